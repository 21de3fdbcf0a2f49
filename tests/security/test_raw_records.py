"""An encrypted run's loose save records on SQLite are kept as raw bytes (a BLOB: half the size
of hex text, so a 2.4 KB record needs no overflow page), each bound to its run id, seq and
snapshot flag: one moved, swapped, truncated, re-flagged or copied into another run does not
load (``CorruptCheckpoint``), a store without keys says the run is encrypted, segments packed
from raw records load, and runs written when each was kept as hex text in a JSON envelope
(``fixtures/hex_records_v1.sql``) still load, continue and refuse a record moved."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from test_encrypted_segments import PACKED, _segments
from test_encryption_at_rest import KEYS, _sqlite, note, run, turns

from unbroken import Agent, CorruptCheckpoint, ScriptedModel, open_store, paging
from unbroken.acceptance import SEALED_RAW, checksum
from unbroken.encryption import LocalKeys
from unbroken.errors import EncryptionKeyMissing
from unbroken.stores import _sqlite_segments
from unbroken.stores.encrypted import EncryptedStore

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


def test_a_run_of_hex_records_continued_keeps_its_new_records_raw(tmp_path: Path) -> None:
    db = _hex_store(tmp_path)
    with open_store(f"sqlite:///{db}", encryption=FIXTURE_KEYS) as store:
        script = turns("alpha", "beta", "gamma", "delta") + turns("epsilon")
        Agent(ScriptedModel(script), tools=[note], store=store).send("hex", "more")
    kinds = _body_types(db, "hex")
    assert kinds[:10] == ["text"] * 10 and set(kinds[10:]) == {"blob"}


def test_a_hex_record_moved_to_another_seq_fails_to_load(tmp_path: Path) -> None:
    db = _hex_store(tmp_path)
    (body, check) = _sqlite(db, "SELECT body, checksum FROM unbroken_records WHERE run_id='hex' AND seq=2")[0]
    _sqlite(db, "UPDATE unbroken_records SET body=?, checksum=? WHERE run_id='hex' AND seq=3", (body, check))
    with (
        open_store(f"sqlite:///{db}", encryption=FIXTURE_KEYS) as store,
        pytest.raises(CorruptCheckpoint, match="does not decrypt"),
    ):
        store.load("hex")


# ---------------------------------------------------------------------- raw records


def _record(db: Path, run_id: str, seq: int) -> bytes:
    ((body,),) = _sqlite(db, "SELECT body FROM unbroken_records WHERE run_id=? AND seq=?", (run_id, seq))
    assert type(body) is bytes
    return body


def _put_record(db: Path, run_id: str, seq: int, body: bytes, *, check: str | None = None) -> None:
    """Record ``seq`` of ``run_id`` replaced by ``body``, its checksum made right unless given
    (the checksum is no secret: anyone who can write the file can recompute it)."""
    check = checksum(body) if check is None else check
    _sqlite(db, "UPDATE unbroken_records SET body=?, checksum=? WHERE run_id=? AND seq=?", (body, check, run_id, seq))


def _load_fails(db: Path, run_id: str, match: str) -> CorruptCheckpoint:
    with (
        open_store(f"sqlite:///{db}", encryption=KEYS) as store,
        pytest.raises(CorruptCheckpoint, match=match) as caught,
    ):
        store.load(run_id)
    return caught.value


def test_an_encrypted_runs_records_are_kept_as_raw_bytes_about_the_plain_size(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "sealed", "alpha", "beta", "gamma")
    run(f"sqlite:///{db}", "plain", "alpha", "beta", "gamma", keys=None)
    assert set(_body_types(db, "sealed")) == {"blob"} and set(_body_types(db, "plain")) == {"text"}
    assert _record(db, "sealed", 1).startswith(SEALED_RAW + b"\x01")  # save 1 is a snapshot
    assert _record(db, "sealed", 2).startswith(SEALED_RAW + b"\x00")
    sizes = {
        run_id: sum(
            int(str(size))
            for (size,) in _sqlite(db, "SELECT length(body) FROM unbroken_records WHERE run_id=?", (run_id,))
        )
        for run_id in ("sealed", "plain")
    }
    records = len(_body_types(db, "plain"))
    assert sizes["sealed"] - sizes["plain"] <= records * (len(SEALED_RAW) + 1 + 12 + 16) + 64  # (task ids differ)
    with open_store(f"sqlite:///{db}", encryption=KEYS) as store:
        assert store.load("sealed").phase == "completed"
        assert [r.seq for r in store.records_in("sealed", 1, 4)] == [2, 3, 4]
        assert all(json.loads(r.body)["seq"] == r.seq for r in store.records_since("sealed", 0))


def test_a_raw_record_read_without_keys_says_the_run_is_encrypted(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "sealed", "alpha", "beta")
    with open_store(f"sqlite:///{db}") as plain:
        with pytest.raises(EncryptionKeyMissing, match="encrypted at rest"):
            plain.load("sealed")
        with pytest.raises(EncryptionKeyMissing, match="encrypted at rest"):
            list(paging.iter_records(plain, "sealed", 0, 2))


def test_a_raw_record_moved_to_another_seq_fails_to_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "r1", "alpha", "beta", "gamma")
    _put_record(db, "r1", 3, _record(db, "r1", 2))
    assert _load_fails(db, "r1", r"save record 3 .* does not decrypt").last_good_seq == 2


def test_two_raw_records_swapped_fail_to_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "r1", "alpha", "beta", "gamma")
    second, third = _record(db, "r1", 2), _record(db, "r1", 3)
    _put_record(db, "r1", 2, third)
    _put_record(db, "r1", 3, second)
    assert _load_fails(db, "r1", r"save record 2 .* does not decrypt").last_good_seq == 1


def test_a_truncated_raw_record_fails_to_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "r1", "alpha", "beta", "gamma")
    body = _record(db, "r1", 3)
    _put_record(db, "r1", 3, body[:-1])  # one byte of its tag cut, the checksum made right
    assert _load_fails(db, "r1", r"save record 3 .* does not decrypt").last_good_seq == 2
    _put_record(db, "r1", 3, body[: len(SEALED_RAW) + 1 + 20])  # shorter than nonce + tag
    _load_fails(db, "r1", r"save record 3 .* too short")
    _put_record(db, "r1", 3, body[:-1], check=checksum(body))  # as a torn write leaves it
    _load_fails(db, "r1", r"save record 3 .* checksum mismatch")


def test_a_raw_records_snapshot_flag_changed_fails_to_load(tmp_path: Path) -> None:
    """The flag is clear (a reader without the key finds snapshots by it) and sealed with the
    record: a snapshot turned into a plain record, or a plain one into a snapshot, does not open."""
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "r1", "alpha", "beta", "gamma")
    for seq, flag in ((1, b"\x00"), (2, b"\x01"), (2, b"\x02")):
        body = _record(db, "r1", seq)
        flagged = body[: len(SEALED_RAW)] + flag + body[len(SEALED_RAW) + 1 :]
        _put_record(db, "r1", seq, flagged)
        _load_fails(db, "r1", rf"save record {seq} .* (does not decrypt|envelope)")
        _put_record(db, "r1", seq, body)
    with open_store(f"sqlite:///{db}", encryption=KEYS) as store:
        assert store.load("r1").phase == "completed"


def test_a_raw_record_copied_into_another_run_fails_to_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}", "r1", "alpha", "beta")
    run(f"sqlite:///{db}", "r2", "alpha", "beta")
    _put_record(db, "r2", 2, _record(db, "r1", 2))
    assert _load_fails(db, "r2", r"save record 2 .* does not decrypt").last_good_seq == 1


def test_raw_records_packed_load_whether_their_segment_is_sealed_whole_or_not(tmp_path: Path) -> None:
    """Packed by the encrypted store (one sealed unit a segment), or packed as they are (a
    segment of raw sealed records, as a pack without the run's key in memory makes)."""
    db = tmp_path / "runs.db"
    run(f"sqlite:///{db}{PACKED}", "whole", "alpha", "beta", "gamma")
    assert all(json.loads(idx).get("sealed") for _, _, idx, _, _ in _segments(db, "whole"))
    url = f"sqlite:///{db}?keep_recent=100&pack_batch=4"
    run(url, "as-is", "alpha", "beta", "gamma")
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        assert _sqlite_segments.pack(conn, "as-is", 8, 1, 4, None) == 4
        conn.execute("COMMIT")
    finally:
        conn.close()
    ((_, _, idx, _, bodies),) = _segments(db, "as-is")
    assert not json.loads(idx).get("sealed") and bodies.startswith(b"[" + SEALED_RAW)
    assert json.loads(idx)["snapshots"] == [1]
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        for run_id in ("whole", "as-is"):
            state = store.load(run_id)
            assert state.phase == "completed" and "gamma" in json.dumps(state.messages)
            assert [r.seq for r in store.records_since(run_id, 0)] == list(range(1, state.save_seq + 1))
    with open_store(url) as plain, pytest.raises(EncryptionKeyMissing):
        plain.load("as-is")
