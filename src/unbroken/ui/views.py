"""What the inspector's pages show, as plain JSON-ready data, built only from the store and ``ops``.

Every page is a bounded read of the store; nothing reads a whole run or every run:

* **The runs list.** One page is one ``store.runs_page(cursor, limit)`` (newest first, keyset
  cursor: ``updated_at`` and ``run_id`` of the last row shown), plus a lease read per row shown.
  A filtered page (phase, text, needs attention) scans summaries newest first, ``SCAN_ROWS`` at
  most per request: it shows what matched among them and hands back a cursor to scan on, so a
  page may hold fewer than ``limit`` rows (even none) while more may match further on. The store's
  run count is not shown (counting is a read of every run). Queued runs (submitted, not started:
  they have no summary yet) are listed on the first page, the oldest ``limit`` of them (``ops.queued_page``).
* **One run.** ``RunDetails`` reads the run's tail (``paging.read_tail``: the newest snapshot and
  the saves after it), its last ``TIMELINE_PAGE`` save points (``paging.timeline_page``) and its
  last ``MESSAGES_PAGE`` messages (``paging.messages_page``), once per new save point (keyed by
  the store's head ``seq``, a few runs cached). Older save points and messages are read from the
  store a page at a time on demand. A run those readers cannot judge alone (damaged, or needing a
  migration) is read whole with ``store.decode(recover=True)`` and paged in memory, as before.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any

from .. import lost, ops, paging
from ..codec import Decoded
from ..errors import RunNotFound
from ..leases import owner_is_dead
from ..message_parts import full_text, render_message
from ..state import RunState, RunSummary, SaveInfo
from ..stores.base import Store

ATTENTION_PHASES = frozenset({"paused", "awaiting_approval", "failed", "damaged"})
"""Phases in which a run waits for a person or has ended badly: the "needs attention" filter."""
MESSAGES_PAGE = 100
TIMELINE_PAGE = 200
LEDGER_PAGE = ops.LEDGER_PAGE
MAX_PAGE = 500
SCAN_ROWS = 10_000
"""Run summaries a filtered list page looks at, at most, per request (one ``summaries_page``)."""


def save_kind(label: str) -> str:
    """The timeline group of a save label (the page colours and filters by it)."""
    if label == "model_turn":
        return "model"
    if label in ("tool_result", "tools_done"):
        return "tool"
    if label in ("resumed", "attempt", "repaired"):
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


def _phase(run: Listed) -> str:
    return run.phase  # a queued run's: queued, or data_lost when parked as lost


def encode_cursor(key: tuple[float, str]) -> str:
    return f"{key[0]!r}:{key[1]}"  # run ids never hold ':'


def decode_cursor(cursor: str) -> tuple[float, str]:
    at, _, run_id = cursor.partition(":")
    return (float(at), run_id)


class RunIndex:
    """The store's runs, newest first, a page per ``store.runs_page`` (keyset cursor)."""

    def __init__(self, store: Store, lock: threading.RLock) -> None:
        self.store, self.lock = store, lock

    def refresh(self) -> None:
        """Nothing is cached: every page is read from the store (kept for the actions' callers)."""

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
        needle = text.lower() if text else None

        def wanted(run: Listed) -> bool:
            if phase and _phase(run) != phase:
                return False
            if attention and _phase(run) not in ATTENTION_PHASES:
                return False
            return not needle or needle in run.task.lower() or needle in run.run_id.lower()

        queued: list[Listed] = []
        if after is None and "claim" in self.store.capabilities:
            with self.lock:  # not started: no summary row yet; the oldest page of them (ops.queued_page)
                queued.extend(run for run in ops.queued_page(self.store, limit=limit).runs if wanted(run))
        cursor = decode_cursor(after) if after else None
        filtered = bool(phase or needle or attention)
        picked: list[Listed] = []
        scanned, next_cursor = 0, None
        while phase != "queued":
            ask = limit - len(picked) + 1 if not filtered else SCAN_ROWS - scanned
            with self.lock:
                rows = self.store.runs_page(cursor, ask)
            scanned += len(rows)
            beyond = False
            for row in rows:
                if len(picked) == limit:
                    beyond = True  # a row past the page: there is a next one
                    break
                cursor = (row.updated_at, row.run_id)
                if wanted(row):
                    picked.append(row)
            if beyond or (len(rows) == ask and (len(picked) == limit or scanned >= SCAN_ROWS)):
                next_cursor = cursor  # a filtered scan that stopped at SCAN_ROWS goes on from here
                break
            if len(rows) < ask:
                break  # the end of the list
        picked = queued + picked
        return {
            "runs": [self._with_lease(run) for run in picked],
            "next": encode_cursor(next_cursor) if next_cursor is not None else None,
            "scanned": scanned,
        }

    def _with_lease(self, run: Listed) -> dict[str, Any]:
        queued = isinstance(run, ops.QueuedRun)
        with self.lock:
            lease = None if queued else self.store.lease_of(run.run_id)
        phase = lost.LOST_PHASE if lease is not None and lease.owner == lost.LOST_OWNER else _phase(run)
        return {
            "run_id": run.run_id,
            "task": run.task,
            "phase": phase,
            "turns": 0 if isinstance(run, ops.QueuedRun) else run.turns,
            "tokens_used": 0 if isinstance(run, ops.QueuedRun) else run.tokens_used,
            "updated_at": run.submitted_at if isinstance(run, ops.QueuedRun) else run.updated_at,
            "needs_attention": phase in ATTENTION_PHASES,
            "lease": _lease(lease, self.store),
        }


