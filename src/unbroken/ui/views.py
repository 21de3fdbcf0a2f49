"""What the inspector's pages show, as plain JSON-ready data, built only from the store and ``ops``.

Two costs matter and are bounded here:

* **The runs list.** A store lists runs with one read of its small per-run summaries (no
  messages): ``store.list_runs()``, O(runs). ``RunIndex`` keeps that list sorted newest first and
  serves pages from it with a keyset cursor (``updated_at`` and ``run_id`` of the last row shown):
  a page is a binary search plus ``limit`` rows, so 100,000 runs cost one list read at start and
  then one in the background at most every ``list_ttl`` seconds, never one per page. Filters scan
  the copy in memory. Only the rows on the page get a lease read.
* **One run.** ``RunDetails`` decodes the run once per new save point (keyed by the store's
  head ``seq``, a few runs cached), then pages the conversation and the timeline out of it: a
  10,000-turn run sends its last ``MESSAGES_PAGE`` messages and ``TIMELINE_PAGE`` save points;
  older ones are fetched on demand.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from .. import ops
from ..codec import Decoded
from ..errors import RunNotFound
from ..leases import owner_is_dead
from ..state import RunState, RunSummary, SaveInfo
from ..stores.base import Store
from .conversation import render_messages

ATTENTION_PHASES = frozenset({"paused", "awaiting_approval", "failed", "damaged"})
"""Phases in which a run waits for a person or has ended badly: the "needs attention" filter."""
MESSAGES_PAGE = 100
TIMELINE_PAGE = 200
MAX_PAGE = 500


def save_kind(label: str) -> str:
    """The timeline group of a save label (the page colours and filters by it)."""
    if label == "model_turn":
        return "model"
    if label in ("tool_result", "tools_done"):
        return "tool"
    if label in ("attempt", "repaired"):
        return "reconcile"
    if label == "compacted":
        return "compaction"
    if label.startswith(("forked from", "rewound to", "recovered from", "kept aside")):
        return "fork"
    if label in ("resolved", "approval_requested", "approval_decided", "user_message", "message_queued"):
        return "person"
    if label in ("completed", "failed", "max_turns", "paused", "finish"):
        return "end"
    return "other"


# --------------------------------------------------------------------------- the runs list


Listed = RunSummary | ops.QueuedRun


def _key(run: Listed) -> tuple[float, str]:
    """Newest first, then by run id: the order of the list and of its keyset cursor."""
    at = run.submitted_at if isinstance(run, ops.QueuedRun) else run.updated_at
    return (-at, run.run_id)


def _phase(run: Listed) -> str:
    return "queued" if isinstance(run, ops.QueuedRun) else run.phase


def encode_cursor(key: tuple[float, str]) -> str:
    return f"{-key[0]!r}:{key[1]}"  # run ids never hold ':'


def decode_cursor(cursor: str) -> tuple[float, str]:
    at, _, run_id = cursor.partition(":")
    return (-float(at), run_id)


class RunIndex:
    """The store's run list, cached for ``list_ttl`` seconds, paged with a keyset cursor."""

    def __init__(self, store: Store, lock: threading.RLock, *, list_ttl: float = 2.0) -> None:
        self.store, self.lock, self.list_ttl = store, lock, list_ttl
        self._list: tuple[list[Listed], list[tuple[float, str]]] = ([], [])
        """The runs, sorted, and their sort keys: replaced as one (a reader never mixes two reads)."""
        self._read_at = -1.0
        self._reading = threading.Event()

    def rows(self) -> tuple[list[Listed], list[tuple[float, str]]]:
        """The sorted list; past ``list_ttl`` the copy in hand is served while a thread reads a new one."""
        if self._read_at < 0:
            self._read()
        elif time.monotonic() - self._read_at > self.list_ttl and not self._reading.is_set():
            self._reading.set()
            threading.Thread(target=self._read, name="unbroken-ui-list", daemon=True).start()
        return self._list

    def _read(self) -> None:
        try:
            with self.lock:
                listed = ops.list_all_runs(self.store)
            keyed = sorted((_key(run), run) for run in listed)  # run ids are unique: runs are never compared
            self._list = ([run for _, run in keyed], [key for key, _ in keyed])
            self._read_at = time.monotonic()
        finally:
            self._reading.clear()

    def refresh(self) -> None:
        """Read the list again at the next page (after an action changed a run)."""
        self._read_at = -1.0

    def page(
        self,
        *,
        phase: str | None = None,
        text: str | None = None,
        attention: bool = False,
        after: str | None = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        """One page of runs, newest first, and the cursor of the next page (None at the end)."""
        rows, keys = self.rows()
        start = bisect.bisect_right(keys, decode_cursor(after)) if after else 0
        needle = text.lower() if text else None
        picked: list[int] = []
        more = False
        for at in range(start, len(rows)):
            run = rows[at]
            if phase and _phase(run) != phase:
                continue
            if attention and _phase(run) not in ATTENTION_PHASES:
                continue
            if needle and needle not in run.task.lower() and needle not in run.run_id.lower():
                continue
            if len(picked) == limit:
                more = True
                break
            picked.append(at)
        return {
            "runs": [self._with_lease(rows[at]) for at in picked],
            "next": encode_cursor(keys[picked[-1]]) if more and picked else None,
            "total": len(rows),
        }

    def _with_lease(self, run: Listed) -> dict[str, Any]:
        queued = isinstance(run, ops.QueuedRun)
        with self.lock:
            lease = None if queued else self.store.lease_of(run.run_id)
        return {
            "run_id": run.run_id,
            "task": run.task,
            "phase": _phase(run),
            "turns": 0 if isinstance(run, ops.QueuedRun) else run.turns,
            "tokens_used": 0 if isinstance(run, ops.QueuedRun) else run.tokens_used,
            "updated_at": -_key(run)[0],
            "needs_attention": _phase(run) in ATTENTION_PHASES,
            "lease": _lease(lease),
        }


def _lease(lease: Any) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "owner": lease.owner,
        "fence": lease.fence,
        "expires_at": lease.expires_at,
        "holder_dead": owner_is_dead(lease.owner),
    }


