"""The store contract (``unbroken.testing.StoreContract``) on every store in the repository.

To add a backend, add one ``Backend`` line to ``BACKENDS``: how to open it on a fresh place and
how to damage it behind its back (change a record, lose a record, edit a ledger entry)."""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from unbroken.codec import StoredRecord
from unbroken.errors import StoreUnavailable
from unbroken.state import LedgerEntry
from unbroken.stores import open_store
from unbroken.stores._file_format import effect_name
from unbroken.stores.backend import SealedEntry
from unbroken.stores.base import Store
from unbroken.stores.examples.jsonkv import JsonKVStore
from unbroken.stores.files import FileStore
from unbroken.stores.memory import InMemoryStore
from unbroken.stores.postgres import PostgresStore
from unbroken.stores.sqlite import SQLiteStore
from unbroken.testing import StoreContract

if TYPE_CHECKING:
    from unbroken.stores.redis import RedisStore

tamper = StoreContract.tamper
EDITED_FROM, EDITED_TO = StoreContract.EDITED_FROM, StoreContract.EDITED_TO


def edited(text: str) -> str:
    assert EDITED_FROM in text
    return text.replace(EDITED_FROM, EDITED_TO)


def corrupt_memory(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, InMemoryStore)
    records = store.backend._runs[run_id].records
    index = next(i for i, record in enumerate(records) if record.seq == seq)
    record = records[index]
    records[index] = StoredRecord(record.seq, tamper(cast(str, record.body)), record.checksum)  # kept as text


def delete_memory(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, InMemoryStore)
    records = store.backend._runs[run_id].records
    records[:] = [record for record in records if record.seq != seq]


def edit_memory(store: Store, run_id: str, key: str) -> None:
    assert isinstance(store, InMemoryStore)
    sealed = store.backend._runs[run_id].ledger[key]
    changed = LedgerEntry.from_json(json.loads(edited(json.dumps(sealed.entry.to_json()))))
    store.backend._runs[run_id].ledger[key] = SealedEntry(changed, sealed.checksum)


def _sqlite_change(store: Store, sql: str, params: tuple[object, ...]) -> None:
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:  # a second connection, as another process would
        assert conn.execute(sql, params).rowcount == 1
    conn.close()


def delete_sqlite(store: Store, run_id: str, seq: int) -> None:
    _sqlite_change(store, "DELETE FROM unbroken_records WHERE run_id=? AND seq=?", (run_id, seq))


def edit_sqlite(store: Store, run_id: str, key: str) -> None:
    sql = "UPDATE unbroken_effects SET result=replace(result, ?, ?) WHERE run_id=? AND key=?"
    _sqlite_change(store, sql, (EDITED_FROM, EDITED_TO, run_id, key))


def corrupt_sqlite(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, SQLiteStore)
    with sqlite3.connect(store.path) as conn:  # a second connection, as another process would
        (body,) = conn.execute("SELECT body FROM unbroken_records WHERE run_id=? AND seq=?", (run_id, seq)).fetchone()
        conn.execute("UPDATE unbroken_records SET body=? WHERE run_id=? AND seq=?", (tamper(body), run_id, seq))
    conn.close()


def open_sqlite_packed(tmp: Path) -> Store:
    """SQLite packing after every save: all but the newest record of a run sit in segments of
    two, so every contract test also runs on packed records."""
    return SQLiteStore(tmp / "runs.db", keep_recent=1, pack_batch=2, sealed_read_from=0)


def _segment_holding(conn: sqlite3.Connection, run_id: str, seq: int) -> tuple[int, dict[str, Any], bytes] | None:
    row = conn.execute(
        "SELECT first_seq, idx, bodies FROM unbroken_segments WHERE run_id=? AND first_seq<=? AND last_seq>=?",
        (run_id, seq, seq),
    ).fetchone()
    return None if row is None else (row[0], json.loads(row[1]), bytes(row[2]))


def _packed_in(store: SQLiteStore, run_id: str, seq: int) -> int | None:
    """The first seq of the segment holding record ``seq``, or None when it is a loose row."""
    conn = sqlite3.connect(store.path)
    try:
        found = _segment_holding(conn, run_id, seq)
    finally:
        conn.close()
    return None if found is None else found[0]


def _bodies_of(index: dict[str, Any], bodies: bytes) -> list[bytes]:
    parts, offset = [], 1
    for length in index["lengths"]:
        parts.append(bodies[offset : offset + length])
        offset += length + 1
    return parts


