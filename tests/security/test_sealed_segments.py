"""An encrypted run's SQLite segments are sealed as one unit each (one AES-GCM call a segment on
resume; raw bytes, not hex), bound to the run id, their first and last seq and their clear index:
a segment moved, truncated, reordered, spliced with another's bytes or copied into another run
does not load (``CorruptCheckpoint``), a record moved before its pack is never sealed anew, and
runs written before (each record of a segment sealed on its own: ``fixtures/``) still load."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from test_encrypted_segments import PACKED, _segments
from test_encryption_at_rest import KEYS, _sqlite, note, run, turns

from unbroken import Agent, CorruptCheckpoint, ScriptedModel, open_store, paging
from unbroken.codec import SEALED_SEGMENT, StoredRecord, segment_seal
from unbroken.encryption import LocalKeys
from unbroken.errors import EncryptionKeyMissing
from unbroken.stores import _sqlite_segments
from unbroken.stores.backend import seal
from unbroken.stores.encrypted import DATA_KEY, EncryptedStore

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_KEYS = LocalKeys(bytes(range(32)))  # fixtures/make_sealed_segments_v1.py's test key


def _put(db: Path, run_id: str, first: int, idx: bytes, bodies: bytes, *, seal_text: str | None = None) -> None:
    """Segment row ``first`` of ``run_id`` given ``idx`` and ``bodies``, its seal made right
    (the seal is no secret: anyone who can write the file can recompute it)."""
    seal_text = segment_seal(idx, bodies) if seal_text is None else seal_text
    _sqlite(
        db,
        "UPDATE unbroken_segments SET idx=?, seal=?, bodies=? WHERE run_id=? AND first_seq=?",
        (idx, seal_text, bodies, run_id, first),
    )


def _shown(records: list[StoredRecord]) -> list[tuple[int, object, object]]:
    """Each record's seq, label and messages (its run id and times differ between two runs)."""
    values = [(r.seq, json.loads(r.body)) for r in records]
    return [(seq, value["label"], value["messages"]) for seq, value in values]


def _load_fails(url: str, run_id: str, match: str) -> CorruptCheckpoint:
    with open_store(url, encryption=KEYS) as store, pytest.raises(CorruptCheckpoint, match=match) as caught:
        store.load(run_id)
    return caught.value


def test_segments_are_sealed_as_one_unit_and_read_as_the_plaintext_run(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "sealed", "alpha", "beta", "gamma")
    run(url, "plain", "alpha", "beta", "gamma", keys=None)
    segments = _segments(db, "sealed")
    assert len(segments) >= 2
    for first, _, idx, _, bodies in segments:
        clear = json.loads(idx)
        assert clear["sealed"] == SEALED_SEGMENT and clear["first"] == first
        assert set(clear) == {"first", "snapshots", "sealed", "index_bytes"}  # no checksum or length in clear
        assert b'"enc"' not in bodies and b"alpha" not in bodies  # one ciphertext, not records sealed one by one
    with open_store(url, encryption=KEYS) as store:
        sealed, plain = store.load("sealed"), store.load("plain")
        assert sealed.messages == plain.messages and sealed.save_seq == plain.save_seq
        top = sealed.save_seq
        for after, upto in ((0, top), (1, 3), (2, 5), (3, top)):  # ranges that cut through segments
            assert _shown(store.records_in("sealed", after, upto)) == _shown(store.records_in("plain", after, upto))
        assert [r.seq for r in store.records_since("sealed", 2)] == list(range(3, top + 1))
        assert store.newest_snapshot("sealed") == store.newest_snapshot("plain")


def test_a_segment_read_without_keys_says_it_is_encrypted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    with open_store(url) as plain:
        with pytest.raises(EncryptionKeyMissing, match=f"under key id '{KEYS.current_kid}'"):
            plain.load("r1")
        with pytest.raises(EncryptionKeyMissing, match=f"under key id '{KEYS.current_kid}'"):
            list(paging.iter_records(plain, "r1", 0, 2))
        assert plain.newest_snapshot("r1") >= 1  # the snapshot flags stay clear


