"""unbroken's own save path, bytes on disk and resume, per store; and the bare-commit floor.

The turns are played by a real ``Agent.run`` (a model answering from the workload's script,
a read-only tool), and each call of the engine's own ``RunSession.save`` at save points A
(the assistant message and its pending call) and B (the tool result) is timed: encoding, the
size check, ``Store.append`` with ``expect_seq`` and the lease's fence, ``Encoder.committed``.
The model, the tool and the turn bookkeeping are outside the timed region.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import servers
import workload
from measure import SaveTimes, files_bytes, interleaved_figures
from unbroken import Agent, ScriptedModel, open_store, tool
from unbroken.model import ModelTurn, ToolSpec
from unbroken.providers import anthropic_format as fmt
from unbroken.session import RunSession
from unbroken.state import JSONValue
from unbroken.stores.base import Store

POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"


@tool(effect="read_only")
def read_ticket(ticket_id: str, fields: list[str]) -> str:
    """Read one support ticket."""
    return workload.tool_result_text(int(ticket_id.split("-")[1]))


@dataclass
class StoreKind:
    """One store configuration to measure."""

    name: str
    url: Callable[[Path], str]
    files: Callable[[Path], list[Path]] | None  # what to count as bytes on disk (None: not measurable)


STORE_KINDS = [
    StoreKind("sqlite full", lambda d: f"sqlite:///{d}/full.db", lambda d: [d / "full.db", d / "full.db-wal"]),
    StoreKind(
        "sqlite normal",
        lambda d: f"sqlite:///{d}/normal.db?durability=normal",
        lambda d: [d / "normal.db", d / "normal.db-wal"],
    ),
    StoreKind("file", lambda d: f"file://{d}/filestore", lambda d: [d / "filestore"]),
    StoreKind("postgres", lambda d: POSTGRES_URL, None),
    StoreKind("redis", servers.redis_url, None),  # its own redis-server, appendfsync always
    StoreKind("s3 (moto)", servers.s3_url, None),
]


@dataclass
class StoreResult:
    store: str
    turns: int
    saves: SaveTimes
    disk_bytes: int | None
    resume_seconds: float | None
    floor: SaveTimes | None = None
    open_seconds: float | None = None
    """Opening the store in the fresh process (driver import, connect, schema check), timed apart
    from ``resume_seconds`` (the load, with the store already open): a fresh run pays it too."""


class BareCommit:
    """The floor: one autocommitted INSERT of a 2.4 KB row into a WAL database at synchronous=FULL."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS saves (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        self.body = " ".join(str(m) for m in workload.history(1)[1:])[:2400]
        self.times = SaveTimes()

    def commit(self) -> None:
        started = time.perf_counter()
        self.conn.execute("INSERT INTO saves (body) VALUES (?)", (self.body,))
        self.times.samples.append(time.perf_counter() - started)

    def close(self) -> None:
        self.conn.close()


class WorkloadModel(ScriptedModel):
    """The workload's answers, taken by a counter instead of ScriptedModel's count of the assistant
    messages in the history (an O(history) scan per turn that is no part of what is measured)."""

    def __init__(self, turns: int) -> None:
        super().__init__(workload.script(turns))
        self.answered = 0

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        response = self.responses[self.answered]
        self.answered += 1
        content = json.loads(json.dumps(response["content"]))  # a private copy, as an SDK would give
        calls = fmt.tool_calls(content)
        stop = response.get("stop_reason")
        done = not calls and stop in fmt.FINAL_STOP_REASONS
        usage = dict(response.get("usage") or {})
        return fmt.assistant_turn(content, calls, usage, stop_reason=stop, text=fmt.text_of(content), done=done)


TIMED_LABELS = frozenset({"model_turn", "tools_done"})


