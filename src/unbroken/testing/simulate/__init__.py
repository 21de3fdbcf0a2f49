"""Deterministic fault simulation: the real engine, leases, ledger and store code, run in a
seeded simulated world that injects faults at every step, with invariants checked after each
schedule. See docs/simulation.md.

``simulate(range(100))`` plays 100 seeds on the in-memory store; pass ``store=`` a factory of
your own store to run them on it. A failure carries its seed and a shrunk schedule that
replays it (``play(scenario_and_schedule(seed)[0], actions)``).
"""

from __future__ import annotations

from .invariants import Violation
from .runner import Outcome, Report, play, run_seed, scenario_and_schedule, shrink, simulate
from .schedule import Action, from_text, to_text

__all__ = [
    "Action",
    "Outcome",
    "Report",
    "Violation",
    "from_text",
    "play",
    "run_seed",
    "scenario_and_schedule",
    "shrink",
    "simulate",
    "to_text",
]
