"""The crash sweep and random SIGKILLs of a real agent process, on Redis: every run of a sweep
shares one store (a key prefix of the test's own) under its own run id."""

from __future__ import annotations

from pathlib import Path

import pytest

from unbroken.testing import chaos

AGENTS = Path(__file__).resolve().parents[2] / "reliability" / "chaos_agent.py"
TASK = "ship order 42"


def _explain(report: chaos.ChaosReport) -> str:
    return "\n".join(f"{v.target}: {v.invariant}: {v.detail}" for v in report.violations[:20])


@pytest.fixture
def kind(redis_url: str) -> chaos.StoreKind:
    return chaos.server_kind("redis", redis_url)


def test_a_run_on_redis_reaches_the_store_crash_point(kind: chaos.StoreKind, tmp_path: Path) -> None:
    reached = chaos.crash_points(chaos.load_factory(f"{AGENTS}:make_agent"), TASK, store_kind=kind, workdir=tmp_path)

    assert {"redis.before_write", "tool.after_execute", "ledger.after_intent"} <= set(reached)


def test_killing_a_run_on_redis_at_every_crash_point_breaks_no_invariant(kind: chaos.StoreKind, tmp_path: Path) -> None:
    factory = chaos.load_factory(f"{AGENTS}:make_agent")
    report = chaos.sweep(factory, TASK, store_kind=kind, workdir=tmp_path, per_label=1, recover_checks=False)

    assert report.ok, _explain(report)
    assert report.corrupt_loads == 0 and report.double_effects == 0
    assert all(stats.kills >= 1 for stats in report.points.values())


def test_random_sigkills_of_a_run_on_redis_break_no_invariant(kind: chaos.StoreKind, tmp_path: Path) -> None:
    factory = chaos.load_factory(f"{AGENTS}:make_agent")
    report = chaos.random_kills(factory, TASK, store_kind=kind, workdir=tmp_path, kills=8, seed=5)

    assert report.ok, _explain(report)
    assert report.kills >= 8 and report.corrupt_loads == 0


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_n_of_every_crash_point_and_100_random_kills_on_redis_break_no_invariant(
    kind: chaos.StoreKind, tmp_path: Path
) -> None:
    factory = chaos.load_factory(f"{AGENTS}:make_agent")
    swept = chaos.sweep(factory, TASK, store_kind=kind, workdir=tmp_path / "sweep", per_label=None, rearm=3)
    killed = chaos.random_kills(factory, TASK, store_kind=kind, workdir=tmp_path / "kills", kills=100, seed=11)

    assert swept.ok, _explain(swept)
    assert killed.ok, _explain(killed)
    assert killed.kills >= 100
