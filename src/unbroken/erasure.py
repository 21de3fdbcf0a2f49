"""Erasing a run for good: ``erase(store, run_id)``.

What goes: the run's save records and snapshots, its effect ledger, its lease and its queue
entry; every copy ``recover`` kept aside (``RUN.damaged-N``: the same data); with
``with_forks`` also every run forked from it (``RUN.fork-N`` or any id whose first save says
"forked from RUN") and every rewind branch (``RUN.branch-N``), and theirs in turn. Then the
store is asked to make the deleted bytes unrecoverable where it can (``Store.scrub_deleted``: SQLite
zeroes deleted content and truncates its WAL). A forked run that is not erased keeps its own
copy of the history up to the fork: the report lists those left, so nothing is assumed gone.

With encryption at rest (``stores.encrypted``) removing a run destroys its data key first
(crypto-shredding): every copy of its sealed bytes the store cannot reach (a backup, a replica,
an old S3 object version) can no longer be read, whatever happens to the rest of the erase.

Cost: finding forks reads every run's first save (a page at a time); the rest is one delete
per run. Refused (``LeaseHeld``) while a live process runs one of them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from . import lost
from .errors import RunNotFound, UnbrokenError
from .leases import acquire, make_owner
from .state import check_run_id
from .stores import Store


@dataclass(frozen=True)
class Erasure:
    """What ``erase`` removed."""

    run_id: str
    removed: list[str]
    """Run ids removed, the run first (then its damaged copies, forks and branches)."""
    ledger_entries: int
    """Effect-ledger entries removed with them."""
    scrubbed: str
    """What the store did to the deleted bytes (empty: deleted only, see docs/security.md)."""
    forks_left: list[str] = field(default_factory=list)
    """Runs forked from an erased one and not erased (no ``with_forks``): they hold their own
    copy of the history up to their fork point."""


def erase(store: Store, run_id: str, *, with_forks: bool = False) -> Erasure:
    """Remove ``run_id`` and what holds its data (see the module docstring). Durable when it
    returns; safe to repeat (a second call finds nothing and raises ``RunNotFound``)."""
    check_run_id(run_id)
    every = list(_all_run_ids(store))
    targets = [run_id, *_damaged_copies(every, run_id)]
    forks = _descendants(store, every, targets)
    if with_forks:
        targets += [fork for fork in forks if fork not in targets]
        targets += [copy for fork in forks for copy in _damaged_copies(every, fork) if copy not in targets]
    present = [target for target in targets if _present(store, target)]
    if not present:
        raise RunNotFound(f"no run {run_id!r} in {store.url}: nothing to erase")
    for target in present:  # first hold them all: a live process running one refuses the whole erase
        if lost.is_parked(store.head_of(target)):  # parked as lost: this operator act displaces the park
            store.acquire_lease(target, make_owner(), 60.0, takeover_from=lost.LOST_OWNER)
        elif store.exists(target):
            acquire(store, target, make_owner(), 60.0)
    entries = 0
    for target in present:
        entries += store.ledger_stored(target)  # (as stored: a damaged or shredded entry counts too)
        store.delete_run(target)  # also drops the lease just taken and the queue entry
    scrubbed = store.scrub_deleted()
    left = [] if with_forks else [fork for fork in forks if fork not in present]
    return Erasure(run_id, present, entries, scrubbed, left)


def _present(store: Store, run_id: str) -> bool:
    if store.exists(run_id):
        return True
    return "claim" in store.capabilities and store.queued(run_id) is not None


def _damaged_copies(every: list[str], run_id: str) -> list[str]:
    pattern = re.compile(re.escape(run_id) + r"\.damaged-\d+")
    return [run for run in every if pattern.fullmatch(run)]


def _descendants(store: Store, every: list[str], roots: list[str]) -> list[str]:
    """Runs forked (or kept as a rewind branch) from any of ``roots``, and theirs, in order found."""
    parents = {run: _parent(store, run) for run in every}
    found: list[str] = []
    frontier = list(roots)
    while frontier:
        parent = frontier.pop()
        for run, its_parent in parents.items():
            if its_parent == parent and run not in found and run not in roots:
                found.append(run)
                frontier.append(run)
    return found


_FORKED = re.compile(r"forked from (\S+) at save \d+")


def _parent(store: Store, run_id: str) -> str | None:
    """The run this one was forked from (its first save's label says so), else None."""
    try:
        first = store.records_in(run_id, 0, 1)
    except UnbrokenError:  # unreadable (an encrypted run whose key is gone: an erase cut short): no parent known
        return None
    if not first:
        return None
    body = first[0].body
    try:
        label = json.loads(body).get("label", "")
    except (ValueError, AttributeError):
        return None
    match = _FORKED.fullmatch(label) if isinstance(label, str) else None
    return match.group(1) if match else None


def _all_run_ids(store: Store, page: int = 500) -> Iterator[str]:
    """Every saved run's id, a page of summaries at a time (keyset: memory holds one page)."""
    after: tuple[float, str] | None = None
    while True:
        rows = store.runs_page(after, page)
        for row in rows:
            yield row.run_id
        if len(rows) < page:
            return
        after = (rows[-1].updated_at, rows[-1].run_id)
