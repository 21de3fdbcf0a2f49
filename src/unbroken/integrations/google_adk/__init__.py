"""Google ADK on unbroken: its sessions in any unbroken store, its tools at most once.

* ``UnbrokenSessionService(store)`` (``sessions``): ADK's ``BaseSessionService`` on every
  unbroken store; each ``append_event`` one atomic durable save, stale session objects refused.
* ``UnbrokenToolPlugin(store)`` (``tools``): an ADK plugin that passes every tool call through
  unbroken's effect ledger, keyed by the call's occurrence, and answers the calls a crash left
  without a response before ADK runs the session again (ADK alone runs them again, or drops
  them and the model makes them again).

An optional extra (``unbroken[adk]``): ``import unbroken`` never imports it.
"""

from .._effects import current_call
from .sessions import UnbrokenSessionService, session_run_id
from .tools import UnbrokenToolPlugin, answer_interrupted_calls, interrupted_calls

__all__ = [
    "UnbrokenSessionService",
    "UnbrokenToolPlugin",
    "answer_interrupted_calls",
    "current_call",
    "interrupted_calls",
    "session_run_id",
]
