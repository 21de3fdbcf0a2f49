"""Fake external services that journal every real execution, and the tools that call them.

Each service is what a tool's side effect lands on: a payments API (probe-able), a mail relay
(no probe: an in-doubt send is an unknown outcome), a charging API that de-duplicates by
idempotency key, a warehouse that refuses a fence lower than one it has seen, and a catalog
that is only read. Every request that reaches a service is journalled with the caller's
idempotency key, fence, owner and the lease expiry it acted under, so the invariants can tell
what really happened from what the run says happened. A service can apply a request and lose
its reply (the tool sees an error; the effect is done).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ...fencing import current_lease
from ...state import ToolCall
from ...tools import Found, NotExecuted, ProbeAnswer, Tool, tool

if TYPE_CHECKING:
    from .world import World


class ReplyLost(ConnectionError):
    """The service applied the request and its reply was lost on the way back."""


@dataclass(frozen=True)
class Execution:
    """One request that reached a service (``applied`` False: refused, nothing done)."""

    service: str
    key: str
    call_id: str
    token: str
    owner: str
    fence: int
    lease_expires_at: float
    grace: float
    at: float
    head_fence: int
    process: int
    applied: bool


@dataclass
class Service:
    """One external service: ``dedup`` (repeats of one key are applied once), ``fenced``
    (refuses a fence lower than the highest seen), ``effect``: the tool class calling it."""

    name: str
    effect: str
    dedup: bool = False
    fenced: bool = False
    journal: list[Execution] = field(default_factory=list)
    lose_next_reply: bool = False
    highest_fence: dict[str, int] = field(default_factory=dict)

    def applied_keys(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for execution in self.journal:
            if execution.applied:
                counts[execution.key] = counts.get(execution.key, 0) + 1
        return counts

    def has(self, key: str) -> Execution | None:
        return next((e for e in self.journal if e.key == key and e.applied), None)


def make_services() -> dict[str, Service]:
    return {
        "payments": Service("payments", "side_effect"),
        "mail": Service("mail", "side_effect"),
        "charges": Service("charges", "idempotent", dedup=True),
        "warehouse": Service("warehouse", "side_effect", fenced=True),
        "catalog": Service("catalog", "read_only"),
    }


def make_tools(world: World) -> list[Tool]:
    """The simulated agent's tools, one per service; each returns ``ok <token>``."""
    services = world.services

    def request(name: str, token: str, call: ToolCall | None) -> str:
        service = services[name]
        run_id = world.current_run()
        if service.effect == "read_only":
            service.journal.append(
                Execution(name, "", "", token, "", 0, 0.0, 0.0, world.store_now(), 0, world.current_index(), True)
            )
            return f"ok {token}"
        assert call is not None
        guard = current_lease()
        head = world.head_of(run_id)
        refused = service.fenced and guard.fence < service.highest_fence.get(run_id, 0)
        duplicate = service.dedup and service.has(call.idempotency_key) is not None
        applied = not refused and not duplicate
        service.journal.append(
            Execution(
                name,
                call.idempotency_key,
                call.id,
                token,
                guard.lease.owner,
                guard.fence,
                guard.lease.expires_at,
                guard.grace,
                world.store_now(),
                head.fence if head is not None else 0,
                world.current_index(),
                applied,
            )
        )
        if refused:
            raise PermissionError(f"{name}: fence {guard.fence} is older than one already seen; refused")
        if service.fenced:
            service.highest_fence[run_id] = max(service.highest_fence.get(run_id, 0), guard.fence)
        if service.lose_next_reply:
            service.lose_next_reply = False
            raise ReplyLost(f"{name}: connection reset after the request was sent")
        return f"ok {token}"

    def probe_of(name: str) -> Callable[[ToolCall], ProbeAnswer]:
        def probe(call: ToolCall) -> ProbeAnswer:
            done = services[name].has(call.idempotency_key)
            return Found(f"ok {done.token}") if done is not None else NotExecuted()

        return probe

    def tool_for(template: Tool, service: str) -> Tool:
        def run(token: str, *, call: ToolCall | None = None) -> str:
            return request(service, token, call)

        probe = probe_of(service) if template.probe is not None else None
        return replace(template, fn=run, probe=probe)

    return [tool_for(template, service) for template, service in _TEMPLATES]


def _declared() -> list[tuple[Tool, str]]:
    """The tools' declarations (schema from the type hints, read once, not per world)."""

    def never(call: ToolCall) -> ProbeAnswer:
        raise AssertionError("a template's probe is replaced before use")

    @tool(effect="side_effect", probe=never)
    def pay(token: str, *, call: ToolCall) -> str:
        """Take a payment."""
        raise AssertionError

    @tool(effect="side_effect")
    def email(token: str, *, call: ToolCall) -> str:
        """Send an email (no probe: an interrupted send is an unknown outcome)."""
        raise AssertionError

    @tool(effect="idempotent")
    def charge(token: str, *, call: ToolCall) -> str:
        """Charge through an API that de-duplicates by idempotency key."""
        raise AssertionError

    @tool(effect="side_effect", probe=never)
    def ship(token: str, *, call: ToolCall) -> str:
        """Ship through a warehouse that refuses stale fences."""
        raise AssertionError

    @tool(effect="read_only")
    def lookup(token: str) -> str:
        """Read the catalog."""
        raise AssertionError

    return [(pay, "payments"), (email, "mail"), (charge, "charges"), (ship, "warehouse"), (lookup, "catalog")]


_TEMPLATES = _declared()
TOOL_NAMES = ("pay", "email", "charge", "ship", "lookup")
