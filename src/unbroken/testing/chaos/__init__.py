"""Chaos: run an agent in child processes, kill them, resume, check the invariants.

Used by ``unbroken chaos`` (on the user's own agent) and by unbroken's reliability tests.

1. A crash-free *reference run* (in a child) lists every crash point the run reaches and how
   often (``crashpoints.observe``), and gives the final messages every other run must end with.
2. ``sweep``: for each point and several n, a fresh run is SIGKILLed at the n-th hit
   (``crashpoints.arm``, the same switch as ``UNBROKEN_CRASH_AT``), then resumed (re-armed
   a few times, so crashes during recovery are covered too) until it finishes.
   ``random_kills``: the parent SIGKILLs the child at seeded random instants instead.
   Each drives the run with ``Agent.run`` (``driver="sync"``) or ``Agent.arun`` (``"async"``).
3. After every death the parent checks the store; at the end it compares the run with the
   reference, runs the user's check on the run's directory and judges the journal.

Every tool of the agent is wrapped (in the child) to journal each execution: the calls that
ran more than once, per tool, and the repeats that repeated a side effect come from what
actually ran, not from the agent's word (``_repeats`` says what can and cannot be inferred).

Built on unbroken's public API (``Agent``, ``Tool``, ``open_store``, ``crashpoints``). The
modules, one idea each: ``_config`` (the agent, the check, the store kind), ``_child`` (one
forked child), ``_journal`` (the tool-execution log), ``_repeats`` (what the log shows),
``_histories`` (tool calls in a history), ``_world`` (one run and its invariants),
``_harness`` (the reference run and shared steps), ``_report`` (what was found), ``_sweeps``
(the public entry points).
"""

from __future__ import annotations

from ._child import DRIVERS, WORLD_ENV
from ._config import (
    STORE_KINDS,
    AgentFactory,
    Check,
    StoreKind,
    drop_stores,
    load_check,
    load_factory,
    server_kind,
)
from ._histories import UNKNOWN_PREFIX
from ._repeats import Call, ToolRepeats
from ._report import ChaosReport, PointStats, Violation
from ._sweeps import crash_points, random_kills, sweep

__all__ = [
    "DRIVERS",
    "STORE_KINDS",
    "UNKNOWN_PREFIX",
    "WORLD_ENV",
    "AgentFactory",
    "Call",
    "ChaosReport",
    "Check",
    "PointStats",
    "StoreKind",
    "ToolRepeats",
    "Violation",
    "crash_points",
    "drop_stores",
    "load_check",
    "load_factory",
    "random_kills",
    "server_kind",
    "sweep",
]
