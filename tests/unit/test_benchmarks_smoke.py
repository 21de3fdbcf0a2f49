"""The benchmark still runs end to end (at a toy size), so it cannot rot unnoticed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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
            "--no-queue",
            "--encryption-turns",
            "3",
            "--no-async",  # PostgreSQL's: smoked by tests/integration/postgres/test_pg_bench_async.py
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
        "| 3 | floor: python + ",
        "| 3 | textbook JSON file (json.loads of its state) |",
    ):
        assert row in out
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS ", "FAIL "))]
    kinds = ["crash", "crash", "load", "save", "bytes", "resume", "resume", "resume", "compacted", "import"]
    kinds += ["encryption", "encryption"]
    assert [line.split()[1] for line in verdicts] == kinds
    assert list(tmp_path.iterdir()) == []  # every database it made was removed


def _queue_benchmark(*sizes: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARK.parent / "bench_queue.py"), *sizes, "--repeats", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _verdict_stores(out: str) -> list[str]:
    verdicts = [line for line in out.splitlines() if line.startswith(("PASS ", "FAIL "))]
    return [line.split(" on ")[-1].split(":")[0] for line in verdicts]


def test_the_queue_benchmark_prints_a_verdict_for_redis() -> None:
    out = _queue_benchmark("--redis", "300", "--s3", "0")

    assert _verdict_stores(out) == ["redis"], out
    assert "First page of `unbroken runs`, redis, 300 queued runs" in out, out


@pytest.mark.slow  # moto's import and server start take seconds
def test_the_queue_benchmark_prints_a_verdict_for_s3_on_moto() -> None:
    out = _queue_benchmark("--redis", "0", "--s3", "60")

    assert _verdict_stores(out) == ["s3 (moto)"], out
    assert "First page of `unbroken runs`, s3 (moto), 60 queued runs" in out, out


def test_the_crash_floor_imports_nothing_of_unbroken(tmp_path: Path) -> None:
    # Issue 24: a floor that imports unbroken hides unbroken's own import inside the floor.
    history = tmp_path / "history.json"
    history.write_text('[{"role": "user", "content": "hi"}]', encoding="utf-8")
    code = (
        f"import json, pathlib, sys; sys.path.insert(0, {str(BENCHMARK.parent)!r}); import bench_crash\n"
        f"history = pathlib.Path({str(history)!r})\n"
        "print(json.dumps([bench_crash.floor_code(history, parser) for parser in bench_crash.PARSERS]))\n"
    )
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    floors = json.loads(listed)
    assert len(floors) == 2
    for floor in floors:
        probe = floor + "import sys; print(sorted(m for m in sys.modules if m.partition('.')[0] == 'unbroken'))\n"
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
        assert out.splitlines()[-1] == "[]", floor


def test_the_fleet_verdict_is_the_median_of_the_rounds_ratios_against_the_bare_loop() -> None:
    # Issue 24 goal 1: each round's figures are taken back to back; the verdict pairs them. It
    # judges the runs hosted in a worker process per core (``workers``); one process per run
    # (``saves``) is printed for information and judged nowhere.
    code = (
        f"import sys; sys.path.insert(0, {str(BENCHMARK.parent)!r}); import report\n"
        "from bench_fleet import FleetFigures\n"
        "results = report.Results()\n"
        "results.fleet[8] = FleetFigures(8, 10, saves=[1.0, 1.0, 1.0], bare=[1000.0, 500.0, 1500.0],\n"
        "    workers=[800.0, 450.0, 2000.0], processes=2)\n"
        "results.fleet[32] = FleetFigures(32, 10, saves=[9e9, 9e9, 9e9], bare=[1000.0, 400.0, 1000.0],\n"
        "    workers=[700.0, 300.0, 600.0], processes=2)\n"
        "print('\\n'.join(report.targets(results, [3])))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = [line for line in out.splitlines() if "PostgreSQL" in line]
    assert len(lines) == 2
    # rounds' ratios 0.8, 0.9, 1.33 and 0.7, 0.75, 0.6: the medians of the ratios, not the ratios
    # of the medians (0.8 and 0.6)
    shape = "in 2 worker processes ({} runs each, as threads)"
    assert lines[0].startswith(f"PASS PostgreSQL, 8 runs saving at once {shape.format(4)}: 800 save points/s = 0.90x")
    assert lines[1].startswith(f"FAIL PostgreSQL, 32 runs saving at once {shape.format(16)}: 600 save points/s = 0.70x")
    assert "from 32 connections (1,000/s;" in lines[1]
