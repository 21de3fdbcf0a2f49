"""Sealed records packed into segments (SQLite) and packed reads (Redis, S3) are opened in one
loop per segment (``RunCipher.open_bodies``); each record stays bound to its run and its seq, so
a segment moved to other seqs or copied into another run does not load, fast path or not."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_encryption_at_rest import KEYS, _sqlite, note, run, turns

from unbroken import Agent, CorruptCheckpoint, ScriptedModel, open_store, paging
from unbroken.acceptance import RunRecords
from unbroken.codec import PackedRecords, segment_seal
from unbroken.encryption import Envelope, LocalKeys
from unbroken.errors import EncryptionKeyMissing
from unbroken.state import JSONValue
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
        assert [r.seq for r in store.backend.records_after("sealed", 0)] == list(range(1, sealed.save_seq + 1))


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
    # (store schema 8 keys a loose record by its run's number: run_no * 2^32 + seq)
    r2_key = "(SELECT run_no FROM unbroken_runs WHERE run_id='r2') * 4294967296 + seq"
    for table, keyed in (("unbroken_records", {"key": r2_key}), ("unbroken_segments", {})):
        _sqlite(db, f"DELETE FROM {table} WHERE run_id='r2'")
        names = [str(row[1]) for row in _sqlite(db, f"PRAGMA table_info({table})") if row[1] != "run_id"]
        values = ", ".join(keyed.get(name, name) for name in names)
        columns = ", ".join(names)
        _sqlite(db, f"INSERT INTO {table} (run_id, {columns}) SELECT 'r2', {values} FROM {table} WHERE run_id='r1'")
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        key = store.inner.backend.get_entry("r1", DATA_KEY)
        assert key is not None
        store.inner.backend.put_entry(seal(replace(key.entry, run_id="r2")), fence=None)
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
        assert opened is not None and opened.parse(99, RunRecords("r1")) is not None
        assert store.load("r1").phase == "completed"
        store.inner.read_packed = lambda run_id: packed([bodies[0], bodies[0], *bodies[2:]])  # type: ignore[method-assign]
        assert store.read_packed("r1") is None


def test_a_plaintext_ledger_entry_put_in_an_encrypted_run_is_refused(tmp_path: Path) -> None:
    """One call's entry of a plaintext run put in place of an entry of an encrypted run, its
    checksum made right: refused on read (every result of a run encrypted from its start is
    sealed), like a plaintext record; the plaintext run's own entries still read."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "plain", "alpha", keys=None)
    run(url, "sealed", "alpha")
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        (foreign,) = store.inner.backend.list_entries("plain")
        (target,) = [s for s in store.inner.backend.list_entries("sealed") if s.entry.key != DATA_KEY]
        store.inner.backend.put_entry(seal(replace(foreign.entry, run_id="sealed", key=target.entry.key)), fence=None)
    with open_store(url, encryption=KEYS) as store:
        with pytest.raises(CorruptCheckpoint, match=r"plaintext where run 'sealed' is encrypted .* key id 'k-"):
            store.ledger_get("sealed", target.entry.key)
        assert store.ledger_get("plain", foreign.entry.key) is not None


def test_an_encrypted_store_reads_the_plaintext_entries_of_a_run_it_took_over(tmp_path: Path) -> None:
    """A plaintext run continued by a store with keys: its entries written before keep reading."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "old", "alpha", keys=None)
    with open_store(url, encryption=KEYS) as store:
        assert isinstance(store, EncryptedStore)
        (entry,) = store.inner.backend.list_entries("old")
        store.ledger_put(replace(entry.entry, key="ub_" + "0" * 32))  # a key made for the run now
        assert store.ledger_get("old", entry.entry.key) is not None
        assert store.ledger_get("old", "ub_" + "0" * 32) is not None


class CountingKeys:
    """``KEYS``, counting the data keys it unwraps."""

    def __init__(self) -> None:
        self.unwrapped = 0

    @property
    def current_kid(self) -> str:
        return KEYS.current_kid

    def wrap(self, data_key: bytes) -> dict[str, JSONValue]:
        return KEYS.wrap(data_key)

    def unwrap(self, envelope: Envelope) -> bytes:
        self.unwrapped += 1
        return KEYS.unwrap(envelope)


def test_ledger_gc_and_submit_unwrap_no_other_runs_data_key(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    for name in ("r1", "r2", "r3"):
        run(url, name, "alpha")
    counting = CountingKeys()
    with EncryptedStore(open_store(url), counting) as store:
        assert isinstance(store, EncryptedStore)
        assert store.submit("task alpha", "r2") == "r2"  # the same task: accepted, one run's key read
        assert counting.unwrapped <= 1
        counting.unwrapped = 0
        assert store.ledger_gc(older_than=time.time() + 3600) == 3  # each run's one tool entry
        assert counting.unwrapped == 0
        assert [s.entry.key for s in store.inner.backend.list_entries("r1")] == [DATA_KEY]  # never collected
    with open_store(url, encryption=KEYS) as store:
        assert store.load("r1").phase == "completed"


def test_a_paged_read_without_keys_names_the_key_id(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "r1", "alpha")
    with open_store(url) as plain, pytest.raises(EncryptionKeyMissing, match=f"under key id '{KEYS.current_kid}'"):
        list(paging.iter_records(plain, "r1", 0, 2))


def test_a_run_whose_data_key_is_in_a_separate_key_store_says_so_without_it(tmp_path: Path) -> None:
    url, key_store = f"sqlite:///{tmp_path / 'runs.db'}", f"sqlite:///{tmp_path / 'keys.db'}"
    with open_store(url, encryption=KEYS, key_store=key_store) as store:
        Agent(ScriptedModel(turns("alpha")), tools=[note], store=store).run("task alpha", run_id="r1")
    with open_store(url) as plain:
        with pytest.raises(EncryptionKeyMissing, match="separate key store"):
            plain.load("r1")
        with pytest.raises(EncryptionKeyMissing, match="separate key store"):
            list(paging.iter_records(plain, "r1", 0, 2))
    other = open_store(url, encryption=LocalKeys(os.urandom(32)), key_store=key_store)
    with other, pytest.raises(EncryptionKeyMissing, match=f"key id '{KEYS.current_kid}'"):
        other.load("r1")


def test_entries_written_in_clear_before_a_run_had_a_data_key_keep_reading(tmp_path: Path) -> None:
    """A run with a ledger entry and no save yet, written without keys, then given a data key (by
    a ledger write of a store with keys): its entry from before is not taken for a replaced one."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run(url, "plain", "alpha", keys=None)
    with open_store(url) as plain:
        (entry,) = plain.ledger_list("plain")
        plain.ledger_put(replace(entry, run_id="fresh"))
    with open_store(url, encryption=KEYS) as store:
        store.ledger_put(replace(entry, run_id="fresh", key="ub_" + "1" * 32))
        assert store.ledger_get("fresh", entry.key) is not None
        assert store.ledger_get("fresh", "ub_" + "1" * 32) is not None
