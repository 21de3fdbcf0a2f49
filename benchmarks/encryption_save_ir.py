"""What encryption at rest adds to a turn, in instructions executed: a figure a busy machine does not move.

    python benchmarks/encryption_save_ir.py [--src DIR ...] [--short 40] [--long 240]

Runs the benchmark workload's ``Agent.run`` (two saves a turn, SQLite ``durability=normal``)
in a fresh process under ``valgrind --tool=callgrind``, plain and encrypted, ``--short`` and
``--long`` turns, and prints the instructions (Ir) of a turn at the margin: (Ir(long) -
Ir(short)) / (long - short), which leaves out the start (interpreter, imports, pyca's load).
A turn is the agent's work and its two saves, so the ratio reads lower than a save's alone;
the difference, encrypted minus plain, is what encryption adds. Ir counts user space only
(not the kernel's writes of WAL pages: ``bench_save_cpu.py --encrypted --frames`` counts those).
One figure per ``--src`` tree (its ``PYTHONPATH``: compare two versions of the code).
``PYTHONHASHSEED=0``, so a figure repeats to within ~1 %.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHILD = f"""
import sys
sys.path.insert(0, {str(HERE)!r})
import workload
from bench_store import WorkloadModel, read_ticket
from unbroken import Agent, open_store
from unbroken.encryption import LocalKeys
turns, db, keys = int(sys.argv[1]), sys.argv[2], LocalKeys(bytes(range(32))) if sys.argv[3] == "1" else None
store = open_store(f"sqlite:///{{db}}?durability=normal", encryption=keys)
agent = Agent(WorkloadModel(turns), [read_ticket], store, max_turns=turns + 1, lease_ttl=3600.0)
assert agent.run(workload.TASK, run_id="r").status == "completed"
store.close()
"""


def instructions(src: str, turns: int, encrypted: bool) -> int:
    """Instructions a fresh process running ``turns`` turns executed (it must succeed)."""
    with tempfile.TemporaryDirectory(prefix="unbroken-ir-") as tmp:
        env = dict(os.environ, PYTHONPATH=src, PYTHONHASHSEED="0")
        args = [sys.executable, "-c", CHILD, str(turns), f"{tmp}/runs.db", "1" if encrypted else "0"]
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *args],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"{turns} turns failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", action="append", default=None, help="a source tree (default: ../src)")
    parser.add_argument("--short", type=int, default=40)
    parser.add_argument("--long", type=int, default=240)
    args = parser.parse_args()
    for src in args.src or [str(HERE.parent / "src")]:
        turn: dict[bool, float] = {}
        for encrypted in (False, True):
            grown = instructions(src, args.long, encrypted) - instructions(src, args.short, encrypted)
            turn[encrypted] = grown / (args.long - args.short) / 1e3
        print(
            f"{src}: kIr a turn (its two saves and the agent's work): plain {turn[False]:.0f}, encrypted "
            f"{turn[True]:.0f}; encryption adds {turn[True] - turn[False]:.0f} ({turn[True] / turn[False]:.3f}x)"
        )


if __name__ == "__main__":
    main()
