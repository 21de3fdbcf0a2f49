"""LangGraph checkpointers on the benchmark workload: LangGraph's SqliteSaver and PostgresSaver
beside ``unbroken.integrations.langgraph.UnbrokenSaver`` on unbroken's SQLite and PostgreSQL
stores.

    python benchmarks/bench_langgraph.py                       # 100 and 1,000 turns
    python benchmarks/bench_langgraph.py --turns 100 --json out.json

Each turn makes two checkpoints, as a two-node agent graph does: the assistant message is
appended to the ``messages`` channel (with ``pending_calls`` and ``phase``), then the tool
result (with ``turns``, ``tokens_used``, ``phase``). Only the channels that changed get a new
version, as LangGraph itself does. Figures: median time of a ``put`` (over all puts, and over
the last 200), bytes on disk at the end, and the time to open a new saver on the same database
and ``get_tuple`` the latest checkpoint (median of 5). PostgreSQL rows are left out when no
server answers at ``UNBROKEN_TEST_POSTGRES_URL`` (default postgresql://postgres@127.0.0.1:5432/test).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workload

PG_URL = os.environ.get("UNBROKEN_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class Row:
    saver: str
    turns: int
    puts: int
    put_median_ms: float
    put_tail_ms: float
    disk_bytes: int
    get_latest_ms: float
    history_bytes: int


Saver = Any
Opener = Callable[[], tuple[Saver, Callable[[], None]]]


def drive(saver: Saver, turns: int, thread_id: str) -> list[float]:
    """Put two checkpoints per turn; return each put's duration."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6

    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    values: dict[str, Any] = {
        "task": workload.TASK,
        "messages": [{"role": "user", "content": workload.TASK}],
        "turns": 0,
        "tokens_used": 0,
        "phase": "awaiting_model",
        "pending_calls": [],
    }
    versions = dict.fromkeys(values, 1)
    step = 0
    times: list[float] = []

    def put(changed: list[str]) -> None:
        nonlocal config, step
        step += 1
        for channel in changed:
            versions[channel] += 1
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = {key: value for key, value in values.items()}
        checkpoint["channel_versions"] = dict(versions)
        new_versions = {channel: versions[channel] for channel in (changed or list(values))}
        started = time.perf_counter()
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, new_versions)
        times.append(time.perf_counter() - started)

    put([])
    times.clear()
    for turn in range(turns):
        values["messages"] = [*values["messages"], workload.assistant_message(turn)]
        values["pending_calls"] = [{"id": workload.call_id(turn), "input": workload.tool_input(turn)}]
        values["phase"] = "running_tools"
        put(["messages", "pending_calls", "phase"])
        usage = workload.usage(turn)
        values["messages"] = [*values["messages"], workload.result_message(turn)]
        values["pending_calls"] = []
        values["phase"] = "awaiting_model"
        values["turns"] += 1
        values["tokens_used"] += sum(usage.values())
        put(["messages", "pending_calls", "phase", "turns", "tokens_used"])
    return times


def measure(name: str, open_saver: Opener, disk: Callable[[], int], turns: int) -> Row:
    thread_id = f"bench-{turns}"
    saver, close = open_saver()
    times = drive(saver, turns, thread_id)
    close()
    reads = []
    for _ in range(5):
        started = time.perf_counter()
        saver, close = open_saver()
        found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        assert len(found.checkpoint["channel_values"]["messages"]) == 2 * turns + 1
        reads.append(time.perf_counter() - started)
        close()
    return Row(
        saver=name,
        turns=turns,
        puts=len(times),
        put_median_ms=statistics.median(times) * 1000,
        put_tail_ms=statistics.median(times[-200:]) * 1000,
        disk_bytes=disk(),
        get_latest_ms=statistics.median(reads) * 1000,
        history_bytes=workload.history_bytes(turns),
    )


def files_size(*paths: Path) -> int:
    return sum(path.stat().st_size for path in paths if path.exists())


