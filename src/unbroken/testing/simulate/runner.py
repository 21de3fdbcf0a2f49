"""Running schedules: one seed, many seeds, replaying a schedule, shrinking a failing one."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ...stores.base import Store
from ...stores.memory import InMemoryStore
from .invariants import CHECKS, SURVIVE_DAMAGE, SURVIVE_LOSS, Violation, check
from .schedule import Action, draw
from .script import draw_script
from .world import Scenario, World, draw_scenario

StoreFactory = Callable[[], Store]
"""Gives the store one schedule runs on; it is closed after the schedule. A schedule's runs are
named after its seed and removed before and after it, so a factory may hand out one shared
store (``delegate.view`` of it, whose ``close`` does nothing)."""


@dataclass
class Outcome:
    """One schedule played: its seed, actions, what broke, and the trace of what happened."""

    seed: int
    actions: list[Action]
    violations: list[Violation]
    trace: list[str] = field(default_factory=list)
    after_loss: list[Violation] = field(default_factory=list)
    """Invariants broken in a schedule where the store lost data its durability lets it lose:
    the cost of that durability, reported apart (``violations`` then holds only those that no
    loss excuses, ``invariants.SURVIVE_LOSS``)."""

    @property
    def failed(self) -> bool:
        return bool(self.violations)


def scenario_and_schedule(seed: int, *, length: int | None = None) -> tuple[Scenario, list[Action]]:
    """What ``seed`` sets up and does (the same on every machine)."""
    rng = random.Random(seed)
    scenario = draw_scenario(rng, draw_script, f"sim{seed}")
    actions = draw(rng, len(scenario.hosts), length if length is not None else rng.randint(20, 80))
    return scenario, actions


def play(scenario: Scenario, actions: list[Action], store: StoreFactory = InMemoryStore, *, seed: int = 0) -> Outcome:
    """Play ``actions`` in a fresh world on a fresh store and check every invariant."""
    backend = store()
    logger = logging.getLogger("unbroken")
    was_disabled, logger.disabled = logger.disabled, True  # tools fail on purpose here, thousands of times
    world = World(scenario, backend)
    try:
        world.remove_runs()
        world.play(actions)
        violations = check(world)
        if world.journal.losses or world.journal.moves:
            excused = _excused(bool(world.journal.losses), bool(world.journal.moves))
            kept = [violation for violation in violations if violation.invariant not in excused]
            return Outcome(seed, actions, kept, world.journal.trace, after_loss=violations)
        return Outcome(seed, actions, violations, world.journal.trace)
    finally:
        world.close()
        world.remove_runs()
        backend.close()
        logger.disabled = was_disabled


def _excused(lost: bool, moved: bool) -> set[str]:
    """The invariants a schedule's data loss (``SURVIVE_LOSS``) or moved records
    (``SURVIVE_DAMAGE``) excuse: those broken as their cost, not by a fault of the code."""
    every = {check.__name__ for check in CHECKS} | {"saves_load", "answers_match"}
    keep = (SURVIVE_LOSS | {"moves_detected"} if lost else set(every)) & (SURVIVE_DAMAGE if moved else set(every))
    return every - keep


def run_seed(seed: int, store: StoreFactory = InMemoryStore) -> Outcome:
    scenario, actions = scenario_and_schedule(seed)
    return play(scenario, actions, store, seed=seed)


def shrink(seed: int, outcome: Outcome, store: StoreFactory = InMemoryStore, *, budget: int = 300) -> Outcome:
    """Drop actions (halves, then smaller chunks, then one at a time), then lower the counts of
    those left (steps, actions during a delay), while the schedule still breaks the same
    invariant; returns the smallest failing schedule found."""
    scenario, _ = scenario_and_schedule(seed)
    wanted = {violation.invariant for violation in outcome.violations}
    best = outcome

    def still_fails(trial: list[Action]) -> bool:
        nonlocal best, budget
        budget -= 1
        result = play(scenario, trial, store, seed=seed)
        if wanted & {violation.invariant for violation in result.violations}:
            best = result
            return True
        return False

    chunk = max(1, len(best.actions) // 2)
    while chunk >= 1 and budget > 0:
        start = 0
        while start < len(best.actions) and budget > 0:
            if not still_fails(best.actions[:start] + best.actions[start + chunk :]):
                start += chunk
        chunk //= 2
    for index in range(len(best.actions)):
        while budget > 0 and index < len(best.actions) and best.actions[index].number >= 2:
            action = best.actions[index]
            if action.kind not in ("step", "fault"):
                break
            fewer = replace(action, number=float(int(action.number) - 1))
            if not still_fails([*best.actions[:index], fewer, *best.actions[index + 1 :]]):
                break
    return best


@dataclass
class Report:
    """Many seeds played: how many, which failed (shrunk), how long it took."""

    seeds: int = 0
    failures: list[Outcome] = field(default_factory=list)
    losses: list[Outcome] = field(default_factory=list)
    """Schedules in which the store lost data (as its durability permits) and an invariant broke."""

    @property
    def passed(self) -> bool:
        return not self.failures


def simulate(
    seeds: Iterable[int],
    store: StoreFactory = InMemoryStore,
    *,
    shrink_failures: bool = True,
    stop_at_first: bool = False,
) -> Report:
    """Play the schedule of each seed on a fresh store and check the invariants after each.
    A failing seed is shrunk to a minimal schedule that still fails (``Outcome.actions``)."""
    report = Report()
    for seed in seeds:
        report.seeds += 1
        outcome = run_seed(seed, store)
        if outcome.after_loss:
            report.losses.append(outcome)
        if outcome.failed:
            report.failures.append(shrink(seed, outcome, store) if shrink_failures else outcome)
            if stop_at_first:
                break
    return report
