"""The simulator's schedules on a store with encryption at rest on (``--backend encrypted``): the
same faults (lost replies, torn writes, delays, kills, frozen processes) over sealed records and
a sealed ledger, and the same invariants hold."""

from __future__ import annotations

from sim_seeds import KNOWN_HOLES

from unbroken.testing.simulate import simulate
from unbroken.testing.simulate.stores import store_factory


def test_the_invariants_hold_on_an_encrypted_store() -> None:
    with store_factory("encrypted") as factory:
        report = simulate(range(60), factory, shrink_failures=False)
    failed = {outcome.seed for outcome in report.failures} - set(KNOWN_HOLES)
    assert report.seeds == 60 and not failed, [str(v) for o in report.failures for v in o.violations]