def test_a_segment_moved_to_other_seqs_fails_to_load(tmp_path: Path) -> None:
    """Segment 1..2's row given the first and last seq of segment 3..4 (its clear index too)."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    (first, _, idx, _, bodies), (target, target_last, _, _, _) = _segments(db, "r1")[:2]
    _sqlite(db, "DELETE FROM unbroken_segments WHERE run_id='r1' AND first_seq=?", (target,))
    clear = json.loads(idx)
    clear["first"] = target
    moved = json.dumps(clear).encode()
    _sqlite(
        db,
        "UPDATE unbroken_segments SET first_seq=?, last_seq=?, idx=?, seal=? WHERE run_id='r1' AND first_seq=?",
        (target, target_last, moved, segment_seal(moved, bodies), first),
    )
    caught = _load_fails(url, "r1", r"save record \d+ .* does not decrypt")
    assert caught.last_good_seq == 0


def test_two_segments_swapped_fail_to_load(tmp_path: Path) -> None:
    """Segments 1..2 and 3..4 exchange their bytes, each clear index made to say its new place."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    (a, _, a_idx, _, a_bodies), (b, _, b_idx, _, b_bodies) = _segments(db, "r1")[:2]
    for place, idx, bodies in ((a, b_idx, b_bodies), (b, a_idx, a_bodies)):
        clear = json.loads(idx)
        clear["first"] = place
        _put(db, "r1", place, json.dumps(clear).encode(), bodies)
    assert _load_fails(url, "r1", r"save record 1 .* does not decrypt").last_good_seq == 0


