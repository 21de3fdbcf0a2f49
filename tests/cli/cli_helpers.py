"""Helpers shared by the CLI tests (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import Result

HERE = Path(__file__).resolve().parent
Invoke = Callable[..., Result]


@dataclass
class Place:
    """Where a test's runs live: a SQLite store and the test agent's outbox."""

    url: str
    db: Path
    outbox: Path


def run_child_until_killed(place: Place, crash_at: str) -> None:
    """Start the test agent's run in a child process that SIGKILLs itself at ``crash_at``."""
    env = dict(os.environ, UNBROKEN_CRASH_AT=crash_at)
    child = subprocess.run([sys.executable, str(HERE / "cli_agents.py")], env=env, capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
