"""The crash sweep: run an agent in child processes, kill them, resume, check the invariants.

Used by the reliability tests, ``python -m unbroken.reliability`` and ``unbroken chaos``.

1. A crash-free *reference run* (in a child) lists every crash point the run reaches and how
   often (``crashpoints.observe``), and gives the final messages every other run must end with.
2. ``sweep``: for each point and several n, a fresh run is SIGKILLed at the n-th hit
   (``crashpoints.arm``, the same switch as ``UNBROKEN_CRASH_AT``), then resumed (re-armed
   a few times, so crashes during recovery are covered too) until it finishes.
   ``random_kills``: the parent SIGKILLs the child at seeded random instants instead.
3. After every death the parent checks the store and the world; at the end it compares the
   run with the reference.

Children are forked (POSIX only), so a kill costs milliseconds. Every tool of the agent is
wrapped to append ``enter``/``exit`` lines to a journal in the run's directory: the count of
side-effecting executions per idempotency key comes from there, not from the agent's word.

The modules, one idea each: ``_config`` (the agent and the store kind), ``_child`` (one forked
child), ``_journal`` (the tool-execution log), ``_histories`` (tool calls in a history),
``_world`` (one run and its invariants), ``_harness`` (the reference run and shared steps),
``_report`` (what was found), ``_sweeps`` (the public entry points).
"""

from __future__ import annotations

from ._child import WORLD_ENV
from ._config import STORE_KINDS, AgentFactory, StoreKind, load_factory
from ._histories import UNKNOWN_PREFIX
from ._report import ChaosReport, PointStats, Violation
from ._sweeps import crash_points, random_kills, sweep

__all__ = [
    "STORE_KINDS",
    "UNKNOWN_PREFIX",
    "WORLD_ENV",
    "AgentFactory",
    "ChaosReport",
    "PointStats",
    "StoreKind",
    "Violation",
    "crash_points",
    "load_factory",
    "random_kills",
    "sweep",
]
