"""``postgresql://USER@HOST:PORT/DB``: one store shared by workers on many machines.

URL options (any other query parameter, such as ``sslmode`` or ``application_name``, goes to libpq):

* ``schema=NAME``: keep unbroken's tables in this schema, created if missing (default ``public``),
  so several stores, or several test runs, can share one database.
* ``pool_size=N``: the most connections this process opens (default 4).
* ``retry_for=SECONDS``: how long one operation keeps retrying while the server is unreachable
  (default 10) before it raises ``StoreUnavailable``.
* ``durability=full|normal`` (default ``full``): ``full`` refuses a server with ``fsync=off`` or
  ``synchronous_commit=off`` (``InsufficientDurability``, checked at open and at every lease
  acquisition); ``normal`` accepts it and declares only ``process_crash`` durability.
* ``group_commit=on|off`` (default ``on``): saves that threads of this process make at the same
  moment, when every connection already has one in flight, share one transaction and its commit
  (``_pg_group_commit``, ``_pg_batch``); a save that finds a connection free is sent alone, as
  with ``off``.

Every statement lives in ``sql/postgres/queries.sql`` and takes its values as bound parameters.
A save point is one statement (so one atomic write): it advances the run's head only if the head
and the fence token are still the ones the writer expects, and writes the record and the ledger
rows only through that advance. Lease times come from the database clock, never the client's,
so a worker whose clock is wrong cannot extend or steal a lease. A resume reads the run's records
in one statement (one snapshot) walking the primary key, streamed in chunks of rows: memory stays
bounded and the server sorts nothing (see ``iter_raw_records``). The schema is created from
``schema.sql`` or brought up to date by the numbered files in ``migrations/``, under an advisory
lock, and each applied migration is recorded in ``unbroken_migrations``.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from .. import crashpoints
from ..codec import EncodedSave, StoredRecord, dumps
from ..errors import ConcurrentSave, IncompatibleSchema, InvalidStoreURL, StoreUnavailable
from ..state import Lease, RunSummary
from ._pg_batch import BatchFailed, send_batch
from ._pg_group_commit import GroupCommit, Pending
from ._postgres_settings import check_durability, level_of
from ._retry import Deadline, retry_until_deadline
from ._rows import ledger_from_row, ledger_to_row
from .backend import (
    ClaimedRun,
    Durability,
    QueueBackend,
    Reach,
    Refused,
    RunHead,
    SealedEntry,
    Submission,
    claimable,
    seal,
)
from .base import Store

T = TypeVar("T")
Conn = psycopg.Connection[tuple[Any, ...]]

DEFAULT_SCHEMA = "public"
DEFAULT_POOL_SIZE = 4
DEFAULT_RETRY_FOR = 10.0
CONNECT_TIMEOUT_S = 5
_STORE_OPTIONS = frozenset({"schema", "pool_size", "retry_for", "durability", "group_commit"})
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MIGRATION_FILE = re.compile(r"(\d{4})_(\w+)\.sql")
_LEDGER_FIELDS = ("key", "run_id", "call_id", "tool", "args_hash", "status", "attempts", "result")
_LEDGER_TIMES = ("created_at", "updated_at", "lease_fence")
_RECORD_MIGRATION = "INSERT INTO unbroken_migrations (version, name) VALUES (%s, %s)"
_MAX_SEQ = 2**63 - 1  # bigint's largest: "no upper bound" for a seq
_STREAM_ROWS = 100
"""Rows per chunk when a resume streams a run's records (about 140 KB of the benchmark's turns).
Measured at 10,000 turns, 25 alternated rounds: the client's CPU for the stream 22.0-22.7 ms in
chunks of 1,000 rows (~1.4 MB each), 16.1-16.5 ms in 250, 14.8-15.5 ms in 100; and the loader
starts on a chunk sooner (docs/benchmarks.md, "PostgreSQL resume")."""
_CURSOR_ROWS = 1000
"""Rows per fetch from the server-side cursor of an older libpq: each fetch is a round trip."""
_CHUNKED_ROWS = psycopg.pq.version() >= 170000
"""libpq 17 hands a streamed result over in chunks of rows; an older one only row by row."""
_ORDERED_READ = "SET LOCAL enable_sort = off"
"""Set in a read's transaction: reading a run in seq order walks the primary key (run_id, seq).
Otherwise the planner sorts a long run's rows, spilling tens of MB to temp files (work_mem is
4 MB by default), and sends nothing before the sort has ended."""


# --------------------------------------------------------------------------- SQL files


def _sql_file(name: str) -> str:
    return resources.files("unbroken.stores").joinpath(f"sql/postgres/{name}").read_text(encoding="utf-8")


def _load_queries() -> dict[str, str]:
    """The named statements of ``queries.sql`` (a ``-- name: X`` line starts statement X)."""
    queries: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in _sql_file("queries.sql").splitlines():
        if line.startswith("-- name: "):
            current = queries.setdefault(line.removeprefix("-- name: ").strip(), [])
        elif current is not None and not line.lstrip().startswith("--"):
            current.append(line)
    return {name: "\n".join(lines).strip() for name, lines in queries.items()}


Q = _load_queries()
_APPEND_RECORD = Q["append_record"].encode()
_APPEND_WITH_LEDGER = Q["append"].encode()
_APPEND_BATCH = Q["append_batch"].encode()
_ONE_STATEMENT = True
_ONE_BATCH = (_APPEND_RECORD, _APPEND_BATCH)
"""A group commit's batch of saves without ledger entries goes as one statement (``_pg_batch``)."""
"""The save statements as bytes, made once: psycopg takes them as they are, where a str would be
encoded again, and its statement cache key hashed again, at every save (~2 KB each)."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    script: str


def migrations() -> list[Migration]:
    """Every numbered file of ``sql/postgres/migrations``, in order."""
    folder = resources.files("unbroken.stores").joinpath("sql/postgres/migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION_FILE.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda m: m.version)


def latest_version() -> int:
    """The number of the newest file of ``sql/postgres/migrations`` (read from the names only)."""
    folder = resources.files("unbroken.stores").joinpath("sql/postgres/migrations")
    return max(int(match[1]) for entry in folder.iterdir() if (match := _MIGRATION_FILE.fullmatch(entry.name)))


def migrate(conn: Conn, schema: str, *, fresh_from_schema_file: bool = True) -> list[int]:
    """Bring ``schema`` up to the latest migration; returns the versions applied now.

    Runs in one transaction under an advisory lock keyed by the schema name, so processes that
    open the store at the same moment apply each migration once. A schema with no recorded
    migration is created from ``schema.sql`` (``fresh_from_schema_file``) or by applying every
    migration in order; a test checks that both give the same tables and indexes."""
    steps = migrations()
    latest = steps[-1].version
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"unbroken.migrate.{schema}",))
        if conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is None:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.unbroken_migrations (version integer PRIMARY KEY, "
                "name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            ).format(sql.Identifier(schema))
        )
        applied = {row[0] for row in conn.execute("SELECT version FROM unbroken_migrations")}
        if applied and max(applied) > latest:
            raise IncompatibleSchema(
                f"PostgreSQL schema {schema!r} is at store migration {max(applied)}; this unbroken knows "
                f"up to {latest}. Upgrade unbroken."
            )
        if not applied and fresh_from_schema_file:
            conn.execute(_sql_file("schema.sql").encode())
            for step in steps:
                conn.execute(_RECORD_MIGRATION, (step.version, step.name))
            return [step.version for step in steps]
        todo = [step for step in steps if step.version not in applied]
        for step in todo:
            conn.execute(step.script.encode())
            conn.execute(_RECORD_MIGRATION, (step.version, step.name))
        return [step.version for step in todo]


# --------------------------------------------------------------------------- URL


@dataclass(frozen=True)
class PostgresURL:
    """A store URL split into what libpq gets and what the store keeps for itself."""

    conninfo: str
    schema: str
    pool_size: int
    retry_for: float
    where: str
    """Host, port, database and user, for messages (never the password)."""
    level: str = "full"
    """What the URL asks of the server (``durability=full|normal``, ``_postgres_settings``)."""
    group_commit: bool = True
    """Concurrent saves of this process share a commit (``group_commit=on|off``)."""


def parse_url(url: str) -> PostgresURL:
    """Split and check a ``postgresql://`` URL; raises ``InvalidStoreURL`` saying what is wrong."""
    parts = urlsplit(url)
    params = parse_qsl(parts.query, keep_blank_values=True)
    ours = {key: value for key, value in params if key in _STORE_OPTIONS}
    libpq = [(key, value) for key, value in params if key not in _STORE_OPTIONS]
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        raise InvalidStoreURL(
            f"schema {schema!r} in store URL is not a plain name: use 1-63 characters from a-z 0-9 _, "
            "not starting with a digit"
        )
    try:
        pool_size = int(ours.get("pool_size", DEFAULT_POOL_SIZE))
        retry_for = float(ours.get("retry_for", DEFAULT_RETRY_FOR))
    except ValueError as exc:
        raise InvalidStoreURL(f"store URL option pool_size or retry_for is not a number: {exc}") from exc
    if pool_size < 1 or not 0 <= retry_for <= 3600:
        raise InvalidStoreURL("store URL needs pool_size >= 1 and retry_for between 0 and 3600 seconds")
    group_commit = ours.get("group_commit", "on")
    if group_commit not in ("on", "off"):
        raise InvalidStoreURL(f"store URL option group_commit is {group_commit!r}: use on or off")
    if not any(key == "connect_timeout" for key, _ in libpq):
        libpq.append(("connect_timeout", str(CONNECT_TIMEOUT_S)))
    scheme = "postgresql" if parts.scheme.lower() in ("postgresql", "postgres") else parts.scheme
    conninfo = urlunsplit((scheme, parts.netloc, parts.path, urlencode(libpq, quote_via=quote), ""))
    try:
        conninfo = psycopg.conninfo.make_conninfo(conninfo, options=f"-c search_path={schema}")
    except psycopg.ProgrammingError as exc:
        raise InvalidStoreURL(f"store URL is not a valid PostgreSQL URL: {' '.join(str(exc).split())}") from exc
    host = parts.hostname or "the local socket"
    port = parts.port or 5432
    database = parts.path.lstrip("/") or parts.username or "(default)"
    where = f"{host}:{port} database {database!r} user {parts.username or '(default)'!r} schema {schema!r}"
    return PostgresURL(conninfo, schema, pool_size, retry_for, where, level_of(ours), group_commit == "on")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


