"""The cost of a crash: from a fresh process's spawn to the model's next request after a SIGKILL.

For unbroken (SQLite, ``full``), each repeat starts a victim that resumes the run and is
SIGKILLed while it waits for its model (so its lease is still held, as after a real crash),
then times a fresh ``Agent.run(run_id=...)`` from ``Popen`` to its model request. Alternated
with it, in the same loop:

* the floor: a fresh ``python`` that parses the history bytes once with the fastest parser
  unbroken ships and imports nothing else (no unbroken: its own import is part of the cost it
  is judged on, issue 24): both orjson and msgspec are timed in every repeat and the faster
  median is the floor;
* the textbook approach: a fresh ``python`` that ``json.loads`` its one state file.

Memory: the resumer's peak resident set at its model request minus its peak after
``import unbroken``, against a fresh process's peak for one ``json.loads`` of the history minus
its peak before it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import workload
import writer

CHILD = str(Path(__file__).resolve().parent / "crash_child.py")


@dataclass
class CrashRow:
    approach: str
    turns: int
    seconds: float | None
    memory_mb: float | None = None
    floor_seconds: float | None = None
    json_memory_mb: float | None = None
    note: str = ""


def kill_victim(url: str, run_id: str, *, compacted: bool = False) -> None:
    """Start an agent that resumes the run, wait until it asks its model, SIGKILL it."""
    args = [sys.executable, CHILD, "victim", url, run_id] + (["compacted"] if compacted else [])
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stderr is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError(f"the victim never reached its model request:\n{proc.stderr.read()[-2000:]}")
    proc.kill()  # SIGKILL, while it waits for the model
    proc.wait()
    proc.stdout.close()
    proc.stderr.close()


def resume_once(
    url: str, run_id: str, *, compacted: bool = False, limit_mb: int | None = None, timeout: float = 120
) -> dict[str, Any]:
    """Spawn a fresh resumer; its report plus ``seconds`` from spawn to the model request."""
    args = [sys.executable, CHILD, "resume", url, run_id] + (["compacted"] if compacted else [])
    env = dict(os.environ)
    if limit_mb is not None:
        env["BENCH_ADDRESS_SPACE_MB"] = str(limit_mb)
    started = time.monotonic()
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"no model request within {timeout:.0f} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": last[:200], "seconds": time.monotonic() - started}
    report: dict[str, Any] = json.loads(lines[-1])
    report["seconds"] = report["at"] - started
    report["memory_mb"] = (report["peak_kb"] - report["imported_kb"]) / 1024
    report["peak_mb"] = report["peak_kb"] / 1024
    return report


def spawn_to_done(code: str) -> float:
    """Seconds from spawning ``python -c code`` to the moment it prints ``time.monotonic()``."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"measurement process failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1]) - started


PARSERS = {"orjson": ("orjson", "orjson.loads"), "msgspec": ("msgspec.json", "msgspec.json.decode")}
"""The JSON parsers unbroken ships (both are required dependencies): the floor takes the faster."""


def floor_code(history: Path, parser: str = "orjson") -> str:
    module, call = PARSERS[parser]
    return (
        f"import time, {module}\n"
        f"with open({str(history)!r}, 'rb') as f:\n"
        f"    messages = {call}(f.read())\n"
        "print(time.monotonic())\n"
    )


def textbook_code(state_file: Path) -> str:
    return (
        "import json, time\n"
        f"with open({str(state_file)!r}, 'rb') as f:\n"
        "    state = json.loads(f.read())\n"
        "print(time.monotonic())\n"
    )


def json_memory_mb(history: Path) -> float:
    """Peak resident memory that one ``json.loads`` of the history adds to a fresh process."""
    code = (
        "import json\n"
        "def peak():\n"
        "    with open('/proc/self/status') as status:\n"
        "        return next(int(line.split()[1]) for line in status if line.startswith('VmHWM:'))\n"
        "before = peak()\n"
        f"with open({str(history)!r}, 'rb') as f:\n"
        "    messages = json.loads(f.read())\n"
        "print((peak() - before) / 1024)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def write_textbook_state(path: Path, turns: int) -> None:
    """The textbook approach's state file at the end of ``turns`` turns (what its last save wrote)."""
    state = {
        "run_id": f"bench-{turns}",
        "task": workload.TASK,
        "turns": turns,
        "tokens_used": sum(sum(workload.usage(t).values()) for t in range(turns)),
        "phase": "awaiting_model",
        "pending_calls": [],
        "messages": workload.history(turns),
    }
    path.write_text(json.dumps(state, ensure_ascii=False, separators=(",", ":")), encoding="utf-8")


def measure(workdir: Path, turns: int, repeats: int, history: Path) -> list[CrashRow]:
    """The crash rows at ``turns``: unbroken (SQLite full), its floor, the textbook approach."""
    db = workdir / f"crash-{turns}.db"
    run_id = f"crash-{turns}"
    writer.write_run(f"sqlite:///{db}?durability=normal", run_id, turns)
    url = f"sqlite:///{db}"  # resumed at the default durability, full
    state_file = workdir / f"textbook-{turns}.json"
    write_textbook_state(state_file, turns)
    ours: list[float] = []
    memory: list[float] = []
    floors: dict[str, list[float]] = {parser: [] for parser in PARSERS}
    textbook: list[float] = []
    for _ in range(repeats):
        kill_victim(url, run_id)
        report = resume_once(url, run_id)
        if "error" in report:
            raise RuntimeError(f"resume after SIGKILL failed at {turns:,} turns: {report['error']}")
        if report["messages"] != 2 * turns + 1:
            raise RuntimeError(f"the resumed model was sent {report['messages']} messages, not {2 * turns + 1}")
        ours.append(report["seconds"])
        memory.append(report["memory_mb"])
        for parser, times in floors.items():
            times.append(spawn_to_done(floor_code(history, parser)))
        textbook.append(spawn_to_done(textbook_code(state_file)))
    json_mb = json_memory_mb(history)
    fastest = min(floors, key=lambda parser: statistics.median(floors[parser]))
    floor = statistics.median(floors[fastest])
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), state_file):
        path.unlink(missing_ok=True)
    return [
        CrashRow(
            f"floor: python + {PARSERS[fastest][1]} of the history, nothing else imported (the faster of orjson, "
            "msgspec)",
            turns,
            floor,
            floor_seconds=floor,
        ),
        CrashRow(
            "unbroken sqlite full",
            turns,
            statistics.median(ours),
            statistics.median(memory),
            floor,
            json_mb,
        ),
        CrashRow("textbook JSON file (json.loads of its state)", turns, statistics.median(textbook), None, floor),
    ]
