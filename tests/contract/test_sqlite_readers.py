"""Reading a SQLite store never needs the write lock: a writer frozen (SIGSTOP) inside a write
transaction does not block opening the store, `unbroken runs`, `show`, `history` or `effects`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from unbroken.cli import main
from unbroken.stores import open_store
from unbroken.testing.contract import RunWriter

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
    url = f"sqlite:///{tmp_path}/runs.db"
    store = open_store(url)
    RunWriter(store, "r").turn(1)
    store.close()
    child = subprocess.Popen([sys.executable, "-c", FROZEN_WRITER, str(tmp_path / "runs.db")], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"in transaction\n"
        for _ in range(200):  # wait until it is really stopped, holding the write lock
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


def test_opening_and_reading_a_store_is_not_blocked_by_a_frozen_writer(frozen_writer: str) -> None:
    started = time.monotonic()
    store = open_store(frozen_writer)
    assert [row.run_id for row in store.list_runs()] == ["r"]
    assert store.load("r").turns == 1
    assert store.history("r")[-1].seq == 1
    assert store.ledger_list("r") == []
    assert store.lease_of("r") is None
    store.close()
    assert time.monotonic() - started < 5.0  # the busy timeout is 10 s: nothing waited for the lock


@pytest.mark.parametrize("command", [["runs"], ["show", "r"], ["history", "r"], ["effects", "r"], ["export", "r"]])
def test_read_only_commands_are_not_blocked_by_a_frozen_writer(frozen_writer: str, command: list[str]) -> None:
    started = time.monotonic()
    result = CliRunner().invoke(main, [*command, "--store", frozen_writer])
    assert result.exit_code == 0, result.output
    assert time.monotonic() - started < 5.0


OPEN_NEW_STORE = """
import sys
from unbroken.stores import open_store
store = open_store(sys.argv[1])
store.list_runs()
store.close()
"""


def test_processes_creating_one_new_store_at_the_same_time_all_open_it(tmp_path: Path) -> None:
    # Switching a new file to WAL takes an exclusive lock that does not wait on busy_timeout.
    for attempt in range(5):
        url = f"sqlite:///{tmp_path}/new-{attempt}.db"
        children = [
            subprocess.Popen([sys.executable, "-c", OPEN_NEW_STORE, url], stderr=subprocess.PIPE) for _ in range(4)
        ]
        for child in children:
            _, stderr = child.communicate(timeout=60)
            assert child.returncode == 0, stderr.decode()[-2000:]