# --------------------------------------------------------------------------- the store


class PostgresBackend(QueueBackend):
    """The primitives of a run store in a PostgreSQL database. Safe to share between threads;
    each process opens its own connection pool (a forked child opens a new one). Declares
    ``ServerCheck`` (``check_server``), ``StreamedReads`` and ``OneStepClaim``."""

    reach: Reach = "network"
    durability: Durability = "power_loss"
    lease_clock_is_store_time = True  # both are the server's clock_timestamp()

    def __init__(self, url: str) -> None:
        self.url = url
        self.settings = parse_url(url)
        self.concurrency = self.settings.pool_size  # threads that may work at once: one connection each
        self.schema = self.settings.schema
        self._lock = threading.Lock()
        self._pool: ConnectionPool[Conn] | None = None
        self._pid = os.getpid()
        self._group: tuple[int, GroupCommit] | None = None
        try:
            with psycopg.connect(self.settings.conninfo, autocommit=True) as conn:
                # The server answers: the pool makes its first connection in the background while
                # the schema is checked, so the store's first operation finds one ready.
                self._open_pool()
                self.durability = self._prepare(conn)
        except psycopg.OperationalError as exc:
            self.close()
            raise StoreUnavailable(
                f"cannot connect to PostgreSQL at {self.settings.where}: {_one_line(exc)} -- check that the "
                "server is running and reachable and that host, port, database, user and password in the "
                "store URL are right"
            ) from exc
        except BaseException as exc:
            self.close()
            if not isinstance(exc, psycopg.Error):
                raise
            where = self.settings.where
            raise StoreUnavailable(f"cannot prepare PostgreSQL store at {where}: {_one_line(exc)}") from exc

    # ------------------------------------------------------------------ plumbing

    def _open_pool(self) -> ConnectionPool[Conn]:
        pool: ConnectionPool[Conn] = ConnectionPool(
            self.settings.conninfo,
            kwargs={"autocommit": True},
            min_size=1,
            max_size=self.settings.pool_size,
            timeout=min(max(self.settings.retry_for, 0.2), 2.0),
            name=f"unbroken-{self.schema}",
            open=False,
        )
        pool.open(wait=False)
        self._pool = pool
        self._pid = os.getpid()
        return pool

    def _get_pool(self) -> ConnectionPool[Conn]:
        with self._lock:
            if self._pool is None:
                raise StoreUnavailable(f"PostgreSQL store at {self.settings.where} is closed")
            if self._pid != os.getpid():
                # A forked child must not use the parent's sockets; leave them to the parent.
                return self._open_pool()
            return self._pool

    def _run(self, op: Callable[[Conn, bool], T]) -> T:
        """Run ``op(connection, retried)``, retrying on a lost connection until ``retry_for``
        has passed (``_retry``). ``retried`` tells ``op`` that an earlier attempt may have committed."""

        def attempt(retried: bool) -> T:
            try:
                try:
                    # getconn/putconn, not the pool's connection() context: the same checks (putconn
                    # rolls back a transaction left open, replaces a broken connection) at half the
                    # cost, paid at every save. Connections are in autocommit; op's transactions
                    # are conn.transaction() blocks, which end themselves.
                    pool = self._get_pool()
                    conn = pool.getconn()
                    try:
                        return op(conn, retried)
                    finally:
                        pool.putconn(conn)
                except PoolTimeout:
                    # The pool may still be backing off from an outage the server is already
                    # back from: one direct connection tells, and does the work if it is.
                    with psycopg.connect(self.settings.conninfo, autocommit=True) as conn:
                        return op(conn, True)
            except psycopg.OperationalError:
                raise  # transient: retried below
            except psycopg.Error as exc:
                raise StoreUnavailable(f"PostgreSQL store at {self.settings.where}: {_one_line(exc)}") from exc

        return retry_until_deadline(
            attempt,
            retry_for=self.settings.retry_for,
            transient=(psycopg.OperationalError,),
            unreachable=self._unreachable,
        )

    def _unreachable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(
            f"PostgreSQL at {self.settings.where} is unreachable ({_one_line(exc)}); gave up after "
            f"{self.settings.retry_for:g}s. The run is intact at its last save point."
        )

    def _stream(self, op: Callable[[Conn], Generator[T]]) -> Iterator[T]:
        """Yield what ``op(connection)`` yields, holding one connection until it ends or is
        closed. A lost connection is retried like ``_run`` until the first item has come; after
        that it raises ``StoreUnavailable`` (a read started again would be another snapshot,
        and the reader has taken part of this one)."""
        deadline = Deadline(self.settings.retry_for, self._unreachable)
        started = False
        while True:
            try:
                with ExitStack() as stack:
                    try:
                        conn = stack.enter_context(self._get_pool().connection())
                    except PoolTimeout:  # as in _run: one direct connection tells
                        conn = stack.enter_context(psycopg.connect(self.settings.conninfo, autocommit=True))
                    items = op(conn)
                    stack.callback(items.close)  # op's statement ends before its connection goes back
                    for first in items:
                        started = True
                        yield first
                        break
                    else:
                        return
                    yield from items  # (not one loop level more per item)
                    return
            except psycopg.OperationalError as exc:
                if started:
                    raise StoreUnavailable(
                        f"lost the connection to PostgreSQL at {self.settings.where} in the middle of a read "
                        f"({_one_line(exc)}); nothing was changed: try again"
                    ) from exc
                deadline.wait(exc)
            except psycopg.Error as exc:
                raise StoreUnavailable(f"PostgreSQL store at {self.settings.where}: {_one_line(exc)}") from exc

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()

    # ------------------------------------------------------------------ head and clock

    def store_time(self) -> float:
        return float(self._run(lambda conn, _: _scalar(conn.execute(Q["store_time"]).fetchone())))

    def read_head(self, run_id: str) -> RunHead | None:
        row = self._run(lambda conn, _: conn.execute(Q["read_head"], {"run_id": run_id}).fetchone())
        return RunHead(row[0], row[1], row[2], row[3]) if row is not None else None

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        params: dict[str, Any] = {"run_id": run_id, "seq": new.seq, "fence": new.fence, "owner": new.owner}
        params["expires_at"] = new.expires_at
        if expected is None:
            return bool(self._run(lambda conn, _: conn.execute(Q["create_head"], params).rowcount == 1))
        params.update(old_seq=expected.seq, old_fence=expected.fence, old_owner=expected.owner)
        params["old_expires_at"] = expected.expires_at
        return bool(self._run(lambda conn, _: conn.execute(Q["swap_head"], params).rowcount == 1))

    # ------------------------------------------------------------------ records

    def _already_written(self, conn: Conn, save: EncodedSave, fence: int | None) -> bool:
        """After a retry: did the attempt that lost its connection commit this very save?"""
        row = conn.execute(Q["head_and_fence"], {"run_id": save.run_id}).fetchone()
        if row is None or row[0] != save.seq or (fence is not None and row[1] != fence):
            return False
        stored = conn.execute(Q["record_checksum"], {"run_id": save.run_id, "seq": save.seq}).fetchone()
        return stored is not None and stored[0] == save.checksum

    @staticmethod
    def _record_params(save: EncodedSave) -> dict[str, Any]:
        s = save.summary
        return {
            "run_id": save.run_id,
            "seq": save.seq,
            "label": save.label,
            "snapshot": save.snapshot,
            "body": save.body,
            "checksum": save.checksum,
            "task": s.task,
            "phase": s.phase,
            "turns": s.turns,
            "tokens_used": s.tokens_used,
            "updated_at": s.updated_at,
        }

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        params = self._record_params(save)
        params.update(expect_seq=expect_seq, fence=fence)
        statement = _APPEND_RECORD
        if entries:  # most saves have none: their statement leaves the ledger out
            statement = _APPEND_WITH_LEDGER
            params["ledger"] = _ledger_json(entries)
        if not self.settings.group_commit or (expect_seq == 0 and fence is None):
            self._save_alone(statement, params, save, fence)
            return
        pending = Pending(save.run_id, statement, params, save, fence)
        self._group_commit().submit(pending)
        if pending.error is not None:
            raise pending.error
        if pending.done:
            if pending.written:
                return
            raise Refused
        self._save_alone(statement, params, save, fence, maybe_written=bool(pending.alone))

    def _save_alone(
        self,
        statement: bytes,
        params: dict[str, Any],
        save: EncodedSave,
        fence: int | None,
        *,
        maybe_written: bool = False,
    ) -> None:
        """One save in its own statement and commit (``maybe_written``: an earlier attempt,
        a batch, may have committed it)."""

        def op(conn: Conn, retried: bool) -> None:
            crashpoints.hit("postgres.before_append")
            if params["expect_seq"] == 0 and fence is None:
                with conn.transaction():  # a brand-new run without a lease: create its row first
                    conn.execute(Q["create_run"], {"run_id": save.run_id})
                    if conn.execute(statement, params).rowcount != 1:
                        raise Refused
                return
            if _saving_cursor(conn).execute(statement, params).rowcount == 1 or (
                (retried or maybe_written) and self._already_written(conn, save, fence)
            ):
                return
            raise Refused

        self._run(op)

    def _group_commit(self) -> GroupCommit:
        """This process's group commit (a forked child makes its own: the parent's queue is not its)."""
        group = self._group
        if group is None or group[0] != os.getpid():
            with self._lock:
                group = self._group
                if group is None or group[0] != os.getpid():
                    group = self._group = (os.getpid(), GroupCommit(self._send_batch, self.settings.pool_size))
        return group[1]

    def _send_batch(self, batch: list[Pending]) -> None:
        """``GroupCommit``'s sender: a save alone is sent as without group commit (its own
        statement and commit); several go in one transaction (``_pg_batch``)."""
        if len(batch) == 1:  # the leader's own save (a batch always holds its leader's)
            pending = batch[0]
            try:
                self._save_alone(pending.statement, pending.params, pending.save, pending.fence)
                pending.written = True
            except Refused:
                pass
            pending.done = True
            return
        try:
            self._run(
                lambda conn, retried: send_batch(
                    conn,
                    batch,
                    retried,
                    _saving_cursor(conn),
                    self._already_written,
                    _ONE_BATCH if _ONE_STATEMENT else None,
                )
            )
        except BatchFailed:
            for pending in batch:
                pending.alone = False  # rolled back whole: each goes again alone, for its own answer

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        params = {"run_id": run_id, "after_seq": after_seq}

        def op(conn: Conn, _retried: bool) -> list[Any]:
            with conn.transaction():
                conn.execute(_ORDERED_READ)
                return conn.execute(Q["read_records_after"], params).fetchall()

        rows = self._run(op)
        return [StoredRecord(seq, body, checksum) for seq, body, checksum in rows]

    def iter_raw_records(self, run_id: str) -> Iterator[StoredRecord]:
        # Speed+scale override: the bodies as their UTF-8 bytes over the binary protocol (no
        # decode to str here, no re-encode for the checksum), streamed: ONE statement (one
        # snapshot of the run) walking the primary key in seq order, whose rows come over in
        # chunks of _STREAM_ROWS as the server sends them. So memory stays bounded (a chunk and
        # the socket's buffers, not the run), the first record is parsed while the rest is still
        # on the wire,
        # and nothing is sorted on the server. Yields nothing for no run.
        def op(conn: Conn) -> Generator[StoredRecord]:
            params = {"run_id": run_id}
            with conn.transaction(), ExitStack() as stack:
                conn.execute(_ORDERED_READ)
                rows: Iterator[tuple[Any, ...]]
                if _CHUNKED_ROWS:
                    cursor = stack.enter_context(conn.cursor(binary=True))
                    rows = cursor.stream(Q["read_records_raw"], params, size=_STREAM_ROWS)
                    # (a generator) closed on the way out: psycopg then cancels a stream left early
                    stack.callback(getattr(rows, "close", lambda: None))
                else:  # an older libpq: a server-side cursor, fetched _CURSOR_ROWS at a time
                    named = stack.enter_context(conn.cursor("unbroken_resume", binary=True))
                    named.itersize = _CURSOR_ROWS
                    rows = iter(named.execute(Q["read_records_raw"], params))
                for seq, body, checksum in rows:
                    yield StoredRecord(seq, body, checksum)

        return self._stream(op)

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        # Bounded: a range scan of the primary key (run_id, seq).
        params = {"run_id": run_id, "after_seq": after_seq, "upto_seq": min(upto_seq, _MAX_SEQ)}
        rows = self._run(lambda conn, _: conn.execute(Q["read_records_between"], params).fetchall())
        return [StoredRecord(seq, body, checksum) for seq, body, checksum in rows]

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        # One probe of the partial index on snapshot records (migration 0005).
        params = {"run_id": run_id, "upto_seq": _MAX_SEQ if upto_seq is None else min(upto_seq, _MAX_SEQ)}
        return int(self._run(lambda conn, _: _scalar(conn.execute(Q["snapshot_seq"], params).fetchone())))

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        last = saves[-1]

        def op(conn: Conn, retried: bool) -> None:
            with conn.transaction():
                conn.execute(Q["create_run"], {"run_id": run_id})
                row = conn.execute(Q["lock_run"], {"run_id": run_id}).fetchone()
                head, current = (row[0], row[1]) if row else (0, 0)
                if head != expect_seq or (fence is not None and current != fence):
                    if retried and self._already_written(conn, last, fence):
                        return
                    raise Refused
                conn.execute(Q["delete_records"], {"run_id": run_id})
                conn.execute(Q["set_summary"], self._record_params(last))
                with conn.cursor() as cur:
                    cur.executemany(Q["insert_record"], [self._record_params(save) for save in saves])
                    entries = [seal(entry) for save in saves for entry in save.ledger]
                    if entries:
                        cur.executemany(Q["ledger_upsert"], [_ledger_params(e, None) for e in entries])

        self._run(op)

    def list_summaries(self) -> list[RunSummary]:
        rows = self._run(lambda conn, _: conn.execute(Q["list_runs"]).fetchall())
        return [RunSummary(*row) for row in rows]

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        # Bounded: the index on updated_second (updated_at cut to the second) read backward, the
        # runs of one second sorted at a time: about ``limit`` rows plus the rest of the last second.
        params: dict[str, Any] = {"limit": max(limit, 0)}
        if after is not None:
            params.update(updated_at=float(after[0]), run_id=after[1])
        query = Q["summaries_first" if after is None else "summaries_after"]
        rows = self._run(lambda conn, _: conn.execute(query, params).fetchall())
        return [RunSummary(*row) for row in rows]

    def remove_run(self, run_id: str) -> None:
        def op(conn: Conn, _: bool) -> None:
            with conn.transaction():
                for name in ("delete_run_records", "delete_run_effects", "delete_run_row"):
                    conn.execute(Q[name], {"run_id": run_id})

        self._run(op)

    # ------------------------------------------------------------------ effect ledger

    def _fence_is(self, conn: Conn, run_id: str, fence: int | None) -> bool:
        row = conn.execute(Q["head_and_fence"], {"run_id": run_id}).fetchone()
        return fence is None or (row[1] if row else 0) == fence

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        params = _ledger_params(sealed, fence)

        def op(conn: Conn, retried: bool) -> SealedEntry | None:
            if conn.execute(Q["ledger_claim"], params).fetchone() is not None:
                return None
            if not self._fence_is(conn, sealed.entry.run_id, fence):
                raise Refused
            row = conn.execute(Q["ledger_get"], {"run_id": sealed.entry.run_id, "key": sealed.entry.key}).fetchone()
            if row is None:
                raise ConcurrentSave(f"ledger key {sealed.entry.key} vanished while being claimed; try again")
            stored = _sealed(row)
            # A retried insert whose first attempt committed finds exactly its own entry: it won.
            return None if retried and stored == sealed else stored

        return self._run(op)

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        params = _ledger_params(sealed, fence)

        def op(conn: Conn, _: bool) -> None:
            if conn.execute(Q["ledger_upsert"], params).fetchone() is None:
                raise Refused

        self._run(op)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        row = self._run(lambda conn, _: conn.execute(Q["ledger_get"], {"key": key, "run_id": run_id}).fetchone())
        return _sealed(row) if row is not None else None

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        rows = self._run(lambda conn, _: conn.execute(Q["ledger_list"], {"run_id": run_id}).fetchall())
        return [_sealed(row) for row in rows]

    def entries_page(self, run_id: str, before: tuple[float, str] | None, limit: int) -> list[SealedEntry]:
        # newest first on the index unbroken_effects_run (run_id, created_at): about ``limit`` rows
        if before is None:
            query, params = Q["ledger_newest"], {"run_id": run_id, "limit": max(0, limit)}
        else:
            query = Q["ledger_before"]
            params = {"run_id": run_id, "at": before[0], "key": before[1], "limit": max(0, limit)}
        rows = self._run(lambda conn, _: conn.execute(query, params).fetchall())
        return [_sealed(row) for row in rows]

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        params = {"run_id": run_id, "keys": list(keys)}
        self._run(lambda conn, _: conn.execute(Q["ledger_delete"], params))

    # ------------------------------------------------------------------ claiming
    # submit is Store.submit over these two primitives (the task rule lives there). The claim is
    # Store.claim_runnable's fast path (OneStepClaim): one transaction, SKIP LOCKED, the phases in
    # UNCLAIMABLE_PHASES (listed in the runs table's generated column phase_claimable: a test
    # checks the SQL lists exactly them), the agent filter and a lease
    # free or expired on the database clock in SQL, then the rule itself (backend.claimable, which
    # also asks whether the holder is alive on this host) over the locked rows; the contract suite
    # proves it equivalent to the rule over primitives.

    def add_submission(self, submission: Submission) -> Submission | None:
        params = {
            "run_id": submission.run_id,
            "task": submission.task,
            "agent": submission.agent,
            "submitted_at": submission.submitted_at,
        }

        def op(conn: Conn, retried: bool) -> Submission | None:
            if conn.execute(Q["add_submission"], params).fetchone() is not None:
                return None
            row = conn.execute(Q["submission"], {"run_id": submission.run_id}).fetchone()
            stored = Submission(*row) if row is not None else None
            if retried and stored == submission:
                return None  # the attempt whose reply was lost queued it
            return stored

        return self._run(op)

    def list_submissions(self) -> list[Submission]:
        rows = self._run(lambda conn, _: conn.execute(Q["list_submissions"]).fetchall())
        return [Submission(*row) for row in rows]

    def submission(self, run_id: str) -> Submission | None:
        row = self._run(lambda conn, _: conn.execute(Q["submission"], {"run_id": run_id}).fetchone())
        return Submission(*row) if row is not None else None

    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        params = {
            "after_at": None if after is None else after[0],
            "after_id": None if after is None else after[1],
            "limit": max(int(limit), 0),
        }
        rows = self._run(lambda conn, _: conn.execute(Q["unstarted_page"], params).fetchall())
        return [Submission(*row) for row in rows]

    def _prepare(self, conn: Conn) -> Durability:
        """At open: the schema brought up to date and the server's durability checked. A store
        already at the latest migration (every open but the first of a new unbroken) takes one
        round trip (``open_check``); otherwise ``migrate``, under its lock, then ``_check_server``."""
        try:
            row = conn.execute(Q["open_check"]).fetchone()
        except psycopg.errors.UndefinedTable:  # a new schema (autocommit: nothing is left open)
            row = None
        if row is None or row[0] != latest_version():
            migrate(conn, self.schema)  # (which refuses a schema of a newer unbroken)
            return self._check_server(conn)
        return check_durability(self.settings.level, row[1], row[2], self.settings.where)

    def _check_server(self, conn: Conn) -> Durability:
        """What the server gives now (``fsync``, ``synchronous_commit``); ``InsufficientDurability``
        if less than the URL asks. One round trip."""
        fsync, synchronous_commit = conn.execute(Q["server_durability"]).fetchone() or ("on", "on")
        return check_durability(self.settings.level, fsync, synchronous_commit, self.settings.where)

    def check_server(self) -> Durability:
        """``_check_server`` on a pooled connection: at every lease acquisition, since a reload
        of the server can change both settings while the store is open."""
        return self._run(lambda conn, _: self._check_server(conn))

    def claim_in_one_step(
        self, owner: str, ttl: float, *, agent: str | None, limit: int, blocked: frozenset[str]
    ) -> list[ClaimedRun]:
        """One transaction, two round trips (pipelined): ``claim_candidates`` locks the oldest
        runnable runs (SKIP LOCKED) and reads their heads on the server's clock, the rule
        (``claimable``: a holder alive on this host keeps its run) chooses among them, and
        ``claim_picked`` takes the chosen leases before the locks go. The SQL's phase list is
        ``blocked`` (``base.UNCLAIMABLE_PHASES``) written out in the generated column
        ``phase_claimable`` that it and the partial index it claims from read; a test compares
        the two."""

        def op(conn: Conn, _: bool) -> list[ClaimedRun]:
            with conn.pipeline():
                with conn.transaction():
                    chosen = _choose(conn, agent, limit)
                    if not chosen:
                        return []
                    params = {"owner": owner, "ttl": float(ttl), "run_ids": list(chosen)}
                    cursor = conn.execute(Q["claim_picked"], params)
                rows = {row[0]: row for row in cursor.fetchall()}
            claimed: list[ClaimedRun] = []
            for run_id, previous in chosen.items():  # oldest first, as chosen
                if run_id in rows:
                    _, task, claimed_for, fence, expires = rows[run_id]
                    lease = Lease(run_id, owner, fence, expires, previous_fence=previous)
                    claimed.append(ClaimedRun(run_id, task, claimed_for, lease))
            return claimed

        return self._run(op)