def _lease(lease: Any, store: Store) -> dict[str, Any] | None:
    if lease is None:
        return None
    return {
        "owner": lease.owner,
        "fence": lease.fence,
        "expires_at": lease.expires_at,  # on the store's lease clock, not always a Unix time
        "expires_in": lease.expires_at - store.lease_now(),
        "holder_dead": owner_is_dead(lease.owner),
    }


# --------------------------------------------------------------------------- one run


class Timeline:
    """Save points of a run as the page shows them: ``saves`` (oldest first), ``starts[i]`` the
    index of the first message ``saves[i]`` wrote, ``tokens_before`` the tokens used before the
    first of them, and the settlement notes by seq."""

    def __init__(
        self, saves: list[SaveInfo], starts: list[int], notes: dict[int, list[str]], tokens_before: int = 0
    ) -> None:
        self.saves, self.starts, self.notes, self.tokens_before = saves, starts, notes, tokens_before
        self.seqs = [info.seq for info in saves]

    def __len__(self) -> int:
        return len(self.saves)

    def entry(self, i: int) -> dict[str, Any]:
        info = self.saves[i]
        before = self.saves[i - 1].tokens_used if i > 0 else self.tokens_before
        return {
            "seq": info.seq,
            "label": info.label,
            "kind": save_kind(info.label),
            "phase": info.phase,
            "turns": info.turns,
            "tokens": info.tokens_used,
            "tokens_added": max(0, info.tokens_used - before),
            "messages": [self.starts[i], self.starts[i] + info.messages_added],
            "at": info.at,
            "snapshot": info.snapshot,
            "notes": self.notes.get(info.seq, []),
        }

    def rows(self, start: int, end: int) -> list[dict[str, Any]]:
        return [self.entry(i) for i in range(max(0, start), min(len(self.saves), end))]

    def writer_of(self, message_index: int) -> int | None:
        """Position of the save point that wrote message ``message_index`` (None: not in these)."""
        at = bisect.bisect_right(self.starts, message_index) - 1
        while at >= 0 and self.saves[at].messages_added == 0:
            at -= 1  # several saves may start at the same index: the one that added messages
        if at < 0 or message_index >= self.starts[at] + self.saves[at].messages_added:
            return None
        return at


@dataclass
class Detail:
    """One run as its page shows it first, for one head ``seq``."""

    seq: int
    view: ops.RunView
    timeline: Timeline
    """The last ``TIMELINE_PAGE`` save points (every one when ``whole`` is set)."""
    timeline_count: int
    messages: list[dict[str, Any]] = field(default_factory=list)
    """The last ``MESSAGES_PAGE`` messages, rendered, with the save that wrote each."""
    whole: Decoded | None = None
    """Set when the run was read whole (damaged, or needing a migration): pages come from it."""


