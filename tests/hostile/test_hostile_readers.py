"""Issue 9.9 as an outside auditor would try it: a writer frozen (SIGSTOP) inside a SQLite
write transaction, and read-only commands run as a user runs them, in fresh processes,
including the commands added since the audit (approvals, watch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_kit import run_child

RUN = "audit-run"
UNBROKEN = Path(sys.executable).with_name("unbroken")

FROZEN_WRITER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE unbroken_runs SET turns = turns + 1")
print("in transaction", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.fixture
def frozen_writer(tmp_path: Path) -> Iterator[str]:
    """A run waiting for approval, written by a real agent process, then a writer frozen
    while it holds the write lock."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    world = tmp_path / "world"
    world.mkdir()
    waiting = run_child("three_sends", url, RUN, world, "--approval")
    assert waiting.outcome["status"] == "awaiting_approval", waiting.stderr
    child = subprocess.Popen([sys.executable, "-c", FROZEN_WRITER, str(tmp_path / "runs.db")], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"in transaction\n"
        for _ in range(500):
            with open(f"/proc/{child.pid}/stat") as stat:
                if stat.read().split(")")[1].split()[0] == "T":
                    break
            time.sleep(0.01)
        yield url
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        if child.stdout is not None:
            child.stdout.close()


@pytest.mark.parametrize(
    "command",
    [["runs"], ["show", RUN], ["history", RUN], ["effects", RUN], ["approvals", RUN]],
    ids=lambda command: command[0],
)
def test_read_only_commands_in_a_fresh_process_are_not_blocked_by_a_frozen_writer(
    frozen_writer: str, command: list[str]
) -> None:
    started = time.monotonic()
    done = subprocess.run(
        [str(UNBROKEN), *command, "--store", frozen_writer], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started < 8.0  # the busy timeout is 10 s: nothing waited for the lock
