"""The crash sweep and random SIGKILLs of a real agent process, on object storage (moto over
HTTP): every run of a sweep shares one store (a bucket of the test's own) under its own run id.
The fast test kills between the store's own two writes; the others are slow (a request to
the moto server costs ~10 ms, so a sweep of every point takes minutes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from unbroken.testing import chaos

AGENTS = Path(__file__).resolve().parents[2] / "reliability" / "chaos_agent.py"
TASK = "ship order 42"


def _explain(report: chaos.ChaosReport) -> str:
    return "\n".join(f"{v.target}: {v.invariant}: {v.detail}" for v in report.violations[:20])


@pytest.fixture
def kind(s3_url: str) -> chaos.StoreKind:
    return chaos.server_kind("s3", s3_url)


def test_a_run_on_s3_reaches_the_store_crash_point(kind: chaos.StoreKind, tmp_path: Path) -> None:
    reached = chaos.crash_points(chaos.load_factory(f"{AGENTS}:make_agent"), TASK, store_kind=kind, workdir=tmp_path)

    assert {"s3.before_record", "s3.before_head", "tool.after_execute", "ledger.after_intent"} <= set(reached)


def test_killing_a_run_on_s3_between_its_record_and_its_head_write_breaks_no_invariant(
    kind: chaos.StoreKind, tmp_path: Path
) -> None:
    factory = chaos.load_factory(f"{AGENTS}:make_agent")
    labels = ["s3.before_record", "s3.before_head"]
    report = chaos.sweep(factory, TASK, store_kind=kind, workdir=tmp_path, per_label=1, labels=labels)

    assert report.ok, _explain(report)
    assert report.corrupt_loads == 0 and report.double_effects == 0
    assert all(stats.kills >= 1 for stats in report.points.values())


@pytest.mark.slow
def test_random_sigkills_of_a_run_on_s3_break_no_invariant(kind: chaos.StoreKind, tmp_path: Path) -> None:
    factory = chaos.load_factory(f"{AGENTS}:make_agent")
    report = chaos.random_kills(factory, TASK, store_kind=kind, workdir=tmp_path, kills=24, seed=5)

    assert report.ok, _explain(report)
    assert report.kills >= 24 and report.corrupt_loads == 0


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_every_n_of_every_crash_point_on_s3_breaks_no_invariant(kind: chaos.StoreKind, tmp_path: Path) -> None:
    factory = chaos.load_factory(f"{AGENTS}:make_agent")
    report = chaos.sweep(factory, TASK, store_kind=kind, workdir=tmp_path, per_label=None, rearm=3)

    assert report.ok, _explain(report)
    assert report.corrupt_loads == 0 and report.double_effects == 0
