"""Agents for the hint tests: the CLI test agent, and the same agent whose send needs approval."""

from __future__ import annotations

import os
from pathlib import Path

import cli_agents

from unbroken import Agent, ScriptedModel, open_store, tool


def approving_agent() -> Agent:
    """The test agent's script, its send waiting for a person's approval."""

    @tool(effect="side_effect", approval=True)
    def send_notice(to: str) -> str:
        """Send a notice to a customer."""
        with open(Path(os.environ[cli_agents.OUTBOX_ENV]) / "approved.log", "a", encoding="utf-8") as log:
            log.write(to + "\n")
        return f"notice sent to {to}"

    store = open_store(os.environ[cli_agents.STORE_ENV])
    return Agent(ScriptedModel(cli_agents.FULL_SCRIPT), tools=[send_notice], store=store)
