"""Small measuring helpers: percentiles, bytes on disk, timing a snippet in a fresh process."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SaveTimes:
    """Per-save latencies of one run, in seconds, in save order."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def p99(self) -> float:
        return percentile(self.samples, 99)

    def tail_median(self, count: int = 200) -> float:
        """Median of the last ``count`` saves: what a save costs once the history is long."""
        return statistics.median(self.samples[-count:])


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * (len(ordered) - 1))))
    return ordered[index]


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk for a file, or for every file under a directory."""
    if path.is_file():
        return path.stat().st_blocks * 512
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(os.path.join(root, name)).st_blocks * 512
    return total


def files_bytes(paths: list[Path]) -> int:
    return sum(disk_bytes(p) for p in paths if p.exists())


def fresh_process_seconds(snippet: str, env: dict[str, str] | None = None) -> float:
    """Run ``snippet`` in a new interpreter. The snippet must set ``elapsed`` (seconds) for the
    part it measures (so interpreter start-up and imports are left out) and may set ``check``."""
    return fresh_process_figures(snippet, env)["elapsed"]


def fresh_process_figures(snippet: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """``fresh_process_seconds`` for a snippet that times several parts: ``elapsed`` plus each
    entry of the dict ``figures`` it may set (name: seconds)."""
    code = (
        "import json as _json, sys as _sys, time as _time\n"
        + snippet
        + "\n_sys.stdout.write(_json.dumps({'elapsed': elapsed, 'check': globals().get('check'), "
        "'figures': globals().get('figures') or {}}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"fresh-process measurement failed:\n{done.stderr.strip()[-2000:]}")
    out = json.loads(done.stdout.strip().splitlines()[-1])
    return {"elapsed": float(out["elapsed"]), **{name: float(value) for name, value in out["figures"].items()}}


def interleaved_medians(snippets: dict[str, str], repeats: int) -> dict[str, float]:
    """Median fresh-process time of each snippet, alternating them so machine noise hits all alike."""
    return {name: figures["elapsed"] for name, figures in interleaved_figures(snippets, repeats).items()}


def interleaved_figures(snippets: dict[str, str], repeats: int) -> dict[str, dict[str, float]]:
    """``interleaved_medians`` of every figure a snippet times (``elapsed`` and its ``figures``)."""
    times: dict[str, dict[str, list[float]]] = {name: {} for name in snippets}
    for _ in range(repeats):
        for name, snippet in snippets.items():
            for figure, seconds in fresh_process_figures(snippet).items():
                times[name].setdefault(figure, []).append(seconds)
    return {
        name: {figure: statistics.median(values) for figure, values in figures.items()}
        for name, figures in times.items()
    }