def test_a_truncated_segment_fails_to_load(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    _, (first, _, idx, _, bodies) = _segments(db, "r1")[:2]
    _put(db, "r1", first, idx, bodies[:-100])
    assert _load_fails(url, "r1", rf"save record {first} .* does not decrypt").last_good_seq == first - 1


def test_a_segment_spliced_with_another_segments_bytes_fails_to_load(tmp_path: Path) -> None:
    """The first half of segment 3..4's ciphertext followed by the second half of 1..2's (both
    of the same run, under the same data key): the tag covers the whole unit."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    (_, _, _, _, donor), (first, _, idx, _, bodies) = _segments(db, "r1")[:2]
    half = min(len(bodies), len(donor)) // 2
    _put(db, "r1", first, idx, bodies[:half] + donor[half:])
    assert _load_fails(url, "r1", rf"save record {first} .* does not decrypt").last_good_seq == first - 1


def test_a_segments_clear_index_edited_fails_to_load(tmp_path: Path) -> None:
    """The clear index is sealed with the segment: a snapshot flag added to it does not load."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    _, (first, last, idx, _, bodies) = _segments(db, "r1")[:2]
    clear = json.loads(idx)
    clear["snapshots"] = [last]
    _put(db, "r1", first, json.dumps(clear).encode(), bodies)
    _load_fails(url, "r1", rf"save record {first} .* does not decrypt")


def test_a_segment_edited_as_stored_is_reported_torn(tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    (first, _, idx, seal_text, bodies), *_ = _segments(db, "r1")
    flipped = bodies[:40] + bytes([bodies[40] ^ 1]) + bodies[41:]
    _put(db, "r1", first, idx, flipped, seal_text=seal_text)  # its seal left as it was
    _load_fails(url, "r1", r"save record 1 .*\(torn or edited as stored\)")


def test_a_segment_copied_into_another_run_fails_to_load(tmp_path: Path) -> None:
    """Run r1's segments, loose records and data key entry copied under the id r2."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}{PACKED}"
    run(url, "r1", "alpha", "beta", "gamma")
    run(url, "r2", "alpha", "beta", "gamma")
    for table in ("unbroken_records", "unbroken_segments"):
        _sqlite(db, f"DELETE FROM {table} WHERE run_id='r2'")
        # (store schema 8 keys a loose record by its run's number: run_no * 2^32 + seq)
        keyed = table == "unbroken_records"
        names = [str(row[1]) for row in _sqlite(db, f"PRAGMA table_info({table})")]
        columns = ", ".join(name for name in names if name not in ("run_id", "key" if keyed else ""))
        key_column, key_value = (
            ("key, ", "(SELECT run_no FROM unbroken_runs WHERE run_id='r2') * 4294967296 + seq, ")
            if keyed
            else ("", "")
        )
        _sqlite(
            db,
            f"INSERT INTO {table} ({key_column}run_id, {columns}) "
            f"SELECT {key_value}'r2', {columns} FROM {table} WHERE run_id='r1'",
        )
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        key = store.inner.backend.get_entry("r1", DATA_KEY)
        assert key is not None
        store.inner.backend.put_entry(seal(replace(key.entry, run_id="r2")), fence=None)
    assert _load_fails(url, "r2", r"save record 1 .* does not decrypt").last_good_seq == 0
    with open_store(url, encryption=KEYS) as store:
        assert store.load("r1").phase == "completed"


def test_a_record_moved_before_its_pack_is_not_sealed_into_the_segment(tmp_path: Path) -> None:
    """Loose record 2 replaced by record 1's sealed bytes (its checksum right) before the run is
    packed: the pack opens every record at its own seq first, so record 1's bytes are never sealed
    anew as record 2; the segment is packed as it was (each record sealed on its own) and the
    load names record 2."""
    db = tmp_path / "runs.db"
    url = f"sqlite:///{db}?keep_recent=100&pack_batch=4"
    run(url, "r1", "alpha", "beta")  # fewer saves than keep_recent: all loose
    assert not _segments(db, "r1")
    _sqlite(
        db,
        "UPDATE unbroken_records SET body=(SELECT body FROM unbroken_records WHERE run_id='r1' AND seq=1), "
        "checksum=(SELECT checksum FROM unbroken_records WHERE run_id='r1' AND seq=1) WHERE run_id='r1' AND seq=2",
    )
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        store.backend._run("r1")  # its data key in memory, as the save before a pack leaves it
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            assert _sqlite_segments.pack(conn, "r1", 5, 1, 4, store.backend) == 4
            conn.execute("COMMIT")
        finally:
            conn.close()
    ((first, last, idx, _, _),) = _segments(db, "r1")
    assert (first, last) == (1, 4) and not json.loads(idx).get("sealed")
    assert _load_fails(url, "r1", r"save record 2 .* does not decrypt").last_good_seq == 1
    run(url, "r2", "alpha", "beta")
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        store.backend._run("r2")
        conn = sqlite3.connect(db, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            assert _sqlite_segments.pack(conn, "r2", 5, 1, 4, store.backend) == 4  # intact: sealed whole
            conn.execute("COMMIT")
        finally:
            conn.close()
        assert json.loads(_segments(db, "r2")[0][2])["sealed"] == SEALED_SEGMENT
        assert store.load("r2").phase == "completed"


def _fixture_store(tmp_path: Path) -> Path:
    db = tmp_path / "runs.db"
    conn = sqlite3.connect(db)
    conn.executescript((FIXTURES / "sealed_segments_v1.sql").read_text())
    conn.close()
    return db


def test_a_run_packed_before_segments_were_sealed_whole_still_loads(tmp_path: Path) -> None:
    db = _fixture_store(tmp_path)
    url = f"sqlite:///{db}{PACKED}"
    assert _segments(db, "old") and not any(json.loads(idx).get("sealed") for _, _, idx, _, _ in _segments(db, "old"))
    with open_store(url, encryption=FIXTURE_KEYS) as store:
        state = store.load("old")
        assert state.phase == "completed" and "delta" in json.dumps(state.messages)
        assert [r.seq for r in store.records_in("old", 1, 5)] == [2, 3, 4, 5]
    with open_store(url) as plain, pytest.raises(EncryptionKeyMissing):
        plain.load("old")


def test_a_run_packed_before_then_continued_holds_both_kinds_of_segment_and_loads(tmp_path: Path) -> None:
    db = _fixture_store(tmp_path)
    url = f"sqlite:///{db}{PACKED}"
    with open_store(url, encryption=FIXTURE_KEYS) as store:
        before = store.load("old")
        script = turns("alpha", "beta", "gamma", "delta") + turns("epsilon", "zeta")  # (answered by position)
        Agent(ScriptedModel(script), tools=[note], store=store).send("old", "more")
    kinds = [bool(json.loads(idx).get("sealed")) for _, _, idx, _, _ in _segments(db, "old")]
    assert False in kinds and True in kinds
    with open_store(url, encryption=FIXTURE_KEYS) as store:
        after = store.load("old")
        assert after.messages[: len(before.messages)] == before.messages and "zeta" in json.dumps(after.messages)
        assert [r.seq for r in store.records_since("old", 0)] == list(range(1, after.save_seq + 1))


def test_an_old_segment_moved_to_other_seqs_still_fails_to_load(tmp_path: Path) -> None:
    """The defence of segments written before: each record is bound to its own seq."""
    db = _fixture_store(tmp_path)
    (_, _, idx, _, bodies), (target, _, _, _, _) = _segments(db, "old")[:2]
    index = json.loads(idx)
    index["first"] = target
    moved = json.dumps(index).encode()
    _put(db, "old", target, moved, bodies)
    url = f"sqlite:///{db}{PACKED}"
    with open_store(url, encryption=FIXTURE_KEYS) as store, pytest.raises(CorruptCheckpoint, match="does not decrypt"):
        store.load("old")
