"""The SQL of one SQLite save against the bare-commit floor, in one loop (issue 12 goal 3).

Not part of ``run.py``: a diagnostic for the save path. Each round runs every variant once, in
a rotating order (so none always follows the same neighbour), each on its own WAL file at
``synchronous=FULL``; medians and ratios to the floor are printed. Record bodies are the
workload's real save records (written once by the workload writer), so the pages each commit
dirties are the benchmark's.

The second half compares layouts of the records table (``LAYOUTS``: rowid + UNIQUE index as in
store schemas 3-4, WITHOUT ROWID, one INTEGER PRIMARY KEY, page sizes), each a store file of its
own saved to by the same one-statement append and packed as schema 4 packs, in the same loop;
then, on fresh files with the automatic checkpoint off, the WAL frames each commit writes and
the bytes on disk.

    .venv/bin/python benchmarks/bench_save_sql.py --saves 2000
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import workload
import writer
from unbroken.codec import EncodedSave
from unbroken.state import RunSummary
from unbroken.stores import sqlite as sqlite_store
from unbroken.stores.backend import RunHead
from unbroken.stores.memory import InMemoryStore
from unbroken.stores.sqlite import SQLiteStore

OLD_UPDATE = (
    "UPDATE unbroken_runs SET head_seq=?, task=?, phase=?, turns=?, tokens_used=?, updated_at=? "
    "WHERE run_id=? AND head_seq=? AND (? IS NULL OR fence=?)"
)
INSERT = "INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum) VALUES (?, ?, ?, ?, ?, ?)"


def record_bodies(turns: int) -> list[str]:
    store = InMemoryStore()  # keeps every record as written (a SQLite store packs the older ones)
    writer.write_turns(store, "bodies", turns)
    return [str(record.body) for record in store.read_records("bodies")]


def variants(workdir: Path, bodies: list[str]) -> dict[str, Callable[[int], None]]:
    floor = sqlite3.connect(workdir / "floor.db", isolation_level=None)
    floor.execute("PRAGMA journal_mode=WAL")
    floor.execute("PRAGMA synchronous=FULL")
    floor.execute("CREATE TABLE saves (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    floor_body = " ".join(str(m) for m in workload.history(1)[1:])[:2400]

    def store(name: str) -> SQLiteStore:
        opened = SQLiteStore(workdir / name)  # durability full
        opened.backend.swap_head("r", None, RunHead(0, 1, "bench", 1e12))
        return opened

    def params(i: int) -> tuple[object, ...]:
        return ("r", i + 1, "model_turn", 0, bodies[i % len(bodies)], "0123abcd")

    def summary(i: int) -> tuple[str, str, int, int, float]:
        return (workload.TASK, "running_tools", i // 2, 100 * i, time.time())

    one, old, bare, api = store("one.db"), store("old.db"), store("bare.db"), store("api.db")
    api_tx = store("api_tx.db")
    api_tx.backend._append_one = lambda *_: False  # type: ignore[method-assign]  # its transaction path

    def one_statement(i: int) -> None:
        one.backend.conn.execute(sqlite_store._APPEND, (*params(i), i, 1, *summary(i)))

    def transaction(i: int) -> None:
        conn = old.backend.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(OLD_UPDATE, (i + 1, *summary(i), "r", i, 1, 1))
        conn.execute(INSERT, params(i))
        conn.execute("COMMIT")

    def insert_only(i: int) -> None:
        bare.backend.conn.execute(INSERT, params(i))

    def encoded(i: int) -> EncodedSave:
        task, phase, turns, tokens, updated = summary(i)
        return EncodedSave(
            "r", i + 1, "model_turn", bodies[i % len(bodies)], "0123abcd", False,
            RunSummary("r", task, phase, turns, tokens, i + 1, updated),
        )  # fmt: skip

    def bare_insert(i: int) -> None:
        floor.execute("INSERT INTO saves (body) VALUES (?)", (floor_body,))

    return {
        "bare INSERT (floor)": bare_insert,
        "save SQL: one statement (schema 3)": one_statement,
        "save SQL: BEGIN/UPDATE/INSERT/COMMIT (schema 2)": transaction,
        "record INSERT alone (no head: not a valid save)": insert_only,
        "SQLiteStore.append (no encoding)": lambda i: api.append(encoded(i), expect_seq=i, fence=1),
        "SQLiteStore.append, transaction path": lambda i: api_tx.append(encoded(i), expect_seq=i, fence=1),
    }


# ---------------------------------------------------------------------------- record table layouts
# Each layout is a whole store file of its own (runs, records, segments, the append view and its
# trigger), saved to by the one-statement append and packed as store schema 4 packs (every
# KEEP_RECENT saves, the oldest PACK_BATCH loose records move into one segment row), so the
# pages a save dirties (and reuses from the freelist) are those of a long run.

KEEP_RECENT, PACK_BATCH = 32, 256
RUN_BASE = 1 << 32  # the integer-key layout: a record's key is run_no * 2**32 + seq

_RUNS = """CREATE TABLE unbroken_runs (
    run_id TEXT PRIMARY KEY, task TEXT, phase TEXT, turns INTEGER NOT NULL DEFAULT 0,
    tokens_used INTEGER NOT NULL DEFAULT 0, head_seq INTEGER NOT NULL DEFAULT 0, updated_at REAL,
    fence INTEGER NOT NULL DEFAULT 0, owner TEXT, lease_expires REAL, run_no INTEGER)"""
_SEGMENTS = """CREATE TABLE unbroken_segments (
    run_id TEXT NOT NULL, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL, idx BLOB NOT NULL,
    seal TEXT NOT NULL, bodies BLOB NOT NULL, PRIMARY KEY (run_id, first_seq))"""
_VIEW = """CREATE VIEW unbroken_append AS SELECT NULL AS run_id, NULL AS seq, NULL AS label,
    NULL AS snapshot, NULL AS body, NULL AS checksum, NULL AS expect_seq, NULL AS fence, NULL AS task,
    NULL AS phase, NULL AS turns, NULL AS tokens_used, NULL AS updated_at WHERE 0"""
_HEAD_AND_SUMMARY = (
    "head_seq = NEW.seq, task = NEW.task, phase = NEW.phase, turns = NEW.turns, "
    "tokens_used = NEW.tokens_used, updated_at = NEW.updated_at"
)
_TRIGGER = """CREATE TRIGGER unbroken_append_insert INSTEAD OF INSERT ON unbroken_append
BEGIN
    UPDATE unbroken_runs SET {head}
     WHERE run_id = NEW.run_id AND head_seq = NEW.expect_seq AND (NEW.fence IS NULL OR fence = NEW.fence);
    SELECT RAISE(ABORT, 'unbroken: refused') WHERE changes() = 0;
    {insert};