def _edit_packed(
    store: Store,
    run_id: str,
    seq: int,
    loose: Callable[[Store, str, int], None],
    edit: Callable[[sqlite3.Connection, int, dict[str, Any], list[bytes]], None],
) -> None:
    """``edit(conn, first, index, bodies)`` the segment holding record ``seq``, or ``loose`` it
    when the record is a loose row."""
    assert isinstance(store, SQLiteStore)
    if _packed_in(store, run_id, seq) is None:
        return loose(store, run_id, seq)
    with sqlite3.connect(store.path) as conn:
        found = _segment_holding(conn, run_id, seq)
        assert found is not None
        first, index, bodies = found
        edit(conn, first, index, _bodies_of(index, bodies))
    conn.close()


def corrupt_sqlite_packed(store: Store, run_id: str, seq: int) -> None:
    """Change a record inside its segment as a hand edit would: its bytes and length in the
    index change, its checksum and the segment's seal stay as they were."""

    def edit(conn: sqlite3.Connection, first: int, index: dict[str, Any], parts: list[bytes]) -> None:
        parts[seq - first] = tamper(parts[seq - first].decode()).encode()
        index["lengths"] = [len(part) for part in parts]
        conn.execute(
            "UPDATE unbroken_segments SET idx=?, bodies=? WHERE run_id=? AND first_seq=?",
            (json.dumps(index).encode(), b"[" + b",".join(parts) + b"]", run_id, first),
        )

    _edit_packed(store, run_id, seq, corrupt_sqlite, edit)


def delete_sqlite_packed(store: Store, run_id: str, seq: int) -> None:
    """Lose a record from its segment as a careful attacker would: the segment is rewritten
    without it, with a consistent index and a fresh seal; the missing seq must still be caught."""
    from unbroken.codec import segment_seal

    def edit(conn: sqlite3.Connection, first: int, index: dict[str, Any], parts: list[bytes]) -> None:
        keep = [i for i in range(len(index["lengths"])) if first + i != seq]
        conn.execute("DELETE FROM unbroken_segments WHERE run_id=? AND first_seq=?", (run_id, first))
        # What is left of the segment, split where the record was: each part sealed afresh.
        for part in ([i for i in keep if first + i < seq], [i for i in keep if first + i > seq]):
            if not part:
                continue
            new_first = first + part[0]
            new_index = {
                "first": new_first,
                "checksums": [index["checksums"][i] for i in part],
                "lengths": [index["lengths"][i] for i in part],
                "snapshots": [s for s in index["snapshots"] if s in {first + i for i in part}],
            }
            index_text = json.dumps(new_index).encode()
            new_bodies = b"[" + b",".join(parts[i] for i in part) + b"]"
            conn.execute(
                "INSERT INTO unbroken_segments (run_id, first_seq, last_seq, idx, seal, bodies) VALUES (?,?,?,?,?,?)",
                (run_id, new_first, first + part[-1], index_text, segment_seal(index_text, new_bodies), new_bodies),
            )

    _edit_packed(store, run_id, seq, delete_sqlite, edit)


def corrupt_file(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, FileStore)
    path = store.backend.root / "runs" / run_id / "records" / f"{seq:012d}.json"
    header, body = path.read_text().splitlines()
    path.write_text(f"{header}\n{tamper(body)}\n")


def delete_file(store: Store, run_id: str, seq: int) -> None:
    assert isinstance(store, FileStore)
    (store.backend.root / "runs" / run_id / "records" / f"{seq:012d}.json").unlink()


def edit_file(store: Store, run_id: str, key: str) -> None:
    assert isinstance(store, FileStore)
    path = store.backend.root / "runs" / run_id / "effects" / effect_name(key)
    path.write_text(edited(path.read_text()))


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
    with psycopg.connect(store.backend.settings.conninfo, autocommit=True) as conn:  # a second connection
        where = (run_id, seq)
        row = conn.execute("SELECT body FROM unbroken_records WHERE run_id = %s AND seq = %s", where).fetchone()
        assert row is not None
        (body,) = row
        conn.execute("UPDATE unbroken_records SET body = %s WHERE run_id = %s AND seq = %s", (tamper(body), *where))


def _postgres_change(store: Store, sql: str, params: tuple[object, ...]) -> None:
    import psycopg

    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.backend.settings.conninfo, autocommit=True) as conn:  # a second connection
        assert conn.execute(sql, params).rowcount == 1


def delete_postgres(store: Store, run_id: str, seq: int) -> None:
    _postgres_change(store, "DELETE FROM unbroken_records WHERE run_id = %s AND seq = %s", (run_id, seq))


