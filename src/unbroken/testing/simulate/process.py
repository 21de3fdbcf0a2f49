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
from typing import TYPE_CHECKING, Any

from ... import clock, crashpoints, engine
from ...engine import CallModel, Compact, Job, Probe, Start, run_steps
from ...errors import LeaseHeld, LeaseLost
from ...execution import invoke_sync
from ...fencing import LeaseGuard
from ...leases import Heartbeat, take_lease
from ...reconcile import call_probe
from ...session import RunSession
from .clocks import ProcessClock
from .injection import FaultyStore

if TYPE_CHECKING:
    from .world import World

Points = Generator[str, None, None]


class Killed(BaseException):
    """The simulator killed this process at a crash point (a SIGKILL: nothing after it runs)."""


class SimProcess:
    """One simulated OS process: a host, a pid (new at each restart), a lease owner name, its
    clocks, its connection to the store, and at most one run it is driving."""

    def __init__(self, world: World, index: int, host: str, clock_: ProcessClock) -> None:
        self.world = world
        self.index = index
        self.host = host
        self.clock = clock_
        self.store = FaultyStore(world, index, world.store)
        self.incarnation = 0
        self.owner = ""
        self.dead = False
        self.frozen = False
        self.busy = False
        self.crash_at: tuple[str, int] | None = None
        self.freeze_at: str | None = None
        self.next_run = index
        self.guard: LeaseGuard | None = None
        self.session: RunSession | None = None
        self.driver: Points | None = None
        self.act_deadline: float | None = None
        """Store time by which the act this process has in flight reaches its service."""
        self.next_beat: float | None = None
        self.context = contextvars.Context()
        self._born()

    def _born(self) -> None:
        self.incarnation += 1
        pid = 1000 + 100 * self.incarnation + self.index
        self.owner = f"{self.host}:{pid}:{pid * 7}:n{self.index}x{self.incarnation}:boot-{self.host}:4026531836"
        self.world.owners[self.owner] = (self, self.incarnation)
        self.context = contextvars.Context()

    # ------------------------------------------------------------------ what the world does to it

    def kill(self) -> None:
        """SIGKILL: the generator is abandoned (kept, never closed: no ``finally`` runs)."""
        if self.driver is not None:
            self.world.graveyard.append((self.context, self.driver))
        self.dead = True
        self.driver = self.session = self.guard = None
        self.act_deadline = self.next_beat = None
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
        try:
            guard = take_lease(self.store, run_id, self.owner, agent.lease_ttl, grace=agent.lease_grace)
        except LeaseHeld:
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
        """The run call returned or raised: give the lease up, as ``Agent.run`` does."""
        guard = self.guard
        self.world.note_end(self, error)
        self.driver = self.session = self.guard = None
        self.act_deadline = self.next_beat = None
        if guard is not None:
            with contextlib.suppress(Exception):  # unreachable: the lease expires instead
                guard.release()

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
                if isinstance(operation, Start):
                    yield from self._execute(session, operation.job)
                    reply = [operation.job]
                elif isinstance(operation, CallModel):
                    reply = agent.model.complete(operation.context, operation.tools, operation.system)
                elif isinstance(operation, Probe):
                    reply = call_probe(operation.tool, operation.call)
                elif isinstance(operation, Compact):
                    assert agent.compaction is not None
                    reply = agent.compaction.compact(session.state, agent.model)
                else:
                    reply = []
            except Exception as exc:
                error = exc

    def _execute(self, session: RunSession, job: Job) -> Points:
        """``engine.execute_sync``, with the act in flight between the lease check and the
        service: it lands by the check's lease expiry plus the grace (the documented bound)."""
        crashpoints.hit("tool.before_execute")
        engine._mark_started(session, job)
        with session.heartbeat.guard.acting(job.tool.effect) as guard:
            if job.tool.effect != "read_only":
                self.act_deadline = guard.lease.expires_at + guard.grace
                yield "in_tool"
                self.act_deadline = None
            job.result = invoke_sync(job.tool, job.call, job.view)
        job.done = True
        yield "after_tool"
        crashpoints.hit("tool.after_execute")
