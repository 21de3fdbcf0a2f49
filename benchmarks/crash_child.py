"""The processes of the crash benchmark (spawned by ``bench_crash.py``).

    crash_child.py victim URL RUN_ID [compacted]   resume the run, print "ready" at the model request, wait
    crash_child.py resume URL RUN_ID [compacted]   resume the run; at the model request print
                                                   {"at": monotonic, "messages": n, "peak_kb": .., "base_kb": ..}
                                                   and exit at once

The victim is SIGKILLed while it waits for its model, as a real agent dies: its lease is still
held. The resumer is a real ``Agent.run(run_id=...)`` in a fresh process; the clock stops when
its model is asked for the next turn. ``time.monotonic`` is one clock for every process on Linux.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Sequence
from typing import Any


def peak_kb() -> int:
    """This process's peak resident set (VmHWM). Not ``ru_maxrss``: Linux carries that over
    from the parent across fork and exec, so a child of a big benchmark process inherits it."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


_BASE_KB = peak_kb()  # the interpreter alone
if os.environ.get("BENCH_ADDRESS_SPACE_MB"):
    # The scale rows cap the resumer's address space: a resume that would read a whole
    # multi-gigabyte history fails fast with MemoryError instead of crowding the machine.
    _limit = int(os.environ["BENCH_ADDRESS_SPACE_MB"]) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (_limit, _limit))

from unbroken import Agent, ScriptedModel, open_store, tool  # noqa: E402
from unbroken.compaction import Compactor  # noqa: E402
from unbroken.model import ModelTurn, ToolSpec  # noqa: E402
from unbroken.state import JSONValue  # noqa: E402

_IMPORTED_KB = peak_kb()


@tool(effect="read_only")
def read_ticket(ticket_id: str, fields: list[str]) -> str:
    """Read one support ticket."""
    return ticket_id


class NextRequest(ScriptedModel):
    """A model whose first request ends the measurement (resume) or waits to be killed (victim)."""

    def __init__(self, mode: str) -> None:
        super().__init__([])
        self.mode = mode

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        at = time.monotonic()
        if self.mode == "victim":
            sys.stdout.write("ready\n")
            sys.stdout.flush()
            time.sleep(3600)
        peak = peak_kb()
        report: dict[str, Any] = {
            "at": at,
            "messages": len(messages),
            "peak_kb": peak,
            "base_kb": _BASE_KB,
            "imported_kb": _IMPORTED_KB,
        }
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
        os._exit(0)


def main(mode: str, url: str, run_id: str, compacted: bool) -> None:
    store = open_store(url)
    compaction = Compactor(threshold_tokens=60_000, keep_recent_tokens=30_000, summarise=lambda prev, msgs: "")
    agent = Agent(
        NextRequest(mode),
        [read_ticket],
        store,
        max_turns=10**9,
        compaction=compaction if compacted else None,
    )
    agent.run(run_id=run_id)
    raise SystemExit(f"the run ended without a model request ({run_id})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], len(sys.argv) > 4 and sys.argv[4] == "compacted")
