"""A child for ``test_arun_off_loop``: ``asyncio.run(agent.arun(...))`` on a SQLite store whose save
of the charge's result is slow (it writes ``<dir>/saving`` first), so the test's SIGINT lands while
that save runs in a store thread. Charges are appended to ``<dir>/charges``."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from unbroken import Agent, ScriptedModel, tool
from unbroken.codec import EncodedSave
from unbroken.stores.base import Store
from unbroken.stores.sqlite import SQLiteBackend


class SlowSave(SQLiteBackend):
    def __init__(self, here: Path) -> None:
        super().__init__(here / "runs.db")
        self.here = here

    def write_record(self, save: EncodedSave, ledger: Any, *, expect_seq: int, fence: int | None) -> None:
        if (self.here / "charges").exists() and not (self.here / "saving").exists():
            (self.here / "saving").write_text(str(save.seq))
            time.sleep(1.0)  # the SIGINT comes now
        super().write_record(save, ledger, expect_seq=expect_seq, fence=fence)


def agent(store: Any, here: Path) -> Agent:
    """The agent of the child and of the test's resume; its tool appends each charge to
    ``<here>/charges`` (the directory is passed, never read from argv at import: the test imports
    this module too, in a process whose argv is pytest's)."""

    @tool(effect="side_effect")
    def charge(amount: int) -> str:
        with (here / "charges").open("a") as charges:
            charges.write(f"{amount}\n")
        return f"charged {amount}"

    call = {"type": "tool_use", "id": "c1", "name": "charge", "input": {"amount": 5}}
    script: list[dict[str, Any]] = [
        {"content": [call], "stop_reason": "tool_use", "usage": {}},
        {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}},
    ]
    return Agent(ScriptedModel(script), [charge], store)


if __name__ == "__main__":
    here = Path(sys.argv[1])
    asyncio.run(agent(Store(SlowSave(here)), here).arun("charge", run_id="r"))
