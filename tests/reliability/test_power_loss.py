"""Guarantee 4: after a power loss at any moment, every save the store acknowledged is there.

A child runs the example agent while every fsync under the store is recorded; then each
possible crash (after any event) is rebuilt as the tree a strict POSIX file system may keep:
unsynced writes dropped (worst case) or, in seeded variants, kept, torn or reordered."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from reliability_agents import AGENT, TASK

import faults_kit as faults
from unbroken import open_store

RUN_ID = "powerloss"


def _url(kind: str, root: Path, durability: str = "full") -> str:
    if kind == "sqlite":
        return f"sqlite:///{root / 'store.db'}?durability={durability}"
    return f"file://{root}"


def _record(
    kind: str, base: Path, *, drop: frozenset[str] = frozenset(), durability: str = "full"
) -> faults.PowerLossLog:
    root, world = base / "store", base / "world"
    root.mkdir(parents=True)
    world.mkdir()
    open_store(_url(kind, root, durability)).close()  # the empty store exists, and is synced, before the run
    os.sync()
    return faults.record_power_loss_run(
        agent=AGENT,
        task=TASK,
        url=_url(kind, root, durability),
        root=root,
        world=world,
        out=base / "log",
        run_id=RUN_ID,
        preload=faults.preload_library() if kind == "sqlite" else None,
        drop_sites=drop,
    )


def _check(kind: str, log: faults.PowerLossLog, base: Path, variants: int, seed: int = 1) -> faults.PowerLossResult:
    return faults.check_power_loss(
        log, url_for=lambda image: _url(kind, image), run_id=RUN_ID, dest=base / "image", variants=variants, seed=seed
    )


@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_a_power_loss_after_any_fsync_loses_no_acknowledged_save(kind: str, scratch: Path) -> None:
    log = _record(kind, scratch)
    result = _check(kind, log, scratch, variants=3)
    assert result.failures == 0, result.examples[:5]
    assert result.crash_points > 20 and result.images > 4 * 20


def _file_store_sites(scratch: Path) -> dict[str, str]:
    """The file store's fsync call sites, named by what they make durable."""
    log = _record("file", scratch / "clean")
    named = {}
    for site, what in log.sites.items():
        function = site.split(":")[0]
        if what.startswith("file"):
            named["the temp file"] = site
        elif function == "_write_file":
            named["the renamed file's directory"] = site
        elif function == "_create_run_dir" and what == "dir runs":
            named["the new run directory's parent"] = site
        elif function == "_write_ledger":
            named["the ledger directory"] = site
    return named


@pytest.mark.parametrize(
    "fsync", ["the temp file", "the renamed file's directory", "the new run directory's parent", "the ledger directory"]
)
def test_removing_one_fsync_of_the_file_store_makes_the_power_loss_check_fail(fsync: str, scratch: Path) -> None:
    site = _file_store_sites(scratch)[fsync]
    log = _record("file", scratch / "mutant", drop=frozenset({site}))
    result = _check("file", log, scratch / "mutant", variants=1)
    assert result.acked_saves_lost + result.acked_ledger_lost > 0


def test_sqlite_normal_durability_may_lose_the_last_saves_on_power_loss_but_never_corrupts(scratch: Path) -> None:
    log = _record("sqlite", scratch, durability="normal")
    result = _check("sqlite", log, scratch, variants=3)
    assert result.acked_saves_lost > 0  # the documented limit of durability=normal
    assert result.corrupt_loads == 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["file", "sqlite"])
def test_many_reorderings_of_unsynced_writes_lose_no_acknowledged_save(kind: str, scratch: Path) -> None:
    log = _record(kind, scratch)
    result = _check(kind, log, scratch, variants=40, seed=5)
    assert result.failures == 0, result.examples[:5]
