"""Key rotation (``ops.rotate_keys``, ``unbroken keys rotate``): every run's data key is re-wrapped
under the new key without rewriting a record, a page of runs at a time, and a kill at any point
leaves every run readable with the old key or the new one."""

from __future__ import annotations

import base64
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from unbroken import Agent, ScriptedModel, ops
from unbroken.cli import main
from unbroken.encryption import LocalKeys
from unbroken.errors import ConfigError, EncryptionKeyMissing
from unbroken.stores import open_store
from unbroken.stores.encrypted import DATA_KEY, EncryptedStore

OLD, NEW = os.urandom(32), os.urandom(32)
FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}
RUNS = [f"r{number}" for number in range(7)]


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def saved_runs(url: str) -> None:
    with open_store(url, encryption=LocalKeys(OLD)) as store:
        for run_id in RUNS:
            Agent(ScriptedModel([FINAL]), store=store).run(f"secret {run_id}", run_id=run_id)


def records_of(db: Path) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT run_id, seq, body, checksum FROM unbroken_records ORDER BY run_id, seq").fetchall()
    finally:
        conn.close()


def loads_with(url: str, keys: LocalKeys) -> dict[str, bool]:
    """Which runs load with only ``keys``."""
    found = {}
    with open_store(url, encryption=keys) as store:
        for run_id in RUNS:
            try:
                found[run_id] = store.load(run_id).phase == "completed"
            except EncryptionKeyMissing:
                found[run_id] = False
    return found


def test_rotation_rewraps_every_run_and_rewrites_no_record(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}"
    saved_runs(url)
    before = records_of(db)
    assert not any(loads_with(url, LocalKeys(NEW)).values())
    with open_store(url, encryption=LocalKeys(NEW, old=[OLD])) as store:
        done = ops.rotate_all(store)
        assert sorted(done.rewrapped) == RUNS and done.kid == LocalKeys(NEW).current_kid
        assert ops.rotate_all(store).rewrapped == []  # again: nothing left to do
    assert records_of(db) == before
    assert all(loads_with(url, LocalKeys(NEW)).values())


def test_rotation_works_a_bounded_page_at_a_time(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    saved_runs(url)
    with open_store(url, encryption=LocalKeys(NEW, old=[OLD])) as store:
        first = ops.rotate_keys(store, limit=3)
        assert len(first.rewrapped) == 3 and first.next is not None
        second = ops.rotate_keys(store, cursor=first.next, limit=3)
        assert len(second.rewrapped) == 3 and not set(first.rewrapped) & set(second.rewrapped)
        third = ops.rotate_keys(store, cursor=second.next, limit=3)
        assert len(third.rewrapped) == 1
        rest = ops.rotate_keys(store, cursor=third.next, limit=3) if third.next is not None else third
        assert rest.next is None


def test_a_rotation_killed_midway_leaves_every_run_readable_and_finishes_when_run_again(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    saved_runs(url)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "UNBROKEN_ENCRYPTION_KEY": b64(NEW),
        "UNBROKEN_ENCRYPTION_OLD_KEYS": b64(OLD),
        "UNBROKEN_CRASH_AT": "keys.rotate.rewrapped:3",
    }
    command = [sys.executable, "-m", "unbroken.cli", "keys", "rotate", "--page", "2", "--store", url]
    killed = subprocess.run(command, env=env, capture_output=True, check=False)
    assert killed.returncode == -9, killed.stderr

    assert all(loads_with(url, LocalKeys(NEW, old=[OLD])).values())  # both keys: every run
    with_new = loads_with(url, LocalKeys(NEW))
    assert sum(with_new.values()) == 3  # three re-wrapped before the kill...
    assert sum(loads_with(url, LocalKeys(OLD)).values()) == len(RUNS) - 3  # ...the rest still under the old key

    del env["UNBROKEN_CRASH_AT"]
    finished = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    assert f"re-wrapped {len(RUNS) - 3} run(s)" in finished.stdout and "3 already were" in finished.stdout
    assert all(loads_with(url, LocalKeys(NEW)).values())


def test_rotation_never_brings_back_the_key_of_a_run_erased_meanwhile(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    saved_runs(url)
    keys = LocalKeys(NEW, old=[OLD])
    with open_store(url, encryption=keys) as store:
        assert isinstance(store, EncryptedStore)
        wrap = keys.wrap

        def erase_then_wrap(data_key: bytes) -> dict[str, object]:
            ops.erase(store, "r1")  # the erase lands between the rotation's read and its write
            return wrap(data_key)

        store.backend.keys = type(
            "Racing",
            (),
            {
                "current_kid": keys.current_kid,
                "wrap": staticmethod(erase_then_wrap),
                "unwrap": staticmethod(keys.unwrap),
            },
        )()
        assert store.rewrap("r1") is None
        assert store.inner.backend.get_entry("r1", DATA_KEY) is None and not store.exists("r1")


def test_rotation_needs_a_store_opened_with_keys(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    saved_runs(url)
    with open_store(url) as plain, pytest.raises(ConfigError, match="without encryption keys"):
        ops.rotate_keys(plain)
    result = CliRunner().invoke(main, ["keys", "rotate", "--store", url])
    assert result.exit_code == 2 and "without encryption keys" in result.output