class RunDetails:
    """Runs as their pages show them, cached per (run, head seq); a new save point invalidates."""

    def __init__(self, store: Store, lock: threading.RLock, *, keep: int = 4) -> None:
        self.store, self.lock, self.keep = store, lock, keep
        self._cache: OrderedDict[str, Detail] = OrderedDict()

    def head_seq(self, run_id: str) -> int:
        with self.lock:
            head = self.store.head_of(run_id)
        return head.seq if head is not None else 0

    def get(self, run_id: str) -> Detail:
        with self.lock:  # one reader at a time: the store's calls and this cache
            seq = self.head_seq(run_id)
            cached = self._cache.get(run_id)
            if cached is not None and cached.seq == seq and seq > 0:
                self._cache.move_to_end(run_id)
                return cached
            try:
                detail = self._paged(run_id, seq)
            except paging.Unusual:
                detail = self._whole(run_id, seq)
            self._cache[run_id] = detail
            while len(self._cache) > self.keep:
                self._cache.popitem(last=False)
            return detail

    def _paged(self, run_id: str, seq: int) -> Detail:
        """The run's tail, last save points and last messages: bounded reads."""
        try:
            decoded = paging.read_tail(self.store, run_id, recover=True)
        except RunNotFound:
            view = ops.inspect_run(self.store, run_id, decoded=None, ledger=LEDGER_PAGE)
            return Detail(seq, view, Timeline([], [], {}), 0)
        if decoded.problem is not None:
            raise paging.Unusual(decoded.problem)  # damaged: read whole, shown as before
        view = ops.inspect_run(self.store, run_id, decoded=decoded, ledger=LEDGER_PAGE)
        assert view.state is not None
        head = decoded.last_seq
        page = paging.timeline_page(self.store, run_id, head - TIMELINE_PAGE, head)
        if page.problem is not None:
            raise paging.Unusual(page.problem)
        timeline = _timeline_of(self.store, run_id, page, drop_first=len(page.saves) > TIMELINE_PAGE)
        first = timeline.saves[0].seq if timeline.saves else head
        count = head - first + 1 if first <= 1 else head - paging.first_seq(self.store, run_id, head) + 1
        total = len(view.state.messages)
        shown = paging.messages_page(self.store, run_id, total - MESSAGES_PAGE, total)
        return Detail(seq, view, timeline, count, _rendered(view.state.provider, shown))

    def _whole(self, run_id: str, seq: int) -> Detail:
        """The run read whole, as before paging (damage, migration): paged in memory."""
        try:
            decoded: Decoded | None = self.store.decode(run_id, recover=True)
        except RunNotFound:
            decoded = None  # maybe queued: inspect_run says
        view = ops.inspect_run(self.store, run_id, decoded=decoded, ledger=LEDGER_PAGE)
        if decoded is None or view.state is None:
            return Detail(seq, view, Timeline([], [], {}), 0)
        saves = decoded.timeline
        notes = ops.settlements(self.store, run_id, decoded=decoded)
        timeline = Timeline(saves, [record["msg_start"] for record in decoded.records], notes)
        total = len(view.state.messages)
        detail = Detail(seq, view, timeline, len(saves), whole=decoded)
        detail.messages = _window(view.state, total - MESSAGES_PAGE, total, timeline)
        return detail


def _timeline_of(store: Store, run_id: str, page: paging.TimelinePage, *, drop_first: bool) -> Timeline:
    """``page`` as the page shows it; ``drop_first``: its first save was read only for the tokens
    used before the next one."""
    notes = ops.settlements(store, run_id, records=page.records)
    saves, starts, before = page.saves, page.starts, 0
    if drop_first and saves:
        saves, starts, before = saves[1:], starts[1:], saves[0].tokens_used
    return Timeline(saves, starts, notes, before)


def _rendered(provider: str, page: paging.MessagesPage) -> list[dict[str, Any]]:
    """A page of messages as the conversation shows them: parts, the save that wrote each, and
    the tokens its model turn used."""
    rendered = []
    for offset, message in enumerate(page.messages):
        item = render_message(provider, page.start + offset, message)
        writer = page.writers[offset]
        item["seq"] = writer.seq
        if save_kind(writer.label) == "model" and item["role"] == "assistant":
            item["tokens"] = page.tokens_added[offset]
        rendered.append(item)
    return rendered


