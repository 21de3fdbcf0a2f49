"""Runs larger than memory (issue 16): a compacted run of 1,000 to 1,000,000 turns, resumed.

The run is built by the workload writer (``writer.py``) with compaction on: every 20 turns a
``compacted`` save point moves the summary forward, so the model is only ever sent the task,
the summary and the last 20-40 turns. A fresh ``Agent.run(run_id=...)`` (with a ``Compactor``)
is timed from spawn to its model request, and its peak resident memory above ``import
unbroken`` (and its whole peak) is read at that moment. Runs of 100,000 turns and more are built once into
``benchmarks/.cache``. The resumer's address space is capped (``LIMIT_MB``) and it gets
``TIMEOUT`` seconds, so a resume that reads the whole history fails fast instead of crowding
a shared machine; such a row says so.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bench_crash
import writer

LIMIT_MB = 3072
TIMEOUT = 60.0


@dataclass
class ScaleRow:
    turns: int
    seconds: float | None
    memory_mb: float | None
    peak_mb: float | None
    messages_sent: int | None
    source: str
    error: str | None = None
    floor_seconds: float | None = None
    """The crash floor at this length (parse the uncompacted history once, import nothing else)."""


def measure(root: Path, turns: int, repeats: int, say: Callable[[str], None]) -> ScaleRow:
    if turns >= 100_000:
        path, run_id = writer.cached_sqlite_run(turns, compaction=True, say=say)
        source = f"cached in {path.parent.name}/{path.name}"
    else:
        path, run_id = root / f"scale-{turns}.db", f"scale-{turns}"
        writer.write_run(f"sqlite:///{path}?durability=normal", run_id, turns, compaction=True)
        source = "built now"
    url = f"sqlite:///{path}"
    seconds: list[float] = []
    memory: list[float] = []
    peaks: list[float] = []
    sent = None
    for _ in range(repeats if turns < 100_000 else 1):
        report = bench_crash.resume_once(url, run_id, compacted=True, limit_mb=LIMIT_MB, timeout=TIMEOUT)
        if "error" in report:
            return ScaleRow(turns, report.get("seconds"), None, None, None, source, report["error"])
        seconds.append(report["seconds"])
        memory.append(report["memory_mb"])
        peaks.append(report["peak_mb"])
        sent = report["messages"]
    if turns < 100_000:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    median = statistics.median
    return ScaleRow(turns, median(seconds), median(memory), median(peaks), sent, source)
