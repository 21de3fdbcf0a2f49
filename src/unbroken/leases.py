"""One writer per run: taking, keeping and giving up a run's lease.

Who may be replaced is decided in ``owners``: a holder provably dead on this host is replaced
at once (a crashed agent resumes in milliseconds); a holder provably alive on this host (its
process runs, or in this process a call or a tool of ours under that name may still act) is
never replaced, whatever a clock says about its lease; any other holder (another host, boot
or PID namespace) is replaced only once its lease expires on the store's lease clock, and a
takeover then waits a grace period before it trusts a "not executed" probe
(``fencing.LeaseGuard``).
"""

from __future__ import annotations

from . import clock, lost, owners
from .errors import LeaseHeld, LeaseLost, StoreDataLost
from .fencing import LeaseGuard, Takeover
from .owners import _boot_id as _boot_id  # re-exported: the fault tests name them here
from .owners import _pid_namespace as _pid_namespace
from .owners import _proc_stat as _proc_stat
from .owners import describe_live
from .owners import make_owner as make_owner
from .owners import mark_ended as mark_ended
from .owners import owner_is_dead as owner_is_dead
from .renewals import renewals_of
from .state import Lease
from .stores.backend import RunHead
from .stores.base import Store

_JUDGINGS = 3
"""How many times ``take_lease`` judges the holder afresh when the store's compare-and-swap finds
a holder its judgment did not see (a write that was still in flight when it read the head)."""


def take_lease(store: Store, run_id: str, owner: str, ttl: float, *, grace: float | None = None) -> LeaseGuard:
    """Take the run's lease and return its guard, which knows how it was obtained (see
    ``fencing.Takeover``). A live holder is replaced at once only when it is provably dead; a
    holder provably alive on this host is never replaced, expired or not; under ``owner``
    itself, the run is not taken back while a tool of an earlier call under that name may still
    act. Otherwise ``LeaseHeld``. Durable when it returns.

    The judgment is made on the head as read; when the store then refuses the swap because the
    head changed (a process killed just before, whose lease write the server still committed
    after it died, is the usual case), the head is read and judged again, up to ``_JUDGINGS``
    times: the holder the store saw is judged by the same rule, never assumed."""
    for judging in range(1, _JUDGINGS + 1):
        head = store.head_of(run_id)  # the lease as stored, live or expired
        now = store.lease_now()
        sent = clock.monotonic()
        try:
            lease = _acquire_judged(store, run_id, owner, ttl, head, now)
        except _SwapRefused as refused:
            if judging == _JUDGINGS:
                raise refused.error from None
            continue
        return LeaseGuard(
            store, lease, ttl, takeover=_how_taken(head, lease, owner, now), obtained_at=sent, grace=grace
        )
    raise AssertionError("unreachable")  # (the loop returns or raises)


class _SwapRefused(Exception):
    """The store refused the lease's swap: the head changed after it was judged."""

    def __init__(self, error: LeaseHeld) -> None:
        super().__init__(str(error))
        self.error = error


def _acquire_judged(store: Store, run_id: str, owner: str, ttl: float, head: RunHead | None, now: float) -> Lease:
    live = head is not None and head.owner is not None and head.expires_at > now
    if lost.is_parked(head):
        raise LeaseHeld(lost.refusal(run_id))
    if head is not None and head.owner is not None and head.owner != owner and owners.owner_is_alive(head.owner):
        raise LeaseHeld(
            f"run {run_id!r} is held by {describe_live(head.owner)}; it is never taken over while it lives, "
            "whatever its lease's expiry says: wait for it to finish, or stop that process"
        )
    if head is not None and head.owner == owner and owners.still_acting(owner, run_id):
        raise LeaseHeld(
            f"run {run_id!r}: a tool that an earlier call of this process started under {owner} may still "
            "act (it outlived its call); the run is taken back once it returns"
        )
    takeover_from = None
    if head is not None and head.owner is not None and live and head.owner != owner:
        if not owner_is_dead(head.owner):
            raise LeaseHeld(
                f"run {run_id!r} is held by {head.owner} for {head.expires_at - now:.1f}s more; that process is "
                "not provably dead on this host, so the run can be taken over only once its lease expires"
            )
        takeover_from = head.owner
    try:
        if takeover_from is None:
            return store.acquire_lease(run_id, owner, ttl)
        return store.acquire_lease(run_id, owner, ttl, takeover_from=takeover_from)
    except LeaseHeld as error:
        raise _SwapRefused(error) from None


def _how_taken(head: RunHead | None, lease: Lease, owner: str, now: float) -> Takeover:
    """How ``lease`` was obtained, given the run's head as read just before acquiring it."""
    if head is None or lease.previous_fence != head.fence:
        # Someone else held it in between (or it is new): know nothing, assume the worst.
        fresh = head is None and lease.previous_fence == 0
        return Takeover("fresh", previous_fence=0) if fresh else Takeover("expired_holder")
    if head.owner is None:
        return Takeover("released", previous_fence=head.fence)
    if head.owner == owner:
        # Claimed earlier under our own name (a worker's claim): whoever held it before that
        # is unknown and may be alive; this acquisition's time bounds its expiry.
        return Takeover("expired_holder", previous_fence=head.fence)
    if head.expires_at > now:
        return Takeover("dead_holder", head.owner, head.expires_at, head.fence)
    return Takeover("expired_holder", head.owner, head.expires_at, head.fence)


def acquire(store: Store, run_id: str, owner: str, ttl: float) -> Lease:
    """Take the run's lease, replacing a holder proven dead. Raises ``LeaseHeld``."""
    return take_lease(store, run_id, owner, ttl).lease


class Heartbeat:
    """Keeps a lease alive while a run is active, so long tools do not lose it: renewed through
    its guard every ``ttl / 3`` seconds by the store's one renewal thread (``renewals``), which
    renews every lease this process holds through that store. If renewal is refused, ``lost``
    is set; the next check, save or ledger write is refused anyway."""

    def __init__(self, guard: LeaseGuard) -> None:
        self.guard = guard
        self.store = guard.store
        self.ttl = guard.ttl

    @property
    def lease(self) -> Lease:
        return self.guard.lease

    @property
    def lost(self) -> LeaseLost | StoreDataLost | None:
        return self.guard.lost

    def __enter__(self) -> Heartbeat:
        renewals_of(self.store).add(self.guard)
        return self

    def __exit__(self, *exc: object) -> None:
        renewals_of(self.store).remove(self.guard)


def release(guard: LeaseGuard) -> None:
    """Give the guard's lease up (a no-op if it was already lost)."""
    guard.release()
