"""``benchmarks/bench_async.py`` still runs end to end (at a toy size), so it cannot rot unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pgtest import require_server

BENCHMARK = Path(__file__).resolve().parents[3] / "benchmarks" / "bench_async.py"


@pytest.mark.slow
def test_bench_async_prints_its_table_and_three_verdicts() -> None:
    require_server()
    args = ["--runs", "4", "--procs", "2", "--slow-runs", "2", "--turns", "1", "--idle-seconds", "0.1"]
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "| one process, arun | 4 | 4 |" in done.stdout
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert [line.split()[1] for line in verdicts] == ["arun,", "arun,", "arun"]