END"""
_INSERT_BY_RUN = (
    "INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum) "
    "VALUES (NEW.run_id, NEW.seq, NEW.label, NEW.snapshot, NEW.body, NEW.checksum)"
)
_BY_RUN = "run_id = :run AND seq >= :low AND seq < :high"
_LOWEST_BY_RUN = "SELECT min(seq) FROM unbroken_records WHERE run_id = :run"


@dataclass(frozen=True)
class Layout:
    records: str
    """The records table's CREATE TABLE."""
    insert: str = _INSERT_BY_RUN
    page_size: int = 4096
    head: str = _HEAD_AND_SUMMARY
    where: str = _BY_RUN
    """Records ``low <= seq < high`` of run ``:run`` (``:base``: its run_no * 2**32)."""
    lowest: str = _LOWEST_BY_RUN
    runs: str = _RUNS


_ROWID_UNIQUE = """CREATE TABLE unbroken_records (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
    label TEXT NOT NULL, snapshot INTEGER NOT NULL, body TEXT NOT NULL, checksum TEXT NOT NULL, UNIQUE (run_id, seq))"""
_WITHOUT_ROWID = """CREATE TABLE unbroken_records (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
    label TEXT NOT NULL, snapshot INTEGER NOT NULL, body TEXT NOT NULL, checksum TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID"""
_WITHOUT_ROWID_BODY_LAST = """CREATE TABLE unbroken_records (run_id TEXT NOT NULL, seq INTEGER NOT NULL,
    label TEXT NOT NULL, snapshot INTEGER NOT NULL, checksum TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)) WITHOUT ROWID"""
_INTEGER_KEY = """CREATE TABLE unbroken_records (key INTEGER PRIMARY KEY, label TEXT NOT NULL,
    snapshot INTEGER NOT NULL, checksum TEXT NOT NULL, body TEXT NOT NULL)"""

