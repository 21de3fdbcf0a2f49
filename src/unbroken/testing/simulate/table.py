"""The mutation table: each switched-off defence and each broken backend, and the first seed
whose schedule shows the hole (seeds that fail on the code as it is are skipped: they show a
hole of their own, not the one switched off)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from ...stores.base import Store
from ...stores.memory import InMemoryStore
from .broken import BROKEN
from .mutations import MUTATIONS, store_of
from .runner import Outcome, StoreFactory, run_seed


@dataclass(frozen=True)
class Row:
    """One switched-off defence: the first seed that found it (None: not within the seeds tried)."""

    name: str
    found: Outcome | None
    tried: int


def first_failure(
    seeds: Iterable[int],
    store: StoreFactory = InMemoryStore,
    *,
    switch: Callable[[], AbstractContextManager[None]] = nullcontext,
    skip: frozenset[int] = frozenset(),
    want: str | None = None,
) -> tuple[Outcome | None, int]:
    """The first seed (not in ``skip``) whose schedule breaks an invariant (``want``, when given),
    and how many were tried."""
    tried = 0
    with switch():
        for seed in seeds:
            if seed in skip:
                continue
            tried += 1
            outcome = run_seed(seed, store)
            if outcome.failed and (want is None or any(v.invariant == want for v in outcome.violations)):
                return outcome, tried
    return None, tried


def mutation_table(within: int, *, skip: frozenset[int] = frozenset()) -> list[Row]:
    """Every entry of ``MUTATIONS`` and ``BROKEN``, tried on seeds ``0..within-1``."""
    rows = []
    for name, switch in MUTATIONS.items():
        found, tried = first_failure(range(within), store_of(name), switch=switch, skip=skip)
        rows.append(Row(name, found, tried))
    for name, wrap in BROKEN.items():

        def broken(wrap: Callable[[Store], Store] = wrap) -> Store:
            return wrap(InMemoryStore())

        found, tried = first_failure(range(within), broken, skip=skip)
        rows.append(Row(f"backend:{name}", found, tried))
    return rows