def _choose(conn: Conn, agent: str | None, limit: int) -> dict[str, int]:
    """Up to ``limit`` runs ``claim_candidates`` locked that the claim rule lets this claim take,
    oldest first, with their fences: a run passed over (its holder is alive on this host) makes
    room for the next candidate."""
    chosen: dict[str, int] = {}
    seen: list[str] = []
    while len(chosen) < limit:
        want = limit - len(chosen)
        params = {"agent": agent, "limit": want, "seen": seen}
        rows = conn.execute(Q["claim_candidates"], params).fetchall()
        for run_id, seq, fence, holder, expires, now in rows:
            seen.append(run_id)
            if claimable(RunHead(seq, fence, holder, expires), now):
                chosen[run_id] = fence
        if len(rows) < want:
            break
    return chosen


_CURSOR_ATTRIBUTE = "_unbroken_save_cursor"


def _saving_cursor(conn: Conn) -> psycopg.Cursor[tuple[Any, ...]]:
    """The cursor a connection's saves run on, made at its first save and kept with it (it goes
    when the pool drops the connection): a new cursor at every save (``conn.execute``) is ~13% of
    the store's client instructions per save. A pooled connection serves one thread at a time."""
    cursor: psycopg.Cursor[tuple[Any, ...]] | None = conn.__dict__.get(_CURSOR_ATTRIBUTE)
    if cursor is None or cursor.closed:
        cursor = conn.cursor()
        conn.__dict__[_CURSOR_ATTRIBUTE] = cursor
    return cursor


