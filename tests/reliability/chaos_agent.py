"""An example agent for ``unbroken chaos`` and the reliability tests: a scripted model and all
three tool classes, acting on a fake external service that keeps its books on disk.

The service lives in ``$UNBROKEN_CHAOS_DIR`` (set by the chaos harness in every child): each
effect is one ``O_APPEND`` line in a ledger file, so a SIGKILL can never half-apply it and the
parent can count how many times each idempotency key took effect.

    unbroken chaos --agent tests/reliability/chaos_agent.py:make_agent --task "ship order 42"
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from unbroken import Agent, Found, LedgerEntry, NotExecuted, ScriptedModel, Store, ToolCall, tool
from unbroken.tools import ProbeAnswer

SERVICE_ENV = "UNBROKEN_CHAOS_DIR"
USAGE = {"input_tokens": 90, "output_tokens": 30}


def service_dir() -> Path:
    return Path(os.environ.get(SERVICE_ENV) or ".")


def _append(book: str, entry: dict[str, Any]) -> None:
    line = (json.dumps(entry, sort_keys=True) + "\n").encode()
    fd = os.open(service_dir() / book, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write with O_APPEND: the line is all there or not at all
    finally:
        os.close(fd)


def read_book(directory: Path, book: str) -> list[dict[str, Any]]:
    """Every effect the service applied, in order."""
    try:
        text = (directory / book).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


def effect_counts(directory: Path) -> dict[str, int]:
    """How many times each (book, idempotency key) took effect in the service."""
    counts: dict[str, int] = {}
    for book in ("payments", "outbox", "stock"):
        for entry in read_book(directory, book):
            name = f"{book}:{entry['key']}"
            counts[name] = counts.get(name, 0) + 1
    return counts


@tool(effect="read_only")
def lookup_order(order_id: str) -> str:
    """Read an order."""
    return f"order {order_id}: 2 x widget, ships to Oslo"


@tool(effect="idempotent")
def reserve_stock(sku: str, quantity: int, *, call: ToolCall) -> str:
    """Reserve stock; the warehouse applies each idempotency key once."""
    if not any(entry["key"] == call.idempotency_key for entry in read_book(service_dir(), "stock")):
        _append("stock", {"key": call.idempotency_key, "sku": sku, "quantity": quantity})
    return f"reserved {quantity} x {sku}"


def _charge_result(amount: int) -> str:
    return f"charged {amount} cents"


def _probe_charge(call: ToolCall) -> ProbeAnswer:
    for entry in read_book(service_dir(), "payments"):
        if entry["key"] == call.idempotency_key:
            return Found(_charge_result(entry["amount"]))
    return NotExecuted()


@tool(effect="side_effect", probe=_probe_charge)
def charge_card(amount: int, *, call: ToolCall) -> str:
    """Charge the customer's card (the payment service can be asked whether a key was charged)."""
    _append("payments", {"key": call.idempotency_key, "amount": amount})
    return _charge_result(amount)


@tool(effect="side_effect")
def send_email(to: str, subject: str, *, call: ToolCall) -> str:
    """Send an email (no way to ask afterwards whether it went)."""
    _append("outbox", {"key": call.idempotency_key, "to": to, "subject": subject})
    return f"sent {subject!r} to {to}"


def _turn(*calls: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": "next step"}]
    blocks += [{"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls]
    return {"content": blocks, "stop_reason": "tool_use", "usage": dict(USAGE)}


SCRIPT = [
    _turn(
        ("toolu_01", "lookup_order", {"order_id": "42"}), ("toolu_02", "reserve_stock", {"sku": "W1", "quantity": 2})
    ),
    _turn(("toolu_03", "charge_card", {"amount": 1250})),
    _turn(("toolu_04", "send_email", {"to": "ann@example.com", "subject": "receipt"})),
    _turn(
        ("toolu_05", "reserve_stock", {"sku": "W2", "quantity": 1}),
        ("toolu_06", "charge_card", {"amount": 300}),
        ("toolu_07", "lookup_order", {"order_id": "43"}),
    ),
    _turn(("toolu_08", "send_email", {"to": "ops@example.com", "subject": "shipped"})),
    {"content": [{"type": "text", "text": "Order 42 shipped."}], "stop_reason": "end_turn", "usage": dict(USAGE)},
]


def make_agent(store: Store) -> Agent:
    """The factory ``unbroken chaos`` calls in each child with the store to use."""
    return Agent(
        ScriptedModel(SCRIPT),
        [lookup_order, reserve_stock, charge_card, send_email],
        store,
        max_turns=20,
    )


class _ForgetfulStore(Store):
    """A store whose effect ledger never remembers an intent: the bug chaos must catch."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.url = inner.url
        self.capabilities = inner.capabilities

    def __getattribute__(self, name: str) -> Any:
        own = ("inner", "url", "capabilities", "ledger_claim", "decode", "load", "history", "exists")
        if name in own or name.startswith("__"):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "inner"), name)

    def ledger_claim(self, entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        self.inner.ledger_put(entry, fence=fence)
        return entry, True

    append = read_records = rewrite = list_runs = delete_run = ledger_put = ledger_get = None  # type: ignore[assignment]
    ledger_list = ledger_gc = acquire_lease = renew_lease = release_lease = lease_of = None  # type: ignore[assignment]


def make_forgetful_agent(store: Store) -> Agent:
    """The example agent on a store that forgets claimed intents, so a crash between a tool's
    execution and its outcome makes the tool run again: ``unbroken chaos`` must fail on it."""
    return make_agent(_ForgetfulStore(store))
