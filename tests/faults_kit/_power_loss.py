"""Power loss, end to end: record a run of an agent in a fresh interpreter, then open the store
on every crash image and check that nothing acknowledged is lost and nothing is corrupt."""

from __future__ import annotations

import contextlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ._crash_images import PowerLossLog


@dataclass
class PowerLossResult:
    """What the crash images showed. Every count but ``images`` must be 0."""

    crash_points: int = 0
    images: int = 0
    acked_saves_lost: int = 0
    acked_ledger_lost: int = 0
    corrupt_loads: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def failures(self) -> int:
        return self.acked_saves_lost + self.acked_ledger_lost + self.corrupt_loads


def check_power_loss(
    log: PowerLossLog,
    *,
    url_for: Callable[[Path], str],
    run_id: str,
    dest: Path,
    variants: int,
    seed: int,
) -> PowerLossResult:
    """Open the store on every crash image: it must load without ``CorruptCheckpoint`` and
    hold every save and ledger write acknowledged before the crash."""
    from unbroken.errors import CorruptCheckpoint, RunNotFound, StoreUnavailable
    from unbroken.stores import open_store

    result = PowerLossResult()
    events: set[int] = set()
    for image in log.crash_images(dest, variants=variants, rng=random.Random(seed)):
        result.images += 1
        events.add(image.event)
        where = f"crash after event {image.event} (variant {image.variant})"
        last = 0
        try:
            store = open_store(url_for(dest))
        except StoreUnavailable as exc:
            result.corrupt_loads += 1
            result.examples.append(f"{where}: store does not open: {exc}")
            continue
        try:
            try:
                last = store.decode(run_id).last_seq
            except CorruptCheckpoint as exc:
                result.corrupt_loads += 1
                result.examples.append(f"{where}: {exc}")
                with contextlib.suppress(CorruptCheckpoint):
                    last = store.decode(run_id, recover=True).last_seq
            except RunNotFound:
                last = 0
            if last < image.acked_seq:
                result.acked_saves_lost += 1
                result.examples.append(f"{where}: save {image.acked_seq} was acknowledged, the store holds {last}")
            for key, updated in image.acked_ledger.items():
                try:
                    entry = store.ledger_get(run_id, key)
                except CorruptCheckpoint:
                    entry = None
                if entry is None or entry.updated_at < updated:
                    result.acked_ledger_lost += 1
                    result.examples.append(f"{where}: acknowledged ledger write of {key[:12]} is missing")
        finally:
            store.close()
    result.crash_points = len(events)
    return result


def record_power_loss_run(
    *,
    agent: str,
    task: str,
    url: str,
    root: Path,
    world: Path,
    out: Path,
    run_id: str = "powerloss",
    preload: Path | None = None,
    drop_sites: frozenset[str] = frozenset(),
) -> PowerLossLog:
    """Run the agent to completion in a fresh interpreter, recording what each fsync made
    durable. ``preload``: the hook library (for SQLite). ``drop_sites``: file-store fsync call
    sites to remove (the mutation check)."""
    args = {
        "agent": agent,
        "task": task,
        "url": url,
        "root": str(root),
        "world": str(world),
        "out": str(out),
        "run_id": run_id,
        "preload": str(preload) if preload else None,
        "drop_sites": sorted(drop_sites),
    }
    env = dict(os.environ)
    kit_parent = str(Path(__file__).resolve().parents[1])  # tests/: the child imports faults_kit from there
    env["PYTHONPATH"] = os.pathsep.join(p for p in (kit_parent, env.get("PYTHONPATH")) if p)
    if preload:
        env["LD_PRELOAD"] = str(preload)
    completed = subprocess.run(
        [sys.executable, "-m", "faults_kit", "powerloss-child", json.dumps(args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"power-loss child failed: {completed.stderr[-2000:]}")
    return PowerLossLog(out)
