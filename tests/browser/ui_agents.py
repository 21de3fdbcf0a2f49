"""Real runs for the inspector's tests, made by real agents (ScriptedModel, real tools, a real
store), some of them in child processes SIGKILLed at a crash point.

    python ui_agents.py STORE_URL RUN_ID KIND OUTBOX     (KIND: invoice | unknown | live)

* ``invoice``: sends an invoice (a side effect with a probe) and looks up a customer (read-only),
  then answers. Killed after the send, it resumes: the probe finds the invoice, so it is not sent again.
* ``unknown``: one side effect without a probe, ``unknown_policy="pause"``: killed after it
  ran, the resume cannot tell whether it happened and pauses for a person.
* ``live``: 40 turns of a slow read-only tool (0.25 s each): a run that is live while a page watches it.
* ``approval`` (in process only, see ``approval_run``): a wire transfer waiting for approval.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from unbroken import Agent, Found, NotExecuted, ScriptedModel, Store, ToolCall, open_store, tool

USAGE = {"input_tokens": 1200, "output_tokens": 80}
XSS = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>'


def turn(*blocks: dict[str, Any], stop: str = "tool_use") -> dict[str, Any]:
    return {"content": list(blocks), "stop_reason": stop, "usage": dict(USAGE)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def use(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def final(value: str = "Done.") -> dict[str, Any]:
    return turn(text(value), stop="end_turn")


def sent(outbox: Path) -> list[dict[str, str]]:
    if not outbox.exists():
        return []
    return [json.loads(line) for line in outbox.read_text(encoding="utf-8").splitlines() if line]


def invoice_agent(store: Store, outbox: Path) -> Agent:
    def find(call: ToolCall) -> Found | NotExecuted:
        hit = next((row for row in sent(outbox) if row["key"] == call.idempotency_key), None)
        return Found(f"invoice {hit['number']} sent") if hit else NotExecuted()

    @tool(effect="side_effect", probe=find)
    def send_invoice(customer: str, amount: int, *, call: ToolCall) -> str:
        """Send an invoice."""
        with open(outbox, "a", encoding="utf-8") as out:
            out.write(json.dumps({"key": call.idempotency_key, "number": "INV-7", "to": customer}) + "\n")
        return "invoice INV-7 sent"

    @tool(effect="read_only")
    def look_up(customer: str) -> str:
        """Look a customer up."""
        return f"{customer}: plan Pro, 3 seats. Notes: {XSS}"

    script = [
        turn(
            {"type": "thinking", "thinking": "Invoice first, then check the plan.", "signature": "c2ln"},
            text("Sending the invoice and looking up the customer."),
            use("toolu_inv", "send_invoice", {"customer": "ACME", "amount": 1200}),
            use("toolu_look", "look_up", {"customer": "ACME"}),
        ),
        final("Invoice INV-7 sent to ACME (plan Pro)."),
    ]
    return Agent(ScriptedModel(script), [send_invoice, look_up], store)


def unknown_agent(store: Store, outbox: Path) -> Agent:
    @tool(effect="side_effect")  # no probe: after a crash its outcome is unknown
    def refund(order: str) -> str:
        """Refund an order."""
        with open(outbox, "a", encoding="utf-8") as out:
            out.write(json.dumps({"refund": order}) + "\n")
        return f"refunded {order}"

    script = [turn(text("Refunding the order."), use("toolu_refund", "refund", {"order": "A-17"})), final("Refunded.")]
    return Agent(ScriptedModel(script), [refund], store, unknown_policy="pause")


def live_agent(store: Store) -> Agent:
    @tool(effect="read_only")
    def read_ticket(number: int) -> str:
        """Read a ticket."""
        time.sleep(0.25)
        return f"ticket {number}: customer cannot log in"

    script = [turn(text(f"Reading ticket {n}."), use(f"toolu_{n}", "read_ticket", {"number": n})) for n in range(40)]
    return Agent(ScriptedModel([*script, final("Read 40 tickets.")]), [read_ticket], store, max_turns=100)


def approval_agent(store: Store, transfers: list[str]) -> Agent:
    @tool(effect="side_effect", approval=True)
    def wire_transfer(to: str, amount: int) -> str:
        """Wire money."""
        transfers.append(to)
        return f"wired {amount} to {to}"

    script = [
        turn(text("This needs a transfer."), use("toolu_wire", "wire_transfer", {"to": "ACME", "amount": 900})),
        final("Transfer done."),
    ]
    return Agent(ScriptedModel(script), [wire_transfer], store)


def main(url: str, run_id: str, kind: str, outbox: str) -> None:
    store = open_store(url)
    if kind == "invoice":
        agent = invoice_agent(store, Path(outbox))
        task = "Invoice ACME for November"
    elif kind == "unknown":
        agent = unknown_agent(store, Path(outbox))
        task = "Refund order A-17"
    else:
        agent = live_agent(store)
        task = "Read the 40 newest tickets"
    result = agent.run(task, run_id=run_id)
    print(json.dumps({"status": result.status}))


if __name__ == "__main__":
    main(*sys.argv[1:5])
