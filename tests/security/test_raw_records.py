"""An encrypted run's loose save records on SQLite: runs written when each was kept as hex text
in a JSON envelope (``fixtures/hex_records_v1.sql``) still load, continue and refuse a record
moved to another seq."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from test_encryption_at_rest import _sqlite, note, turns

from unbroken import Agent, CorruptCheckpoint, ScriptedModel, open_store
from unbroken.encryption import LocalKeys
from unbroken.errors import EncryptionKeyMissing

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_KEYS = LocalKeys(bytes(range(32)))  # fixtures/make_hex_records_v1.py's test key


def _hex_store(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    conn = sqlite3.connect(db)
    conn.executescript((FIXTURES / "hex_records_v1.sql").read_text())
    conn.close()
    return db


def _body_types(db: Path, run_id: str) -> list[str]:
    rows = _sqlite(db, "SELECT typeof(body) FROM unbroken_records WHERE run_id=? ORDER BY seq", (run_id,))
    return [str(kind) for (kind,) in rows]


def test_a_run_whose_records_are_hex_text_still_loads(tmp_path: Path) -> None:
    db = _hex_store(tmp_path)
    assert set(_body_types(db, "hex")) == {"text"}
    with open_store(f"sqlite:///{db}", encryption=FIXTURE_KEYS) as store:
        state = store.load("hex")
        assert state.phase == "completed" and "delta" in json.dumps(state.messages)
        assert [r.seq for r in store.records_in("hex", 1, 5)] == [2, 3, 4, 5]
    with open_store(f"sqlite:///{db}") as plain, pytest.raises(EncryptionKeyMissing):
        plain.load("hex")


def test_a_run_of_hex_records_continued_loads_whole(tmp_path: Path) -> None:
    db = _hex_store(tmp_path)
    url = f"sqlite:///{db}"
    with open_store(url, encryption=FIXTURE_KEYS) as store:
        before = store.load("hex")
        script = turns("alpha", "beta", "gamma", "delta") + turns("epsilon", "zeta")  # (answered by position)
        Agent(ScriptedModel(script), tools=[note], store=store).send("hex", "more")
    with open_store(url, encryption=FIXTURE_KEYS) as store:
        after = store.load("hex")
        assert after.messages[: len(before.messages)] == before.messages and "zeta" in json.dumps(after.messages)
        assert [r.seq for r in store.records_since("hex", 0)] == list(range(1, after.save_seq + 1))


def test_a_hex_record_moved_to_another_seq_fails_to_load(tmp_path: Path) -> None:
    db = _hex_store(tmp_path)
    (body, check) = _sqlite(db, "SELECT body, checksum FROM unbroken_records WHERE run_id='hex' AND seq=2")[0]
    _sqlite(db, "UPDATE unbroken_records SET body=?, checksum=? WHERE run_id='hex' AND seq=3", (body, check))
    with (
        open_store(f"sqlite:///{db}", encryption=FIXTURE_KEYS) as store,
        pytest.raises(CorruptCheckpoint, match="does not decrypt"),
    ):
        store.load("hex")
