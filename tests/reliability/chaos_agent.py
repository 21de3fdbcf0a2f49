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
import threading
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


def make_forgetful_agent(store: Store) -> Agent:
    """The example agent on a store that forgets claimed intents, so a crash between a tool's
    execution and its outcome makes the tool run again: ``unbroken chaos`` must fail on it."""
    remember = store.ledger_put

    def forget_intents(entry: LedgerEntry, *, fence: int | None = None) -> tuple[LedgerEntry, bool]:
        remember(entry, fence=fence)
        return entry, True  # "claimed just now", even when the call was claimed (or done) before

    store.ledger_claim = forget_intents  # type: ignore[method-assign]
    return make_agent(store)


def receipt_was_sent(world: Path) -> list[str]:
    """A user check (``--check``): the customer got the receipt. The email tool has no probe,
    so a crash between saving its intent and sending leaves an unknown outcome that is never
    retried: at most once is kept, and this check shows what it costs."""
    sent = [entry for entry in read_book(world, "outbox") if entry["subject"] == "receipt"]
    return [] if sent else ["no receipt was sent to ann@example.com"]


# An invoice tool declared read_only although it sends: the user error chaos must catch.


@tool(effect="read_only")
def send_invoice(customer: str, amount: int) -> str:
    """Send an invoice (wrongly declared read-only)."""
    # Which thread sent it tells the tests which driver ran it (Agent.arun runs sync tools in threads).
    _append(
        "invoices",
        {
            "customer": customer,
            "amount": amount,
            "main_thread": threading.current_thread() is threading.main_thread(),
        },
    )
    return f"invoice for {amount} cents sent to {customer}"


def make_invoice_agent(store: Store) -> Agent:
    """Sends one invoice through a tool declared read_only: a resume re-runs it."""
    script = [
        _turn(("toolu_i1", "send_invoice", {"customer": "ann@example.com", "amount": 1250})),
        {"content": [{"type": "text", "text": "Invoiced."}], "stop_reason": "end_turn", "usage": dict(USAGE)},
    ]
    return Agent(ScriptedModel(script), [lookup_order, send_invoice], store, max_turns=5)


def one_invoice_per_customer(world: Path) -> list[str]:
    """A user check: each customer got at most one invoice."""
    counts: dict[str, int] = {}
    for entry in read_book(world, "invoices"):
        counts[entry["customer"]] = counts.get(entry["customer"], 0) + 1
    return [f"{customer} got {n} invoices" for customer, n in sorted(counts.items()) if n > 1]


# An idempotent tool that never looks at the idempotency key: each run applies it again.


@tool(effect="idempotent")
def add_loyalty_points(customer: str, points: int) -> str:
    """Credit loyalty points (declared idempotent, but adds again every time it runs)."""
    _append("loyalty", {"customer": customer, "points": points})
    return f"{points} points credited to {customer}"


def make_keyless_agent(store: Store) -> Agent:
    """Credits points through an idempotent tool that ignores the key."""
    script = [
        _turn(("toolu_k1", "add_loyalty_points", {"customer": "ann@example.com", "points": 50})),
        {"content": [{"type": "text", "text": "Credited."}], "stop_reason": "end_turn", "usage": dict(USAGE)},
    ]
    return Agent(ScriptedModel(script), [add_loyalty_points], store, max_turns=5)
