"""The benchmark still runs end to end (at a toy size), so it cannot rot unnoticed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"


def test_benchmark_prints_the_table_and_a_verdict_for_every_target(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(BENCHMARK),
            "--turns",
            "3",
            "--repeats",
            "1",
            "--stores",
            "sqlite full",
            "--no-langgraph",
            "--agent-turns",
            "2",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for row in ("| 3 | bare SQLite commit (floor) |", "| 3 | unbroken sqlite full |", "| 3 | textbook JSON rewrite |"):
        assert row in out
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert [line.split()[1] for line in verdicts] == ["save", "bytes", "resume", "import"]
    assert list(tmp_path.iterdir()) == []  # every database it made was removed