def edit_postgres(store: Store, run_id: str, key: str) -> None:
    sql = "UPDATE unbroken_effects SET result = replace(result, %s, %s) WHERE run_id = %s AND key = %s"
    _postgres_change(store, sql, (EDITED_FROM, EDITED_TO, run_id, key))


def open_redis(tmp: Path) -> Store:
    """A store under a key prefix of its own on the shared test server (deleted at exit); no
    durability is claimed there (the durability tests start their own server). Skipped when the
    server is unreachable, unless CI is set."""
    import atexit
    import os
    import uuid

    server = os.environ.get("UNBROKEN_TEST_REDIS_URL") or "redis://127.0.0.1:6379/0"
    prefix = f"ubc-{uuid.uuid4().hex[:12]}"
    try:
        store = open_store(f"{server}{'&' if '?' in server else '?'}prefix={prefix}&durability=none")
    except StoreUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"CI is set, so Redis tests must run: {exc}")
        pytest.skip(str(exc))

    def drop() -> None:
        import redis

        client = redis.Redis.from_url(server)
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()

    atexit.register(drop)
    return store


def _redis_client(store: RedisStore) -> Any:
    """The store's own client: its replies are bytes (no decode_responses), which redis-py's
    types (``bytes | str``, or an awaitable) cannot say."""
    return store.backend._client


def corrupt_redis(store: Store, run_id: str, seq: int) -> None:
    from unbroken.stores.redis import RedisStore

    assert isinstance(store, RedisStore)
    client, key = _redis_client(store), store.backend._key("rec", run_id)
    for index, element in enumerate(client.lrange(key, 0, -1)):
        number, check, body = element.split(b" ", 2)
        if int(number) == seq:
            client.lset(key, index, b" ".join([number, check, tamper(body.decode()).encode()]))


def delete_redis(store: Store, run_id: str, seq: int) -> None:
    from unbroken.stores.redis import RedisStore

    assert isinstance(store, RedisStore)
    client, key = _redis_client(store), store.backend._key("rec", run_id)
    (element,) = [e for e in client.lrange(key, 0, -1) if int(e.split(b" ", 1)[0]) == seq]
    assert client.lrem(key, 1, element) == 1


def edit_redis(store: Store, run_id: str, key: str) -> None:
    from unbroken.stores.redis import RedisStore

    assert isinstance(store, RedisStore)
    client, ledger = _redis_client(store), store.backend._key("led", run_id)
    client.hset(ledger, key, edited(client.hget(ledger, key).decode()).encode())


@functools.cache
def _s3_bucket() -> str:
    """A bucket on a moto S3 server started in a child process for this session (fake
    credentials: it takes any), or on ``$UNBROKEN_TEST_S3_ENDPOINT``."""
    import atexit
    import os
    import socket
    import subprocess
    import sys
    import time

    import boto3  # type: ignore[import-untyped]  # boto3 ships no type stubs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ[name] = "testing"
    endpoint = os.environ.get("UNBROKEN_TEST_S3_ENDPOINT")
    if not endpoint:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        atexit.register(server.kill)
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
    bucket = f"ubc-{os.getpid()}-{int(time.time())}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/{{prefix}}?endpoint={endpoint}&region=us-east-1"


def open_s3(tmp: Path) -> Store:
    """A store under a prefix of its own in the test bucket (moto, over HTTP); skipped when
    moto[server] is not installed, unless CI is set."""
    import importlib.util
    import os
    import uuid

    if not os.environ.get("UNBROKEN_TEST_S3_ENDPOINT") and importlib.util.find_spec("moto") is None:
        if os.environ.get("CI"):
            pytest.fail("CI is set, so S3 tests must run: moto[server] is not installed")
        pytest.skip("moto[server] is not installed (pip install -e '.[dev]')")
    return open_store(_s3_bucket().format(prefix=f"t-{uuid.uuid4().hex[:12]}"))


def corrupt_s3(store: Store, run_id: str, seq: int) -> None:
    from unbroken.stores._s3_layout import pack, unpack
    from unbroken.stores.s3 import S3Store

    assert isinstance(store, S3Store)
    bucket = store.backend.objects
    for name in bucket.names(f"runs/{run_id}/"):
        if "/rec/" not in name and "/seg/" not in name:
            continue
        body, _ = bucket.get(name) or (b"", "")
        records = unpack(body, [])
        if any(number == seq for number, _, _ in records):
            changed = [(n, c, tamper(b.decode()).encode() if n == seq else b) for n, c, b in records]
            bucket.put(name, pack(changed))


