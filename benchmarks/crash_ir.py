"""The cost of a crash in instructions executed, for a machine too busy even for CPU time.

    python benchmarks/crash_ir.py DB_URL RUN_ID HISTORY_JSON [--src DIR ...] [--compacted]

Runs the processes of ``bench_crash.py`` under ``valgrind --tool=callgrind`` and prints the
instructions (Ir) each executed: a fresh resumer from its spawn to its model request (after a
victim SIGKILLed at its own, so the lease is held as after a real crash), once per ``--src``
tree (its ``PYTHONPATH``: compare two versions of the code; default: the current one), and the
floor (a fresh python parsing ``HISTORY_JSON`` once with orjson and with msgspec, the fewer
counted), which ends with ``os._exit`` right after its timestamp as the resumer ends at its
request. ``PYTHONHASHSEED=0``, so a figure repeats to within ~1 %. Compile the trees to
bytecode first: a module compiled from source adds tens of millions. Ir does not count
``exec``, dynamic linking or page faults, which both sides pay, so its ratios read higher than
the wall-clock ratios of ``make bench``; use it to compare versions, not as the goal's measure.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import bench_crash

VALGRIND = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]


def instructions(args: list[str], env: dict[str, str]) -> float:
    """Millions of instructions the process ``args`` executed (it must succeed)."""
    done = subprocess.run(VALGRIND + args, capture_output=True, text=True, env=env, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{args[1:3]} failed:\n{done.stderr[-2000:]}")
    return int(found.group(1)) / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("run_id")
    parser.add_argument("history", type=Path)
    parser.add_argument("--src", action="append", default=[], help="a PYTHONPATH to resume with (repeatable)")
    parser.add_argument("--compacted", action="store_true")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONHASHSEED="0")
    exits = "import os\nos._exit(0)\n"  # right after the floor's timestamp, as the resumer at its request
    floor = min(
        instructions([sys.executable, "-c", bench_crash.floor_code(args.history, name) + exits], env)
        for name in bench_crash.PARSERS
    )
    print(f"floor {floor:.0f} M instructions")
    extra = ["compacted"] if args.compacted else []
    for tree in args.src or [env.get("PYTHONPATH", "")]:
        tree_env = dict(env, PYTHONPATH=tree)
        os.environ["PYTHONPATH"] = tree  # (kill_victim spawns with this process's environment)
        bench_crash.kill_victim(args.url, args.run_id, compacted=args.compacted)
        resume = instructions([sys.executable, bench_crash.CHILD, "resume", args.url, args.run_id, *extra], tree_env)
        print(f"resume {resume:.0f} M instructions ({tree or 'current'}): {resume / floor:.2f}x the floor")


if __name__ == "__main__":
    main()
