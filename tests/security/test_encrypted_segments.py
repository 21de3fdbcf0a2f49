"""Sealed records packed into segments (SQLite) and packed reads (Redis, S3) are opened in one
loop per segment (``RunCipher.open_bodies``); each record stays bound to its run and its seq, so
a segment moved to other seqs or copied into another run does not load, fast path or not."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from test_encryption_at_rest import KEYS, _sqlite, run

from unbroken import CorruptCheckpoint, open_store
from unbroken.codec import PackedRecords, segment_seal
from unbroken.stores.backend import seal
from unbroken.stores.encrypted import DATA_KEY, EncryptedStore

PACKED = "?keep_recent=2&pack_batch=2"


def _segments(db: Path, run_id: str) -> list[tuple[int, int, bytes, str, bytes]]:
    rows = _sqlite(db, "SELECT first_seq, last_seq, idx, seal, bodies FROM unbroken_segments WHERE run_id=?", (run_id,))
    return sorted((int(a), int(b), bytes(c), str(d), bytes(e)) for a, b, c, d, e in rows)  # type: ignore[call-overload]


def test_an_encrypted_run_in_segments_loads_as_the_same_run_in_plaintext(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}{PACKED}"
    run(url, "sealed", "alpha", "beta", "gamma")
    run(url, "plain", "alpha", "beta", "gamma", keys=None)
    assert len(_segments(tmp_path / "runs.db", "sealed")) >= 2
    with open_store(url, encryption=KEYS) as store:
        sealed, plain = store.load("sealed"), store.load("plain")
        assert sealed.messages == plain.messages and sealed.save_seq == plain.save_seq
        assert [r.seq for r in store.records_after("sealed", 0)] == list(range(1, sealed.save_seq + 1))


def test_a_sealed_segment_moved_to_other_seqs_fails_to_load(tmp_path: Path) -> None:
    """Segment 1..2 put in place of segment 3..4, its index and seal made right (neither is a
    secret): its records do not open at seqs 3 and 4 (each seq is sealed with its record)."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    (first, last, idx, _, bodies), (target, target_last, _, _, _) = _segments(db, "r1")[:2]
    assert (first, last, target, target_last) == (1, 2, 3, 4)
    index = json.loads(idx)
    index["first"] = target
    moved = json.dumps(index).encode()
    _sqlite(
        db,
        "UPDATE unbroken_segments SET idx=?, seal=?, bodies=? WHERE run_id='r1' AND first_seq=?",
        (moved, segment_seal(moved, bodies), bodies, target),
    )
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match=r"save record 3 .* does not decrypt") as caught:
            store.load("r1")
        assert caught.value.last_good_seq == 2


def test_a_sealed_run_in_segments_copied_under_another_run_id_fails_to_load(tmp_path: Path) -> None:
    """Every segment and row of run r1, its data key entry included, copied under the id r2:
    nothing opens there (the run id is sealed with each record)."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    run(url, "r2", "alpha", "beta", "gamma")
    for table in ("unbroken_records", "unbroken_segments"):
        _sqlite(db, f"DELETE FROM {table} WHERE run_id='r2'")
        columns = ", ".join(str(row[1]) for row in _sqlite(db, f"PRAGMA table_info({table})") if row[1] != "run_id")
        _sqlite(db, f"INSERT INTO {table} (run_id, {columns}) SELECT 'r2', {columns} FROM {table} WHERE run_id='r1'")
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        key = store.inner.get_entry("r1", DATA_KEY)
        assert key is not None
        store.inner.put_entry(seal(replace(key.entry, run_id="r2")), fence=None)
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match=r"save record 1 .* does not decrypt"):
            store.load("r2")
        assert store.load("r1").phase == "completed"


def test_a_packed_read_opens_in_one_loop_and_refuses_a_record_moved_in_it(tmp_path: Path) -> None:
    """A store's packed read (Redis, S3) of sealed records: opened whole when every record opens,
    refused (None: the loader reads record by record and names the record) when one was moved."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "alpha", "beta")
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        records = list(store.inner.iter_raw_records("r1"))
        bodies = [r.body if isinstance(r.body, bytes) else r.body.encode() for r in records]

        def packed(items: list[bytes]) -> PackedRecords:
            index = [(r.seq, r.checksum, len(body)) for r, body in zip(records, items, strict=True)]
            return PackedRecords(b"[" + b",".join(items) + b"]", index)

        store.inner.read_packed = lambda run_id: packed(bodies)  # type: ignore[method-assign]
        opened = store.read_packed("r1")
        assert opened is not None and opened.parse(99) is not None
        assert store.load("r1").phase == "completed"
        store.inner.read_packed = lambda run_id: packed([bodies[0], bodies[0], *bodies[2:]])  # type: ignore[method-assign]
        assert store.read_packed("r1") is None