def delete_s3(store: Store, run_id: str, seq: int) -> None:
    from unbroken.stores._s3_layout import pack, unpack
    from unbroken.stores.s3 import S3Store

    assert isinstance(store, S3Store)
    bucket = store.backend.objects
    for name in bucket.names(f"runs/{run_id}/"):
        if "/rec/" not in name and "/seg/" not in name:
            continue
        body, _ = bucket.get(name) or (b"", "")
        records = unpack(body, [])
        if any(number == seq for number, _, _ in records):
            rest = [record for record in records if record[0] != seq]
            if rest:
                bucket.put(name, pack(rest))
            else:
                bucket.delete([name])


def edit_s3(store: Store, run_id: str, key: str) -> None:
    from urllib.parse import quote

    from unbroken.stores.s3 import S3Store

    assert isinstance(store, S3Store)
    # The entry is stored in its own object and, while its save is the run's last, in the head.
    for name in (f"runs/{run_id}/led/{quote(key, safe='')}", f"runs/{run_id}/head"):
        found = store.backend.objects.get(name)
        if found is not None:
            store.backend.objects.put(name, edited(found[0].decode()).encode())


def _jsonkv_record(store: Store, run_id: str, seq: int) -> Path:
    assert isinstance(store, JsonKVStore)
    head = json.loads((store.backend.root / "runs" / run_id / "head.json").read_text())
    return store.backend.root / "runs" / run_id / f"g{head.get('gen', 0)}" / f"{seq}.json"


def corrupt_jsonkv(store: Store, run_id: str, seq: int) -> None:
    path = _jsonkv_record(store, run_id, seq)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "body": tamper(record["body"])}))


def delete_jsonkv(store: Store, run_id: str, seq: int) -> None:
    _jsonkv_record(store, run_id, seq).unlink()


def edit_jsonkv(store: Store, run_id: str, key: str) -> None:
    assert isinstance(store, JsonKVStore)
    (path,) = (store.backend.root / "runs" / run_id / "ledger").glob("*.json")
    path.write_text(edited(path.read_text()))


@dataclass(frozen=True)
class Backend:
    open: Callable[[Path], Store]
    corrupt: Callable[[Store, str, int], None]
    delete: Callable[[Store, str, int], None]
    edit: Callable[[Store, str, str], None]
    reopen: Callable[[Store], Store] = lambda store: open_store(store.url)


SQLITE = (corrupt_sqlite, delete_sqlite, edit_sqlite)
BACKENDS = [
    pytest.param(Backend(lambda tmp: open_store("memory://"), corrupt_memory, delete_memory, edit_memory), id="memory"),
    pytest.param(Backend(lambda tmp: open_store(f"sqlite:///{tmp}/runs.db"), *SQLITE), id="sqlite-full"),
    pytest.param(
        Backend(lambda tmp: open_store(f"sqlite:///{tmp}/runs.db?durability=normal"), *SQLITE), id="sqlite-normal"
    ),
    pytest.param(
        Backend(
            open_sqlite_packed,
            corrupt_sqlite_packed,
            delete_sqlite_packed,
            edit_sqlite,
            lambda store: SQLiteStore(store.path, keep_recent=1, pack_batch=2, sealed_read_from=0),  # type: ignore[attr-defined]
        ),
        id="sqlite-packed",
    ),
    pytest.param(
        Backend(lambda tmp: open_store(f"file://{tmp}/store"), corrupt_file, delete_file, edit_file), id="file"
    ),
    pytest.param(Backend(open_postgres, corrupt_postgres, delete_postgres, edit_postgres), id="postgres"),
    pytest.param(Backend(open_redis, corrupt_redis, delete_redis, edit_redis), id="redis"),
    pytest.param(Backend(open_s3, corrupt_s3, delete_s3, edit_s3), id="s3"),
    pytest.param(
        Backend(
            lambda tmp: JsonKVStore(tmp / "kv"),
            corrupt_jsonkv,
            delete_jsonkv,
            edit_jsonkv,
            lambda store: JsonKVStore(store.backend.root),  # type: ignore[attr-defined]
        ),
        id="jsonkv-example",
    ),
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

    def delete_record(self, store: Store, run_id: str, seq: int) -> None:
        self.backend.delete(store, run_id, seq)

    def edit_entry(self, store: Store, run_id: str, key: str) -> None:
        self.backend.edit(store, run_id, key)

    def reopen(self, store: Store) -> Store:
        return self.backend.reopen(store)
