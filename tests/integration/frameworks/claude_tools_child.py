"""One ``query()`` of the Claude Agent SDK in a process of its own, with the real bundled
``claude`` CLI pointed at a local stand-in model, an in-process ``charge`` tool run through
``durable_tools`` and the transcript kept in an ``UnbrokenSessionStore``. ``charge`` records
each payment in a journal (the outside service) and kills its own process (SIGKILL) right after
paying the invoice named by ``KILL_AFTER_INVOICE``. Prints the session id and the final answer.

argv: store URL, journal path, stand-in URL, config dir, work dir, prompt, session to resume
("-" for a new one), "probe" or "no-probe"."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, cast

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query, tool
from claude_agent_sdk.types import SessionStore

from unbroken import Found, NotExecuted, ToolCall, open_store
from unbroken.integrations.claude_agent import UnbrokenSessionStore, current_call, durable_tools

url, journal_path, stub_url, config, work, prompt, resume, with_probe = sys.argv[1:9]
journal = Path(journal_path)


def payments() -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []


@tool("charge", "Charge an invoice", {"invoice": str, "amount": int})
async def charge(args: dict[str, Any]) -> dict[str, Any]:
    with journal.open("a") as out:
        out.write(json.dumps({**args, "key": current_call().idempotency_key}) + "\n")
        out.flush()
        os.fsync(out.fileno())
    if os.environ.get("KILL_AFTER_INVOICE") == args["invoice"]:
        os.kill(os.getpid(), signal.SIGKILL)
    return {"content": [{"type": "text", "text": f"charged {args['amount']} for {args['invoice']}"}]}


def charged(call: ToolCall) -> Found | NotExecuted:
    for payment in payments():
        if payment["key"] == call.idempotency_key:
            return Found(f"charged {payment['amount']} for {payment['invoice']}")
    return NotExecuted()


async def main() -> None:
    store = open_store(url)
    durable = durable_tools([charge], store, server="pay", probes={"charge": charged} if with_probe == "probe" else {})
    env = {
        "ANTHROPIC_BASE_URL": stub_url,
        "ANTHROPIC_API_KEY": "sk-test-not-a-key",
        "CLAUDE_CONFIG_DIR": config,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
    }
    options = ClaudeAgentOptions(
        session_store=cast(SessionStore, UnbrokenSessionStore(store)),
        mcp_servers=durable.mcp_servers,
        hooks=durable.hooks,
        allowed_tools=["mcp__pay__charge"],
        max_turns=6,
        env=env,
        cwd=work,
        resume=None if resume == "-" else resume,
    )
    session, answer = "", ""
    async for message in query(prompt=prompt, options=options):
        if isinstance(message, ResultMessage):
            session, answer = message.session_id, str(message.result)
    print(json.dumps({"session": session, "answer": answer}))


asyncio.run(main())
