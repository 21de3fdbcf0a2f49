"""Running ``features_child.py`` in a child process, optionally SIGKILLed at a crash point."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

CHILD = Path(__file__).resolve().parent / "features_child.py"


def child(*args: str, crash_at: str | None = None) -> dict[str, Any] | None:
    """Run the child; None when it was killed at ``crash_at`` (which must then happen)."""
    env = {key: value for key, value in os.environ.items() if key != "UNBROKEN_CRASH_AT"}
    if crash_at is not None:
        env["UNBROKEN_CRASH_AT"] = crash_at
    done = subprocess.run([sys.executable, str(CHILD), *args], env=env, capture_output=True, text=True, timeout=120)
    if crash_at is not None:
        assert done.returncode == -signal.SIGKILL, f"not killed at {crash_at}: {done.stdout}{done.stderr}"
        return None
    assert done.returncode == 0, done.stderr
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def sent(outbox: Path) -> list[str]:
    """Every email the outbox received, in order (one per request: no deduplication)."""
    if not outbox.exists():
        return []
    return [json.loads(line)["to"] for line in outbox.read_text(encoding="utf-8").splitlines() if line]
