"""The store contract on every store with encryption at rest on (``EncryptedStore`` over it).

The damage hooks reach the backend behind the encrypting store: a record's sealed bytes changed
(its checksum kept), a record lost, a ledger entry edited and sealed again under the run's own
data key with its old checksum kept (the edit must still be caught, and shown). A record inside
a SQLite segment sealed as one unit is changed or lost the same way, by someone holding the key."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_store_contract import BACKENDS, Backend, tamper

from unbroken.codec import Segment, StoredRecord
from unbroken.encryption import LocalKeys
from unbroken.stores._sealing import OpenedRun, open_sealed_segment, seal_bodies
from unbroken.stores.backend import SealedEntry
from unbroken.stores.base import Store
from unbroken.stores.encrypted import EncryptedStore
from unbroken.stores.sqlite import SQLiteStore
from unbroken.testing import StoreContract
from unbroken.testing.contract._support import LONG_TTL

KEYS = LocalKeys(os.urandom(32))
Damage = Callable[[Store, str, int], None]
ENCRYPTED = ("memory", "sqlite-packed", "file", "postgres", "redis", "s3")
SERVERS = ("postgres", "redis", "s3")
"""The suite over a server takes minutes: `make reliability` runs those (the encrypting layer is
the same code over every backend; the plain suite runs on each server in the default tier)."""


def _inner(store: Store) -> Store:
    assert isinstance(store, EncryptedStore)
    return store.inner


def edit_sealed_entry(store: Store, run_id: str, key: str) -> None:
    """Open the stored entry with the run's data key, edit its result, seal it again (valid under
    that key) and put it back with the checksum it had: what someone holding the key could do."""
    assert isinstance(store, EncryptedStore)
    stored = store.inner.backend.get_entry(run_id, key)
    run = store.backend._run(run_id)
    assert stored is not None and stored.entry.result is not None and run is not None
    content = run.cipher.open_text("ledger", key, stored.entry.result.content)
    assert StoreContract.EDITED_FROM in content
    edited = run.cipher.seal_text("ledger", key, content.replace(StoreContract.EDITED_FROM, StoreContract.EDITED_TO))
    entry = replace(stored.entry, result=replace(stored.entry.result, content=edited))
    store.inner.backend.put_entry(SealedEntry(entry, stored.checksum), fence=None)


def _sealed_segment_holding(store: Store, run_id: str, seq: int) -> tuple[OpenedRun, Segment, Segment] | None:
    """The segment sealed as one unit that holds record ``seq`` (SQLite), opened with the run's
    data key: (the run's key, the segment as stored, its plaintext segment); None otherwise."""
    assert isinstance(store, EncryptedStore)
    inner = store.inner
    if not isinstance(inner, SQLiteStore):
        return None
    stored = [s for s in inner.iter_load_pieces(run_id) if type(s) is Segment and s.first <= seq <= s.last]
    run = store.backend._run(run_id)
    if not stored or not stored[0].sealed or run is None:
        return None
    plain = open_sealed_segment(run, stored[0])
    assert isinstance(plain, Segment)
    return run, stored[0], plain


def _reseal(
    store: Store, run_id: str, first: int, run: OpenedRun, parts: list[list[StoredRecord]], snaps: list[int]
) -> None:
    """Segment row ``first`` replaced by ``parts``, each sealed as one unit under the run's key."""
    assert isinstance(store, EncryptedStore) and isinstance(store.inner, SQLiteStore)
    conn = sqlite3.connect(store.inner.path)
    try:
        with conn:
            conn.execute("DELETE FROM unbroken_segments WHERE run_id=? AND first_seq=?", (run_id, first))
            for part in parts:
                bodies = [r.body if isinstance(r.body, bytes) else r.body.encode() for r in part]
                kept = [seq for seq in snaps if part[0].seq <= seq <= part[-1].seq]
                unit = seal_bodies(run, part[0].seq, bodies, [r.checksum for r in part], kept)
                conn.execute(
                    "INSERT INTO unbroken_segments (run_id, first_seq, last_seq, idx, seal, bodies) "
                    "VALUES (?,?,?,?,?,?)",
                    (run_id, unit.first, unit.last, unit.index_text, unit.seal, unit.bodies),
                )
    finally:
        conn.close()


def corrupt_in_sealed_segment(store: Store, run_id: str, seq: int, otherwise: Damage) -> None:
    """A record inside a segment sealed as one unit changed by someone holding the run's data key
    (its bytes changed, its checksum kept, the segment sealed again: valid under that key); any
    other record as the plain store's hook damages it. (Without the key, any change to a sealed
    segment makes all of it fail: ``tests/security/test_sealed_segments.py``.)"""
    found = _sealed_segment_holding(store, run_id, seq)
    if found is None:
        return otherwise(_inner(store), run_id, seq)
    run, stored, plain = found
    records = plain.records()
    records[seq - plain.first].body = tamper(records[seq - plain.first].body.decode()).encode()  # type: ignore[union-attr]
    _reseal(store, run_id, stored.first, run, [records], plain.snapshots())


def delete_in_sealed_segment(store: Store, run_id: str, seq: int, otherwise: Damage) -> None:
    """A record lost from a segment sealed as one unit by someone holding the run's data key: the
    segment sealed again without it, split where it was (each part consistent and valid)."""
    found = _sealed_segment_holding(store, run_id, seq)
    if found is None:
        return otherwise(_inner(store), run_id, seq)
    run, stored, plain = found
    records = plain.records()
    parts = [[r for r in records if r.seq < seq], [r for r in records if r.seq > seq]]
    _reseal(store, run_id, stored.first, run, [part for part in parts if part], plain.snapshots())


def _encrypted(param: object) -> object:
    backend: Backend = param.values[0]  # type: ignore[attr-defined]
    name: str = param.id  # type: ignore[attr-defined]
    return pytest.param(
        Backend(
            lambda tmp: EncryptedStore(backend.open(tmp), KEYS),
            lambda store, run, seq: corrupt_in_sealed_segment(store, run, seq, backend.corrupt),
            lambda store, run, seq: delete_in_sealed_segment(store, run, seq, backend.delete),
            edit_sealed_entry,
            lambda store: EncryptedStore(backend.reopen(_inner(store)), KEYS),
        ),
        id=f"{name}+encrypted",
        marks=[pytest.mark.slow] if name in SERVERS else [],
    )


ENCRYPTED_BACKENDS = [_encrypted(param) for param in BACKENDS if param.id in ENCRYPTED]


class TestEncryptedStoreContract(StoreContract):
    @pytest.fixture(params=ENCRYPTED_BACKENDS)
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
        self.backend: Backend = request.param
        opened = self.backend.open(tmp_path)
        yield opened
        opened.close()

    def corrupt_record(self, store: Store, run_id: str, seq: int) -> None:
        self.backend.corrupt(store, run_id, seq)

    def delete_record(self, store: Store, run_id: str, seq: int) -> None:
        self.backend.delete(store, run_id, seq)

    def edit_entry(self, store: Store, run_id: str, key: str) -> None:
        self.backend.edit(store, run_id, key)

    def reopen(self, store: Store) -> Store:
        return self.backend.reopen(store)

    def test_leases_are_judged_on_the_store_lease_clock(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
        """As the suite's test, with the lease clock stepped where it is: the encrypting store has
        no clock of its own, it reads its backend's."""
        before = store.lease_now()
        lease = store.acquire_lease("run-a6", "worker-a", LONG_TTL)
        after = store.lease_now()
        assert before + LONG_TTL - 2.0 <= lease.expires_at <= after + LONG_TTL + 2.0

        backend = _inner(store).backend
        real = backend.lease_time
        monkeypatch.setattr(backend, "lease_time", lambda: real() + 2 * LONG_TTL)  # the lease clock moves on

        assert store.lease_now() >= after + 2 * LONG_TTL
        assert store.lease_of("run-a6") is None
        assert store.acquire_lease("run-a6", "worker-b", LONG_TTL).fence > lease.fence
