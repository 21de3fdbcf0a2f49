"""A run that is not in the store: told as what it may be, never silently started from nothing.

A run id with no save records is either new or a run the store lost (a server restarted without
its data, keys evicted, a backup restored). Starting a lost run from its task repeats every side
effect it had done, so the paths that mean "continue" refuse (``resume``, ``send`` without
``create=True``, an integration's log it saw saved) with ``missing_run``, and every fresh start
first asks ``check_never_saved``: a run whose effect ledger holds entries had save records (its
first save, ``start``, is written before any tool runs and carries no entry), so it was lost.
"""

from __future__ import annotations

from .errors import CorruptCheckpoint, EncryptionKeyMissing, RunNotFound, RunQueued, StoreDataLost
from .stores.base import Store

__all__ = ["check_never_saved", "missing_run"]


def check_never_saved(store: Store, run_id: str) -> None:
    """Before starting ``run_id`` from nothing: raise ``StoreDataLost`` when its effect ledger
    holds entries (the store lost its save records, not its ledger). One ledger read."""
    from .stores._data_keys import DATA_KEY  # (a fresh start only: a resume never imports it)

    entries = store.ledger_list(run_id)
    if any(entry.key == DATA_KEY for entry in entries):  # only a store without keys lists it
        raise EncryptionKeyMissing(
            f"run {run_id!r} is encrypted at rest (it has a data key, no save record yet) and this store was "
            "opened without its keys: nothing was written. Open the store with them (open_store(url, "
            "encryption=...), or set UNBROKEN_ENCRYPTION_KEY or UNBROKEN_ENCRYPTION_KEY_FILE)"
        )
    if entries:
        raise StoreDataLost(
            f"run {run_id!r} has no save records, but its effect ledger holds {len(entries)} "
            f"entr{'y' if len(entries) == 1 else 'ies'} (for example {entries[0].tool!r}, {entries[0].status}): the "
            f"store lost its saves, and starting it from its task would run those calls again. Nothing was "
            f"written. Restore the store, or erase the run (`unbroken erase {run_id}`) to start it over on purpose"
        )


def missing_run(store: Store, run_id: str, told: str) -> RunNotFound | RunQueued | CorruptCheckpoint:
    """The error for a path that continues runs and found none: the store's own story when it
    has one (queued, records lost under a head), else ``RunNotFound(told)``."""
    error = store.why_missing(run_id)
    if isinstance(error, (RunQueued, CorruptCheckpoint)):
        return error
    return RunNotFound(told)
