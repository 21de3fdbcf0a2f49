"""The cost of a crash in CPU time, for a machine too busy for wall-clock figures.

    python benchmarks/crash_cpu.py DB_URL RUN_ID HISTORY_JSON [--repeats 7] [--compacted]

Runs the same processes as ``bench_crash.py`` (a victim SIGKILLed at its model request, then a
fresh resumer timed to its next model request, alternated with the floor: a fresh python that
parses ``HISTORY_JSON`` once with orjson and with msgspec) and prints the medians of the CPU
seconds (user + system) each fresh process used, and their ratio. On a shared VM with a load
average of 10-20, the wall-clock crash rows of ``make bench`` swing 2x between runs; CPU time
swings ~5-10 %. It is not the goal's measure (spawn to request, wall clock), which also counts
waits (fsync, the scheduler); use it to compare two versions of the code on the same machine.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import bench_crash


def cpu_seconds(args: list[str]) -> float:
    """User + system CPU seconds of the process ``args`` (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{args[1:3]} failed:\n{done.stderr[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("run_id")
    parser.add_argument("history", type=Path)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--compacted", action="store_true")
    args = parser.parse_args()
    extra = ["compacted"] if args.compacted else []
    ours: list[float] = []
    floors: dict[str, list[float]] = {name: [] for name in bench_crash.PARSERS}
    for _ in range(args.repeats):
        bench_crash.kill_victim(args.url, args.run_id, compacted=args.compacted)
        ours.append(cpu_seconds([sys.executable, bench_crash.CHILD, "resume", args.url, args.run_id, *extra]))
        for name, times in floors.items():
            times.append(cpu_seconds([sys.executable, "-c", bench_crash.floor_code(args.history, name)]))
    floor = min(statistics.median(times) for times in floors.values())
    resume = statistics.median(ours)
    print(f"resume {resume * 1e3:.1f} ms CPU, floor {floor * 1e3:.1f} ms CPU: {resume / floor:.2f}x")


if __name__ == "__main__":
    main()
