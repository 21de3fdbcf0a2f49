"""The SQL of one SQLite save against the bare-commit floor, in one loop (issue 12 goal 3).

Not part of ``run.py``: a diagnostic for the save path. Each round runs every variant once, in
a rotating order (so none always follows the same neighbour), each on its own WAL file at
``synchronous=FULL``; medians and ratios to the floor are printed. Record bodies are the
workload's real save records (written once by the workload writer), so the pages each commit
dirties are the benchmark's.

    .venv/bin/python benchmarks/bench_save_sql.py --saves 2000
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import workload
import writer
from unbroken.codec import EncodedSave
from unbroken.state import RunSummary
from unbroken.stores import sqlite as sqlite_store
from unbroken.stores.backend import RunHead
from unbroken.stores.sqlite import SQLiteStore

OLD_UPDATE = (
    "UPDATE unbroken_runs SET head_seq=?, task=?, phase=?, turns=?, tokens_used=?, updated_at=? "
    "WHERE run_id=? AND head_seq=? AND (? IS NULL OR fence=?)"
)
INSERT = "INSERT INTO unbroken_records (run_id, seq, label, snapshot, body, checksum) VALUES (?, ?, ?, ?, ?, ?)"


def record_bodies(workdir: Path, turns: int) -> list[str]:
    url = f"sqlite:///{workdir}/bodies.db?durability=normal"
    writer.write_run(url, "bodies", turns)
    with sqlite3.connect(workdir / "bodies.db") as conn:
        return [row[0] for row in conn.execute("SELECT body FROM unbroken_records ORDER BY seq")]


def variants(workdir: Path, bodies: list[str]) -> dict[str, Callable[[int], None]]:
    floor = sqlite3.connect(workdir / "floor.db", isolation_level=None)
    floor.execute("PRAGMA journal_mode=WAL")
    floor.execute("PRAGMA synchronous=FULL")
    floor.execute("CREATE TABLE saves (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    floor_body = " ".join(str(m) for m in workload.history(1)[1:])[:2400]

    def store(name: str) -> SQLiteStore:
        opened = SQLiteStore(workdir / name)  # durability full
        opened.swap_head("r", None, RunHead(0, 1, "bench", 1e12))
        return opened

    def params(i: int) -> tuple[object, ...]:
        return ("r", i + 1, "model_turn", 0, bodies[i % len(bodies)], "0123abcd")

    def summary(i: int) -> tuple[str, str, int, int, float]:
        return (workload.TASK, "running_tools", i // 2, 100 * i, time.time())

    one, old, bare, api = store("one.db"), store("old.db"), store("bare.db"), store("api.db")
    api_tx = store("api_tx.db")
    api_tx._append_one = lambda *_: False  # type: ignore[method-assign]  # its transaction path

    def one_statement(i: int) -> None:
        one.conn.execute(sqlite_store._APPEND, (*params(i), i, 1, *summary(i)))

    def transaction(i: int) -> None:
        conn = old.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(OLD_UPDATE, (i + 1, *summary(i), "r", i, 1, 1))
        conn.execute(INSERT, params(i))
        conn.execute("COMMIT")

    def insert_only(i: int) -> None:
        bare.conn.execute(INSERT, params(i))

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--saves", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        bodies = record_bodies(workdir, 500)
        steps = variants(workdir, bodies)
        names = list(steps)
        samples: dict[str, list[float]] = {name: [] for name in names}
        clock = time.perf_counter
        for i in range(args.saves):
            for j in range(len(names)):
                name = names[(i + j) % len(names)]
                started = clock()
                steps[name](i)
                samples[name].append(clock() - started)
    floor = statistics.median(samples[names[0]])
    print(f"{args.saves} rounds, record bodies median {statistics.median(map(len, bodies)):.0f} chars")
    for name in names:
        median = statistics.median(samples[name])
        print(f"{name:50s} {median * 1e6:8.1f} us  {median / floor:5.2f}x")


if __name__ == "__main__":
    main()
