"""One writer per run: taking, keeping and giving up a run's lease.

An owner is named ``host:pid:start:nonce``. When a run's lease is held by a process on this
same host that no longer exists (killed, OOM), it is taken over at once instead of waiting
for the lease to expire, so a crashed agent resumes in milliseconds. Holders on other hosts
are only replaced once their lease expires on the store's clock.
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

from .errors import LeaseHeld, LeaseLost
from .state import Lease
from .stores.base import Store

_HOST = socket.gethostname()


def _start_time(pid: int) -> str | None:
    """Process start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rfind(")") + 2 :].split()[0] in ("Z", "X")


def make_owner() -> str:
    """A name for this process as a lease owner."""
    pid = os.getpid()
    return f"{_HOST}:{pid}:{_start_time(pid) or 0}:{uuid.uuid4().hex[:8]}"


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` certainly names a process of this host that has exited."""
    parts = owner.split(":")
    if len(parts) != 4 or parts[0] != _HOST or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    if _is_zombie(pid):
        return True
    started = _start_time(pid)
    return started is not None and parts[2] != "0" and started != parts[2]


def acquire(store: Store, run_id: str, owner: str, ttl: float) -> Lease:
    """Take the run's lease, replacing a holder proven dead. Raises ``LeaseHeld``."""
    try:
        return store.acquire_lease(run_id, owner, ttl)
    except LeaseHeld:
        holder = store.lease_of(run_id)
        if holder is None:
            return store.acquire_lease(run_id, owner, ttl)
        if owner_is_dead(holder.owner):
            return store.acquire_lease(run_id, owner, ttl, takeover_from=holder.owner)
        raise


class Heartbeat:
    """Renews a lease every ``ttl / 3`` seconds on a daemon thread while a run is active,
    so long tools do not lose it. If renewal fails, ``lost`` is set; the next save is refused
    by the store's fence check anyway."""

    def __init__(self, store: Store, lease: Lease, ttl: float) -> None:
        self.store = store
        self.lease = lease
        self.ttl = ttl
        self.lost: Exception | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"unbroken-heartbeat-{lease.run_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.lease = self.store.renew_lease(self.lease, self.ttl)
            except LeaseLost as exc:
                self.lost = exc
                return
            except Exception:  # the store is briefly unreachable: try again at the next beat
                continue
