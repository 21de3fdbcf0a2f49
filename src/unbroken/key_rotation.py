"""Key rotation: re-wrap every run's data key under the key provider's current key.

No record is rewritten: each run's data key stays the same, only its wrapped copy (one small
ledger entry) is replaced, atomically, under the run's fence (so an erase meanwhile is never
undone). A crash at any point leaves each run wrapped under the old key or the new one, and a
provider holding both reads all of them; running the rotation again finishes the job (a run
already under the current key is counted and left alone). Work per call is one page of runs:
``rotate_keys`` returns a cursor for the next page. A run saved between two pages moves ahead
of the cursor and may be missed by this pass: ``unbroken keys rotate`` passes again until a
whole pass re-wraps nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigError
from .stores import Store
from .stores.encrypted import EncryptedStore

PAGE = 100
"""Runs one ``rotate_keys`` call looks at, at most."""


@dataclass(frozen=True)
class RotationCursor:
    """Where the next page starts: the saved runs (newest first), then the queued ones."""

    queued: bool
    after: tuple[float, str] | None


@dataclass(frozen=True)
class KeyRotation:
    """What one page of a rotation did."""

    rewrapped: list[str]
    """Runs whose data key is now wrapped under the current key (it was under another)."""
    current: int
    """Runs already under the current key."""
    plaintext: int
    """Runs with no data key (saved before encryption was turned on): nothing to re-wrap."""
    next: RotationCursor | None
    """The cursor of the next page; None when this page was the last."""
    kid: str
    """The current key's id: what every re-wrapped run is under now."""


def rotate_keys(store: Store, *, cursor: RotationCursor | None = None, limit: int = PAGE) -> KeyRotation:
    """Re-wrap the data keys of up to ``limit`` runs from ``cursor`` (None: the first page)
    under the store's current key. Durable per run when it returns; safe to repeat and to kill
    at any point. Raises ``ConfigError`` for a store opened without keys."""
    if not isinstance(store, EncryptedStore):
        raise ConfigError(
            f"{store.url} was opened without encryption keys: give the new key as the current key and the old "
            "one as an old key (UNBROKEN_ENCRYPTION_KEY and UNBROKEN_ENCRYPTION_OLD_KEYS, or "
            "open_store(url, encryption=LocalKeys(new, old=[old])))"
        )
    at = cursor or RotationCursor(False, None)
    if not at.queued:
        summaries = store.inner.runs_page(at.after, limit)  # the inner store's: no task is opened
        page = [row.run_id for row in summaries]
        ahead = (
            RotationCursor(False, (summaries[-1].updated_at, summaries[-1].run_id))
            if len(summaries) == limit
            else (RotationCursor(True, None) if "claim" in store.capabilities else None)
        )
    else:
        queued = store.inner.unstarted_runs(at.after, limit)
        page = [item.run_id for item in queued]
        ahead = RotationCursor(True, (queued[-1].submitted_at, queued[-1].run_id)) if len(queued) == limit else None
    rewrapped, current, plaintext = [], 0, 0
    for run_id in page:
        done = store.rewrap(run_id)
        if done is None:
            plaintext += 1
        elif done:
            rewrapped.append(run_id)
        else:
            current += 1
    return KeyRotation(rewrapped, current, plaintext, ahead, store.keys.current_kid)


def rotate_all(store: Store, *, limit: int = PAGE) -> KeyRotation:
    """Pass over every run until a whole pass re-wraps nothing (a run saved during a pass can
    slip behind its cursor); the totals of the passes. Each page is bounded, as in ``rotate_keys``."""
    rewrapped: list[str] = []
    while True:
        current = plaintext = 0
        found: list[str] = []
        cursor: RotationCursor | None = None
        while True:
            page = rotate_keys(store, cursor=cursor, limit=limit)
            found += page.rewrapped
            current, plaintext = current + page.current, plaintext + page.plaintext
            if page.next is None:
                break
            cursor = page.next
        rewrapped += found
        if not found:
            return KeyRotation(rewrapped, current - len(rewrapped), plaintext, None, page.kid)
