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
            "--crash-turns",
            "3",
            "--scale-turns",
            "3",
            "--no-fleet",
            "--dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for row in (
        "| 3 | bare SQLite commit (floor) |",
        "| 3 | unbroken sqlite full |",
        "| 3 | textbook JSON rewrite |",
        "| 3 | floor: python + import unbroken + ",
        "| 3 | textbook JSON file (json.loads of its state) |",
    ):
        assert row in out
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS ", "FAIL "))]
    kinds = ["crash", "load", "save", "bytes", "resume", "resume", "resume", "compacted", "import"]
    assert [line.split()[1] for line in verdicts] == kinds
    assert list(tmp_path.iterdir()) == []  # every database it made was removed
