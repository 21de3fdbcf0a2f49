"""A simulated process and the third driver of the engine.

``drive`` performs ``engine.run_steps``'s operations like ``drive_sync`` does, but yields to
the simulator between any two of them and once more inside each tool that is not read-only,
after its lease check and before its first byte reaches the service (the window
docs/effects.md names). The same session, lease guard, ledger and store code runs; only the
order in which processes get to move is the simulator's. Heartbeats are the world's events,
not threads. A kill abandons the generator (no release, no ``finally``).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import clock, crashpoints
from ...engine import CallModel, Compact, Job, Probe, Sleep, Start, Wait, run_steps
from ...errors import LeaseHeld, LeaseLost
from ...execution import invoke_sync
from ...fencing import LeaseGuard
from ...leases import Heartbeat, take_lease
from ...reconcile import call_probe
from ...session import RunSession
from .clocks import ProcessClock
from .delegate import view
from .injection import FaultyBackend

if TYPE_CHECKING:
    from .world import World

Points = Generator[str, None, None]


class Killed(BaseException):
    """The simulator killed this process at a crash point (a SIGKILL: nothing after it runs)."""


@dataclass
class InFlight:
    """A tool started by a concurrent driver (as ``drive_async`` starts one in a task): its
    steps suspended after the lease check, in a context of its own (a task copies its context)."""

    job: Job
    steps: Points
    context: contextvars.Context
    deadline: float | None
    """Store time by which its act reaches its service (None: read-only, nothing to land)."""
    error: Exception | None = None


class SimProcess:
    """One simulated OS process: a host, a pid (new at each restart), a lease owner name, its
    clocks, its connection to the store, and at most one run it is driving."""

    def __init__(self, world: World, index: int, host: str, clock_: ProcessClock, *, concurrent: bool = False) -> None:
        self.world = world
        self.index = index
        self.host = host
        self.clock = clock_
        self.store = view(world.store, lambda inner: FaultyBackend(world, index, inner))
        self.incarnation = 0
        self.owner = ""
        """The lease owner name of the run call in progress (a new one per call, as ``Agent.run``)."""
        self.dead = False
        self.frozen = False
        self.busy = False
        self.crash_at: tuple[str, int] | None = None
        self.freeze_at: str | None = None
        self.next_run = index
        self.guard: LeaseGuard | None = None
        self.session: RunSession | None = None
        self.driver: Points | None = None
        self.concurrent = concurrent
        """Drive like ``drive_async``: a turn's tools start one after the other and finish later,
        in the order the world lets them, while the run goes on."""
        self.jobs: list[InFlight] = []
        self.finished: list[InFlight] = []
        self.orphans: list[InFlight] = []
        self.in_thread = False
        """Tools still running after their run call ended (``tools_left_running``): they still act."""
        self._sync_deadline: float | None = None
        self._job_deadline: float | None = None
        self.next_beat: float | None = None
        self.context = contextvars.Context()
        self._born()

    @property
    def act_deadline(self) -> float | None:
        """Store time by which the next act this process has in flight reaches its service."""
        deadlines = [job.deadline for job in self.jobs + self.orphans if job.deadline is not None]
        if self._sync_deadline is not None:
            deadlines.append(self._sync_deadline)
        return min(deadlines) if deadlines else None

    def _born(self) -> None:
        self.incarnation += 1
        pid = 1000 + 100 * self.incarnation + self.index
        self.pid = pid
        self.calls = 0
        self.ended: dict[str, str] = {}
        """Owner names of this incarnation's run calls that have ended, each with its run."""
        self.context = contextvars.Context()

    # ------------------------------------------------------------------ what the world does to it

    def kill(self) -> None:
        """SIGKILL: the generator is abandoned (kept, never closed: no ``finally`` runs)."""
        if self.driver is not None:
            self.world.graveyard.append((self.context, self.driver))
        self.world.graveyard += [(job.context, job.steps) for job in self.jobs + self.orphans]
        self.dead = True
        self.driver = self.session = self.guard = None
        self.jobs, self.finished, self.orphans = [], [], []
        self._sync_deadline = self.next_beat = None
        self.crash_at = None

    def restart(self) -> None:
        if self.dead:
            self.dead = False
            self.frozen = False
            self._born()

    def step(self) -> None:
        """Move one step (in this process's context, on its clocks)."""
        with clock.using(self.clock):
            try:
                if self.driver is None:
                    self._begin()
                elif next(self.driver) == self.freeze_at:
                    self.frozen, self.freeze_at = True, None
            except StopIteration:
                self._end(None)
            except Killed:
                self.kill()
            except Exception as exc:
                self._end(exc)

    def deliver(self, *, nested: bool = False) -> None:
        """An act in flight reaches its service (forced by its deadline, even if frozen; a
        concurrent tool even while the process is busy: it runs in a thread of its own)."""
        if nested:
            if self.jobs or self.orphans:
                self.in_thread = True
                try:
                    with clock.using(self.clock):
                        self._finish(min(self.jobs + self.orphans, key=lambda job: job.deadline or float("inf")))
                finally:
                    self.in_thread = False
            return
        with clock.using(self.clock):
            try:
                if self._sync_deadline is not None and self.driver is not None:
                    next(self.driver)  # the sync driver is inside the tool: the body runs
                elif self.jobs or self.orphans:
                    self._finish(min(self.jobs + self.orphans, key=lambda job: job.deadline or float("inf")))
            except StopIteration:
                self._end(None)
            except Killed:
                self.kill()
            except Exception as exc:
                self._end(exc)

    def _finish(self, job: InFlight) -> None:
        """Run a started tool to its end (its body, then the engine's crash point after it); the
        run call that started it collects it, unless it has ended (an orphan's result is lost)."""
        orphan = job in self.orphans
        (self.orphans if orphan else self.jobs).remove(job)
        try:
            job.context.run(lambda: list(job.steps))
        except Exception as exc:  # a task's error reaches the engine when it is collected
            job.error = exc
        if not orphan:
            self.finished.append(job)

    def _collect(self) -> list[Job]:
        done, self.finished = self.finished, []
        for job in done:
            if job.error is not None:
                raise job.error
        return [job.job for job in done]

    def beat(self) -> None:
        """The heartbeat thread's renewal (a frozen or dead process misses it)."""
        guard = self.guard
        if guard is None:
            return
        with clock.using(self.clock):
            try:
                guard.renew()
            except LeaseLost:
                self.next_beat = None
                return
            except Exception:  # unreachable for a moment: the next beat tries again
                pass
        self.next_beat = self.world.now + guard.ttl / 3

    # ------------------------------------------------------------------ a run call

    def _begin(self) -> None:
        world = self.world
        run_id = world.run_ids[self.next_run % len(world.run_ids)]
        self.next_run += 1
        if world.finished(run_id):
            return
        agent = world.agent
        self.calls += 1
        self.owner = (
            f"{self.host}:{self.pid}:{self.pid * 7}:n{self.index}x{self.incarnation}c{self.calls}"
            f":boot-{self.host}:4026531836"
        )
        world.owners[self.owner] = (self, self.incarnation)
        try:
            guard = take_lease(self.store, run_id, self.owner, agent.lease_ttl, grace=agent.lease_grace)
        except LeaseHeld:
            world.note_refused(self, run_id)
            return
        world.note_lease(run_id, guard.fence, self.owner, self.index)
        self.guard = guard
        self.next_beat = world.now + guard.ttl / 3
        session = RunSession(
            agent, run_id, guard.lease, Heartbeat(guard), store=self.store, stop=threading.Event(), started=0.0
        )
        self.session = session
        session.open(world.tasks[run_id], None)
        self.driver = self._drive(session)

    def _end(self, error: Exception | None) -> None:
        """The run call returned or raised: ``Agent.run``'s own end, ``LeaseGuard.finish(
        owner_ends=True)``: the lease is released now unless a tool of this call that may act is
        still running (``drive_async``'s ``tools_left_running``; each simulated tool enters
        ``guard.acting`` as a real one does, so ``owners.still_acting`` counts it); then it is
        released when that tool's act has landed, and the name is marked ended."""
        guard = self.guard
        self.world.note_end(self, error)
        self.driver = self.session = self.guard = None
        self._sync_deadline = self.next_beat = None
        self.finished = []
        self.orphans += self.jobs
        self.jobs = []
        if guard is not None:
            self.ended[self.owner] = guard.run_id  # ended once owners.still_acting says 0 (world.owner_is_dead)
            with contextlib.suppress(Exception):  # a release that fails: the lease expires instead
                guard.finish(owner_ends=True)

    def _drive(self, session: RunSession) -> Points:
        """``engine.drive_sync`` with a scheduling point between any two operations."""
        agent = session.agent
        steps = run_steps(session)
        reply: Any = None
        error: Exception | None = None
        while True:
            try:
                operation = steps.send(reply) if error is None else steps.throw(error)
            except StopIteration:
                return
            reply, error = None, None
            yield "step"
            try:
                if isinstance(operation, Start) and self.concurrent:
                    reply = self._start(session, operation.job)
                elif isinstance(operation, Wait) and self.concurrent:
                    if not self.finished and self.jobs:
                        self._finish(self.jobs[-1 if self.world.scenario.last_first else 0])
                    reply = self._collect()
                elif isinstance(operation, Start):
                    yield from self._execute(session, operation.job)
                    reply = [operation.job]
                elif isinstance(operation, CallModel):
                    reply = agent.model.complete(operation.context, operation.tools, operation.system)
                elif isinstance(operation, Probe):
                    reply = call_probe(operation.tool, operation.call)
                elif isinstance(operation, Compact):
                    assert agent.compaction is not None
                    reply = agent.compaction.compact(session.state, agent.model)
                elif isinstance(operation, Sleep):
                    clock.sleep(operation.seconds)  # the world's virtual time moves on meanwhile
                else:
                    reply = []
            except Exception as exc:
                error = exc

    def _start(self, session: RunSession, job: Job) -> list[Job]:
        """``drive_async``'s Start: the task begins (its lease check runs now, in a context of
        its own) and the driver goes on; returns the tools finished so far."""
        context = contextvars.copy_context()
        steps = self._execute(session, job, concurrent=True)
        self._sync_deadline = None
        started = InFlight(job, steps, context, None)
        self.jobs.append(started)
        try:
            context.run(next, steps)
            started.deadline = self._job_deadline
        except StopIteration:
            pass
        except Exception as exc:
            started.error = exc
            self.jobs.remove(started)
            self.finished.append(started)
        if job.done:
            self._finish(started)
        return self._collect()

    def _execute(self, session: RunSession, job: Job, *, concurrent: bool = False) -> Points:
        """``engine.execute_sync``, with the act in flight between the lease check and the
        service: it lands by the check's lease expiry plus the grace (the documented bound)."""
        with session.heartbeat.guard.acting(job.tool.effect) as guard:
            if job.tool.effect != "read_only":
                deadline = guard.lease.expires_at + guard.grace
                if concurrent:
                    self._job_deadline = deadline
                else:
                    self._sync_deadline = deadline
                yield "in_tool"
                self._sync_deadline = None
            job.result = invoke_sync(job.tool, job.call, job.view)
        job.done = True
        yield "after_tool"
        crashpoints.hit("tool.after_execute")
