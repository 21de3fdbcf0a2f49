"""Runs whose saved data the store lost are parked, never run again by a worker on its own.

A worker that finds a run's data gone under it (``StoreDataLost``: a server restarted without
its data, keys evicted, a restore from an older backup; or ``RunNotFound`` for a run it had seen
saved) parks the run: its lease goes to ``LOST_OWNER`` for ``PARK_SECONDS`` (a century), on
the store's own compare-and-set, with a new fence. So no worker claims it again (each would
re-report it forever, and a worker that never saw it saved would start it over from its task,
repeating side effects the lost ledger recorded), ``Agent.run``/``resume`` refuse it
(``LeaseHeld`` naming what to do), the writer it was taken from is fenced off, and ``unbroken
runs``, ``show`` and the inspector show it with the phase ``data_lost``.

An operator then decides: ``unbroken erase RUN`` removes it (its queue entry too), or
``unbroken recover RUN`` releases it (``release``) knowing what that means: workers take it
again, from the save point the store still has or, with none left, from its task.

Only a run still queued for workers is parked: a run deleted under its holder (``erase``) has
no queue entry left to re-claim, and parking it would bring back a head for a deleted run.
"""

from __future__ import annotations

from .errors import ConfigError
from .stores.backend import RunHead
from .stores.base import Store

LOST_OWNER = "unbroken:data-lost"
"""The lease holder of a parked run. Not a process name: ``owners`` never judges it alive or
dead, so it is never taken over, only displaced by an operator's ``recover`` or ``erase``."""
PARK_SECONDS = 100 * 365 * 86_400.0
"""How long a park holds the run's lease: for good, within what every store's clock can hold."""
LOST_PHASE = "data_lost"
"""The phase ``runs``, ``show`` and the inspector give a parked run."""


def is_parked(head: RunHead | None) -> bool:
    """Whether this head is a parked run's."""
    return head is not None and head.owner == LOST_OWNER


def park(store: Store, run_id: str) -> bool:
    """Park the run as lost (see the module docstring) if it is still queued for workers and
    not parked yet. Returns whether it parked it now. Durable when it returns; safe to call
    twice (and from several workers at once: the head's compare-and-set decides)."""
    return store.park(run_id, LOST_OWNER, PARK_SECONDS)


def release(store: Store, run_id: str) -> RunHead:
    """An operator's act: lift the park, so workers may take the run again (from the save
    point the store still has, or from its task when none is left). ``ConfigError`` if the run
    is not parked. Returns the head as it is now (its ``seq``: the save point kept)."""
    free = store.unpark(run_id, LOST_OWNER)
    if free is None:
        raise ConfigError(f"run {run_id!r} is not parked as lost; nothing was changed")
    return free


def refusal(run_id: str) -> str:
    """What a caller trying to run or take a parked run is told."""
    return (
        f"run {run_id!r} is parked as lost: the store lost its saved data while a worker ran it, so no "
        f"worker or resume takes it on its own. `unbroken erase {run_id}` removes it; `unbroken recover "
        f"{run_id}` releases it to run again from what the store still has (its task, if nothing), which "
        "may repeat side effects already done"
    )
