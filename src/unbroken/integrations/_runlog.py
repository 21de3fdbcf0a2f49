"""The one place the integrations touch a ``Store``: an append-only log of JSON items per key.

A log is an unbroken run: its items are the run's ``messages`` (each written exactly once, so
an append costs the size of what it adds, not of the log) and a small JSON ``head`` dict rides
in ``business_state``. Appends are atomic and conditional on the position this process last
saw, so two writers cannot interleave; a reload picks up another process's appends. Only
``load``, ``append``, ``rewrite``, ``delete_run``, ``list_runs``, ``read_head`` and (through
``missing.check_never_saved``) ``ledger_list`` of the store are used, so re-pointing the
integrations at a new store seam means changing this file alone.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from .. import clock
from ..codec import Encoder, encode_full
from ..errors import ConcurrentSave, RunNotFound
from ..missing import check_never_saved
from ..state import JSONValue, RunState, check_run_id
from ..stores.base import Store

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")


def log_id(prefix: str, name: str) -> str:
    """A run id for a user's name (a session id, a thread id): the name itself when it is a
    safe run id, else a readable prefix plus a hash of the whole name."""
    candidate = f"{prefix}{name}"
    if len(candidate) <= 200 and name and all(ch in _SAFE for ch in name) and candidate[0] not in ".-":
        return check_run_id(candidate)
    digest = hashlib.sha256(name.encode()).hexdigest()[:32]
    readable = "".join(ch if ch in _SAFE else "_" for ch in name)[:80]
    return check_run_id(f"{prefix}{readable}.{digest}")


class RunLog:
    """An append-only list of JSON items, plus a small JSON head, stored as one unbroken run.

    Safe to share between threads of one process; one instance per log per process (two
    instances in one process would each see the other's appends only after ``refresh``)."""

    def __init__(self, store: Store, run_id: str, *, kind: str) -> None:
        self.store = store
        self.run_id = check_run_id(run_id)
        self.kind = kind
        self._lock = threading.RLock()
        self._state: RunState | None = None
        self._encoder = Encoder(messages_are_json=False)
        self.generation = 0
        """Bumped whenever the items are re-read or replaced (not on appends): an index built
        over ``items()`` must be rebuilt when it changes."""

    # ------------------------------------------------------------------ reading

    def _loaded(self) -> RunState:
        if self._state is None:
            self.refresh()
        assert self._state is not None
        return self._state

    def refresh(self) -> None:
        """Re-read the log from the store (after another process wrote to it). A log with no
        saves is empty, unless its effect ledger says it had some: then the store lost them,
        and ``StoreDataLost`` is raised rather than starting the thread over
        (``missing.check_never_saved``)."""
        with self._lock:
            self.generation += 1
            try:
                state = self.store.load(self.run_id)
            except RunNotFound:
                check_never_saved(self.store, self.run_id)
                state = RunState(run_id=self.run_id, task=self.kind, provider=self.kind)
                self._encoder = Encoder(messages_are_json=False)
            else:
                self._encoder = Encoder(messages_are_json=False)
                self._encoder.prime(state)
            self._state = state

    def refresh_if_changed(self) -> None:
        """Re-read the log if another process appended to it since this one last did (one
        small read of the run's head when nothing changed)."""
        with self._lock:
            if self._state is None:
                return
            head = self.store.head_of(self.run_id)
            if (head.seq if head is not None else 0) != self._state.save_seq:
                self.refresh()

    def items(self) -> list[JSONValue]:
        """Every item, oldest first (the list is the log's own: do not modify it)."""
        with self._lock:
            return self._loaded().messages

    def head(self) -> dict[str, JSONValue]:
        """The small JSON dict kept beside the items (the log's own: do not modify it)."""
        with self._lock:
            return self._loaded().business_state

    def exists(self) -> bool:
        with self._lock:
            return self._loaded().save_seq > 0

    def save_seq(self) -> int:
        """The revision this process last saw (0: never saved): every save bumps it."""
        with self._lock:
            return self._loaded().save_seq

    # ------------------------------------------------------------------ writing

    def append(self, items: Sequence[JSONValue] = (), head: dict[str, JSONValue] | None = None) -> None:
        """Append ``items`` and, if given, replace the head, in one atomic durable save."""
        self.update(lambda state: (list(items), head))

    def update(
        self, change: Callable[[RunState], tuple[list[JSONValue], dict[str, JSONValue] | None]], *, retries: int = 3
    ) -> None:
        """Apply ``change(state) -> (new items, new head or None)`` and save it atomically;
        on a concurrent append by another process, reload and apply it again."""
        with self._lock:
            for attempt in range(retries + 1):
                state = self._loaded()
                new_items, new_head = change(state)
                if not new_items and new_head is None:
                    return
                updated = state.replace(
                    save_seq=state.save_seq + 1,
                    messages=state.messages + new_items,
                    business_state=new_head if new_head is not None else state.business_state,
                    updated_at=clock.wall(),
                )
                encoded = self._encoder.encode(updated, self.kind)
                try:
                    self.store.append(encoded, expect_seq=state.save_seq)
                except ConcurrentSave:
                    if attempt == retries:
                        raise
                    self.refresh()
                    continue
                self._encoder.committed(updated, encoded)
                self._state = updated
                return

    def rewrite(self, items: Sequence[JSONValue], head: dict[str, JSONValue]) -> None:
        """Replace the whole log atomically (rare: removing items)."""
        with self._lock:
            state = self._loaded()
            updated = replace(
                state, save_seq=state.save_seq + 1, messages=list(items), business_state=head, updated_at=clock.wall()
            )
            if state.save_seq == 0:
                self.append(items, head)
                return
            self.store.rewrite(self.run_id, [encode_full(updated, self.kind)], expect_seq=state.save_seq)
            self.generation += 1
            self._encoder = Encoder(messages_are_json=False)
            self._encoder.prime(updated)
            self._state = updated

    def delete(self) -> None:
        """Remove the log (and the effect ledger of its run). Safe to call twice."""
        with self._lock:
            self.store.delete_run(self.run_id)
            self._state = None
            self.generation += 1


def list_logs(store: Store, prefix: str) -> list[str]:
    """The run ids of the logs whose id starts with ``prefix``."""
    return [summary.run_id for summary in store.list_runs() if summary.run_id.startswith(prefix)]
