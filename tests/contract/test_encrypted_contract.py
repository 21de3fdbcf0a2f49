"""The store contract on every store with encryption at rest on (``EncryptedStore`` over it).

The damage hooks reach the backend behind the encrypting store: a record's sealed bytes changed
(its checksum kept), a record lost, a ledger entry edited and sealed again under the run's own
data key with its old checksum kept (the edit must still be caught, and shown)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from test_store_contract import BACKENDS, Backend

from unbroken.encryption import LocalKeys
from unbroken.stores.backend import SealedEntry
from unbroken.stores.base import Store
from unbroken.stores.encrypted import EncryptedStore
from unbroken.testing import StoreContract
from unbroken.testing.contract._support import LONG_TTL

KEYS = LocalKeys(os.urandom(32))
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


def _encrypted(param: object) -> object:
    backend: Backend = param.values[0]  # type: ignore[attr-defined]
    name: str = param.id  # type: ignore[attr-defined]
    return pytest.param(
        Backend(
            lambda tmp: EncryptedStore(backend.open(tmp), KEYS),
            lambda store, run, seq: backend.corrupt(_inner(store), run, seq),
            lambda store, run, seq: backend.delete(_inner(store), run, seq),
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
