"""Which store the schedules run on: ``memory`` (a fresh one per schedule), ``forgetful`` (a
fresh in-memory one that loses data as a cache-like server may, ``lossy.py``), ``encrypted`` (a
fresh in-memory one with encryption at rest on: ``stores.encrypted``), ``sqlite`` (one
file in a temporary directory), a store URL (``postgresql://...``, ``redis://...``,
``s3://...``: one shared store), or ``module:factory`` / ``path/to/file.py:factory`` naming
your own function that returns a store (called once per schedule; return a fresh store, or
``delegate.view(shared)`` of a shared one, since the store it returns is closed after the schedule)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import ConfigError
from ...stores import open_store
from ...stores.base import Store
from ...stores.memory import InMemoryStore
from .delegate import view
from .lossy import ForgetfulStore
from .runner import StoreFactory


@contextmanager
def store_factory(spec: str) -> Iterator[StoreFactory]:
    """The factory ``spec`` names, for as long as the ``with`` block lasts (then closed)."""
    if spec == "memory":
        yield InMemoryStore
        return
    if spec == "forgetful":
        yield ForgetfulStore
        return
    if spec == "encrypted":
        from ...encryption import LocalKeys
        from ...stores.encrypted import EncryptedStore

        keys = LocalKeys(os.urandom(32))
        yield lambda: EncryptedStore(InMemoryStore(), keys)
        return
    scratch: Path | None = None
    if spec == "sqlite":
        scratch = Path(
            tempfile.mkdtemp(prefix="unbroken-simulate-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)
        )
        spec = f"sqlite:///{scratch / 'simulate.db'}"
    if "://" in spec:
        shared = open_store(spec)
        try:
            yield lambda: view(shared)
        finally:
            shared.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
        return
    from ..chaos._config import load_attr

    found = load_attr(spec, "--backend")
    if not callable(found):
        raise ConfigError(f"--backend {spec!r} is not a function returning a store")

    def make() -> Store:
        store = found()
        if not isinstance(store, Store):
            raise ConfigError(f"--backend {spec!r} returned {type(store).__name__}, not a Store")
        return store

    yield make