_INTEGER_KEY_LAYOUT = Layout(
    _INTEGER_KEY,
    insert=(
        "INSERT INTO unbroken_records (key, label, snapshot, checksum, body) "
        "SELECT run_no * 4294967296 + NEW.seq, NEW.label, NEW.snapshot, NEW.checksum, NEW.body "
        "FROM unbroken_runs WHERE run_id = NEW.run_id"
    ),
    where="key >= :base + :low AND key < :base + :high",
    lowest="SELECT min(key) - :base FROM unbroken_records WHERE key >= :base AND key < :base + 4294967296",
)

LAYOUTS = {
    "rowid + UNIQUE (run_id, seq) (schema 3/4)": Layout(_ROWID_UNIQUE),
    "  same, trigger moves head_seq only": Layout(_ROWID_UNIQUE, head="head_seq = NEW.seq"),
    "  same, 8 KB pages": Layout(_ROWID_UNIQUE, page_size=8192),
    "WITHOUT ROWID, PRIMARY KEY (run_id, seq)": Layout(_WITHOUT_ROWID),
    "  same, body last": Layout(_WITHOUT_ROWID_BODY_LAST),
    "  same, body last, 8 KB pages": Layout(_WITHOUT_ROWID_BODY_LAST, page_size=8192),
    "INTEGER PRIMARY KEY run_no*2^32+seq (one b-tree)": _INTEGER_KEY_LAYOUT,
    "  same, runs table WITHOUT ROWID": replace(_INTEGER_KEY_LAYOUT, runs=_RUNS + " WITHOUT ROWID"),
}


class LayoutStore:
    """One layout's store file, with one run, saved to by the one-statement append."""

    def __init__(self, path: Path, layout: Layout, *, synchronous: str = "FULL") -> None:
        self.path, self.layout = path, layout
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute(f"PRAGMA page_size={layout.page_size}")
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        for statement in (
            layout.runs,
            layout.records,
            _SEGMENTS,
            _VIEW,
            _TRIGGER.format(head=layout.head, insert=layout.insert),
        ):
            self.conn.execute(statement)
        self.conn.execute("INSERT INTO unbroken_runs (run_id, fence, run_no) VALUES ('r', 1, 1)")
        self.keys = {"run": "r", "base": RUN_BASE}

    def append(self, params: tuple[object, ...]) -> None:
        self.conn.execute(sqlite_store._APPEND, params)

    def pack_due(self, seq: int) -> bool:
        return seq % KEEP_RECENT == 0 and seq >= KEEP_RECENT + PACK_BATCH

    def pack(self, seq: int) -> None:
        """Move the oldest PACK_BATCH loose records into one segment row while more than
        KEEP_RECENT would stay loose (what store schema 4 does, minus the record checks)."""
        conn, layout = self.conn, self.layout
        conn.execute("BEGIN IMMEDIATE")
        while True:
            (low,) = conn.execute(layout.lowest, self.keys).fetchone()
            if low is None or low + PACK_BATCH - 1 > seq - KEEP_RECENT:
                break
            where = {**self.keys, "low": low, "high": low + PACK_BATCH}
            rows = conn.execute(
                f"SELECT CAST(body AS BLOB), checksum FROM unbroken_records WHERE {layout.where}", where
            )
            bodies, checks = zip(*rows.fetchall(), strict=True)
            index = json.dumps({"first": low, "checksums": checks, "lengths": [len(b) for b in bodies]}).encode()
            conn.execute(
                "INSERT INTO unbroken_segments VALUES ('r', ?, ?, ?, '00000000', ?)",
                (low, low + PACK_BATCH - 1, index, b"[" + b",".join(bodies) + b"]"),
            )
            conn.execute(f"DELETE FROM unbroken_records WHERE {layout.where}", where)
        conn.execute("COMMIT")

    def wal_bytes(self) -> int:
        return os.path.getsize(f"{self.path}-wal")

    def disk(self) -> tuple[int, int]:
        """(bytes of the whole file, bytes of the records table and its index) after a checkpoint."""
        self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        records = self.conn.execute(
            "SELECT sum(pgsize) FROM dbstat "
            "WHERE name = 'unbroken_records' OR name LIKE 'sqlite_autoindex_unbroken_records%'"
        ).fetchone()[0]
        return os.path.getsize(self.path), records or 0

    def close(self) -> None:
        self.conn.close()