def drive_saves(store: Store, run_id: str, turns: int, floor_each: Callable[[], None] | None = None) -> SaveTimes:
    """Run a real ``Agent.run`` of ``turns`` turns and time each call of the engine's own
    ``RunSession.save`` at save points A and B (``floor_each`` runs beside each save: right
    before every other one, right after the rest)."""
    times = SaveTimes()
    real_save = RunSession.save
    clock = time.perf_counter

    def timed_save(session: RunSession, label: str, **kwargs: Any) -> None:
        if label not in TIMED_LABELS:
            real_save(session, label, **kwargs)
            return
        # The floor's commit alternates between right before and right after a save: a commit
        # timed right after another fsync runs 8-15% faster than one after the agent's own work
        # (measured), so always taking one side would bias the ratio.
        before = floor_each is not None and len(times.samples) % 2 == 0
        if before:
            floor_each()
        started = clock()
        real_save(session, label, **kwargs)
        times.samples.append(clock() - started)
        if floor_each is not None and not before:
            floor_each()

    agent = Agent(WorkloadModel(turns), [read_ticket], store, max_turns=turns + 1, lease_ttl=3600.0)
    RunSession.save = timed_save  # type: ignore[method-assign,assignment]  # time exactly what the engine calls
    try:
        result = agent.run(workload.TASK, run_id=run_id)
    finally:
        RunSession.save = real_save  # type: ignore[method-assign]
    if result.status != "completed" or len(times.samples) != 2 * turns:
        raise RuntimeError(
            f"expected a completed run with {2 * turns} saves at points A and B; got {result.status} "
            f"with {len(times.samples)}"
        )
    return times


def resume_snippet(url: str, run_id: str) -> str:
    """Fresh process: open the store (timed apart, as ``figures["open"]``: importing the store's
    driver, connecting, checking the schema), then load the run until its messages list is
    materialised (``elapsed``: the resume's own cost, which the goals judge)."""
    return (
        "from unbroken import open_store\n"
        "started = _time.perf_counter()\n"
        f"store = open_store({url!r})\n"
        "opened = _time.perf_counter()\n"
        f"state = store.load({run_id!r})\n"
        "check = len(state.messages)\n"
        "elapsed = _time.perf_counter() - opened\n"
        "figures = {'open': opened - started}\n"
        "store.close()\n"
    )


def json_snippet(path: Path) -> str:
    """Fresh process: read the history as one JSON file and ``json.loads`` it (the resume target)."""
    return (
        "started = _time.perf_counter()\n"
        f"with open({str(path)!r}, 'rb') as _f:\n"
        "    messages = _json.loads(_f.read())\n"
        "check = len(messages)\n"
        "elapsed = _time.perf_counter() - started\n"
    )


def measure_store(
    kind: StoreKind, workdir: Path, turns: int, repeats: int, json_path: Path, with_floor: bool
) -> tuple[StoreResult, float]:
    """Run ``turns`` turns on a fresh store of ``kind``; returns the result and the json.loads
    baseline measured interleaved with its resume."""
    url = kind.url(workdir)
    run_id = f"bench-{turns}"
    store = open_store(url)
    floor = BareCommit(workdir / "floor.db") if with_floor else None
    try:
        store.delete_run(run_id)  # a shared PostgreSQL database may hold one from an earlier run
        saves = drive_saves(store, run_id, turns, floor.commit if floor is not None else None)
    finally:
        store.close()
        if floor is not None:
            floor.close()
    disk = files_bytes(kind.files(workdir)) if kind.files is not None else None
    medians = interleaved_figures({"resume": resume_snippet(url, run_id), "json": json_snippet(json_path)}, repeats)
    if kind.files is None:
        cleanup = open_store(url)
        cleanup.delete_run(run_id)
        cleanup.close()
    resume = medians["resume"]
    floor_times = floor.times if floor is not None else None
    result = StoreResult(kind.name, turns, saves, disk, resume["elapsed"], floor_times, resume["open"])
    return result, medians["json"]["elapsed"]


def store_available(kind: StoreKind, workdir: Path) -> str | None:
    """None if the store can be opened here, else why not (the column is then skipped)."""
    try:
        store = open_store(kind.url(workdir))
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
    store.close()
    return None
