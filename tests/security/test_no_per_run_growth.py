"""A long-lived process running many short runs keeps nothing per run: after a warm-up, the
memory Python holds stays flat. The ended owner names (owners._ended, bounded at 4,096 names and
tested there: tests/faults/test_zombie_guard.py) are left out of the count; everything else the
library allocates is in it."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from unbroken import Agent, ScriptedModel, open_store

FINAL = {"content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn", "usage": {}}


def held_after(runs: int, *, warm_up: int, distinct_ids: int) -> tuple[int, str]:
    """Bytes still allocated (outside leases.py) after ``runs`` short runs, each deleted after it
    ends, measured from after ``warm_up`` runs; run ids cycle over ``distinct_ids`` names."""
    with open_store("memory://") as store:

        def one(n: int) -> None:
            run_id = f"short-{n % distinct_ids}"
            Agent(ScriptedModel([FINAL]), store=store).run("t", run_id=run_id)
            store.delete_run(run_id)

        for n in range(warm_up):
            one(n)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            for n in range(warm_up, warm_up + runs):
                one(n)
            gc.collect()
            after = tracemalloc.take_snapshot()
        finally:
            tracemalloc.stop()
    # (owners.py's strings are the ended owner names owners._ended keeps, up to 4,096; pathlib's
    # one block is the interpreter's table of interned strings when it is resized, not a per-run object)
    outside = [tracemalloc.Filter(False, "*/unbroken/owners.py"), tracemalloc.Filter(False, "*/pathlib.py")]
    grown = after.filter_traces(outside).compare_to(before.filter_traces(outside), "filename")
    return sum(stat.size_diff for stat in grown), "\n".join(str(stat) for stat in grown[:5])


def test_a_thousand_short_runs_leave_nothing_behind() -> None:
    grown, where = held_after(1_000, warm_up=200, distinct_ids=100)
    assert grown < 48 * 1024, f"{grown:,} bytes held after 1,000 runs ({grown / 1_000:.0f} per run):\n{where}"


@pytest.mark.slow
@pytest.mark.timeout(1800)  # 100,000 runs under tracemalloc: ~300 s on a loaded two-core machine
def test_a_hundred_thousand_short_runs_with_distinct_ids_leave_nothing_behind() -> None:
    # distinct run ids: the run-id check's cache fills to its bound (4,096 names) in the warm-up
    grown, where = held_after(100_000, warm_up=5_000, distinct_ids=10**9)
    assert grown < 256 * 1024, f"{grown:,} bytes held after 100,000 runs ({grown / 100_000:.1f} per run):\n{where}"
