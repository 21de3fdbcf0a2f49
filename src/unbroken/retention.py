"""Retention: how long finished runs and their side-effect ledger are kept.

``Retention(runs_days=30, ledger_days=365)``: a finished run (completed, failed, max_turns)
whose last save is older than ``runs_days`` loses its history: what users typed, what tools
returned, what the model said. Its effect ledger (which side effects ran, when, with what
result) is an audit record and may be kept longer, ``ledger_days``: the run is then rewritten
as one save holding no content (task, messages, business_state and output emptied; label
``retention: ...``) until its ledger is old enough too, and then removed whole. With
``erase=True`` removal is ``erase`` (the store scrubs the deleted bytes), else a delete.

``apply_retention`` does at most ``limit`` runs a call (``unbroken gc --runs-older-than``, or a
``Worker(retention=...)`` between claims), so a store with a large backlog is worked down a
bounded step at a time; each step is one atomic store call, so a crash between steps leaves
every run either as it was, emptied, or gone, and the next call goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from . import clock, crashpoints
from .codec import encode_full
from .errors import ConfigError, LeaseError
from .leases import acquire, make_owner
from .state import TERMINAL_PHASES, RunSummary
from .stores import Store

DAY = 86_400.0
EMPTIED = "retention: history removed, ledger kept for audit"
RETAINED = "retained"
"""The listed phase of a run whose history retention removed (its ledger kept for audit)."""


@dataclass(frozen=True)
class Retention:
    """How long finished runs are kept (see the module docstring)."""

    runs_days: float
    ledger_days: float | None = None
    """Keep the side-effect ledger this long (None: it goes with the run)."""
    erase: bool = False

    def __post_init__(self) -> None:
        if self.runs_days < 0 or (self.ledger_days is not None and self.ledger_days < 0):
            raise ConfigError("retention days must be zero or more")


@dataclass
class RetentionReport:
    removed: list[str] = field(default_factory=list)
    """Runs removed whole (history and ledger)."""
    emptied: list[str] = field(default_factory=list)
    """Runs whose history was removed, their ledger kept for audit."""
    more: bool = False
    """The call stopped at ``limit``: call again for the rest."""
    scrubbed: str = ""
    """With ``erase``: what the store did to the deleted bytes (``Store.scrub_deleted``)."""


def apply_retention(store: Store, policy: Retention, *, limit: int = 100, now: float | None = None) -> RetentionReport:
    """Apply ``policy`` to at most ``limit`` finished runs past it. Durable when it returns;
    safe to repeat and to interrupt (each run is changed by one atomic store call). A run a
    live process holds is left for the next call."""
    if limit < 1:
        raise ConfigError(f"limit must be at least 1, not {limit}")
    now = clock.wall() if now is None else now
    runs_cutoff = now - policy.runs_days * DAY
    ledger_cutoff = None if policy.ledger_days is None else now - policy.ledger_days * DAY
    report = RetentionReport()
    for summary in _due(store, runs_cutoff, ledger_cutoff, limit + 1):
        if len(report.removed) + len(report.emptied) >= limit:
            report.more = True
            break
        try:
            _apply_one(store, policy, summary, ledger_cutoff, report)
        except LeaseError:
            continue  # a live process holds it (resumed meanwhile): next time
    if policy.erase and (report.removed or report.emptied):
        report.scrubbed = store.scrub_deleted()
    return report


def _apply_one(
    store: Store, policy: Retention, summary: RunSummary, ledger_cutoff: float | None, report: RetentionReport
) -> None:
    run_id = summary.run_id
    ledger = store.ledger_list(run_id)
    ledger_may_go = ledger_cutoff is None or all(entry.updated_at < ledger_cutoff for entry in ledger)
    if ledger_may_go:
        crashpoints.hit("retention.before_remove")
        acquire(store, run_id, make_owner(), 60.0)  # refused while a live process holds it
        store.delete_run(run_id)
        report.removed.append(run_id)
        return
    lease = acquire(store, run_id, make_owner(), 60.0)
    try:
        state = store.load(run_id)
        head = state.save_seq
        state.task = ""
        state.messages = []
        state.business_state = {}
        state.output = None
        state.error = None
        state.pending_calls = []
        state.results = {}
        state.resolutions = {}
        state.attempts = {}
        state.approvals = {}
        state.save_seq = head + 1
        state.updated_at = summary.updated_at
        emptied = encode_full(state, EMPTIED)
        # Listed as "retained" from now on, dated by its newest ledger entry: it comes back to
        # retention when that entry is past ledger_days, and never clogs the runs_days scan.
        newest = max(entry.updated_at for entry in ledger)
        emptied = replace(emptied, summary=replace(emptied.summary, phase=RETAINED, updated_at=newest))
        crashpoints.hit("retention.before_empty")
        store.rewrite(run_id, [emptied], expect_seq=head, fence=lease.fence)
    finally:
        store.release_lease(lease)
    report.emptied.append(run_id)


# Finished for retention: the terminal phases, and the copies ``recover`` kept aside.
_DONE = frozenset(TERMINAL_PHASES) | {"damaged"}


def _due(store: Store, runs_cutoff: float, ledger_cutoff: float | None, keep: int, page: int = 500) -> list[RunSummary]:
    """The ``keep`` oldest runs retention must act on: finished runs last saved before
    ``runs_cutoff``, and emptied ones whose newest ledger entry is before ``ledger_cutoff``.
    Summaries are read a page at a time (newest first, keyset); memory holds ``keep`` of them."""

    def due(row: RunSummary) -> bool:
        if row.phase == RETAINED:
            return ledger_cutoff is not None and row.updated_at < ledger_cutoff
        return row.phase in _DONE and row.updated_at < runs_cutoff

    found: list[RunSummary] = []
    after: tuple[float, str] | None = None
    while True:
        rows = store.runs_page(after, page)
        found += [row for row in rows if due(row)]
        found = sorted(found, key=lambda row: (row.updated_at, row.run_id))[:keep]
        if len(rows) < page:
            return found
        after = (rows[-1].updated_at, rows[-1].run_id)
