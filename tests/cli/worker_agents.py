"""The agent the worker-command tests run (``--agent worker_agents:chatty_agent``): its tool logs
an INFO line as an SDK does for every HTTP request, and one of the library's own."""

from __future__ import annotations

import logging
import os

import cli_agents

from unbroken import Agent, ScriptedModel, open_store, tool

SDK_LINE = "HTTP Request: POST https://api.example.test/v1/messages"
OWN_LINE = "a line of unbroken's own"


def chatty_agent() -> Agent:
    @tool(effect="side_effect")  # no probe: a send cut short by a kill has an unknown outcome
    def send_notice(to: str) -> str:
        """Send a notice to a customer."""
        logging.getLogger("httpx").info(SDK_LINE)
        logging.getLogger("unbroken.tests").info(OWN_LINE)
        return f"notice sent to {to}"

    store = open_store(os.environ[cli_agents.STORE_ENV])
    model = ScriptedModel(cli_agents.FULL_SCRIPT)
    return Agent(model, tools=[send_notice], store=store, unknown_policy="pause", lease_ttl=1.0)
