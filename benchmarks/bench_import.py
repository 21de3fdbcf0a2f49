"""How long importing unbroken takes in a fresh interpreter (issue 24 goal 4).

Two figures, each the median of alternated fresh processes:

* ``import unbroken``: the package's cumulative figure from ``-X importtime`` (the goal's
  measure), and the wall time of ``python -c 'import unbroken'`` minus ``python -c 'pass'``;
* the resume path: what a process that resumes a run on SQLite imports before it can ask its
  model (``Agent``, ``open_store``, the SQLite store, compaction), as the ``-X importtime`` sum
  of every module it loads that a bare interpreter does not. Shown, not judged: it sits inside
  the crash rows, which are judged against a floor that imports none of it.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

RESUME_PATH = (
    "from unbroken import Agent, ScriptedModel, open_store, tool; import unbroken.stores.sqlite, unbroken.compaction"
)


@dataclass
class ImportFigures:
    wall: float
    """``python -c 'import unbroken'`` minus ``python -c 'pass'`` (seconds, medians)."""
    importtime: float
    """``-X importtime`` cumulative figure of ``unbroken`` (seconds, median)."""
    resume_path: float
    """``-X importtime``: every top-level import of the resume path that ``pass`` does not make."""


def _wall(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def _importtime(code: str) -> dict[str, float]:
    """Top-level imports of ``python -X importtime -c code``: name to cumulative seconds."""
    report = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True
    ).stderr
    top: dict[str, float] = {}
    for line in report.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2]
        if name.startswith(" ") and not name.startswith("  "):  # one space: imported by the -c code or site
            top[name.strip()] = top.get(name.strip(), 0.0) + int(parts[1]) / 1e6
    return top


def measure(repeats: int) -> ImportFigures:
    with_import: list[float] = []
    bare: list[float] = []
    cumulative: list[float] = []
    resume: list[float] = []
    for _ in range(repeats):
        bare.append(_wall("pass"))
        with_import.append(_wall("import unbroken"))
        cumulative.append(_importtime("import unbroken").get("unbroken", 0.0))
        baseline = _importtime("pass")
        resume.append(sum(s for name, s in _importtime(RESUME_PATH).items() if name not in baseline))
    median = statistics.median
    return ImportFigures(median(with_import) - median(bare), median(cumulative), median(resume))
