"""A forked child never writes through its parent's SQLite connection: it opens its own on first use
(SQLite forbids carrying a connection across fork), and the parent's stays in use by the parent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from unbroken.stores.sqlite import SQLiteStore
from unbroken.testing.contract import RunWriter


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_child_saves_on_a_connection_of_its_own_and_the_parent_goes_on(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "runs.db")
    try:
        parent = RunWriter(store, "parent")
        parent.turn(1)
        parents_connection = store.backend.conn
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if it saved on a connection of its own
            code = 1
            try:
                own = store.backend.conn is not parents_connection
                RunWriter(store, "child").turn(1)
                code = 0 if own else 3
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert store.backend.conn is parents_connection
        assert [record.seq for record in store.read_records("child")] == [1]
        parent.turn(2)
        assert store.load("parent") == parent.state
    finally:
        store.close()