# --------------------------------------------------------------------------- the savers


def sqlite_langgraph(workdir: Path, turns: int) -> Row:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    db = workdir / f"langgraph-{turns}.db"

    def open_saver() -> tuple[Saver, Callable[[], None]]:
        conn = sqlite3.connect(db, check_same_thread=False)
        saver = SqliteSaver(conn)
        saver.setup()
        return saver, conn.close

    return measure("LangGraph SqliteSaver", open_saver, lambda: files_size(db, Path(f"{db}-wal")), turns)


def sqlite_unbroken(workdir: Path, turns: int) -> Row:
    from unbroken import open_store
    from unbroken.integrations.langgraph import UnbrokenSaver

    db = workdir / f"unbroken-{turns}.db"

    def open_saver() -> tuple[Saver, Callable[[], None]]:
        store = open_store(f"sqlite:///{db}")
        return UnbrokenSaver(store), store.close

    return measure("UnbrokenSaver (sqlite)", open_saver, lambda: files_size(db, Path(f"{db}-wal")), turns)


def postgres_reachable() -> str | None:
    try:
        import psycopg

        with psycopg.connect(PG_URL, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except Exception as exc:
        return f"PostgreSQL at {PG_URL} is unreachable ({type(exc).__name__})"
    return None


@contextmanager
def pg_schema() -> Iterator[str]:
    import psycopg

    schema = f"bench_lg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield schema
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def schema_bytes(schema: str) -> int:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def postgres_langgraph(turns: int) -> Row:
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with pg_schema() as schema:

        def open_saver() -> tuple[Saver, Callable[[], None]]:
            conn = psycopg.connect(
                PG_URL, autocommit=True, prepare_threshold=0, row_factory=dict_row, options=f"-c search_path={schema}"
            )
            saver = PostgresSaver(conn)
            saver.setup()
            return saver, conn.close

        return measure("LangGraph PostgresSaver", open_saver, lambda: schema_bytes(schema), turns)


def postgres_unbroken(turns: int) -> Row:
    from unbroken import open_store
    from unbroken.integrations.langgraph import UnbrokenSaver

    with pg_schema() as schema:
        url = f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"

        def open_saver() -> tuple[Saver, Callable[[], None]]:
            store = open_store(url)
            return UnbrokenSaver(store), store.close

        return measure("UnbrokenSaver (postgres)", open_saver, lambda: schema_bytes(schema), turns)


# --------------------------------------------------------------------------- report


def run(turns_list: list[int]) -> list[Row]:
    rows: list[Row] = []
    no_pg = postgres_reachable()
    with tempfile.TemporaryDirectory(prefix="bench-langgraph-") as tmp:
        workdir = Path(tmp)
        for turns in turns_list:
            rows.append(sqlite_langgraph(workdir, turns))
            rows.append(sqlite_unbroken(workdir, turns))
            if no_pg is None:
                rows.append(postgres_langgraph(turns))
                rows.append(postgres_unbroken(turns))
            for leftover in workdir.iterdir():
                leftover.unlink()
    if no_pg:
        print(f"(PostgreSQL rows left out: {no_pg})", file=sys.stderr)
    return rows


def table(rows: list[Row]) -> str:
    lines = [
        "| saver | turns | put, median | put, last 200 | bytes on disk | x history | get_tuple latest (new saver) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        ratio = row.disk_bytes / row.history_bytes
        lines.append(
            f"| {row.saver} | {row.turns:,} | {row.put_median_ms:.2f} ms | {row.put_tail_ms:.2f} ms | "
            f"{row.disk_bytes / 1e6:,.1f} MB | {ratio:,.1f}x | {row.get_latest_ms:.1f} ms |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", default="100,1000", help="comma-separated history lengths (default 100,1000)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    rows = run(sorted({int(part) for part in args.turns.split(",") if part.strip()}))
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
