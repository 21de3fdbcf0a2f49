"""Child process for the provider kill-and-resume tests: runs (or resumes) the agent on the real
SDK against the local server and prints its result as JSON.

Usage: python provider_child.py PROVIDER BASE_URL STORE_URL RUN_ID sync|async [compact]"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provider_agents import SYSTEM, TASK, TOOLS, build_model, step

from unbroken import Agent, open_store
from unbroken.compaction import Compactor

COMPACT_AT, KEEP_RECENT = 500, 200


def main() -> None:
    provider, base_url, url, run_id, mode = sys.argv[1:6]
    compact = len(sys.argv) > 6 and sys.argv[6] == "compact"
    model = build_model(provider, base_url, use_async=mode == "async")
    compaction = Compactor(threshold_tokens=COMPACT_AT, keep_recent_tokens=KEEP_RECENT) if compact else None
    tools = [step] if compact else TOOLS
    agent = Agent(model=model, tools=tools, store=open_store(url), system=SYSTEM, compaction=compaction)
    result = asyncio.run(agent.arun(TASK, run_id=run_id)) if mode == "async" else agent.run(TASK, run_id=run_id)
    print(json.dumps({"status": result.status, "output": result.output, "turns": result.turns}))


if __name__ == "__main__":
    main()
