"""The store contract (``unbroken.testing.StoreContract``) on every store in the repository.

To add a backend, add one ``Backend`` line to ``BACKENDS``: how to open it on a fresh place and
how to damage one of its records."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from unbroken.codec import StoredRecord
from unbroken.errors import StoreUnavailable
from unbroken.stores import open_store
from unbroken.stores.base import Store
from unbroken.stores.files import FileStore
from unbroken.stores.memory import InMemoryStore
from unbroken.stores.postgres import PostgresStore
from unbroken.stores.sqlite import SQLiteStore
from unbroken.testing import StoreContract

tamper = StoreContract.tamper


def corrupt_memory(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, InMemoryStore)
    records = store._runs[run_id].records
    index = next(i for i, record in enumerate(records) if record.seq == seq)
    record = records[index]
    records[index] = StoredRecord(record.seq, tamper(record.body), record.checksum)


def corrupt_sqlite(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:  # a second connection, as another process would
        (body,) = conn.execute("SELECT body FROM unbroken_records WHERE run_id=? AND seq=?", (run_id, seq)).fetchone()
        conn.execute("UPDATE unbroken_records SET body=? WHERE run_id=? AND seq=?", (tamper(body), run_id, seq))
    conn.close()


def corrupt_file(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, FileStore)
    path = store.root / "runs" / run_id / "records" / f"{seq:012d}.json"
    header, body = path.read_text().splitlines()
    path.write_text(f"{header}\n{tamper(body)}\n")


def open_postgres(tmp: Path) -> Store:
    """A store in a schema of its own on the test server (dropped when the session ends);
    skipped when the server is unreachable, unless CI is set."""
    import atexit
    import os
    import uuid

    import psycopg

    server = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"
    schema = f"ubc_{uuid.uuid4().hex[:12]}"
    try:
        store = open_store(f"{server}{'&' if '?' in server else '?'}schema={schema}")
    except StoreUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so PostgreSQL tests must run: {exc}")
        pytest.skip(str(exc))

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')

    atexit.register(drop)
    return store


def corrupt_postgres(store: Store, run_id: str, seq: int) -> None:
    import psycopg

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.settings.conninfo, autocommit=True) as conn:  # a second connection
        where = (run_id, seq)
        (body,) = conn.execute("SELECT body FROM unbroken_records WHERE run_id = %s AND seq = %s", where).fetchone()
        conn.execute("UPDATE unbroken_records SET body = %s WHERE run_id = %s AND seq = %s", (tamper(body), *where))


@dataclass(frozen=True)
class Backend:
    open: Callable[[Path], Store]
    corrupt: Callable[[Store, str, int], None]


BACKENDS = [
    pytest.param(Backend(lambda tmp: open_store("memory://"), corrupt_memory), id="memory"),
    pytest.param(Backend(lambda tmp: open_store(f"sqlite:///{tmp}/runs.db"), corrupt_sqlite), id="sqlite-full"),
    pytest.param(
        Backend(lambda tmp: open_store(f"sqlite:///{tmp}/runs.db?durability=normal"), corrupt_sqlite),
        id="sqlite-normal",
    ),
    pytest.param(Backend(lambda tmp: open_store(f"file://{tmp}/store"), corrupt_file), id="file"),
    pytest.param(Backend(open_postgres, corrupt_postgres), id="postgres"),
]


class TestStoreContract(StoreContract):
    @pytest.fixture(params=BACKENDS)
    def store(self, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
        self.backend: Backend = request.param
        opened = self.backend.open(tmp_path)
        yield opened
        opened.close()

    def corrupt_record(self, store: Store, run_id: str, seq: int) -> None:
        self.backend.corrupt(store, run_id, seq)
