"""How long ``import unbroken`` takes in a fresh interpreter."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def _wall(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True)
    return time.perf_counter() - started


def import_seconds(repeats: int) -> tuple[float, float]:
    """(median wall time of ``python -c 'import unbroken'`` minus that of ``python -c 'pass'``,
    the package's own cumulative figure from ``-X importtime``), alternating the two."""
    with_import: list[float] = []
    bare: list[float] = []
    for _ in range(repeats):
        bare.append(_wall("pass"))
        with_import.append(_wall("import unbroken"))
    report = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import unbroken"], capture_output=True, text=True, check=True
    ).stderr
    cumulative = 0.0
    for line in report.splitlines():
        parts = [part.strip() for part in line.split("|")]
        if len(parts) == 3 and parts[2] == "unbroken":
            cumulative = int(parts[1]) / 1e6
    return statistics.median(with_import) - statistics.median(bare), cumulative