def _window(state: RunState, start: int, end: int, timeline: Timeline) -> list[dict[str, Any]]:
    """Messages ``start..end`` of a run held whole, with their writers from ``timeline``."""
    start, end = max(0, start), min(len(state.messages), end)
    rendered = []
    for index in range(start, max(start, end)):
        message = render_message(state.provider, index, state.messages[index])
        at = timeline.writer_of(index)
        if at is not None:
            entry = timeline.entry(at)
            message["seq"] = entry["seq"]
            if entry["kind"] == "model" and message["role"] == "assistant":
                message["tokens"] = entry["tokens_added"]
        rendered.append(message)
    return rendered


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
    return {
        "run_id": run_id,
        "seq": detail.seq,
        "queued": None,
        "task": state.task,
        "provider": state.provider,
        "phase": lost.LOST_PHASE if view.lost else state.phase,
        "lost": lost.refusal(run_id) if view.lost else None,
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
        "lease": _lease(view.lease, details.store),
        "message_count": len(state.messages),
        "messages": detail.messages,
        "timeline_count": detail.timeline_count,
        "timeline": timeline.rows(len(timeline) - TIMELINE_PAGE, len(timeline)),
        "crashes": state.resumes,  # as the run counts its resumes (each one's record says what it found)
        "ledger": [entry.to_json() for entry in view.ledger],
        "ledger_earlier": view.ledger_earlier,
        "unsettled": _unsettled(state, view),
        "approvals": _approvals(run_id, state),
    }


def messages_before(details: RunDetails, run_id: str, before: int, limit: int | None) -> dict[str, Any]:
    """The messages before index ``before``, read from the store (a page of records)."""
    detail = details.get(run_id)
    state = detail.view.state
    if state is None:
        return {"messages": [], "start": 0}
    start = max(0, before - _clamp(limit, MESSAGES_PAGE))
    if detail.whole is not None:
        return {"messages": _window(state, start, before, detail.timeline), "start": start}
    with details.lock:
        try:
            page = paging.messages_page(details.store, run_id, start, before)
        except paging.Unusual:
            details._cache.pop(run_id, None)  # read whole from now on (damage found): the next call says
            return messages_before(_whole_details(details, run_id), run_id, before, limit)
    return {"messages": _rendered(state.provider, page), "start": start}


def part_text(details: RunDetails, run_id: str, index: int, part: int) -> str:
    """All of part ``part`` of message ``index`` (what the page's "show all" asks for)."""
    detail = details.get(run_id)
    state = detail.view.state
    if state is None or not 0 <= index < len(state.messages):
        raise ValueError(f"run {run_id!r} has no message {index}")
    message = state.messages[index]
    if message is None or detail.whole is None:
        with details.lock:
            message = paging.messages_page(details.store, run_id, index, index + 1).messages[0]
    parts = render_message(state.provider, index, message, cap=None)["parts"]
    if not 0 <= part < len(parts):
        raise ValueError(f"message {index} of run {run_id!r} has no part {part}")
    return full_text(parts[part])


def timeline_before(details: RunDetails, run_id: str, before_seq: int, limit: int | None) -> dict[str, Any]:
    """The save points before ``before_seq``, read from the store (a page of records)."""
    detail = details.get(run_id)
    size = _clamp(limit, TIMELINE_PAGE)
    if detail.whole is not None or detail.view.state is None:
        timeline = detail.timeline
        end = bisect.bisect_left(timeline.seqs, before_seq)
        return {"timeline": timeline.rows(end - size, end)}
    with details.lock:
        page = paging.timeline_page(details.store, run_id, before_seq - size - 1, before_seq - 1)
        if page.problem is not None:
            details._cache.pop(run_id, None)
            return timeline_before(_whole_details(details, run_id), run_id, before_seq, limit)
        timeline = _timeline_of(details.store, run_id, page, drop_first=len(page.saves) > size)
    return {"timeline": timeline.rows(0, len(timeline))}


def ledger_before(details: RunDetails, run_id: str, at: float, key: str, limit: int | None) -> dict[str, Any]:
    """The ledger entries just older than (``at``, ``key``) (the oldest entry shown), oldest
    first, read from the store (``store.ledger_page``); ``earlier``: older ones exist still."""
    size = _clamp(limit, LEDGER_PAGE)
    with details.lock:
        page = details.store.ledger_page(run_id, before=(at, key), limit=size + 1)
    return {"ledger": [entry.to_json() for entry in page[:size][::-1]], "earlier": len(page) > size}


def _whole_details(details: RunDetails, run_id: str) -> RunDetails:
    """``details`` with ``run_id`` read whole (a page found damage the tail did not show)."""
    with details.lock:
        details._cache[run_id] = details._whole(run_id, details.head_seq(run_id))
    return details


def _unsettled(state: RunState, view: ops.RunView) -> list[dict[str, Any]]:
    """Calls left without a result that a person may settle (``ops.resolve_call``)."""
    if state.phase != "paused":
        return []
    ledger = view.call_entries
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
