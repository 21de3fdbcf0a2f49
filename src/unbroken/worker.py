"""Workers: processes that take submitted runs from a shared store and drive them to the end.

A worker claims a runnable run (submitted and never started, or left unfinished by an owner
whose lease expired on the store's clock), runs it through ``Agent.run`` (which resumes and
reconciles it exactly as after any restart), then claims the next. A run that had save points
(at its claim, or when this worker last drove it) is only resumed (``Agent.resume``): if the
store lost it meanwhile, it is reported (``WorkerStats.data_lost``) and parked for an operator
(``lost``), never started over. The claim takes the lease
under the agent's own owner name, so ``Agent.run`` re-acquires it without a gap (bumping the
fence once more) and ``runner.py`` needs no worker-specific path.

On SIGTERM (or SIGINT) a worker stops claiming, lets each running run finish its current save
point, releases the leases and returns. A worker killed outright loses nothing: its leases
expire and another worker resumes its runs from their last save points.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from . import clock, lost
from .errors import ConfigError, LeaseError, RunInterrupted, RunNotFound, StoreDataLost, UnbrokenError, Unsupported
from .leases import take_lease
from .redact import log_failure
from .retention import Retention, apply_retention
from .runner import Agent
from .session import RunResult
from .stores.base import ClaimedRun, Store

log = logging.getLogger("unbroken.worker")

AgentFactory = Callable[[Store], Agent]
"""Builds the agent a worker runs: called once per concurrent slot with the worker's store."""


@dataclass
class WorkerStats:
    """What one call to ``Worker.run`` did."""

    claimed: int = 0
    finished: int = 0
    """Runs that ended: completed, max_turns, failed or paused."""
    interrupted: int = 0
    """Runs stopped at a save point because the worker was asked to stop."""
    lost: int = 0
    """Runs whose lease another worker took over (this worker's writes were refused)."""
    errors: int = 0
    """Runs that raised (model or store failure); each is retried after ``retry_after``."""
    data_lost: int = 0
    """Runs whose saved data the store lost (``StoreDataLost``, or gone when only a resume was
    right): never started over; parked as lost (``lost.park``) for an operator to erase or release."""
    took_over: int = 0
    """Finished runs that had save points already: left by a dead or expired owner (or by an
    earlier attempt that raised), resumed here."""
    settled: dict[str, int] = field(default_factory=dict)
    """Calls left without a result by an earlier process, by how resuming settled them."""
    awaiting_approval: int = 0
    """Finished runs that stopped for a person's approval (``unbroken approvals``)."""
    paused: int = 0
    """Finished runs paused on an unknown outcome (``unbroken resolve``)."""

    def count(self, result: RunResult) -> None:
        """Count one run that ended (the caller holds the worker's lock)."""
        self.finished += 1
        self.took_over += result.resumed
        self.awaiting_approval += result.status == "awaiting_approval"
        self.paused += result.status == "paused"
        for _call_id, _tool, how in result.reconciled:
            self.settled[how] = self.settled.get(how, 0) + 1


