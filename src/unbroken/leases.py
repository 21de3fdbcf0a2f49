"""One writer per run: taking, keeping and giving up a run's lease.

An owner is named ``host:pid:start:nonce:boot:pidns``: the host name, the process id, its
start time (clock ticks since boot), a random nonce, the boot id
(``/proc/sys/kernel/random/boot_id``) and the inode of its PID namespace
(``/proc/self/ns/pid``). A holder is judged dead at once, so that a crashed agent resumes in
milliseconds, only where that is provable: same host, same boot, same PID namespace, and its
pid is gone, a zombie, or belongs to a process with another start time. Every other holder (a
container with its own PID namespace, another boot or host, an owner name of the older
4-part form ``host:pid:start:nonce``) is replaced only once its lease expires on the store's
clock; a takeover of an expired holder then waits a grace period before it trusts a "not
executed" probe (``fencing.LeaseGuard``).
"""

from __future__ import annotations

import os
import socket
import threading
import uuid
from pathlib import Path

from . import clock
from .errors import LeaseHeld, LeaseLost, StoreDataLost
from .fencing import LeaseGuard, Takeover
from .state import Lease, check_run_id
from .stores.backend import RunHead
from .stores.base import Store

_HOST = socket.gethostname()


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks since boot) of ``pid`` from /proc, or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return (fields[0], fields[19]) if len(fields) > 19 else None


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace(":", "")
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return ""


def make_owner() -> str:
    """A name for this process as a lease owner (see the module docstring)."""
    pid = os.getpid()
    stat = _proc_stat(pid)
    start = stat[1] if stat else "0"
    return f"{_HOST}:{pid}:{start}:{uuid.uuid4().hex[:8]}:{_boot_id()}:{_pid_namespace()}"


_ENDED_OWNERS: set[str] = set()


def mark_ended(owner: str) -> None:
    """Record that the call of this process that held leases as ``owner`` has ended: its lease,
    if it could not be released (the store was unreachable), is provably free to take over."""
    _ENDED_OWNERS.add(owner)


def owner_is_dead(owner: str) -> bool:
    """True only when ``owner`` provably names a holder that can no longer act: a call of this
    process that has ended (``mark_ended``), or a process that has exited: same host, same boot,
    same PID namespace as this process, and its pid is gone, a zombie, or reused. False for
    anything that cannot be proven (including owner names of the older 4-part form)."""
    if owner in _ENDED_OWNERS:
        return True
    parts = owner.split(":")
    if len(parts) != 6:
        return False
    host, pid_text, start, _nonce, boot, namespace = parts
    if host != _HOST or not pid_text.isdigit() or not start.isdigit() or start == "0":
        return False
    if not boot or boot != _boot_id() or not namespace or namespace != _pid_namespace():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False  # this very process is alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        pass  # it exists under another user: its start time still tells
    except OSError:
        return False
    stat = _proc_stat(pid)
    if stat is None:
        return False
    state, started = stat
    return state in ("Z", "X") or started != start


def take_lease(store: Store, run_id: str, owner: str, ttl: float, *, grace: float | None = None) -> LeaseGuard:
    """Take the run's lease and return its guard, which knows how it was obtained (see
    ``fencing.Takeover``). A live holder is replaced at once only when it is provably dead;
    otherwise ``LeaseHeld``. Durable when it returns."""
    head = store.read_head(check_run_id(run_id))  # the lease as stored, live or expired
    now = store.store_time()
    sent = clock.monotonic()
    live = head is not None and head.owner is not None and head.expires_at > now
    if head is not None and head.owner is not None and live and head.owner != owner:
        if not owner_is_dead(head.owner):
            raise LeaseHeld(
                f"run {run_id!r} is held by {head.owner} for {head.expires_at - now:.1f}s more; that process is "
                "not provably dead on this host, so the run can be taken over only once its lease expires"
            )
        lease = store.acquire_lease(run_id, owner, ttl, takeover_from=head.owner)
    else:
        lease = store.acquire_lease(run_id, owner, ttl)
    return LeaseGuard(store, lease, ttl, takeover=_how_taken(head, lease, owner, now), obtained_at=sent, grace=grace)


def _how_taken(head: RunHead | None, lease: Lease, owner: str, now: float) -> Takeover:
    """How ``lease`` was obtained, given the run's head as read just before acquiring it."""
    previous_fence = head.fence if head is not None else 0
    if lease.fence != previous_fence + 1 or head is None:
        # Someone else held it in between (or it is new): know nothing, assume the worst.
        return Takeover("fresh") if lease.fence == 1 else Takeover("expired_holder")
    if head.owner is None:
        return Takeover("released")
    if head.owner == owner:
        # Claimed earlier under our own name (a worker's claim): whoever held it before that
        # is unknown and may be alive; this acquisition's time bounds its expiry.
        return Takeover("expired_holder")
    if head.expires_at > now:
        return Takeover("dead_holder", head.owner, head.expires_at)
    return Takeover("expired_holder", head.owner, head.expires_at)


def acquire(store: Store, run_id: str, owner: str, ttl: float) -> Lease:
    """Take the run's lease, replacing a holder proven dead. Raises ``LeaseHeld``."""
    return take_lease(store, run_id, owner, ttl).lease


class Heartbeat:
    """Renews a lease through its guard every ``ttl / 3`` seconds on a daemon thread while a run
    is active, so long tools do not lose it. If renewal is refused, ``lost`` is set; the next
    check, save or ledger write is refused anyway."""

    def __init__(self, guard: LeaseGuard) -> None:
        self.guard = guard
        self.store = guard.store
        self.ttl = guard.ttl
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"unbroken-heartbeat-{guard.run_id}", daemon=True)

    @property
    def lease(self) -> Lease:
        return self.guard.lease

    @property
    def lost(self) -> LeaseLost | StoreDataLost | None:
        return self.guard.lost

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _beat(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self.guard.renew()
            except (LeaseLost, StoreDataLost):  # for good: the next check or save raises it
                return
            except Exception:  # the store is briefly unreachable: try again at the next beat
                continue


def release(guard: LeaseGuard) -> None:
    """Give the guard's lease up (a no-op if it was already lost)."""
    guard.release()
