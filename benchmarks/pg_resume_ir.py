"""A PostgreSQL resume's open and load in instructions executed, for a machine too busy for time.

    python benchmarks/pg_resume_ir.py URL RUN_ID HISTORY_JSON [--src DIR ...] [--imports]

The resume row of ``make bench`` (``bench_store.resume_snippet``) timed in instructions (Ir,
``valgrind --tool=callgrind``), by difference of fresh processes that stop at ``os._exit``:
``import unbroken``; then ``open_store(URL)``; then ``store.load(RUN_ID)``. So ``open`` is the
driver's import, the connection and the schema check, ``load`` the read and the fold, each
beside the floor of that row (a fresh python's stdlib ``json.loads`` of ``HISTORY_JSON``). Once
per ``--src`` tree (its ``PYTHONPATH``: compare two versions of the code). ``--imports`` adds
what importing the driver costs, module by module, over ``import unbroken``.
``PYTHONHASHSEED=0``; compile the trees to bytecode first. Ir leaves out page faults and the
server's own work, so compare versions with it; the goal is judged in time by ``make bench``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from crash_ir import instructions

SETUP = "import json as _json, sys as _sys, time as _time\n"  # (as measure.fresh_process_figures)
EXIT = "import os\nos._exit(0)\n"
DRIVER_IMPORTS = {
    "psycopg": "import psycopg\n",
    "psycopg + psycopg_pool": "import psycopg, psycopg_pool\n",
    "unbroken.stores.postgres": "import unbroken.stores.postgres\n",
    "(asyncio alone, imported by psycopg.errors)": "import asyncio\n",
    "(importlib.metadata alone, by psycopg_binary.version)": "import importlib.metadata\n",
    "(ctypes.util alone, by psycopg.pq.misc)": "import ctypes.util\n",
}


def run(code: str, env: dict[str, str]) -> float:
    """Millions of instructions a fresh python running ``code`` executed."""
    return instructions([sys.executable, "-c", code], env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url")
    parser.add_argument("run_id")
    parser.add_argument("history", type=Path)
    parser.add_argument("--src", action="append", default=[], help="a PYTHONPATH to resume with (repeatable)")
    parser.add_argument("--imports", action="store_true", help="also the driver's import, module by module")
    args = parser.parse_args()
    env = dict(os.environ, PYTHONHASHSEED="0")
    floor = run(SETUP + f"with open({str(args.history)!r}, 'rb') as f:\n    _json.loads(f.read())\n" + EXIT, env)
    floor -= run(SETUP + EXIT, env)
    print(f"one json.loads of the history: {floor:.0f} M instructions")
    base = SETUP + "from unbroken import open_store\n"
    opened = base + f"store = open_store({args.url!r})\n"
    loaded = opened + f"state = store.load({args.run_id!r})\ncheck = len(state.messages)\n"
    for tree in args.src or [env.get("PYTHONPATH", "")]:
        tree_env = dict(env, PYTHONPATH=tree)
        start = run(base + EXIT, tree_env)
        open_ir = run(opened + "store.close()\n" + EXIT, tree_env) - start
        load_ir = run(loaded + "store.close()\n" + EXIT, tree_env) - start - open_ir
        total = open_ir + load_ir
        print(
            f"{tree or 'current'}: open {open_ir:.0f} M + load {load_ir:.0f} M = {total:.0f} M "
            f"= {total / floor:.2f}x one json.loads"
        )
        if args.imports:
            for name, code in DRIVER_IMPORTS.items():
                print(f"  import {name}: {run(base + code + EXIT, tree_env) - start:.0f} M")


if __name__ == "__main__":
    main()