def _scalar(row: tuple[Any, ...] | None) -> Any:
    return row[0] if row is not None else None


def _ledger_params(sealed: SealedEntry, fence: int | None) -> dict[str, Any]:
    row = ledger_to_row(sealed.entry, dumps)
    params = dict(zip((*_LEDGER_FIELDS, *_LEDGER_TIMES), row, strict=True))
    params["checksum"] = sealed.checksum
    params["fence"] = fence
    return params


def _sealed(row: Sequence[Any]) -> SealedEntry:
    return SealedEntry(ledger_from_row(row[:11]), row[11])


def _ledger_json(entries: Sequence[SealedEntry]) -> str:
    # One row per key (the last wins): ON CONFLICT cannot touch one row twice in a statement.
    by_key = {sealed.entry.key: _ledger_params(sealed, None) for sealed in entries}
    for params in by_key.values():
        del params["fence"]
    return json.dumps(list(by_key.values()), ensure_ascii=False, allow_nan=False)


class PostgresStore(Store):
    """A run store in a PostgreSQL database: ``Store``'s rules over ``PostgresBackend``."""

    backend: PostgresBackend

    def __init__(self, url: str) -> None:
        super().__init__(PostgresBackend(url))

    def check_server(self) -> Durability:
        """What the server gives now (``InsufficientDurability`` if less than the URL asks)."""
        return self.backend.check_server()
