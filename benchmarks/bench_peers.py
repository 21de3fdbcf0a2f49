"""The same workload through two other ways of saving an agent's state.

* ``textbook``: rewrite the whole state as one JSON file at every save point (temp file,
  ``fsync``, ``os.replace``; no directory fsync). Each save costs O(history), a run O(N^2).
* ``langgraph``: LangGraph's ``SqliteSaver.put`` with the messages in one channel, as a
  LangGraph agent stores them (each checkpoint holds the whole channel value). Only ``put``
  is timed (a real graph also calls ``put_writes`` each step), so this is a lower bound.
  Optional: skipped when ``langgraph-checkpoint-sqlite`` is not installed.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import workload
from bench_crash import spawn_to_done
from measure import SaveTimes, disk_bytes, files_bytes, interleaved_medians


@dataclass
class PeerResult:
    store: str
    turns: int
    saves: SaveTimes
    disk_bytes: int | None
    resume_seconds: float | None
    crash_seconds: float | None = None


def _drive(turns: int, save: Any) -> SaveTimes:
    """Mutate a plain state dict through the two save points of each turn; time each save."""
    state: dict[str, Any] = {
        "run_id": f"bench-{turns}",
        "task": workload.TASK,
        "turns": 0,
        "tokens_used": 0,
        "phase": "awaiting_model",
        "pending_calls": [],
        "messages": [{"role": "user", "content": workload.TASK}],
    }
    save(state)
    times = SaveTimes()
    clock = time.perf_counter
    for turn in range(turns):
        usage = workload.usage(turn)
        state["turns"] += 1
        state["tokens_used"] += sum(usage.values())
        state["messages"].append(workload.assistant_message(turn))
        state["pending_calls"] = [
            {"id": workload.call_id(turn), "name": workload.TOOL_NAME, "input": workload.tool_input(turn)}
        ]
        state["phase"] = "running_tools"
        started = clock()
        save(state)
        times.samples.append(clock() - started)
        state["messages"].append(workload.result_message(turn))
        state["pending_calls"] = []
        state["phase"] = "awaiting_model"
        started = clock()
        save(state)
        times.samples.append(clock() - started)
    return times


def textbook(workdir: Path, turns: int, repeats: int) -> PeerResult:
    path = workdir / "state.json"
    temp = workdir / "state.json.tmp"

    def save(state: dict[str, Any]) -> None:
        text = json.dumps(state, ensure_ascii=False, separators=(",", ":"))
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)

    times = _drive(turns, save)
    snippet = (
        "started = _time.perf_counter()\n"
        f"with open({str(path)!r}, 'rb') as _f:\n"
        "    state = _json.loads(_f.read())\n"
        "check = len(state['messages'])\n"
        "elapsed = _time.perf_counter() - started\n"
    )
    resume = interleaved_medians({"resume": snippet}, repeats)["resume"]
    result = PeerResult("textbook JSON rewrite", turns, times, disk_bytes(path), resume)
    path.unlink()
    return result


def langgraph_available() -> str | None:
    """None if LangGraph's SqliteSaver can be imported, else why not."""
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError as exc:
        return f"langgraph-checkpoint-sqlite is not installed ({exc}); pip install 'unbroken[bench]'"
    return None


def langgraph(workdir: Path, turns: int, repeats: int) -> PeerResult:
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.base.id import uuid6
    from langgraph.checkpoint.sqlite import SqliteSaver

    db = workdir / "langgraph.db"
    conn = sqlite3.connect(db, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()  # WAL; the connection keeps SQLite's default synchronous=FULL
    thread_id = f"bench-{turns}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    step = 0

    def save(state: dict[str, Any]) -> None:
        nonlocal config, step
        step += 1
        checkpoint = empty_checkpoint()
        checkpoint["id"] = str(uuid6(clock_seq=step))
        checkpoint["channel_values"] = dict(state)
        checkpoint["channel_versions"] = dict.fromkeys(state, step)
        config = saver.put(config, checkpoint, {"source": "loop", "step": step}, dict.fromkeys(state, step))  # type: ignore[arg-type]

    times = _drive(turns, save)
    conn.close()
    disk = files_bytes([db, Path(f"{db}-wal")])
    snippet = (
        "import sqlite3\n"
        "from langgraph.checkpoint.sqlite import SqliteSaver\n"
        "started = _time.perf_counter()\n"
        f"saver = SqliteSaver(sqlite3.connect({str(db)!r}, check_same_thread=False))\n"
        f"found = saver.get_tuple({{'configurable': {{'thread_id': {thread_id!r}, 'checkpoint_ns': ''}}}})\n"
        "check = len(found.checkpoint['channel_values']['messages'])\n"
        "elapsed = _time.perf_counter() - started\n"
    )
    resume = interleaved_medians({"resume": snippet}, repeats)["resume"]
    # The cost of a crash for a LangGraph agent, as a lower bound: spawn, import the checkpointer
    # (not the graph), read the latest checkpoint. A real agent also imports and builds its graph.
    crash_code = (
        "import sqlite3, time\n"
        "from langgraph.checkpoint.sqlite import SqliteSaver\n"
        f"saver = SqliteSaver(sqlite3.connect({str(db)!r}, check_same_thread=False))\n"
        f"found = saver.get_tuple({{'configurable': {{'thread_id': {thread_id!r}, 'checkpoint_ns': ''}}}})\n"
        "assert len(found.checkpoint['channel_values']['messages'])\n"
        "print(time.monotonic())\n"
    )
    crash = statistics.median(spawn_to_done(crash_code) for _ in range(repeats))
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    return PeerResult("LangGraph SqliteSaver", turns, times, disk, resume, crash)