def layout_params(bodies: list[str], i: int) -> tuple[object, ...]:
    """The append view's parameters for save ``i + 1`` (head at ``i``, fence 1)."""
    body = bodies[i % len(bodies)]
    return ("r", i + 1, "model_turn", 0, body, "0123abcd", i, 1, workload.TASK, "running_tools", i // 2, 100 * i, 1e9)


@dataclass
class Frames:
    per_commit: list[int]
    pack_frames: int
    file_bytes: int
    records_bytes: int
    body_bytes: int


def count_frames(workdir: Path, name: str, layout: Layout | None, bodies: list[str], saves: int) -> Frames:
    """WAL frames each commit writes, on a file of its own with the automatic checkpoint off (the
    WAL then only grows, by page size + 24 bytes a frame); packing's frames counted apart."""
    path = workdir / f"frames-{abs(hash(name))}.db"
    if layout is None:  # the floor
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("CREATE TABLE saves (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        body = " ".join(str(m) for m in workload.history(1)[1:])[:2400]
        frames = []
        for _ in range(saves):
            before = os.path.getsize(f"{path}-wal")
            conn.execute("INSERT INTO saves (body) VALUES (?)", (body,))
            frames.append((os.path.getsize(f"{path}-wal") - before) // (4096 + 24))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        return Frames(frames, 0, os.path.getsize(path), os.path.getsize(path), len(body) * saves)
    store = LayoutStore(path, layout, synchronous="OFF")
    store.conn.execute("PRAGMA wal_autocheckpoint=0")
    frame_bytes = layout.page_size + 24
    frames, pack_frames, body_bytes = [], 0, 0
    for i in range(saves):
        before = store.wal_bytes()
        params = layout_params(bodies, i)
        store.append(params)
        frames.append((store.wal_bytes() - before) // frame_bytes)
        body_bytes += len(str(params[4]).encode())
        if store.pack_due(i + 1):
            before = store.wal_bytes()
            store.pack(i + 1)
            pack_frames += (store.wal_bytes() - before) // frame_bytes
    file_bytes, records_bytes = store.disk()
    store.close()
    return Frames(frames, pack_frames, file_bytes, records_bytes, body_bytes)


def layout_variants(workdir: Path, bodies: list[str]) -> tuple[dict[str, Callable[[int], None]], list[LayoutStore]]:
    stores = [LayoutStore(workdir / f"layout-{n}.db", layout) for n, layout in enumerate(LAYOUTS.values())]

    def step(store: LayoutStore) -> Callable[[int], None]:
        def save(i: int) -> None:
            store.append(layout_params(bodies, i))

        return save

    return {name: step(store) for name, store in zip(LAYOUTS, stores, strict=True)}, stores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bodies = record_bodies(500)
        steps = variants(workdir, bodies)
        layout_steps, layout_stores = layout_variants(workdir, bodies)
        steps.update(layout_steps)
        names = list(steps)
        samples: dict[str, list[float]] = {name: [] for name in names}
        clock = time.perf_counter
        for i in range(args.saves):
            for j in range(len(names)):
                name = names[(i + j) % len(names)]
                started = clock()
                steps[name](i)
                samples[name].append(clock() - started)
            for store in layout_stores:  # not timed: packing is its own transaction after a save
                if store.pack_due(i + 1):
                    store.pack(i + 1)
        for store in layout_stores:
            store.close()
        frames = {name: count_frames(workdir, name, layout, bodies, args.saves) for name, layout in LAYOUTS.items()}
        floor_frames = count_frames(workdir, "floor", None, bodies, args.saves)
    floor = statistics.median(samples[names[0]])
    print(f"{args.saves} rounds, record bodies median {statistics.median(map(len, bodies)):.0f} chars")
    for name in names:
        median = statistics.median(samples[name])
        print(f"{name:50s} {median * 1e6:8.1f} us  {median / floor:5.2f}x")
    print(
        f"\nWAL frames per commit ({args.saves} saves, packing as schema 4: every {KEEP_RECENT} saves, "
        f"{PACK_BATCH} records a segment); disk after a checkpoint"
    )
    columns = ("mean", "median", "KB/commit", "pack/save", "file/body", "records KB")
    print(f"{'':50s} " + " ".join(f"{column:>9s}" for column in columns))
    for name, counted in [("bare INSERT (floor)", floor_frames), *frames.items()]:
        layout = LAYOUTS.get(name)
        page = layout.page_size if layout is not None else 4096
        mean = statistics.fmean(counted.per_commit)
        print(
            f"{name:50s} {mean:9.2f} {statistics.median(counted.per_commit):9.0f} {mean * page / 1024:9.1f} "
            f"{counted.pack_frames / args.saves:9.2f} {counted.file_bytes / counted.body_bytes:9.2f} "
            f"{counted.records_bytes / 1024:9.0f}"
        )


if __name__ == "__main__":
    main()