# --------------------------------------------------------------------------- one run


@dataclass
class Detail:
    """One decoded run and what the page needs from it, for one head ``seq``."""

    seq: int
    view: ops.RunView
    timeline: Timeline
    notes: dict[int, list[str]]


class RunDetails:
    """Decoded runs, cached per (run, head seq); a new save point invalidates the entry."""

    def __init__(self, store: Store, lock: threading.RLock, *, keep: int = 4) -> None:
        self.store, self.lock, self.keep = store, lock, keep
        self._cache: OrderedDict[str, Detail] = OrderedDict()

    def head_seq(self, run_id: str) -> int:
        with self.lock:
            head = self.store.read_head(run_id)
        return head.seq if head is not None else 0

    def get(self, run_id: str) -> Detail:
        with self.lock:  # one reader at a time: the store's calls and this cache
            seq = self.head_seq(run_id)
            cached = self._cache.get(run_id)
            if cached is not None and cached.seq == seq and seq > 0:
                self._cache.move_to_end(run_id)
                return cached
            try:
                decoded: Decoded | None = self.store.decode(run_id, recover=True)  # read once, for both
            except RunNotFound:
                decoded = None  # maybe queued: inspect_run says
            view = ops.inspect_run(self.store, run_id, decoded=decoded)
            # Settlement notes start at a resume's save point (labels attempt/repaired, see
            # ops.settlements): a run that never resumed has none, and skips a pass over its records.
            resumed = decoded is not None and any(save_kind(info.label) == "reconcile" for info in view.timeline)
            notes = ops.settlements(self.store, run_id, decoded=decoded) if resumed and decoded else {}
            detail = Detail(seq, view, Timeline(view.timeline, notes), notes)
            self._cache[run_id] = detail
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
            return detail


class Timeline:
    """A run's save points as the page shows them, built per row on demand (a 10,000-turn run
    has 20,000 save points; a page shows 200)."""

    def __init__(self, saves: list[SaveInfo], notes: dict[int, list[str]]) -> None:
        self.saves, self.notes = saves, notes
        self.seqs = [info.seq for info in saves]
        self.starts = list(itertools.accumulate((info.messages_added for info in saves), initial=0))
        """``starts[i]``: index of the first message save ``i`` wrote."""

    def __len__(self) -> int:
        return len(self.saves)

    def entry(self, i: int) -> dict[str, Any]:
        info = self.saves[i]
        before = self.saves[i - 1].tokens_used if i > 0 else 0
        return {
            "seq": info.seq,
            "label": info.label,
            "kind": save_kind(info.label),
            "phase": info.phase,
            "turns": info.turns,
            "tokens": info.tokens_used,
            "tokens_added": max(0, info.tokens_used - before),
            "messages": [self.starts[i], self.starts[i + 1]],
            "at": info.at,
            "snapshot": info.snapshot,
            "notes": self.notes.get(info.seq, []),
        }

    def rows(self, start: int, end: int) -> list[dict[str, Any]]:
        return [self.entry(i) for i in range(max(0, start), min(len(self.saves), end))]

    def writer_of(self, message_index: int) -> int | None:
        """Position of the save point that wrote message ``message_index``."""
        at = min(bisect.bisect_right(self.starts, message_index) - 1, len(self.saves) - 1)
        while 0 <= at < len(self.saves) and self.saves[at].messages_added == 0:
            at -= 1  # several saves may start at the same index: the one that added messages
        return at if 0 <= at < len(self.saves) else None

    def crashes(self) -> int:
        return sum(1 for info in self.saves if save_kind(info.label) == "reconcile")


