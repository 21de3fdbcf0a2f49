"""The three ways to use the harness: list the crash points, kill at each of them, kill at random."""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from pathlib import Path

from ._config import AgentFactory, Check, StoreKind, resolve_kind
from ._harness import Harness
from ._report import ChaosReport, PointStats


def crash_points(
    factory: AgentFactory, task: str, *, store_kind: str | StoreKind = "sqlite", workdir: Path, driver: str = "sync"
) -> dict[str, int]:
    """The crash points a crash-free run of the agent reaches, with how many times each."""
    harness = Harness(factory, task, resolve_kind(store_kind), workdir, "listing", driver=driver)
    harness.run_reference()
    return dict(harness.points)


def _pick(count: int, per_label: int | None) -> list[int]:
    if per_label is None or count <= per_label:
        return list(range(1, count + 1))
    if per_label == 1:
        return [1]
    step = (count - 1) / (per_label - 1)
    return sorted({1 + round(i * step) for i in range(per_label)})


def _chosen(labels: Sequence[str] | None, label: str) -> list[int] | None:
    """The hits of ``label`` that ``labels`` names ([]: the usual pick; None: skip the label).
    An entry is a label (every pick of it) or ``label:n`` (its n-th hit only)."""
    if labels is None:
        return []
    picked: list[int] = []
    for entry in labels:
        name, _, count = entry.rpartition(":")
        if entry == label:
            return []
        if name == label and count.isdigit():
            picked.append(int(count))
    return sorted(set(picked)) or None


def sweep(
    factory: AgentFactory,
    task: str,
    *,
    store_kind: str | StoreKind = "sqlite",
    workdir: Path,
    per_label: int | None = 3,
    rearm: int = 2,
    max_resumes: int = 6,
    recover_checks: bool = True,
    labels: Sequence[str] | None = None,
    driver: str = "sync",
    check: Check | None = None,
    check_spec: str = "",
    keep: bool = False,
) -> ChaosReport:
    """Kill a run at every crash point the reference run reaches, at ``per_label`` values of n
    spread over its hits (None: every n), resume until done and check every invariant.
    ``labels``: only these crash points (``label`` or ``label:n``).
    ``driver``: ``sync`` (``Agent.run``) or ``async`` (``Agent.arun``); ``check``: a user check
    run on every finished run's directory; ``keep``: keep every run's directory."""
    started = time.perf_counter()
    harness = Harness(
        factory,
        task,
        resolve_kind(store_kind),
        workdir,
        "crash points",
        driver=driver,
        check=check,
        check_spec=check_spec,
        keep=keep,
    )
    harness.run_reference()
    report = harness.report
    for label, hits in sorted(harness.points.items()):
        chosen = _chosen(labels, label)
        if chosen is None:
            continue
        stats = report.points.setdefault(label, PointStats(label, hits))
        for n in chosen or _pick(hits, per_label):
            world = harness.new_world(label.replace(".", "_"), stats)
            # The first attempt dies at the n-th hit; the next ones are resumes armed the same way.
            for attempt in range(rearm):
                if harness.attempt(world, world.job(f"{label}:{n}")):
                    break
                if attempt:
                    harness.count_resume(world)
                if attempt == 0 and recover_checks and harness.kind.in_world:
                    world.recover_twice()
            else:
                harness.finish(world, max_resumes)
            world.discard()
    report.seconds = time.perf_counter() - started
    return report


def random_kills(
    factory: AgentFactory,
    task: str,
    *,
    store_kind: str | StoreKind = "sqlite",
    workdir: Path,
    kills: int = 30,
    seed: int = 0,
    kills_per_run: int = 6,
    max_resumes: int = 6,
    driver: str = "sync",
    check: Check | None = None,
    check_spec: str = "",
    keep: bool = False,
) -> ChaosReport:
    """SIGKILL children from outside at seeded random instants (anywhere, not only at crash
    points) until ``kills`` kills have landed, resuming each run until it finishes. The seed
    fixes the sequence of delays; where each one lands depends on the machine's timing.
    ``driver``, ``check`` and ``keep`` as for ``sweep``."""
    started = time.perf_counter()
    harness = Harness(
        factory,
        task,
        resolve_kind(store_kind),
        workdir,
        f"random kills (seed {seed})",
        driver=driver,
        check=check,
        check_spec=check_spec,
        keep=keep,
    )
    harness.run_reference()
    report = harness.report
    stats = report.points.setdefault("random", PointStats("random", 0))
    rng = random.Random(seed)
    span = max(harness.reference_seconds, 0.01) * 1.2
    while report.kills < kills:
        world = harness.new_world("random", stats)
        for attempt in range(kills_per_run):
            if attempt:
                harness.count_resume(world)
            if harness.attempt(world, world.job(), kill_after=rng.uniform(0.0, span)):
                break
        else:
            harness.finish(world, max_resumes)
        world.discard()
    report.seconds = time.perf_counter() - started
    return report
