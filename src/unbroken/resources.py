"""Resources from descriptors: live things (connections, clients, handles) that a run uses but
never saves.

A run saves only JSON. A tool that needs a database connection keeps a *descriptor* of it in
``business_state`` (``{"kind": "postgres", "dsn": "..."}``), and the agent has a registry of
openers by kind::

    def open_pg(descriptor: dict) -> psycopg.Connection:
        return psycopg.connect(descriptor["dsn"])

    agent = Agent(model, tools, resources={"postgres": open_pg})

    @tool(effect="read_only")
    def count_orders() -> int:
        conn = resource("orders_db")   # business_state["orders_db"] is the descriptor
        return conn.execute("select count(*) from orders").fetchone()[0]

``resource(name)`` opens the resource on first use in this run call (lazily), hands the same
object to every later call of the run in this process, and closes it (``close()``, if it has
one) when the run call returns or raises. After a crash the resumed process reopens it from
the same descriptor. A descriptor that changes gets a new resource.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ._log import log
from .codec import canonical_hash
from .errors import ConfigError
from .redact import log_failure
from .state import JSONValue

if TYPE_CHECKING:
    from .session import RunSession


Opener = Callable[[dict[str, JSONValue]], Any]
"""Makes a live resource from its descriptor (a JSON object with at least ``kind``)."""


class Resources:
    """The resources of one run call: opened lazily from descriptors, closed at the end."""

    def __init__(self, openers: Mapping[str, Opener], business_state: Callable[[], dict[str, JSONValue]]) -> None:
        self._openers = openers
        self._business_state = business_state
        self._open: dict[str, tuple[str, Any]] = {}  # name -> (descriptor digest, live object)
        self._lock = threading.Lock()

    def get(self, name: str) -> Any:
        """The live resource described by ``business_state[name]``."""
        descriptor = self._business_state().get(name)
        if not isinstance(descriptor, dict) or not isinstance(descriptor.get("kind"), str):
            raise ConfigError(
                f"business_state[{name!r}] is not a resource descriptor; save a JSON object with a 'kind' "
                f"(one of: {', '.join(sorted(self._openers)) or 'none registered'}) and what its opener needs"
            )
        kind = descriptor["kind"]
        opener = self._openers.get(kind)
        if opener is None:
            raise ConfigError(
                f"no opener for resource kind {kind!r} (business_state[{name!r}]); give the agent one: "
                f"Agent(..., resources={{{kind!r}: open_fn}})"
            )
        digest = canonical_hash(descriptor)
        with self._lock:
            held = self._open.get(name)
            if held is not None and held[0] == digest:
                return held[1]
            if held is not None:
                _close(name, held[1])  # the descriptor changed: the old resource is not what it names
            live = opener(dict(descriptor))
            self._open[name] = (digest, live)
            return live

    def close(self) -> None:
        """Close every opened resource (errors are logged: closing must not hide the run's outcome)."""
        with self._lock:
            opened, self._open = self._open, {}
        for name, (_, live) in reversed(list(opened.items())):
            _close(name, live)


def _close(name: str, live: Any) -> None:
    close = getattr(live, "close", None)
    if not callable(close):
        return
    try:
        close()
    except Exception as exc:
        log_failure(log, f"closing resource {name!r} raised", exc)


_current: contextvars.ContextVar[Resources | None] = contextvars.ContextVar("unbroken_resources", default=None)


def resource(name: str) -> Any:
    """The live resource that ``business_state[name]`` describes, opened once per run call in this
    process by the agent's opener for its ``kind``. Call it inside a tool run by an agent."""
    scope = _current.get()
    if scope is None:
        raise ConfigError(f"resource({name!r}) was called outside a tool run by an Agent; nothing is open here")
    return scope.get(name)


@contextmanager
def scope(session: RunSession) -> Iterator[Resources]:
    """Make ``resource()`` work for the tools of this run call; close what was opened at the end."""
    resources = Resources(session.agent.resources, lambda: session.state.business_state)
    token = _current.set(resources)
    try:
        yield resources
    finally:
        _current.reset(token)
        resources.close()