def _clamp(limit: int | None, default: int) -> int:
    return max(1, min(MAX_PAGE, limit or default))


def run_page(details: RunDetails, run_id: str) -> dict[str, Any]:
    """Everything the run page shows first: the run's fields, the last save points, the last
    messages, the ledger, and what waits for a person (unknown outcomes, approvals)."""
    detail = details.get(run_id)
    view = detail.view
    if view.state is None:
        queued = view.queued
        return {"run_id": run_id, "queued": asdict(queued) if queued else None, "seq": 0}
    state = view.state
    timeline = detail.timeline
    count = len(state.messages)
    return {
        "run_id": run_id,
        "seq": detail.seq,
        "queued": None,
        "task": state.task,
        "provider": state.provider,
        "phase": state.phase,
        "turns": state.turns,
        "tokens_used": state.tokens_used,
        "usage": state.usage,
        "output": state.output,
        "summary": state.summary,
        "summary_upto": state.summary_upto,
        "error": state.error,
        "problem": view.problem,
        "created_at": state.created_at,
        "updated_at": state.updated_at,
        "business_state": state.business_state,
        "business_state_version": state.business_state_version,
        "lease": _lease(view.lease),
        "message_count": count,
        "messages": messages_window(state, count - MESSAGES_PAGE, count, timeline),
        "timeline_count": len(timeline),
        "timeline": timeline.rows(len(timeline) - TIMELINE_PAGE, len(timeline)),
        "crashes": timeline.crashes(),
        "ledger": [entry.to_json() for entry in view.ledger],
        "unsettled": _unsettled(state, view),
        "approvals": _approvals(run_id, state),
    }


def messages_window(state: RunState, start: int, end: int, timeline: Timeline | None = None) -> list[dict[str, Any]]:
    start, end = max(0, start), min(len(state.messages), end)
    rendered = render_messages(state.provider, state.messages, start, max(start, end))
    if timeline is not None:
        # the save point that wrote each message, and the tokens its model turn used
        for message in rendered:
            at = timeline.writer_of(message["index"])
            if at is not None:
                entry = timeline.entry(at)
                message["seq"] = entry["seq"]
                if entry["kind"] == "model" and message["role"] == "assistant":
                    message["tokens"] = entry["tokens_added"]
    return rendered


def messages_before(details: RunDetails, run_id: str, before: int, limit: int | None) -> dict[str, Any]:
    detail = details.get(run_id)
    state = detail.view.state
    if state is None:
        return {"messages": [], "start": 0}
    size = _clamp(limit, MESSAGES_PAGE)
    start = max(0, before - size)
    return {"messages": messages_window(state, start, before, detail.timeline), "start": start}


def timeline_before(details: RunDetails, run_id: str, before_seq: int, limit: int | None) -> dict[str, Any]:
    timeline = details.get(run_id).timeline
    end = bisect.bisect_left(timeline.seqs, before_seq)
    return {"timeline": timeline.rows(end - _clamp(limit, TIMELINE_PAGE), end)}


def _unsettled(state: RunState, view: ops.RunView) -> list[dict[str, Any]]:
    """Calls left without a result that a person may settle (``ops.resolve_call``)."""
    if state.phase != "paused":
        return []
    ledger = {entry.key: entry for entry in view.ledger}
    calls = []
    for call in state.dangling_calls():
        entry = ledger.get(call.idempotency_key)
        calls.append(
            {
                "call_id": call.id,
                "tool": call.name,
                "arguments": call.input,
                "key": call.idempotency_key,
                "ledger_status": entry.status if entry else None,
            }
        )
    return calls


def _approvals(run_id: str, state: RunState) -> list[dict[str, Any]]:
    approvals = state.approvals or {}
    requests = [
        ops.ApprovalRequest.of(run_id, call, approvals[call.idempotency_key])
        for call in state.pending_calls
        if call.idempotency_key in approvals
    ]
    return [asdict(request) for request in requests]
