"""Leases and fences of a file store: ``runs/<run_id>/lease.json`` (and ``lease.prev.json``, the
generation before, from which a damaged lease's fence is rebuilt), read and replaced under the
run's exclusive lock. Expiry uses the local clock: a file store serves one machine.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

from ..errors import LeaseHeld, LeaseLost
from ..state import Lease
from ._durable import translating
from ._file_format import lease_bytes, lease_state
from ._file_runs import RunDirectories


class LeaseFiles(RunDirectories):
    """The lease methods of ``FileStore``, and the fence check its writes make."""

    def _check_fence(self, run_dir: Path, run_id: str, fence: int | None) -> None:
        if fence is None:
            return
        current = lease_state(run_dir)[1]
        if current != fence:
            raise LeaseLost(f"run {run_id!r} is now owned under fence {current}, not {fence}; this write was refused")

    def _write_lease(self, run_dir: Path, owner: str | None, fence: int, expires_at: float) -> None:
        self._write_file(run_dir, "lease.json", lease_bytes(owner, fence, expires_at))

    def acquire_lease(self, run_id: str, owner: str, ttl: float, *, takeover_from: str | None = None) -> Lease:
        with self._writing(run_id, "take the lease of") as run_dir:
            now = time.time()  # one machine, one clock
            holder, fence, expires = lease_state(run_dir)
            if holder is not None and expires > now and holder not in (owner, takeover_from):
                raise LeaseHeld(f"run {run_id!r} is held by {holder} for {expires - now:.1f}s more")
            if fence:
                self._write_file(run_dir, "lease.prev.json", lease_bytes(holder, fence, expires), sync_dir=False)
            self._write_lease(run_dir, owner, fence + 1, now + ttl)
        return Lease(run_id, owner, fence + 1, now + ttl)

    def renew_lease(self, lease: Lease, ttl: float) -> Lease:
        with self._holding(lease.run_id, "renew the lease of", exclusive=True) as run_dir:
            holder, fence, _ = lease_state(run_dir) if run_dir is not None else (None, 0, 0.0)
            if run_dir is None or fence != lease.fence or holder != lease.owner:
                raise LeaseLost(f"lease on run {lease.run_id!r} (fence {lease.fence}) was taken over")
            expires = time.time() + ttl
            self._write_lease(run_dir, lease.owner, lease.fence, expires)
        return replace(lease, expires_at=expires)

    def release_lease(self, lease: Lease) -> None:
        with self._holding(lease.run_id, "release the lease of", exclusive=True) as run_dir:
            if run_dir is None:
                return
            holder, fence, _ = lease_state(run_dir)
            if fence == lease.fence and holder is not None:
                self._write_lease(run_dir, None, fence, 0.0)

    def lease_of(self, run_id: str) -> Lease | None:
        run_dir = self._run_dir(run_id)
        with translating("read the lease of", run_dir):
            holder, fence, expires = lease_state(run_dir)
        if holder is None or expires <= time.time():
            return None
        return Lease(run_id, holder, fence, expires)
