"""The runs the inspector's tests look at, made by real agents in real child processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "ui_agents.py"


def run_child(url: str, run_id: str, kind: str, outbox: Path, crash_at: str | None = None) -> None:
    env = {key: value for key, value in os.environ.items() if key != "UNBROKEN_CRASH_AT"}
    if crash_at:
        env["UNBROKEN_CRASH_AT"] = crash_at
    done = subprocess.run(
        [sys.executable, str(AGENTS), url, run_id, kind, str(outbox)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if crash_at:
        assert done.returncode == -signal.SIGKILL, f"not killed at {crash_at}: {done.stderr}"
    else:
        assert done.returncode == 0, done.stderr


@dataclass
class World:
    root: Path
    url: str
    transfers: list[str]