class Worker:
    """Runs submitted runs from ``store`` with ``concurrency`` agents in parallel (threads).

    ``agent_name`` limits it to runs submitted for that name (``store.submit(..., agent=...)``);
    None takes any. ``poll_interval`` is how long an idle slot waits before claiming again,
    ``retry_after`` how long a run that raised is left alone before it is claimed again.
    ``on_finish(result)`` is called for each run that ends, ``on_ready()`` once the worker is
    claiming and its signal handlers are installed. ``retention``: a policy an idle slot applies
    (``apply_retention``, at most ``retention_limit`` runs, once per ``retention_every`` seconds)."""

    def __init__(
        self,
        agent_factory: AgentFactory,
        store: Store,
        *,
        concurrency: int = 1,
        agent_name: str | None = None,
        poll_interval: float = 1.0,
        retry_after: float = 10.0,
        on_finish: Callable[[RunResult], None] | None = None,
        on_ready: Callable[[], None] | None = None,
        retention: Retention | None = None,
        retention_every: float = 60.0,
        retention_limit: int = 100,
    ) -> None:
        if concurrency < 1:
            raise ConfigError("concurrency must be at least 1")
        if poll_interval <= 0 or retry_after <= 0:
            raise ConfigError("poll_interval and retry_after must be positive")
        if "claim" not in store.capabilities:
            raise Unsupported(
                f"{store.url} cannot hand runs to workers; use sqlite:///FILE (processes on one machine) "
                "or postgresql://... (many machines)"
            )
        self.agent_factory = agent_factory
        self.store = store
        self.concurrency = concurrency
        self.agent_name = agent_name
        self.poll_interval = poll_interval
        self.retry_after = retry_after
        self.on_finish = on_finish
        self.on_ready = on_ready
        self.stats = WorkerStats()
        self._stopping = threading.Event()
        self._count = threading.Lock()
        self._max_runs: int | None = None
        self._saved_runs: set[str] = set()
        """Runs this worker saw with save points: claimed again, they are only ever resumed."""
        self.retention, self.retention_every, self.retention_limit = retention, retention_every, retention_limit
        self._retained_at: float | None = None

    def _retain(self) -> None:
        """Apply the retention policy, if any and if its time has come (one slot at a time)."""
        if self.retention is None:
            return
        with self._count:
            now = clock.monotonic()
            if self._retained_at is not None and now - self._retained_at < self.retention_every:
                return
            self._retained_at = now
        try:
            apply_retention(self.store, self.retention, limit=self.retention_limit)
        except UnbrokenError as exc:
            log.warning("worker could not apply retention: %s", exc)

    def stop(self) -> None:
        """Ask the worker to stop: no new claims; running runs stop after their next save point."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def run(self, *, until_idle: bool = False, max_runs: int | None = None) -> WorkerStats:
        """Claim and run until stopped (SIGTERM, SIGINT or ``stop()``), until nothing is left to
        claim (``until_idle``), or until ``max_runs`` runs were claimed. Returns what it did."""
        self._max_runs = max_runs
        agents = [self._agent() for _ in range(self.concurrency)]
        previous = self._install_signal_handlers()
        try:
            slots = [
                threading.Thread(target=self._slot, args=(agent, until_idle), name=f"unbroken-worker-{i}", daemon=True)
                for i, agent in enumerate(agents)
            ]
            for slot in slots:
                slot.start()
            if self.on_ready is not None:  # signal handlers are in place from here on
                self.on_ready()
            for slot in slots:
                while slot.is_alive():  # short joins keep the main thread free to take signals
                    slot.join(0.2)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return self.stats

    # ------------------------------------------------------------------ internals

    def _agent(self) -> Agent:
        agent = self.agent_factory(self.store)
        if not isinstance(agent, Agent):
            raise ConfigError(f"the agent factory returned {type(agent).__name__}, not an unbroken Agent")
        if agent.store is not self.store:
            raise ConfigError("the agent factory must build its Agent on the store it is given")
        return agent

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("worker got signal %d: finishing current save points, then exiting", signum)
            self._stopping.set()

        previous: dict[int, Any] = {}
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, on_signal)
        return previous

    def _take_slot(self) -> bool:
        with self._count:
            if self._max_runs is not None and self.stats.claimed >= self._max_runs:
                return False
            self.stats.claimed += 1
            return True

    def _slot(self, agent: Agent, until_idle: bool) -> None:
        while not self._stopping.is_set():
            if not self._take_slot():
                return
            try:
                claimed = self.store.claim_runnable(agent.owner, agent.lease_ttl, agent=self.agent_name)
            except UnbrokenError as exc:
                claimed = []
                log.warning("worker could not claim a run: %s", exc)
            if not claimed:
                with self._count:
                    self.stats.claimed -= 1
                self._retain()
                if until_idle:
                    return
                self._stopping.wait(self.poll_interval)
                continue
            self._drive(agent, claimed[0])

    def _drive(self, agent: Agent, claim: ClaimedRun) -> None:
        run_id = claim.run_id
        try:
            # Under the owner name it claimed the run with: the run's lease is re-entered, not refused.
            if self._was_saved(run_id):
                # A started run is only resumed: if the store lost it, RunNotFound, never a fresh start.
                result = agent.resume(run_id, owner=agent.owner, stop=self._stopping)
            else:
                result = agent.run(claim.task, run_id=run_id, owner=agent.owner, stop=self._stopping)
        except RunInterrupted:
            self._count_as("interrupted")
        except LeaseError as exc:
            log.warning("run %s was taken over by another worker: %s", run_id, exc)
            self._count_as("lost")
        except (RunNotFound, StoreDataLost) as exc:
            log.error("run %s: the store lost its saved data, not starting it over: %s", run_id, exc)
            self._count_as("data_lost")
            self._park(agent, run_id)
        except Exception as exc:
            log_failure(log, f"run {run_id} raised (retrying in {self.retry_after:g}s)", exc)
            self._count_as("errors")
            self._hold(agent, run_id)
        else:
            with self._count:
                self.stats.count(result)
            if self.on_finish is not None:
                self.on_finish(result)
        finally:
            self._remember_saved(run_id)

    def _was_saved(self, run_id: str) -> bool:
        """Whether the run had save points: seen by this worker, or at its claim (the claim
        leaves the head's save number as it was)."""
        if run_id in self._saved_runs:
            return True
        head = self.store.head_of(run_id)
        return head is not None and head.seq > 0

    def _remember_saved(self, run_id: str) -> None:
        with contextlib.suppress(UnbrokenError):  # unreachable: what was seen before still counts
            if self.store.exists(run_id):
                with self._count:
                    self._saved_runs.add(run_id)

    def _count_as(self, what: str) -> None:
        with self._count:
            setattr(self.stats, what, getattr(self.stats, what) + 1)

    def _park(self, agent: Agent, run_id: str) -> None:
        """Park a run whose data the store lost (``lost.park``): no worker claims it again, an
        operator erases or releases it. If the store cannot be written now, hold it instead."""
        try:
            if lost.park(self.store, run_id):
                log.error("run %s is parked as lost: %s", run_id, lost.refusal(run_id))
        except UnbrokenError as exc:
            log.warning("run %s could not be parked as lost (%s); holding it for %gs", run_id, exc, self.retry_after)
            self._hold(agent, run_id)

    def _hold(self, agent: Agent, run_id: str) -> None:
        """Keep a failing run's lease for ``retry_after`` seconds so no worker retries it at once."""
        # If someone else took it, a tool of ours may still act under it, or the store is down, it
        # is not ours to hold. The hold's owner name is not this process's: a hold cannot act, so
        # any worker may claim the run once it expires.
        with contextlib.suppress(UnbrokenError):
            take_lease(self.store, run_id, f"{agent.owner}:retry-hold", self.retry_after)


__all__ = ["AgentFactory", "Worker", "WorkerStats"]
