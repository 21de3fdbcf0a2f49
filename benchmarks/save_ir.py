"""Instructions a save executes (issue 24 goal 4), for a machine too busy even for CPU time.

    python benchmarks/save_ir.py [--turns 300] [--src DIR ...]

Runs a real ``Agent.run`` of ``--turns`` turns on SQLite ``durability=normal`` under ``valgrind
--tool=callgrind`` and counts the instructions (Ir) executed inside each ``RunSession.save`` at
save points A and B only: the benchmark calls those saves through ``operator.call``, and callgrind
collects only inside that C function (``--toggle-collect=_operator_call``). Packing is off
(``keep_recent`` huge), as in the median save. Once per ``--src`` tree (its ``PYTHONPATH``: compare
two versions of the code; default: the current one), then the floor: an autocommitted INSERT of
the workload's 2.4 KB row into a WAL table, counted the same way. A figure repeats to within
~0.2 %. Ir leaves out the kernel's side (the write, the fsync) and counts a cold instruction like
a warm one: compare versions with it, judge the goal with ``make bench``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VALGRIND = [
    "valgrind",
    "--tool=callgrind",
    "--callgrind-out-file=/dev/null",
    "--collect-atstart=no",
    "--toggle-collect=_operator_call",
]

SAVES = """
import operator, sys, tempfile
sys.path.insert(0, {here!r})
import workload
from bench_store import TIMED_LABELS, WorkloadModel, read_ticket
from unbroken import Agent
from unbroken.session import RunSession
from unbroken.stores.sqlite import SQLiteStore
real = RunSession.save
def save(session, label, **kwargs):
    if label in TIMED_LABELS:
        return operator.call(real, session, label, **kwargs)
    return real(session, label, **kwargs)
RunSession.save = save
with tempfile.TemporaryDirectory() as directory:
    store = SQLiteStore(directory + "/ir.db", durability="normal", keep_recent=10**9)
    agent = Agent(WorkloadModel({turns}), [read_ticket], store, max_turns={turns} + 1, lease_ttl=3600.0)
    assert agent.run(workload.TASK, run_id="ir").status == "completed"
    store.close()
"""

FLOOR = """
import operator, sqlite3, sys, tempfile
sys.path.insert(0, {here!r})
import workload
with tempfile.TemporaryDirectory() as directory:
    conn = sqlite3.connect(directory + "/floor.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE saves (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    body = " ".join(str(m) for m in workload.history(1)[1:])[:2400]
    for _ in range(2 * {turns}):
        operator.call(conn.execute, "INSERT INTO saves (body) VALUES (?)", (body,))
"""


def instructions(code: str, env: dict[str, str]) -> int:
    """Instructions callgrind collected inside ``operator.call`` while ``code`` ran."""
    done = subprocess.run([*VALGRIND, sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the measured process failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--src", action="append", default=[], help="a PYTHONPATH to measure (repeatable)")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONHASHSEED="0")
    saves = 2 * args.turns
    for tree in args.src or [env.get("PYTHONPATH", "")]:
        count = instructions(SAVES.format(here=str(HERE), turns=args.turns), dict(env, PYTHONPATH=tree))
        print(f"{tree or '(installed)'}: {count / saves / 1e3:.1f} k instructions a save (points A and B)")
    floor = instructions(FLOOR.format(here=str(HERE), turns=args.turns), env)
    print(f"bare INSERT of 2.4 KB: {floor / saves / 1e3:.1f} k instructions a commit")


if __name__ == "__main__":
    main()
