"""Child process for the core kill-and-resume tests: runs (or resumes) a scripted agent and
prints its result as JSON. Usage: python core_child.py STORE_URL RUN_ID TURNS"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))

from core_scripts import reading_script

from unbroken import Agent, ScriptedModel, open_store, tool


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    """Read one ticket."""
    return f"ticket {ticket_id}: " + "details " * 40


def main() -> None:
    url, run_id, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(url)
    agent = Agent(model=ScriptedModel(reading_script(turns)), tools=[read_ticket], store=store)
    result = agent.run("Summarize the quarter", run_id=run_id)
    print(json.dumps({"status": result.status, "turns": result.turns, "tokens": result.tokens_used,
                      "resumed": result.resumed, "resume_seconds": result.resume_seconds}))  # fmt: skip


if __name__ == "__main__":
    main()
