"""Fencing: a holder proves it still holds its run's lease right before it acts.

A lease can be lost while its holder is still alive: the process was frozen (SIGSTOP, a VM
pause), C code held the GIL so the heartbeat thread could not renew, or the store was out of
reach. Another process may then have taken the run over. ``LeaseGuard.check`` makes one store
round trip (a renewal, which is a compare-and-set on the run's fence token) and measures the
time left on a local monotonic clock from the moment that request was sent; it raises
``LeaseLost`` unless the fence is still ours and at least ``min_remaining`` seconds are left.
The engine calls it immediately before every tool that is not read-only (``acting``), and a
tool can call it again itself at the last moment (``current_lease()``).

The other side of the same rule: a process that takes a run over must not trust a probe's
"not executed" about a call left in doubt before whoever started that attempt can no longer
act (``absence_needs_wait``; the engine waits it out as an operation its driver performs,
never by sleeping inside a step). The attempt's ledger entry records the fence it started
under: if that is the fence of the holder we took over from, how we took over says when it can
no longer act (dead or released: now; expired: ``grace`` after its expiry); an older fence
means its holder was displaced before our predecessor and may still be frozen mid-act, so we
wait the full ``grace`` from our acquisition. See docs/effects.md, "Fencing and zombie
owners", for the rule and the windows that remain.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from . import clock, owners
from ._log import log
from ._plain import Frozen
from .errors import LeaseLost, StoreDataLost, UnbrokenError
from .state import Lease, LedgerEntry
from .stores.base import Store

TakenHow = Literal["fresh", "released", "dead_holder", "expired_holder"]


_SLOW_RENEWAL_RETRIES = 3
_CURRENT: contextvars.ContextVar[LeaseGuard | None] = contextvars.ContextVar("unbroken_lease", default=None)


class Takeover(Frozen):
    """How a lease was obtained.

    ``fresh``: nobody held the run before. ``released``: its previous holder gave it up.
    ``dead_holder``: its holder was proven dead on this host. ``expired_holder``: its holder's
    lease expired, or who held it before cannot be known (a worker's claim, a race); that
    holder may still be alive and frozen, so a "not executed" probe is trusted only ``grace``
    seconds after ``previous_expires_at`` (store clock; when unknown, the time of this
    acquisition stands in for it, which is later and so safe)."""

    __slots__ = ("how", "previous_expires_at", "previous_fence", "previous_owner")
    how: TakenHow
    previous_owner: str | None
    previous_expires_at: float | None
    previous_fence: int | None
    """The fence of the holder we took the run from (0: none; None: not known, someone held
    it between our read of the head and our acquisition)."""

    def __init__(
        self,
        how: TakenHow,
        previous_owner: str | None = None,
        previous_expires_at: float | None = None,
        previous_fence: int | None = None,
    ) -> None:
        object.__setattr__(self, "how", how)
        object.__setattr__(self, "previous_owner", previous_owner)
        object.__setattr__(self, "previous_expires_at", previous_expires_at)
        object.__setattr__(self, "previous_fence", previous_fence)


class LeaseGuard:
    """This process's hold on one run's lease: renews it, checks it before acting, gives it up.

    ``ttl`` is the lease length. ``min_remaining`` (default ``ttl / 2``) is how much of the
    lease ``check`` must prove is left. ``grace`` (default ``ttl``) is how long after an
    expired holder's expiry its in-doubt calls may still be acting. Safe to share between
    threads (the heartbeat thread renews through it)."""

    def __init__(
        self,
        store: Store,
        lease: Lease,
        ttl: float,
        *,
        takeover: Takeover | None = None,
        obtained_at: float | None = None,
        grace: float | None = None,
        min_remaining: float | None = None,
    ) -> None:
        if ttl <= 0:
            raise ValueError("ttl must be positive")
        self.store = store
        self.ttl = ttl
        self.takeover = takeover or Takeover("fresh")
        self.grace = ttl if grace is None else grace
        self.min_remaining = ttl / 2 if min_remaining is None else min_remaining
        self.lost: LeaseLost | StoreDataLost | None = None
        """Why the lease is gone for good, once a renewal found out: taken over, or the store lost the run."""
        self._lease = lease
        self._lock = threading.Lock()
        self._finishing: bool | None = None  # set by finish: whether the owner name ends with it
        self._finished = False
        self.release_in: Callable[[Callable[[], None]], object] | None = None
        """Where the release after the last tool that outlived its call runs: None, in the thread
        that ran the tool; ``arun`` sets a store thread (a tool task ends on the event loop)."""
        sent = clock.monotonic() if obtained_at is None else obtained_at
        # The store set the expiry to (its now + ttl) after we sent the request: measured from
        # the send time on our monotonic clock, the lease is certainly still ours until here.
        self._deadline = sent + ttl
        received = clock.monotonic()
        self._trust_absence_at = self._absence_trusted_from(lease, received)
        # The store acquired before we received its answer: a holder whose lease had ended before
        # that (any holder older than our predecessor) can no longer act ``grace`` after this.
        self._trust_older_absence_at = received + self.grace

    def _absence_trusted_from(self, lease: Lease, received: float) -> float:
        """Local monotonic time from which "not executed" about an in-doubt call is evidence."""
        takeover = self.takeover
        if takeover.how != "expired_holder":
            return float("-inf")
        acquired_store_time = lease.expires_at - self.ttl
        old_expiry = takeover.previous_expires_at
        if old_expiry is None or old_expiry > acquired_store_time:
            old_expiry = acquired_store_time
        # The store acquired before we received its answer: waiting from ``received`` is safe.
        return received + max(0.0, old_expiry + self.grace - acquired_store_time)

    # ------------------------------------------------------------------ reading

    @property
    def lease(self) -> Lease:
        return self._lease

    @property
    def run_id(self) -> str:
        return self._lease.run_id

    @property
    def fence(self) -> int:
        """The fencing token: a number that grows with every new holder of the run. Hand it to
        a service that can refuse a write whose token is lower than one it has already seen."""
        return self._lease.fence

    def remaining(self) -> float:
        """Seconds of the lease certainly left, on this process's monotonic clock, since the
        last successful renewal (negative once that much time has passed)."""
        return self._deadline - clock.monotonic()

    # ------------------------------------------------------------------ renewing and checking

    def renew(self) -> Lease:
        """One store round trip extending the lease (compare-and-set on the fence). Raises
        ``LeaseLost`` (and remembers it) when another holder took the run, ``StoreDataLost``
        (remembered too) when the store lost the run's head under us; other store errors
        propagate unchanged."""
        if self.lost is not None:
            raise self.lost
        sent = clock.monotonic()
        try:
            lease = self.store.renew_lease(self._lease, self.ttl)
        except (LeaseLost, StoreDataLost) as exc:
            self.lost = exc
            raise
        with self._lock:
            self._lease = lease
            self._deadline = max(self._deadline, sent + self.ttl)
        return lease

    def check(self, min_remaining: float | None = None) -> Lease:
        """Prove, with a store round trip, that the lease is still ours and at least
        ``min_remaining`` seconds of it are left (default: the guard's ``min_remaining``).
        Raises ``LeaseLost`` otherwise (``StoreDataLost`` when the store lost the run: told as
        such, never as a takeover): the caller must not act. Safe to call any number of times."""
        need = self.min_remaining if min_remaining is None else min_remaining
        for _ in range(_SLOW_RENEWAL_RETRIES):
            try:
                lease = self.renew()
            except LeaseLost as exc:
                raise LeaseLost(
                    f"lease on run {self.run_id!r} (fence {self.fence}) is no longer ours: another process took "
                    "the run over. Nothing was executed by this process after the check."
                ) from exc
            except StoreDataLost:
                raise
            except UnbrokenError as exc:
                raise LeaseLost(
                    f"could not confirm the lease on run {self.run_id!r} ({type(exc).__name__}: {exc}); not "
                    "acting without proof. The call stays in doubt and is settled when the run resumes."
                ) from exc
            left = self.remaining()
            if left >= need:
                return lease
            # Still ours, but the round trip was too slow to prove enough is left: try again.
        raise LeaseLost(
            f"lease on run {self.run_id!r} has only {max(left, 0.0):.2f}s certainly left (need {need:.2f}s; "
            "this process was slow or frozen around each renewal); not acting"
        )

    @contextmanager
    def acting(self, effect: str, *, checked: bool = False) -> Iterator[LeaseGuard]:
        """Around one tool execution: unless the tool is ``read_only``, ``check`` first (so a
        ``LeaseLost`` stops the tool before it starts) and count it as able to act until it
        returns (``finish`` waits for it); then let the tool reach this guard through
        ``current_lease()``. ``checked``: the caller has just run ``check`` itself (``arun``
        runs it in a store thread, off the event loop)."""
        done = None
        if effect != "read_only":
            if not checked:
                self.check()
            done = self.tool_started()
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)
            if done is not None:
                done()

    def release(self) -> None:
        """Give the lease up (a no-op if it was already lost). Safe to call twice."""
        self.store.release_lease(self._lease)

    # ------------------------------------------------------------------ nothing of ours may act

    def tool_started(self) -> Callable[[], None]:
        """Count a tool of ours that is not read-only as able to act under this lease until the
        returned function is called (once, when the tool has returned or raised, in whichever
        thread ran it). Until then ``finish`` does not release the lease, this process's calls
        do not take the run back, and every process of this host sees the holder alive."""
        owners.begin_acting(self._lease.owner, self.run_id)
        once = threading.Lock()

        def done() -> None:
            if not once.acquire(blocking=False):
                return
            if owners.end_acting(self._lease.owner, self.run_id) == 0 and self._finishing is not None:
                if self.release_in is None:
                    self._end_after_last_tool()
                else:
                    self.release_in(self._end_after_last_tool)

        return done

    def _end_after_last_tool(self) -> None:
        try:
            self._end()
        except Exception as exc:  # in the tool's thread: the lease expires instead
            log.warning("could not release the lease of run %s after its last tool: %s", self.run_id, exc)

    def finish(self, *, owner_ends: bool) -> bool:
        """The call holding this guard has ended (returned, raised, interrupted). Release the
        lease now if no tool of ours may still act under it (True); otherwise leave it to expire
        (the heartbeat has stopped) and release it when the last such tool returns (False).
        ``owner_ends``: the owner name is never used again; once nothing acts it is marked ended,
        so a later call of this process may take over at once even if the release failed."""
        with self._lock:
            self._finishing = owner_ends
        if owners.still_acting(self._lease.owner, self.run_id) > 0:
            return False
        self._end()
        return True

    def _end(self) -> None:
        with self._lock:
            if self._finished:
                return
            self._finished = True
        try:
            self.release()
        finally:
            if self._finishing:
                owners.mark_ended(self._lease.owner)
            owners.end_use(self._lease.owner)

    # ------------------------------------------------------------------ after a takeover

    def started_before_predecessor(self, entry: LedgerEntry | None) -> bool:
        """Whether the in-doubt attempt ``entry`` started under a fence other than that of the
        holder we took the run from (and not under ours): its holder was displaced before our
        predecessor was, so how our predecessor gave the run up (released, died) says nothing
        about it. The predecessor's fence is the one our acquisition replaced
        (``Takeover.previous_fence``; fences are not consecutive, ``stores.base.next_fence``);
        when it is not known, every other fence counts as older. A fence above our
        predecessor's can only come from a store that lost data: it waits too. An entry with
        no fence (written before fences were recorded, or outside a lease) keeps the
        predecessor's rule."""
        started = entry.fence if entry is not None else None
        if started is None or started == self.fence:
            return False
        return started != self.takeover.previous_fence

    def absence_needs_wait(self, entry: LedgerEntry | None = None) -> float:
        """Seconds still to wait before a "not executed" probe about the in-doubt attempt
        ``entry`` is evidence (0 when it already is): until whoever started that attempt can no
        longer act (at most ``grace``). The one place this rule is decided. Nothing here
        waits: the step machine yields the wait as an operation (``engine.Sleep``) that its
        driver performs (the heartbeat keeps the lease meanwhile), then probes again."""
        trust_at = self._trust_absence_at
        if self.started_before_predecessor(entry):
            trust_at = max(trust_at, self._trust_older_absence_at)
        return max(0.0, trust_at - clock.monotonic())


def keep_acting(effect: str) -> Callable[[], None]:
    """For code that hands a tool to another thread: count that thread as able to act under
    the current tool's lease (see ``LeaseGuard.tool_started``); call the result when it ends.
    A no-op outside an ``Agent``'s tool, and for read-only tools."""
    guard = _CURRENT.get()
    if guard is None or effect == "read_only":
        return lambda: None
    return guard.tool_started()


def current_lease() -> LeaseGuard:
    """The lease of the run whose tool is executing now, for the tool itself: call
    ``current_lease().check()`` at the last moment before an irreversible act, and pass
    ``current_lease().fence`` to a service that supports conditional writes. Raises
    ``LeaseLost`` outside a tool run by an ``Agent``."""
    guard = _CURRENT.get()
    if guard is None:
        raise LeaseLost("current_lease() was called outside a tool executed by an Agent; there is no lease to check")
    return guard
