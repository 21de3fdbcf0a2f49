"""Shared by the framework crash tests: run a child, wait for an effect, SIGKILL the child."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


def effects(state: Path) -> list[dict[str, Any]]:
    path = state / "effects.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@dataclass
class Child:
    """A child process whose output goes to a temporary file, not a pipe: a grandchild (a
    stdio server) inherits it and may outlive the child, and nobody must wait for it to close."""

    process: subprocess.Popen[bytes]
    output: IO[bytes]

    def text(self) -> str:
        self.output.seek(0)
        return self.output.read().decode(errors="replace")


def start(args: list[str]) -> Child:
    env = {k: v for k, v in os.environ.items() if k != "UNBROKEN_CRASH_AT"}
    output = tempfile.TemporaryFile()  # noqa: SIM115 - closed by kill_once_effect_recorded
    return Child(subprocess.Popen([sys.executable, *args], env=env, stdout=output, stderr=output), output)


def kill_once_effect_recorded(child: Child, state: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Wait until the tool has recorded its effect (and is hanging), then SIGKILL the child."""
    process = child.process
    try:
        deadline = time.monotonic() + timeout
        while not effects(state):
            if process.poll() is not None:
                raise AssertionError(f"the child exited ({process.returncode}) before the effect:\n{child.text()}")
            if time.monotonic() > deadline:
                process.kill()
                process.wait(timeout=30)
                raise AssertionError(f"no effect was recorded in time:\n{child.text()}")
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        assert process.returncode == -signal.SIGKILL
        return effects(state)[0]
    finally:
        child.output.close()


def stop_pid(pid: int) -> None:
    """SIGKILL a process the test started indirectly (a stdio server left hanging)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
