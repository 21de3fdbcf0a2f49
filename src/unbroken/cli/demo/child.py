"""The demo's agent process: ``python -m unbroken.cli.demo.child --workdir DIR``.

Starts the demo run, or resumes it when the work dir's store already holds it (``Agent.run``
decides), and prints the ``RunResult`` as one JSON line on stdout. The demo starts this twice:
once armed with ``UNBROKEN_CRASH_AT`` so it SIGKILLs itself, once to resume.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ... import UnbrokenError
from .scenario import RUN_ID, build_agent, load_tickets, task_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unbroken.cli.demo.child")
    parser.add_argument("--workdir", required=True, type=Path, help="the demo's work dir (script.json, runs.db)")
    parser.add_argument("--run-id", default=RUN_ID)
    parser.add_argument("--live", action="store_true", help="use the real API when an API key is set")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        agent = build_agent(args.workdir, live=args.live)
        result = agent.run(task_text(), run_id=args.run_id, business_state={"quarter": load_tickets()["quarter"]})
    except UnbrokenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report = {
        "run_id": result.run_id,
        "status": result.status,
        "turns": result.turns,
        "tokens_used": result.tokens_used,
        "resumed": result.resumed,
        "resume_seconds": result.resume_seconds,
        "run_seconds": time.perf_counter() - started,
        "reconciled": [{"call_id": c, "tool": name, "how": how} for c, name, how in result.reconciled],
        "recovered_from": result.recovered_from,
        "output": result.output,
    }
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
