"""``sqlite:///PATH``: the default store. One file, no server, WAL mode.

Durability (``?durability=``):

* ``full`` (default): ``synchronous=FULL``; a save that returned survives power loss.
* ``normal``: ``synchronous=NORMAL``; survives a process crash, but the last saves before a
  power loss or kernel panic may be lost (never corrupted). About 10x cheaper per save.

Several processes on one machine may share the file: every write transaction starts with
``BEGIN IMMEDIATE`` so it takes the write lock up front (a deferred transaction that upgrades
from read to write can fail with SQLITE_BUSY half-way), and ``busy_timeout`` makes a writer
wait for the lock instead of failing. Not for network file systems (SQLite's locking is not
reliable there): use PostgreSQL for many machines.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from .. import crashpoints
from ..codec import EncodedSave, PackedRecords, StoredRecord, dumps
from ..errors import (
    ConcurrentSave,
    CorruptCheckpoint,
    IncompatibleSchema,
    LeaseHeld,
    LeaseLost,
    RunNotFound,
    StoreUnavailable,
    TaskMismatch,
)
from ..state import TERMINAL_PHASES, Lease, LedgerEntry, RunSummary, check_run_id
from ._rows import ledger_from_row, ledger_to_row
from .base import ClaimedRun, Store

STORE_SCHEMA = 1
BUSY_TIMEOUT_MS = 10_000
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
DURABILITY = {"full": "FULL", "normal": "NORMAL"}


class SQLiteStore(Store):
    """A run store in one SQLite file."""

    capabilities = frozenset({"leases", "ledger", "multi_process", "claim"})

    def __init__(self, path: str | os.PathLike[str], *, durability: str = "full", url: str | None = None) -> None:
        if durability not in DURABILITY:
            from ..errors import InvalidStoreURL

            raise InvalidStoreURL(f"durability must be 'full' or 'normal', not {durability!r}")
        self.path = Path(path)
        self.durability = durability
        self.url = url or f"sqlite:///{self.path}"
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._connect()

    # ------------------------------------------------------------------ plumbing

    def _connect(self) -> sqlite3.Connection:
        parent = self.path.parent if str(self.path.parent) else Path(".")
        if not parent.is_dir():
            raise StoreUnavailable(
                f"cannot open SQLite store {self.path}: directory {parent} does not exist; create it first"
            )
        if not os.access(parent, os.W_OK | os.X_OK):
            raise StoreUnavailable(
                f"cannot open SQLite store {self.path}: directory {parent} is not writable "
                "(SQLite needs to create its -wal and -shm files there); pick a writable path"
            )
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
            )
            conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailable(f"cannot put {self.path} in WAL mode (got {mode!r})")
            conn.execute(f"PRAGMA synchronous={DURABILITY[self.durability]}")
            schema = resources.files("unbroken.stores").joinpath("sql/sqlite_schema.sql").read_text()
            conn.executescript("BEGIN IMMEDIATE;\n" + schema + "\nCOMMIT;")
            version = int(conn.execute("SELECT value FROM unbroken_meta WHERE key='store_schema'").fetchone()[0])
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
            text = str(exc)
            if "malformed" in text or "not a database" in text:
                raise CorruptCheckpoint(f"SQLite store {self.path} is damaged: {text}") from exc
            raise StoreUnavailable(f"SQLite store {self.path}: {text}") from exc

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

    # ------------------------------------------------------------------ records

    def _refuse(self, conn: sqlite3.Connection, run_id: str, expect_seq: int, fence: int | None) -> None:
        row = conn.execute("SELECT head_seq, fence FROM unbroken_runs WHERE run_id=?", (run_id,)).fetchone()
        head, current = (row[0], row[1]) if row else (0, 0)
        if fence is not None and current != fence:
            raise LeaseLost(f"run {run_id!r} is now owned under fence {current}, not {fence}; this write was refused")
        raise ConcurrentSave(f"run {run_id!r} is at save {head}, not {expect_seq}; reload it")

    def _advance(self, conn: sqlite3.Connection, save: EncodedSave, expect_seq: int, fence: int | None) -> None:
        s = save.summary
        cur = conn.execute(
            "UPDATE unbroken_runs SET head_seq=?, task=?, phase=?, turns=?, tokens_used=?, updated_at=? "
            "WHERE run_id=? AND head_seq=? AND (? IS NULL OR fence=?)",
            (save.seq, s.task, s.phase, s.turns, s.tokens_used, s.updated_at, save.run_id, expect_seq, fence, fence),
        )
        if cur.rowcount == 1:
            return
        if expect_seq == 0 and fence is None:
            exists = conn.execute("SELECT 1 FROM unbroken_runs WHERE run_id=?", (save.run_id,)).fetchone()
            if not exists:
                conn.execute(
                    "INSERT INTO unbroken_runs (run_id, task, phase, turns, tokens_used, head_seq, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (save.run_id, s.task, s.phase, s.turns, s.tokens_used, save.seq, s.updated_at),
                )
                return
        self._refuse(conn, save.run_id, expect_seq, fence)

    def _insert_record(self, conn: sqlite3.Connection, save: EncodedSave) -> None:
        conn.execute(
            "INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum) VALUES (?, ?, ?, ?, ?, ?)",
            (save.run_id, save.seq, save.label, int(save.snapshot), save.body, save.checksum),
        )
        for entry in save.ledger:
            self._upsert_ledger(conn, entry)

    def append(self, save: EncodedSave, *, expect_seq: int, fence: int | None = None) -> None:
        check_run_id(save.run_id)
        with self._write() as conn:
            self._advance(conn, save, expect_seq, fence)
            self._insert_record(conn, save)

    def read_records(self, run_id: str) -> list[StoredRecord]:
        check_run_id(run_id)
        rows = self._read("SELECT seq, body, checksum FROM unbroken_records WHERE run_id=? ORDER BY seq", (run_id,))
        if not rows:
            raise RunNotFound(f"no run {run_id!r} in {self.url}")
        return [StoredRecord(seq, body, checksum) for seq, body, checksum in rows]

    def read_raw_records(self, run_id: str) -> list[StoredRecord]:
        # CAST to BLOB hands back the stored UTF-8 as bytes: no decode here, no re-encode
        # for the checksum, one decode inside json.loads (about a third off a long resume).
        check_run_id(run_id)
        rows = self._read(
            "SELECT seq, CAST(body AS BLOB), checksum FROM unbroken_records WHERE run_id=? ORDER BY seq", (run_id,)
        )
        if not rows:
            raise RunNotFound(f"no run {run_id!r} in {self.url}")
        return [StoredRecord(seq, body, checksum) for seq, body, checksum in rows]

    def read_packed(self, run_id: str) -> PackedRecords:
        # SQLite concatenates the bodies itself (in C, no Python object per record), in one
        # read transaction with the index of (seq, checksum, length) so both see one snapshot.
        # If group_concat ever yielded another order, the seq check fails and the loader falls
        # back to the ordered per-record read.
        check_run_id(run_id)
        with self._lock, self._translate():
            conn = self.conn
            conn.execute("BEGIN")
            try:
                index = conn.execute(
                    "SELECT seq, checksum, length(CAST(body AS BLOB)) FROM unbroken_records "
                    "WHERE run_id=? ORDER BY seq",
                    (run_id,),
                ).fetchall()
                row = conn.execute(
                    "SELECT CAST('[' || group_concat(body, ',') || ']' AS BLOB) FROM "
                    "(SELECT body FROM unbroken_records WHERE run_id=? ORDER BY seq)",
                    (run_id,),
                ).fetchone()
            finally:
                conn.execute("COMMIT")
        if not index:
            raise RunNotFound(f"no run {run_id!r} in {self.url}")
        return PackedRecords(row[0], index)

    def rewrite(self, run_id: str, saves: Sequence[EncodedSave], *, expect_seq: int, fence: int | None = None) -> None:
        check_run_id(run_id)
        if not saves:
            raise ValueError("rewrite needs at least one save record")
        with self._write() as conn:
            row = conn.execute("SELECT head_seq, fence FROM unbroken_runs WHERE run_id=?", (run_id,)).fetchone()
            head, current = (row[0], row[1]) if row else (0, 0)
            if head != expect_seq or (fence is not None and current != fence):
                self._refuse(conn, run_id, expect_seq, fence)
            conn.execute("DELETE FROM unbroken_records WHERE run_id=?", (run_id,))
            last = saves[-1]
            s = last.summary
            if row is None:
                conn.execute("INSERT INTO unbroken_runs (run_id, head_seq) VALUES (?, 0)", (run_id,))
            conn.execute(
                "UPDATE unbroken_runs SET head_seq=?, task=?, phase=?, turns=?, tokens_used=?, updated_at=? "
                "WHERE run_id=?",
                (last.seq, s.task, s.phase, s.turns, s.tokens_used, s.updated_at, run_id),
            )
            for save in saves:
                self._insert_record(conn, save)

    def list_runs(self) -> list[RunSummary]:
        rows = self._read(
            "SELECT run_id, task, phase, turns, tokens_used, head_seq, updated_at FROM unbroken_runs "
            "WHERE head_seq > 0 ORDER BY updated_at DESC"
        )
        return [RunSummary(*row) for row in rows]

    def delete_run(self, run_id: str) -> None:
        check_run_id(run_id)
        with self._write() as conn:
            conn.execute("DELETE FROM unbroken_records WHERE run_id=?", (run_id,))
            conn.execute("DELETE FROM unbroken_effects WHERE run_id=?", (run_id,))
            conn.execute("DELETE FROM unbroken_runs WHERE run_id=?", (run_id,))

    # ------------------------------------------------------------------ ledger

    def _check_fence(self, conn: sqlite3.Connection, run_id: str, fence: int | None) -> None:
        if fence is None:
            return
        row = conn.execute("SELECT fence FROM unbroken_runs WHERE run_id=?", (run_id,)).fetchone()
        current = row[0] if row else 0
        if current != fence:
            raise LeaseLost(f"run {run_id!r} is now owned under fence {current}, not {fence}; this write was refused")

    def _upsert_ledger(self, conn: sqlite3.Connection, entry: LedgerEntry) -> None:
        conn.execute(
            "INSERT INTO unbroken_effects (key, run_id, call_id, tool, args_hash, status, attempts, result, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (key) DO UPDATE SET status=excluded.status, attempts=excluded.attempts, "
            "result=excluded.result, updated_at=excluded.updated_at, args_hash=excluded.args_hash",
            ledger_to_row(entry, dumps),
        )

    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        check_run_id(entry.run_id)
        with self._write() as conn:
            self._check_fence(conn, entry.run_id, fence)
            row = conn.execute(f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE key=?", (entry.key,)).fetchone()
            if row is not None:
                return ledger_from_row(row), False
            self._upsert_ledger(conn, entry)
        return entry, True

    def ledger_put(self, entry: LedgerEntry, *, fence: int | None = None) -> None:
        check_run_id(entry.run_id)
        with self._write() as conn:
            self._check_fence(conn, entry.run_id, fence)
            self._upsert_ledger(conn, entry)

    def ledger_get(self, run_id: str, key: str) -> LedgerEntry | None:
        check_run_id(run_id)
        rows = self._read(f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE key=? AND run_id=?", (key, run_id))
        return ledger_from_row(rows[0]) if rows else None

    def ledger_list(self, run_id: str) -> list[LedgerEntry]:
        check_run_id(run_id)
        rows = self._read(
            f"SELECT {_LEDGER_COLUMNS} FROM unbroken_effects WHERE run_id=? ORDER BY created_at, key", (run_id,)
        )
        return [ledger_from_row(row) for row in rows]

    def ledger_gc(self, older_than: float) -> int:
        terminal = ",".join("?" for _ in TERMINAL_PHASES)
        with self._write() as conn:
            cur = conn.execute(
                "DELETE FROM unbroken_effects WHERE updated_at < ? AND run_id NOT IN "
                f"(SELECT run_id FROM unbroken_runs WHERE phase IS NULL OR phase NOT IN ({terminal}))",
                (older_than, *sorted(TERMINAL_PHASES)),
            )
            return cur.rowcount

    # ------------------------------------------------------------------ leases

    def acquire_lease(self, run_id: str, owner: str, ttl: float, *, takeover_from: str | None = None) -> Lease:
        check_run_id(run_id)
        with self._write() as conn:
            row = conn.execute(
                f"SELECT owner, lease_expires, fence, {_NOW} FROM unbroken_runs WHERE run_id=?", (run_id,)
            ).fetchone()
            if row is None:
                now = conn.execute(f"SELECT {_NOW}").fetchone()[0]
                conn.execute(
                    "INSERT INTO unbroken_runs (run_id, fence, owner, lease_expires) VALUES (?, 1, ?, ?)",
                    (run_id, owner, now + ttl),
                )
                return Lease(run_id, owner, 1, now + ttl)
            holder, expires, fence, now = row
            live = holder is not None and expires is not None and expires > now
            if live and holder not in (owner, takeover_from):
                raise LeaseHeld(f"run {run_id!r} is held by {holder} for {expires - now:.1f}s more")
            conn.execute(
                "UPDATE unbroken_runs SET fence=?, owner=?, lease_expires=? WHERE run_id=?",
                (fence + 1, owner, now + ttl, run_id),
            )
            return Lease(run_id, owner, fence + 1, now + ttl)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        with self._write() as conn:
            cur = conn.execute(
                f"UPDATE unbroken_runs SET lease_expires={_NOW} + ? WHERE run_id=? AND fence=? AND owner=?",
                (ttl, lease.run_id, lease.fence, lease.owner),
            )
            if cur.rowcount != 1:
                raise LeaseLost(f"lease on run {lease.run_id!r} (fence {lease.fence}) was taken over")
            expires = conn.execute("SELECT lease_expires FROM unbroken_runs WHERE run_id=?", (lease.run_id,)).fetchone()
        return Lease(lease.run_id, lease.owner, lease.fence, expires[0])

    def release_lease(self, lease: Lease) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE unbroken_runs SET owner=NULL, lease_expires=NULL WHERE run_id=? AND fence=?",
                (lease.run_id, lease.fence),
            )

    def lease_of(self, run_id: str) -> Lease | None:
        check_run_id(run_id)
        rows = self._read(
            f"SELECT owner, fence, lease_expires FROM unbroken_runs WHERE run_id=? AND owner IS NOT NULL "
            f"AND lease_expires > {_NOW}",
            (run_id,),
        )
        if not rows:
            return None
        owner, fence, expires = rows[0]
        return Lease(run_id, owner, fence, expires)

    # ------------------------------------------------------------------ claiming (workers)
    # Submitted runs wait in their own table, created on first use, so files written before
    # claiming existed keep working unchanged. BEGIN IMMEDIATE serialises claims across processes.

    _QUEUE_SCHEMA = (
        "CREATE TABLE IF NOT EXISTS unbroken_queue (run_id TEXT PRIMARY KEY, task TEXT NOT NULL, "
        "agent TEXT, submitted_at REAL NOT NULL)"
    )

    def submit(self, task: str, run_id: str | None = None, *, agent: str | None = None) -> str:
        if run_id is None:
            import uuid

            run_id = f"run-{uuid.uuid4().hex[:12]}"
        check_run_id(run_id)
        with self._write() as conn:
            conn.execute(self._QUEUE_SCHEMA)
            row = conn.execute("SELECT task FROM unbroken_runs WHERE run_id=?", (run_id,)).fetchone()
            if row is not None and row[0] is not None and row[0] != task:
                raise TaskMismatch(
                    f"run {run_id!r} already exists with task {row[0][:80]!r}; "
                    "submit the same task or use another run id"
                )
            if row is None:
                conn.execute("INSERT INTO unbroken_runs (run_id, task, head_seq) VALUES (?, ?, 0)", (run_id, task))
            conn.execute(
                f"INSERT INTO unbroken_queue (run_id, task, agent, submitted_at) VALUES (?, ?, ?, {_NOW}) "
                "ON CONFLICT (run_id) DO UPDATE SET task=excluded.task, agent=excluded.agent",
                (run_id, task, agent),
            )
        return run_id

    def claim_runnable(self, owner: str, ttl: float, *, agent: str | None = None, limit: int = 1) -> list[ClaimedRun]:
        blocked = sorted(TERMINAL_PHASES | {"paused"})
        marks = ",".join("?" for _ in blocked)
        with self._write() as conn:
            conn.execute(self._QUEUE_SCHEMA)
            now = conn.execute(f"SELECT {_NOW}").fetchone()[0]
            rows = conn.execute(
                "SELECT q.run_id, q.task, q.agent, r.fence FROM unbroken_queue q JOIN unbroken_runs r USING (run_id) "
                f"WHERE (? IS NULL OR q.agent = ?) AND (r.phase IS NULL OR r.phase NOT IN ({marks})) "
                "AND (r.owner IS NULL OR r.lease_expires IS NULL OR r.lease_expires <= ?) "
                "ORDER BY q.submitted_at, q.run_id LIMIT ?",
                (agent, agent, *blocked, now, limit),
            ).fetchall()
            claimed = []
            for run_id, task, claimed_for, fence in rows:
                conn.execute(
                    "UPDATE unbroken_runs SET fence=?, owner=?, lease_expires=? WHERE run_id=?",
                    (fence + 1, owner, now + ttl, run_id),
                )
                claimed.append(ClaimedRun(run_id, task, claimed_for, Lease(run_id, owner, fence + 1, now + ttl)))
        return claimed


_LEDGER_COLUMNS = "key, run_id, call_id, tool, args_hash, status, attempts, result, created_at, updated_at"
