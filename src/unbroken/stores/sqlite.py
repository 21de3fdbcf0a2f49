"""``sqlite:///PATH``: the default store. One file, no server, WAL mode.

Durability (``?durability=``):

* ``full`` (default): ``synchronous=FULL``; a save that returned survives power loss.
* ``normal``: ``synchronous=NORMAL``; survives a process crash, but the last saves before a
  power loss or kernel panic may be lost (never corrupted). About 10x cheaper per save.

Several processes on one machine may share the file: every write transaction starts with
``BEGIN IMMEDIATE`` so it takes the write lock up front (a deferred transaction that upgrades
from read to write can fail with SQLITE_BUSY half-way), and ``busy_timeout`` makes a writer
wait for the lock instead of failing. The usual save (an existing run, no ledger entries) is one
autocommitted ``INSERT`` into the ``unbroken_append`` view instead, whose trigger checks and moves
the head and inserts the record (schema 3; the statement takes the write lock when it starts,
the same way). Reading never takes the write lock (WAL readers see the
last commit while a writer works), and neither does opening a file whose schema is current,
so ``unbroken runs`` and ``show`` work while a writer is frozen inside a transaction. Not for
network file systems (SQLite's locking is not reliable there): use PostgreSQL for many machines.

This module implements the primitives of ``backend.py`` (``SQLiteBackend``), plus faster reads
for resume (``RawReads``, ``StreamedReads``, ``SegmentReads``); ``SQLiteStore`` is the ``Store``
over it.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from .. import clock, crashpoints
from ..codec import EncodedSave, Segment, StoredRecord, dumps
from ..errors import CorruptCheckpoint, IncompatibleSchema, StoreUnavailable
from ..state import RunSummary
from . import _sqlite_segments as _segments
from ._boot_lease_clock import BootLeaseClock
from ._durable import PRIVATE_FILE_MODE, create_file
from ._rows import ledger_from_row, ledger_to_row
from .backend import QueueBackend, Reach, Refused, RunHead, SealedEntry, SegmentSealer, Submission
from .base import Store

if TYPE_CHECKING:
    from pathlib import Path

STORE_SCHEMA = 8
"""8: unbroken_records keyed by one integer (run_no * 2^32 + seq);
7: unbroken_effects.lease_fence (the fence an attempt started under);
6: unbroken_queue_order (queued runs read a page at a time); 5: ledger keyed by (run_id, key);
4: unbroken_segments (older records packed); 3: the unbroken_append view; 2: ledger checksums."""
BUSY_TIMEOUT_MS = 10_000
PAGE_SIZE = 4096
# Page size of NEW store files (an existing file keeps its own). Measured 2026-11-30 (10,000
# turns): 1024 makes a save ~4% of a bare commit cheaper (smaller WAL frames) and the file 24%
# smaller, but reading the run ~35% slower (more pages per record): 4096 keeps the load fast.
DURABILITY = {"full": "FULL", "normal": "NORMAL"}
_MAX_SEQ = _segments.MAX_SEQ
KEEP_RECENT = 32
"""The most recent save points of a run always stay one row each in ``unbroken_records``."""
PACK_BATCH = 256
"""Older save points are packed into segment rows of this many (``_sqlite_segments``)."""
_LEDGER_COLUMNS = (
    "key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at, lease_fence, checksum"
)


class SQLiteBackend(QueueBackend):
    """The primitives of a run store in one SQLite file."""

    reach: Reach = "machine"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        url: str | None = None,
        keep_recent: int = KEEP_RECENT,
        pack_batch: int = PACK_BATCH,
        mode: int = PRIVATE_FILE_MODE,
    ) -> None:
        """``mode``: the permissions a new database file is created with (owner-only by default;
        SQLite gives its -wal and -shm files the database file's).
        ``keep_recent``: the most recent saves of a run kept one row each; older ones are
        packed ``pack_batch`` to a segment row (a resume reads a few rows, not one per save)."""
        if durability not in DURABILITY:
            from ..errors import InvalidStoreURL

            raise InvalidStoreURL(f"durability must be 'full' or 'normal', not {durability!r}")
        if type(keep_recent) is not int or keep_recent < 1 or type(pack_batch) is not int or pack_batch < 2:
            from ..errors import InvalidStoreURL

            raise InvalidStoreURL(
                f"keep_recent must be a whole number >= 1 and pack_batch one >= 2 (got {keep_recent!r}, "
                f"{pack_batch!r}); the defaults are {KEEP_RECENT} and {PACK_BATCH}"
            )
        self.keep_recent, self.pack_batch = keep_recent, pack_batch
        self._sealer: SegmentSealer | None = None  # (an encrypted store's: ``SealableSegments``)
        self.file = os.fspath(path)
        """The database file's path, as given (``path``: as a ``Path``). A str, not a ``Path``: a
        resume that opens a store need not import pathlib (and urllib.parse) for it."""
        self.durability = "power_loss" if durability == "full" else "process_crash"
        self.sync_level = durability
        self.url = url or f"sqlite:///{self.path}"
        self._lock = threading.RLock()
        self._lease_clock = BootLeaseClock(self._number_boot)
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self.file_mode = mode
        self._connect()

    @property
    def path(self) -> Path:
        """The database file (built when asked: the open path uses ``file``)."""
        from pathlib import Path

        return Path(self.file)

    # ------------------------------------------------------------------ plumbing

    def _connect(self) -> sqlite3.Connection:
        parent = os.path.dirname(self.file) or "."
        if not os.path.isdir(parent):
            raise StoreUnavailable(
                f"cannot open SQLite store {self.path}: directory {parent} does not exist; create it first"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise StoreUnavailable(
                f"cannot open SQLite store {self.path}: directory {parent} is not writable "
                "(SQLite needs to create its -wal and -shm files there); pick a writable path"
            )
        try:  # created here, not by SQLite, so that it never exists with the umask's wider mode
            if self.file != ":memory:":
                os.close(create_file(self.file, self.file_mode))
        except FileExistsError:
            pass
        except OSError as exc:
            raise StoreUnavailable(f"cannot create SQLite store {self.path}: {exc}") from exc
        try:
            conn = sqlite3.connect(
                self.file, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            conn.execute(f"PRAGMA synchronous={DURABILITY[self.sync_level]}")
            # Deleted rows are overwritten with zeros, not left in free space: an erased run (and
            # the rows packing moves into segments) cannot be read back from the file.
            conn.execute("PRAGMA secure_delete=ON")
            version = self._schema_version(conn)
            if version < STORE_SCHEMA:
                version = self._create_schema(conn, version)
        except sqlite3.DatabaseError as exc:
            raise StoreUnavailable(
                f"cannot open SQLite store {self.path}: {exc}. Is it an unbroken store file on a local disk?"
            ) from exc
        if version > STORE_SCHEMA:
            conn.close()
            raise IncompatibleSchema(
                f"{self.path} uses store schema {version}; this unbroken knows {STORE_SCHEMA}. Upgrade unbroken."
            )
        self._conn = conn
        self._pid = os.getpid()
        return conn

    @staticmethod
    def _schema_version(conn: sqlite3.Connection) -> int:
        """The file's store schema (0: new file), read without any write lock."""
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            return 0  # a new file: WAL is switched on with the schema
        try:
            row = conn.execute("SELECT value FROM unbroken_meta WHERE key='store_schema'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" not in str(exc):
                raise
            return 0
        return int(row[0]) if row else 0

    def _create_schema(self, conn: sqlite3.Connection, found: int) -> int:
        """Create or upgrade the schema, once, in one write transaction (only for new or old files)."""
        # Switching a new file to WAL needs an exclusive lock and does not wait on busy_timeout: when
        # two processes create one store at once, the loser gets "database is locked" at once. Retry.
        deadline = clock.monotonic() + BUSY_TIMEOUT_MS / 1000
        if found == 0:  # only a new, empty file takes it: an existing file keeps its page size
            conn.execute(f"PRAGMA page_size={PAGE_SIZE}")
        while True:
            try:
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                break
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or clock.monotonic() > deadline:
                    raise
                clock.sleep(0.01)
        if str(mode).lower() != "wal":
            raise StoreUnavailable(f"cannot put {self.path} in WAL mode (got {mode!r})")
        from importlib import resources  # only here: importing it costs a resume ~10 ms (zipfile, tempfile, ...)

        sql_files = resources.files("unbroken.stores").joinpath("sql")
        schema = sql_files.joinpath("sqlite_schema.sql").read_text()
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = self._schema_version(conn)  # another process may have done it meanwhile
            if version == 1:
                conn.execute("ALTER TABLE unbroken_effects ADD COLUMN checksum TEXT")
            if 0 < version < 5:
                for statement in _statements(sql_files.joinpath("sqlite_ledger_per_run.sql").read_text()):
                    conn.execute(statement)
            if 0 < version < 7:
                conn.execute("ALTER TABLE unbroken_effects ADD COLUMN lease_fence INTEGER")
            if 0 < version < 8:
                for statement in _statements(sql_files.joinpath("sqlite_records_by_key.sql").read_text()):
                    conn.execute(statement)
            if version < STORE_SCHEMA:
                for statement in _statements(schema):
                    conn.execute(statement)
                conn.execute("UPDATE unbroken_meta SET value=? WHERE key='store_schema'", (str(STORE_SCHEMA),))
                version = STORE_SCHEMA
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return max(version, found)

    @property
    def conn(self) -> sqlite3.Connection:
        if self._conn is None or self._pid != os.getpid():
            # A forked child must not share the parent's connection.
            self._connect()
        assert self._conn is not None
        return self._conn

    @contextmanager
    def _translate(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.DatabaseError as exc:
            raise self._translated(exc) from exc

    def _translated(self, exc: sqlite3.DatabaseError) -> Exception:
        text = str(exc)
        if "malformed" in text or "not a database" in text:
            return CorruptCheckpoint(f"SQLite store {self.path} is damaged: {text}")
        return StoreUnavailable(f"SQLite store {self.path}: {text}")

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._translate():
            conn = self.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                crashpoints.hit("sqlite.before_commit")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        crashpoints.hit("sqlite.after_commit")

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock, self._translate():
            return self.conn.execute(sql, params).fetchall()

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # ------------------------------------------------------------------ head and clock

    def store_time(self) -> float:
        # This machine's clock, read in-process: SQLite's julianday('now') is the same clock cut
        # to milliseconds, too coarse for a fence's floor (stores.base.next_fence).
        return clock.wall()

    def lease_time(self) -> float:
        return self._lease_clock.now()  # the boot clock: see _boot_lease_clock

    def _number_boot(self, boot: str) -> int:
        """The boot number of ``boot`` in this file (``unbroken_meta``): 1 + the highest given so
        far, fixed in one write transaction by the first process of that boot to ask."""
        key = f"lease_clock_boot:{boot}"
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO unbroken_meta (key, value) SELECT ?, CAST(COALESCE(MAX(CAST(value AS "
                "INTEGER)), 0) + 1 AS TEXT) FROM unbroken_meta WHERE key LIKE 'lease_clock_boot:%'",
                (key,),
            )
            return int(conn.execute("SELECT value FROM unbroken_meta WHERE key=?", (key,)).fetchone()[0])

    def read_head(self, run_id: str) -> RunHead | None:
        rows = self._read("SELECT head_seq, fence, owner, lease_expires FROM unbroken_runs WHERE run_id=?", (run_id,))
        return RunHead(rows[0][0], rows[0][1], rows[0][2], rows[0][3] or 0.0) if rows else None

    def swap_head(self, run_id: str, expected: RunHead | None, new: RunHead) -> bool:
        with self._write() as conn:
            if expected is None:
                _number_next_run(conn)
                cur = conn.execute(
                    "INSERT OR IGNORE INTO unbroken_runs (run_id, head_seq, fence, owner, lease_expires, run_no) "
                    f"VALUES (?, ?, ?, ?, ?, {_NEXT_RUN_NO})",
                    (run_id, new.seq, new.fence, new.owner, new.expires_at),
                )
            else:
                cur = conn.execute(
                    "UPDATE unbroken_runs SET fence=?, owner=?, lease_expires=? WHERE run_id=? AND head_seq=? "
                    "AND fence=? AND owner IS ? AND IFNULL(lease_expires, 0.0)=?",
                    (new.fence, new.owner, new.expires_at, run_id, *_head_values(expected)),
                )
            return cur.rowcount == 1

    # ------------------------------------------------------------------ records

    def _advance(
        self, conn: sqlite3.Connection, run_id: str, last: EncodedSave, expect_seq: int, fence: int | None
    ) -> None:
        s = last.summary
        values = (last.seq, s.task, s.phase, s.turns, s.tokens_used, s.updated_at)
        cur = conn.execute(
            "UPDATE unbroken_runs SET head_seq=?, task=?, phase=?, turns=?, tokens_used=?, updated_at=? "
            "WHERE run_id=? AND head_seq=? AND (? IS NULL OR fence=?)",
            (*values, run_id, expect_seq, fence, fence),
        )
        if cur.rowcount == 1:
            return
        if expect_seq == 0 and not fence:
            _number_next_run(conn)
            cur = conn.execute(
                "INSERT OR IGNORE INTO unbroken_runs (head_seq, task, phase, turns, tokens_used, updated_at, run_id, "
                f"run_no) VALUES (?, ?, ?, ?, ?, ?, ?, {_NEXT_RUN_NO})",
                (*values, run_id),
            )
            if cur.rowcount == 1:
                return
        raise Refused

    def _insert_record(self, conn: sqlite3.Connection, save: EncodedSave) -> None:
        if not 0 < save.seq <= _MAX_SEQ:
            raise ValueError(f"a SQLite store holds saves 1 to {_MAX_SEQ} of a run, not {save.seq}")
        cur = conn.execute(
            "INSERT INTO unbroken_records (key, run_id, seq, label, snapshot, checksum, body) "
            "SELECT run_no * 4294967296 + ?, run_id, ?, ?, ?, ?, ? FROM unbroken_runs WHERE run_id=? AND run_no > 0",
            (save.seq, save.seq, save.label, int(save.snapshot), save.checksum, save.body, save.run_id),
        )
        if cur.rowcount != 1:  # (the caller moved the head of this very row in this transaction)
            raise StoreUnavailable(f"SQLite store {self.path}: run {save.run_id!r} has no run number")

    def write_record(
        self, save: EncodedSave, entries: Sequence[SealedEntry], *, expect_seq: int, fence: int | None
    ) -> None:
        if not entries and (expect_seq or fence) and self._append_one(save, expect_seq, fence):
            self._pack_after(save.seq, save.run_id, fence)
            return
        with self._write() as conn:
            self._advance(conn, save.run_id, save, expect_seq, fence)
            self._insert_record(conn, save)
            for sealed in entries:
                self._upsert(conn, sealed)
        self._pack_after(save.seq, save.run_id, fence)

    def _pack_after(self, seq: int, run_id: str, fence: int | None) -> None:
        """After save ``seq`` (durable already): every ``keep_recent`` saves, pack what has grown
        old into segments, in a transaction of its own, still under the writer's fence. A failure
        here loses nothing (the records stay loose) and is retried after the next saves."""
        if seq % self.keep_recent or seq < self.keep_recent + self.pack_batch:
            return
        try:
            # Asked first without the write lock (one index probe): most checks find nothing to pack.
            with self._reading() as conn:
                low = _segments.lowest_loose(conn, run_id)
            if low is None or low + self.pack_batch - 1 > seq - self.keep_recent:
                return
            with self._write() as conn:
                self._fenced(conn, run_id, fence)
                crashpoints.hit("sqlite.pack.before")
                _segments.pack(conn, run_id, seq, self.keep_recent, self.pack_batch, self._sealer)
        except (Refused, StoreUnavailable, CorruptCheckpoint):
            return

    def _append_one(self, save: EncodedSave, expect_seq: int, fence: int | None) -> bool:
        """The usual save (an existing head, no ledger entries) as ONE autocommitted statement:
        the schema's ``unbroken_append`` trigger moves the head and summary if the head is at
        ``expect_seq`` (and the fence matches) and inserts the record, or aborts the statement
        (``Refused``, nothing written). Same rule and atomicity as ``_advance`` + ``_insert_record``
        in a ``_write`` transaction, in one round trip instead of four (the write lock is taken
        when the statement starts, waiting on ``busy_timeout`` like ``BEGIN IMMEDIATE``). False
        when the connection is inside a transaction (the statement would not commit by itself):
        the caller then takes the transaction path."""
        s = save.summary
        params = (
            save.run_id, save.seq, save.label, int(save.snapshot), save.body, save.checksum,
            expect_seq, fence, s.task, s.phase, s.turns, s.tokens_used, s.updated_at,
        )  # fmt: skip
        with self._lock:
            conn = self.conn
            if conn.in_transaction:
                return False
            crashpoints.hit("sqlite.before_commit")  # (a kill here leaves nothing written, as in _write)
            try:
                conn.execute(_APPEND, params)
            except sqlite3.IntegrityError as exc:
                if str(exc) == _REFUSED:
                    raise Refused from None
                raise self._translated(exc) from exc
            except sqlite3.DatabaseError as exc:
                raise self._translated(exc) from exc
        crashpoints.hit("sqlite.after_commit")
        return True

    def replace_records(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None) -> None:
        with self._write() as conn:
            self._advance(conn, run_id, saves[-1], expect_seq, fence)
            _delete_records(conn, run_id)
            conn.execute("DELETE FROM unbroken_segments WHERE run_id=?", (run_id,))
            for save in saves:
                self._insert_record(conn, save)

    # Reads of records see both tables in one read transaction (``_reading``): the packed
    # segments (older records, ``_sqlite_segments``) and the loose rows after them.

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        """One consistent read (a WAL snapshot) over several statements; never the write lock."""
        with self._lock, self._translate():
            conn = self.conn
            if conn.in_transaction:  # (inside a write of this store's own: already consistent)
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def records_after(self, run_id: str, after_seq: int = 0) -> list[StoredRecord]:
        return self._expanded(self.pieces_between(run_id, after_seq, None), after_seq, None)

    def records_between(self, run_id: str, after_seq: int, upto_seq: int) -> list[StoredRecord]:
        return self._expanded(self.pieces_between(run_id, after_seq, upto_seq), after_seq, upto_seq)

    @staticmethod
    def _expanded(pieces: list[StoredRecord | Segment], after_seq: int, upto_seq: int | None) -> list[StoredRecord]:
        segments = [piece for piece in pieces if type(piece) is Segment]
        loose = [piece for piece in pieces if type(piece) is StoredRecord]
        return _segments.expanded(segments, after_seq, upto_seq, text=True) + loose

    def pieces_between(self, run_id: str, after_seq: int, upto_seq: int | None) -> list[StoredRecord | Segment]:
        # Bounded: a range search on the records' integer key and the segments' key
        # (EXPLAIN QUERY PLAN: SEARCH, tests/contract/test_paging_bounded.py).
        upto = _MAX_SEQ if upto_seq is None else min(upto_seq, _MAX_SEQ)
        with self._reading() as conn:
            segments = _segments.segments_between(conn, run_id, after_seq, None if upto_seq is None else upto)
            pieces: list[StoredRecord | Segment] = list(segments)
            rows = conn.execute(
                f"SELECT r.seq, r.body, r.checksum FROM {_RUN_RECORDS} ORDER BY r.key",
                (max(after_seq, 0), max(upto, 0), run_id),
            ).fetchall()
        pieces += [StoredRecord(seq, body, checksum) for seq, body, checksum in rows]
        return pieces

    def seal_segments_with(self, sealer: SegmentSealer) -> None:
        self._sealer = sealer

    def keeps_bytes_bodies(self) -> Literal[True]:
        return True  # a bytes body is bound as a BLOB (the TEXT column's affinity leaves it so)

    def snapshot_seq(self, run_id: str, upto_seq: int | None = None) -> int:
        # Walks the records' key back from upto_seq to the first snapshot row: about
        # snapshot_every rows, never a body's overflow (the snapshot column comes before it);
        # then, if the loose rows hold none, the index of one segment at a time, newest first.
        upto = _MAX_SEQ if upto_seq is None else min(upto_seq, _MAX_SEQ)
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT r.seq FROM {_RUN_RECORDS} AND r.snapshot=1 ORDER BY r.key DESC LIMIT 1",
                (0, max(upto, 0), run_id),
            ).fetchall()
            return int(rows[0][0]) if rows else _segments.newest_snapshot(conn, run_id, upto)

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        return list(self.iter_raw_records(run_id))

    def iter_raw_records(self, run_id: str) -> Iterator[StoredRecord]:
        for piece in self.iter_load_pieces(run_id):
            if type(piece) is Segment:
                yield from piece.records()
            else:
                yield piece  # type: ignore[misc]

    def iter_load_pieces(self, run_id: str) -> Iterator[StoredRecord | Segment]:
        # Speed+scale override: in one read transaction, the run's segments (older records, a
        # few dozen rows however long the run) and then its loose rows a few hundred at a time,
        # as bytes (CAST AS BLOB: no decode here). The loader parses each and drops its bytes, so
        # a resume peaks at about the parsed state. Yields nothing for no run.
        # (Read ahead in a thread (measured, not kept: docs/benchmarks.md), or in chunks of records per statement
        # with the GIL released for the whole chunk, it was no faster at 10,000 turns: the GIL-free
        # part of a read from the page cache is too small.)
        with self._reading() as conn:
            cursor = conn.execute(
                f"SELECT {_segments.COLUMNS} FROM unbroken_segments WHERE run_id=? ORDER BY first_seq", (run_id,)
            )
            while segment_rows := cursor.fetchmany(8):
                for first, last, idx, seal, bodies in segment_rows:
                    yield Segment(first, last, bytes(idx), bytes(bodies), seal)
            cursor = conn.execute(
                f"SELECT r.seq, CAST(r.body AS BLOB), r.checksum FROM {_RUN_RECORDS} ORDER BY r.key",
                (0, _MAX_SEQ, run_id),
            )
            while rows := cursor.fetchmany(256):
                for seq, body, checksum in rows:
                    yield StoredRecord(seq, body, checksum)

    def list_summaries(self) -> list[RunSummary]:
        rows = self._read(
            "SELECT run_id, task, phase, turns, tokens_used, head_seq, updated_at FROM unbroken_runs WHERE head_seq > 0"
        )
        return [RunSummary(*row) for row in rows]

    def summaries_page(self, after: tuple[float, str] | None, limit: int) -> list[RunSummary]:
        """One keyset query. There is deliberately no index on ``updated_at`` (every save would
        dirty one more page): SQLite scans ``unbroken_runs`` (small rows, one per run) keeping
        the ``limit`` newest in a sorter, so a page costs O(runs) reads and O(limit) memory."""
        columns = "run_id, task, phase, turns, tokens_used, head_seq, updated_at"
        where, params = ("", ()) if after is None else (" AND (updated_at, run_id) < (?, ?)", (after[0], after[1]))
        rows = self._read(
            f"SELECT {columns} FROM unbroken_runs WHERE head_seq > 0{where} "
            "ORDER BY updated_at DESC, run_id DESC LIMIT ?",
            (*params, max(limit, 0)),
        )
        return [RunSummary(*row) for row in rows]

    def scrub(self) -> str:
        # secure_delete (set at connect) zeroed the deleted rows in the pages; the WAL still holds
        # the older page images: checkpoint them into the file and truncate it to nothing.
        busy, _, _ = self._read("PRAGMA wal_checkpoint(TRUNCATE)")[0]
        if busy:
            return "deleted content zeroed (secure_delete); the WAL could not be truncated now (a reader holds it)"
        return "deleted content zeroed (secure_delete), WAL checkpointed and truncated"

    def remove_run(self, run_id: str) -> None:
        with self._write() as conn:
            _delete_records(conn, run_id)
            for table in (
                "unbroken_segments",
                "unbroken_effects",
                "unbroken_queue",
                "unbroken_runs",
            ):
                conn.execute(f"DELETE FROM {table} WHERE run_id=?", (run_id,))

    # ------------------------------------------------------------------ effect ledger

    def _fenced(self, conn: sqlite3.Connection, run_id: str, fence: int | None) -> None:
        if fence is None:
            return
        row = conn.execute("SELECT fence FROM unbroken_runs WHERE run_id=?", (run_id,)).fetchone()
        if (row[0] if row else 0) != fence:
            raise Refused

    def _upsert(self, conn: sqlite3.Connection, sealed: SealedEntry) -> None:
        conn.execute(
            f"INSERT INTO unbroken_effects ({_LEDGER_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id, key) DO UPDATE SET status=excluded.status, attempts=excluded.attempts, "
            "result=excluded.result, updated_at=excluded.updated_at, args_hash=excluded.args_hash, "
            "call_id=excluded.call_id, tool=excluded.tool, created_at=excluded.created_at, "
            "lease_fence=excluded.lease_fence, checksum=excluded.checksum",
            (*ledger_to_row(sealed.entry, dumps), sealed.checksum),
        )

    def insert_entry(self, sealed: SealedEntry, *, fence: int | None) -> SealedEntry | None:
        with self._write() as conn:
            self._fenced(conn, sealed.entry.run_id, fence)
            row = conn.execute(
                f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE run_id=? AND key=?",
                (sealed.entry.run_id, sealed.entry.key),
            )
            found = row.fetchone()
            if found is not None:
                return _sealed(found)
            self._upsert(conn, sealed)
        return None

    def put_entry(self, sealed: SealedEntry, *, fence: int | None) -> None:
        with self._write() as conn:
            self._fenced(conn, sealed.entry.run_id, fence)
            self._upsert(conn, sealed)

    def get_entry(self, run_id: str, key: str) -> SealedEntry | None:
        rows = self._read(f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE run_id=? AND key=?", (run_id, key))
        return _sealed(rows[0]) if rows else None

    def list_entries(self, run_id: str) -> list[SealedEntry]:
        return [
            _sealed(row)
            for row in self._read(f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE run_id=?", (run_id,))
        ]

    def entries_page(self, run_id: str, before: tuple[float, str] | None, limit: int) -> list[SealedEntry]:
        # newest first on the index unbroken_effects_run (run_id, created_at): about ``limit`` rows
        where = "run_id=?"
        params: list[Any] = [run_id]
        if before is not None:
            where += " AND created_at <= ? AND (created_at < ? OR key < ?)"
            params += [before[0], before[0], before[1]]
        sql = f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE {where} ORDER BY created_at DESC, key DESC LIMIT ?"
        return [_sealed(row) for row in self._read(sql, (*params, max(0, limit)))]

    def delete_entries(self, run_id: str, keys: Sequence[str]) -> None:
        with self._write() as conn:
            conn.executemany("DELETE FROM unbroken_effects WHERE run_id=? AND key=?", [(run_id, key) for key in keys])

    # ------------------------------------------------------------------ submissions

    def add_submission(self, submission: Submission) -> Submission | None:
        with self._write() as conn:
            row = conn.execute(
                "SELECT run_id, task, agent, submitted_at FROM unbroken_queue WHERE run_id=?", (submission.run_id,)
            ).fetchone()
            if row is not None:
                return Submission(*row)
            conn.execute(
                "INSERT INTO unbroken_queue (run_id, task, agent, submitted_at) VALUES (?, ?, ?, ?)",
                (submission.run_id, submission.task, submission.agent, submission.submitted_at),
            )
        return None

    def list_submissions(self) -> list[Submission]:
        rows = self._read("SELECT run_id, task, agent, submitted_at FROM unbroken_queue ORDER BY submitted_at, run_id")
        return [Submission(*row) for row in rows]

    def submission(self, run_id: str) -> Submission | None:
        rows = self._read("SELECT run_id, task, agent, submitted_at FROM unbroken_queue WHERE run_id=?", (run_id,))
        return Submission(*rows[0]) if rows else None

    def claimable_page(
        self, agent: str | None, blocked: frozenset[str], after: tuple[float, str] | None, limit: int
    ) -> list[Submission]:
        # the queue in index order (unbroken_queue_order), each run's phase by its primary key
        marks = ", ".join("?" for _ in blocked)
        where, params = "", list[Any](sorted(blocked))
        if agent is not None:
            where += " AND q.agent = ?"
            params.append(agent)
        if after is not None:
            where += " AND (q.submitted_at, q.run_id) > (?, ?)"
            params += [after[0], after[1]]
        rows = self._read(
            "SELECT q.run_id, q.task, q.agent, q.submitted_at FROM unbroken_queue q "
            "LEFT JOIN unbroken_runs r ON r.run_id = q.run_id "
            f"WHERE (r.phase IS NULL OR r.phase NOT IN ({marks})){where} ORDER BY q.submitted_at, q.run_id LIMIT ?",
            (*params, max(limit, 0)),
        )
        return [Submission(*row) for row in rows]

    def phase_of(self, run_id: str) -> str | None:
        rows = self._read("SELECT phase FROM unbroken_runs WHERE run_id=? AND head_seq > 0", (run_id,))
        return rows[0][0] if rows else None

    def unstarted_page(self, after: tuple[float, str] | None, limit: int) -> list[Submission]:
        # on the index unbroken_queue_order (schema 5): about ``limit`` rows, not the whole queue
        where, params = ("", ()) if after is None else ("AND (q.submitted_at, q.run_id) > (?, ?) ", after)
        rows = self._read(
            "SELECT q.run_id, q.task, q.agent, q.submitted_at FROM unbroken_queue q "
            "WHERE NOT EXISTS (SELECT 1 FROM unbroken_runs r WHERE r.run_id = q.run_id AND r.head_seq > 0) "
            f"{where}ORDER BY q.submitted_at, q.run_id LIMIT ?",
            (*params, max(limit, 0)),
        )
        return [Submission(*row) for row in rows]


_APPEND = (
    "INSERT INTO unbroken_append (run_id, seq, label, snapshot, body, checksum, expect_seq, fence, task, phase, "
    "turns, tokens_used, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_REFUSED = "unbroken: refused"  # the trigger's RAISE(ABORT, ...) message (sql/sqlite_schema.sql)
_RUN_RECORDS = _segments.RUN_RECORDS
_NEXT_RUN_NO = "(SELECT CAST(value AS INTEGER) FROM unbroken_meta WHERE key = 'last_run_no')"
"""The number a run row made in this transaction takes, after ``_number_next_run``."""


def _number_next_run(conn: sqlite3.Connection) -> None:
    """Take the next run number (never reused: a record of a deleted run cannot become another's)."""
    conn.execute("UPDATE unbroken_meta SET value = CAST(value AS INTEGER) + 1 WHERE key = 'last_run_no'")


def _delete_records(conn: sqlite3.Connection, run_id: str) -> None:
    """Delete the run's loose records (one range of the integer key), inside the caller's write."""
    base = _segments.records_base(conn, run_id)
    if base is not None:
        conn.execute("DELETE FROM unbroken_records WHERE key > ? AND key <= ?", (base, base + _MAX_SEQ))


def _statements(script: str) -> Iterator[str]:
    """The SQL statements of ``script``, cut where a line completes one (a trigger's body holds ';')."""
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""
    if pending.strip() and not all(row.lstrip().startswith("--") or not row.strip() for row in pending.splitlines()):
        raise ValueError(f"incomplete SQL statement at the end of the schema: {pending.strip()[:80]!r}")


def _head_values(head: RunHead) -> tuple[Any, ...]:
    return (head.seq, head.fence, head.owner, head.expires_at)


def _sealed(row: Sequence[Any]) -> SealedEntry:
    return SealedEntry(ledger_from_row(row[:11]), row[11])


class SQLiteStore(Store):
    """A run store in one SQLite file: ``Store``'s rules over ``SQLiteBackend`` (its arguments,
    and ``sealed_read_from``: see ``Store.sealed_read_from``; tests set 0 to read every segment
    sealed)."""

    backend: SQLiteBackend

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: str = "full",
        url: str | None = None,
        keep_recent: int = KEEP_RECENT,
        pack_batch: int = PACK_BATCH,
        sealed_read_from: int | None = None,
        mode: int = PRIVATE_FILE_MODE,
    ) -> None:
        backend = SQLiteBackend(
            path, durability=durability, url=url, keep_recent=keep_recent, pack_batch=pack_batch, mode=mode
        )
        super().__init__(backend)
        if sealed_read_from is not None:
            self.sealed_read_from = sealed_read_from

    @property
    def path(self) -> Path:
        """The database file."""
        return self.backend.path
