"""The simulated world: processes, virtual time, the shared store, the external services, and
the scheduler that plays a schedule over them.

One ``random.Random(seed)`` draws the scenario (runs, processes, hosts, the model's script)
and the schedule; nothing else is random and nothing waits on the machine's clock. Time
moves only when the schedule advances it, when a process sleeps, or when a store call is
delayed; whatever falls due meanwhile happens in time order: heartbeats of processes that are
not frozen, and acts in flight, which reach their service by their deadline.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import random
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ... import crashpoints, leases, owners
from ...codec import EncodedSave, encode_full
from ...errors import UnbrokenError, UnloadableState
from ...runner import Agent
from ...state import TERMINAL_PHASES, RunState
from ...stores.backend import RunHead
from ...stores.base import Store
from .clocks import EPOCH, ProcessClock
from .lossy import Forgetful, opened
from .moves import Move, move_record
from .process import Killed, SimProcess
from .schedule import Action
from .script import make_model
from .services import make_services, make_tools

STOPPED = TERMINAL_PHASES | {"paused"}
MAX_NESTING = 2
COMPARE_START_TIMES = True
"""A holder's pid is judged with the start time in its name (``owners``); the ``start_time``
mutation judges it by its pid alone."""
"""How deep delayed store calls may nest (a delay inside what happens during a delay)."""


@dataclass(frozen=True)
class Scenario:
    """What a seed sets up before its schedule: runs, processes on hosts, the model's script."""

    runs: int
    hosts: tuple[str, ...]
    script: list[dict[str, Any]]
    ttl: float = 30.0
    name: str = "sim"
    """Prefix of the run ids (``NAME-run-0``...), so that schedules can share one store."""
    concurrent: tuple[bool, ...] = ()
    """Per process: drive like ``Agent.arun`` (a turn's tools run concurrently) instead of ``run``."""
    last_first: bool = False
    """Concurrent tools finish newest first (else oldest first)."""
    agent_options: dict[str, Any] = field(default_factory=dict)
    """Options of the simulated ``Agent`` (unknown-outcome policy, snapshot interval, attempts)."""
    saved_by_version: int | None = None
    """When set, each run is stored before the schedule as an agent of that (older)
    ``business_state_version`` saved it, so the first process to open it migrates it
    (``ODD_CONFIG``: a migration that returns no object)."""


@dataclass
class Ack:
    """A save the store acknowledged to a process."""

    run_id: str
    seq: int
    checksum: str
    process: int


@dataclass
class Journal:
    """What happened, for the invariants: saves, leases, ends of run calls, misdeeds seen live."""

    acks: list[Ack] = field(default_factory=list)
    leases: list[tuple[str, int, str, int]] = field(default_factory=list)
    stale_writes: list[str] = field(default_factory=list)
    fence_drops: list[str] = field(default_factory=list)
    losses: list[str] = field(default_factory=list)
    """Data the store lost (as its durability permits): invariants broken after one are its cost."""
    rewritten: set[str] = field(default_factory=set)
    moves: list[Move] = field(default_factory=list)
    """Records the world copied over another place (``moves``): the runs they landed in must be
    refused as damage; invariants broken by that damage are its cost."""
    ends: list[str] = field(default_factory=list)
    store_refused: str | None = None
    """Why the store was refused at open (``lossy.opened``): then nothing ran, every run counts as
    ended with that clear error."""
    refused: set[str] = field(default_factory=set)
    """Runs whose save the write-time check refused (``UnloadableState``) because the world
    configured the agent with a migration whose result no load accepts (``ODD_CONFIG``): each ended with that clear
    error, nothing unloadable was written, so it counts as finished."""
    trace: list[str] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    """Run calls refused (``LeaseHeld``) while the run's live holder was provably dead on the
    refused process's host: a dead process's lease must never hold a resume off."""


class World:
    """Everything one schedule runs in. ``store`` is the real store all processes share."""

    def __init__(self, scenario: Scenario, store: Store, *, agent_options: dict[str, Any] | None = None) -> None:
        self.scenario = scenario
        self.store = store
        self.now = EPOCH
        self.owners: dict[str, tuple[SimProcess, int]] = {}
        self.strangers: dict[tuple[str, int], int] = {}
        """(host, pid) -> start time of programs that are not the world's, given a dead process's pid."""
        self.graveyard: list[tuple[contextvars.Context, Generator[str, None, None]]] = []
        """Killed processes' generators: kept, so that no ``finally`` of theirs runs while the world does."""
        self.stack: list[SimProcess] = []
        self.journal = Journal()
        self.services = make_services()
        self.run_ids = [f"{scenario.name}-run-{index}" for index in range(scenario.runs)]
        self.tasks = {run_id: f"simulated task of {run_id}" for run_id in self.run_ids}
        self.agent = Agent(
            make_model(scenario.script),
            make_tools(self),
            store=store,
            lease_ttl=scenario.ttl,
            max_turns=12,
            **{**scenario.agent_options, **(agent_options or {})},
        )
        self.processes = [
            SimProcess(
                self,
                index,
                host,
                ProcessClock(self._now, self.sleep, f"boot-{host}"),
                concurrent=index < len(scenario.concurrent) and scenario.concurrent[index],
            )
            for index, host in enumerate(scenario.hosts)
        ]
        self._fences: dict[str, int] = {}
        self._forgetful = store if isinstance(store, Forgetful) else None
        self.misconfigured = scenario.saved_by_version is not None
        """The agent was given a migration whose result no load accepts: its refused saves are
        the right outcome (any other ``UnloadableState`` leaves the run stuck, which
        ``runs_finish`` reports)."""
        self.journal.store_refused = opened(store)
        self._phases: dict[str, tuple[int, str | None]] = {}
        self._armed: dict[tuple[int, str], tuple[str, float]] = {}
        self._actions: list[Action] = []
        self._cursor = 0
        self._depth = 0
        self._late: list[tuple[float, Callable[[], str]]] = []
        """Writes of processes killed with them in flight, each with the store time it lands at."""

    # ------------------------------------------------------------------ clocks

    def _now(self) -> float:
        return self.now

    def store_now(self) -> float:
        """The store service's clock: the one every lease is judged by."""
        return self.now

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def advance(self, seconds: float) -> None:
        """Move time on by ``seconds``; what falls due meanwhile happens, in time order."""
        target = self.now + seconds
        if self._forgetful is not None and int(target) > int(self.now):
            self._forgetful.sync()  # once a second of virtual time, what was written reaches disk
        while True:
            due = self._next_due(target)
            if due is None:
                break
            when, process, what = due
            self.now = max(self.now, when)
            if what == "late":
                landing = [write for at, write in self._late if at == when]
                self._late = [late for late in self._late if late[0] != when]
                self.journal.trace += [write() for write in landing]
            elif what == "act":
                # A concurrent tool is a thread: it lands even while its process is busy.
                self._on(process, functools.partial(process.deliver, nested=process.busy))
            else:
                process.next_beat = None
                self._on(process, process.beat)
        self.now = max(self.now, target)

    def _next_due(self, target: float) -> tuple[float, SimProcess, str] | None:
        best: tuple[float, SimProcess, str] | None = None
        for when, _ in self._late:
            if when <= target and (best is None or when < best[0]):
                best = (when, self.processes[0], "late")
        for process in self.processes:
            if process.dead:
                continue
            if process.act_deadline is not None and (not process.busy or process.concurrent):
                candidate = (process.act_deadline, process, "act")
                if candidate[0] <= target and (best is None or candidate[0] < best[0]):
                    best = candidate
            if process.next_beat is not None and not process.frozen:
                candidate = (process.next_beat, process, "beat")
                if candidate[0] <= target and (best is None or candidate[0] < best[0]):
                    best = candidate
        return best

    # ------------------------------------------------------------------ running processes

    def current(self) -> SimProcess | None:
        return self.stack[-1] if self.stack else None

    def current_index(self) -> int:
        process = self.current()
        return process.index if process is not None else -1

    def current_run(self) -> str:
        process = self.current()
        session = process.session if process is not None else None
        return session.run_id if session is not None else ""

    def _on(self, process: SimProcess, work: Callable[[], None]) -> None:
        self.stack.append(process)
        try:
            contextlib_context = process.context if not process.busy else None
            if contextlib_context is None:
                work()
            else:
                process.busy = True
                try:
                    contextlib_context.run(work)
                finally:
                    process.busy = False
        finally:
            self.stack.pop()

    def _run(self, process: SimProcess, *, forced: bool = False) -> None:
        if process.dead or process.busy or (process.frozen and not forced):
            return
        self._on(process, process.step)

    def on_crash_point(self, label: str) -> None:
        process = self.current()
        if process is None or process.crash_at is None or process.in_thread:
            return  # a kill lands on the process's own steps, not inside a tool thread finishing meanwhile
        prefix, remaining = process.crash_at
        if label.startswith(prefix):
            if remaining > 1:
                process.crash_at = (prefix, remaining - 1)
                return
            process.crash_at = None
            self.journal.trace.append(f"p{process.index} killed at {label}")
            raise Killed(label)

    def owner_is_dead(self, owner: str) -> bool:
        """The world's answer to ``leases.owner_is_dead``: provable only on the same host, where
        the name's pid is looked up with its start time (``owners``)."""
        return self._dead(owner, truth=False)

    def _dead(self, owner: str, *, truth: bool) -> bool:
        """Whether ``owner`` is dead: as judged from its name's pid and start time, or (``truth``)
        as the world knows it (the very process and incarnation that made the name)."""
        known = self.owners.get(owner)
        asking = self.current()
        if known is None or asking is None:
            return False
        process, incarnation = known
        if owner in process.ended and process.incarnation == incarnation and not self._acting(process, owner):
            return True  # a call of a live process that has ended, nothing of it acting (owners.mark_ended)
        if process.host != asking.host:
            return False
        if truth:
            return process.dead or process.incarnation != incarnation
        return not self._pid_runs(owner)

    def _pid_runs(self, owner: str) -> bool:
        """A process of the name's host runs with the name's pid and (``COMPARE_START_TIMES``) its
        start time: one of the world's, or a stranger that was given a dead one's pid (``reuse``)."""
        host, pid, start = owner.split(":")[:3]
        running = [(p.host, p.pid, p.pid * 7) for p in self.processes if not p.dead]
        running += [(where, number, began) for (where, number), began in self.strangers.items()]
        return any(
            (where, str(number)) == (host, pid) and (str(began) == start or not COMPARE_START_TIMES)
            for where, number, began in running
        )

    def owner_is_alive(self, owner: str) -> bool:
        """The world's answer to ``owners.owner_is_alive``, provable only on the same host: another
        process that runs (even frozen) in the incarnation that made the name, whether or not its
        call has ended (it cannot know); the asking process's own name only while its call is in
        progress or a tool of its may still act."""
        known = self.owners.get(owner)
        asking = self.current()
        if known is None or asking is None:
            return False
        process, _ = known
        if process.host != asking.host or not self._pid_runs(owner):
            return False
        if process is not asking:
            return True
        if owner in process.ended:
            return self._acting(process, owner)
        return process.owner == owner and process.guard is not None

    @staticmethod
    def _acting(process: SimProcess, owner: str) -> bool:
        """A tool of the ended call ``owner`` may still act (the count ``guard.acting`` keeps)."""
        return owners.still_acting(owner, process.ended[owner]) > 0

    # ------------------------------------------------------------------ faults

    def arm(self, process: int, primitive: str, fault: str, number: float) -> None:
        self._armed[(process, primitive)] = (fault, number)

    def take_fault(self, process: int, primitive: str) -> tuple[str | None, float]:
        found = self._armed.pop((process, primitive), None)
        return found if found is not None else (None, 0.0)

    def take_late(self, process: int) -> float | None:
        """When ``process``'s lease write was armed to outlive it (the ``late`` fault): the
        seconds after the death at which the store applies it."""
        fault = self._armed.get((process, "swap_head"))
        if fault is None or fault[0] != "late":
            return None
        del self._armed[(process, "swap_head")]
        return fault[1] or LATE_SECONDS

    def kill_in_flight(self, process: int, after: float, write: Callable[[], str]) -> None:
        """``process`` is killed while ``write`` is in flight: the store applies it ``after``
        seconds later, the process dead (as PostgreSQL commits a SIGKILLed client's transaction)."""
        self._late.append((self.now + after, write))
        self.journal.trace.append(f"p{process} killed with its lease write in flight")
        raise Killed("a lease write in flight")

    def note_refused(self, process: SimProcess, run_id: str) -> None:
        """A run call was refused the lease: noted when the live holder is provably dead here."""
        head = self.store.head_of(run_id)
        if head is None or head.owner is None or head.expires_at <= self.store_now():
            return
        if self._dead(head.owner, truth=True):
            self.journal.blocked.append(
                f"p{process.index} was refused {run_id} at {self.now - EPOCH:.1f}s: its holder {head.owner} is "
                f"dead (for {head.expires_at - self.store_now():.1f}s more)"
            )

    def meanwhile(self, count: int) -> None:
        """A delayed call: time passes and the next ``count`` actions happen meanwhile."""
        self.advance(2.0)
        if self._depth >= MAX_NESTING:
            return
        self._depth += 1
        try:
            for _ in range(count):
                if self._cursor >= len(self._actions):
                    break
                action = self._actions[self._cursor]
                self._cursor += 1
                self.perform(action)
        finally:
            self._depth -= 1

    # ------------------------------------------------------------------ journal

    def head_of(self, run_id: str) -> RunHead | None:
        return self.store.head_of(run_id) if run_id else None

    def note_lease(self, run_id: str, fence: int, owner: str, process: int) -> None:
        self.journal.leases.append((run_id, fence, owner, process))

    def note_head(self, run_id: str, head: RunHead, process: int) -> None:
        """A head swap landed (lease taken, renewed, released): its fence never goes down (A4)."""
        last = self._fences.get(run_id, 0)
        if head.fence < last:
            self.journal.fence_drops.append(f"p{process} set the fence of {run_id} back from {last} to {head.fence}")
        self._fences[run_id] = max(last, head.fence)

    def note_save(self, save: EncodedSave, process: int) -> None:
        """A record write applied: by the holder of the run's current fence, or a stale writer."""
        writer = self.processes[process]
        head = self.store.head_of(save.run_id)
        guard = writer.guard
        if head is not None and (guard is None or guard.fence != head.fence):
            self.journal.stale_writes.append(
                f"save {save.seq} ({save.label}) of {save.run_id} written by p{process} with fence "
                f"{guard.fence if guard else None} while the run's fence is {head.fence} (holder {head.owner})"
            )

    def note_acknowledged(self, save: EncodedSave, process: int) -> None:
        self.journal.acks.append(Ack(save.run_id, save.seq, save.checksum, process))

    def note_rewrite(self, run_id: str) -> None:
        self.journal.rewritten.add(run_id)

    def note_end(self, process: SimProcess, error: Exception | None) -> None:
        what = "returned" if error is None else f"raised {type(error).__name__}: {error}"
        self.journal.trace.append(f"p{process.index} run call {what}")
        self.journal.ends.append(type(error).__name__ if error is not None else "returned")
        if isinstance(error, UnloadableState) and self.misconfigured and process.session is not None:
            self.journal.refused.add(process.session.run_id)

    def phase(self, run_id: str) -> str | None:
        """The run's phase as last saved (None: never saved), read from the store as it is (read
        again only when the run's head has moved)."""
        head = self.store.head_of(run_id)
        seq = head.seq if head is not None else 0
        known = self._phases.get(run_id)
        if known is not None and known[0] == seq:
            return known[1]
        phase: str | None = None
        if seq > 0 or self.store.records_since(run_id, 0):
            try:
                phase = self.store.load(run_id).phase
            except UnbrokenError:
                phase = "damaged"
        self._phases[run_id] = (seq, phase)
        return phase

    def finished(self, run_id: str) -> bool:
        """The run stopped (a final phase or paused), or ended refusing a save no load accepts."""
        if self.journal.store_refused is not None or run_id in self.journal.refused:
            return True
        return self.phase(run_id) in STOPPED

    def remove_runs(self) -> None:
        for run_id in self.run_ids:
            self.store.delete_run(run_id)

    # ------------------------------------------------------------------ the schedule

    def perform(self, action: Action) -> None:
        """Do one action (nothing when it does not apply now)."""
        if not 0 <= action.process < len(self.processes):
            return
        process = self.processes[action.process]
        kind = action.kind
        if kind == "step":
            for _ in range(max(1, int(action.number))):
                self._run(process)
        elif kind in ("lose", "evict"):
            self._lose(action)
        elif kind == "move":
            self._move(action)
        elif kind == "advance":
            self.advance(action.number)
        elif kind == "freeze":
            process.frozen = True
        elif kind == "freeze_at":
            process.freeze_at = action.detail
        elif kind == "thaw":
            process.frozen = False
        elif kind == "kill" and not process.busy:
            process.kill()
        elif kind == "restart":
            process.restart()
        elif kind == "crash_at" and not process.dead:
            process.crash_at = (action.detail, max(1, int(action.number)))
        elif kind == "fault":
            primitive, _, fault = action.detail.partition(":")
            self.arm(action.process, primitive, fault, action.number)
        elif kind == "clock":
            process.clock.wall_offset += action.number
        elif kind == "reuse" and process.dead and (process.host, process.pid) not in self.strangers:
            # Another program gets the dead process's pid: it runs, with another start time.
            self.strangers[(process.host, process.pid)] = process.pid * 7 + 1
            self.journal.trace.append(f"p{process.index}'s pid {process.pid} reused by another program")
        elif kind == "lose_reply" and action.detail in self.services:
            self.services[action.detail].lose_next_reply = True

    def _lose(self, action: Action) -> None:
        """The store service loses what its durability permits (only a ``Forgetful`` store)."""
        store = self._forgetful
        if store is None:
            return
        if action.kind == "evict":
            # Not a loss a checked store permits: the world runs on an evicting store only when
            # the precondition check (lossy.opened) is off; what it breaks is a failure.
            evicted = store.evict(int(action.number))
            if evicted is not None:
                self._phases.clear()
                self.journal.trace.append(f"the store evicted {evicted} at {self.now - EPOCH:.1f}s")
            return
        store.restart(everything=action.detail == "everything")
        what = "everything" if action.detail == "everything" else "the writes of the last second"
        self._phases.clear()
        self.journal.losses.append(f"the store lost {what} at {self.now - EPOCH:.1f}s")
        self.journal.trace.append(self.journal.losses[-1])
        self.advance(RESTART_SECONDS)

    def _move(self, action: Action) -> None:
        """A stored record is copied over another place, behind the store's back (``moves``)."""
        moved = move_record(self.store, self.run_ids, int(action.number), action.detail)
        if moved is not None:
            self._phases.clear()
            self.journal.moves.append(moved)
            self.journal.trace.append(f"{moved} at {self.now - EPOCH:.1f}s")

    def _save_as_older_version(self, version: int) -> None:
        """Store each run's first save point as an agent of ``version`` wrote it (a deploy
        since then bumped ``business_state_version``): the next process to open it migrates."""
        model = self.agent.model
        for run_id in self.run_ids:
            task = self.tasks[run_id]
            state = RunState(
                run_id=run_id,
                task=task,
                provider=model.provider,
                messages=list(model.start_messages(task)),
                business_state_version=version,
                save_seq=1,
                created_at=self.now,
                updated_at=self.now,
            )
            self.store.append(encode_full(state, "start"), expect_seq=0)
        self.journal.trace.append(f"each run was saved by an agent of business_state_version {version}")

    def play(self, actions: list[Action], *, drain_steps: int = 400) -> None:
        """Play ``actions``, then let every process recover (no more faults) until every run is
        finished or ``drain_steps`` steps have been taken."""
        self._actions, self._cursor = actions, 0
        if self.journal.store_refused is not None:
            self.journal.trace.append(f"the store was refused at open: {self.journal.store_refused}")
            return
        if self.scenario.saved_by_version is not None:
            self._save_as_older_version(self.scenario.saved_by_version)
        with self._seams():
            while self._cursor < len(self._actions):
                action = self._actions[self._cursor]
                self._cursor += 1
                self.perform(action)
            self._drain(drain_steps)

    def _drain(self, budget: int) -> None:
        """No more faults: every process is thawed and restarted, and they take turns until
        every run is finished; then time moves past every deadline (acts still in flight land)
        and each process still inside a run call moves until that call ends."""
        self._armed.clear()
        for service in self.services.values():
            service.lose_next_reply = False
        for process in self.processes:
            process.frozen = False
            process.crash_at = process.freeze_at = None
            process.restart()
        idle_rounds = 0
        while budget > 0 and not all(self.finished(run_id) for run_id in self.run_ids):
            moved = False
            for process in self.processes:
                before = (process.driver is not None, len(self.journal.acks))
                self._run(process)
                budget -= 1
                moved |= before != (process.driver is not None, len(self.journal.acks))
            if not moved:
                idle_rounds += 1
                self.advance(self.scenario.ttl * 2 + 1)
                if idle_rounds > 8:
                    break
            else:
                idle_rounds = 0
        self.advance(self.scenario.ttl * 3)
        for process in self.processes:
            for _ in range(50):
                if process.driver is None:
                    break
                self._run(process)

    def close(self) -> None:
        """Once the world is checked: let go of the generators still open (killed or unfinished)."""
        for process in self.processes:
            process.kill()
        for context, generator in self.graveyard:
            with contextlib.suppress(BaseException):
                context.run(generator.close)
        self.graveyard.clear()

    @contextlib.contextmanager
    def _seams(self) -> Iterator[None]:
        """Answer "is that process dead" and "is it alive" from this world, and see every crash
        point reached."""
        real_dead, real_alive = leases.owner_is_dead, owners.owner_is_alive
        leases.owner_is_dead = self.owner_is_dead
        owners.owner_is_alive = self.owner_is_alive
        crashpoints.observe(self.on_crash_point)
        try:
            yield
        finally:
            crashpoints.observe(None)
            leases.owner_is_dead, owners.owner_is_alive = real_dead, real_alive


LATE_SECONDS = 1.0
"""How long after its writer's death a lease write in flight reaches the store (``late``), unless
the fault says."""

RESTART_SECONDS = 0.01
"""How long a store service's restart takes (a real one takes longer): store time moves on, as
it does past every real restart, which is what a fence's floor relies on (``next_fence``)."""


def _not_an_object(business_state: dict[str, Any]) -> Any:
    return [business_state]  # a migration bug: the state wrapped in a list


ODD_CONFIG: dict[str, Any] = {"business_state_version": 2, "business_state_migrations": {1: _not_an_object}}
"""Agent options an operator may configure that lead to a state no load accepts
(``acceptance.accept_fields``: ``business_state`` must be an object): a migration from version 1
that returns a list, run on runs saved at version 1 (``Scenario.saved_by_version``). The
write-time check (``codec.accept_before_save``) must refuse the migrated save before it is
acknowledged. (An out-of-range ``business_state_version`` is refused when the ``Agent`` is built.)"""
ODD_CONFIG_RATE = 0.04
"""How often a scenario's agent is configured so."""


def draw_scenario(
    rng: random.Random, script: Callable[[random.Random], list[dict[str, Any]]], name: str = "sim"
) -> Scenario:
    runs = rng.choice((1, 1, 2))
    processes = rng.choice((2, 3, 3))
    hosts = tuple("h0" if index == 0 or rng.random() < 0.6 else "h1" for index in range(processes))
    options = {
        "unknown_policy": rng.choice(("tell_model", "tell_model", "pause", "fail")),
        "snapshot_every": rng.choice((2, 5, 50)),
        "max_attempts": rng.choice((1, 3, 3)),
    }
    config = random.Random(f"{name}:config")  # its own stream: the rest of the seed draws as before
    odd = config.random() < ODD_CONFIG_RATE
    if odd:
        options.update(ODD_CONFIG)
    concurrent = tuple(rng.random() < 0.4 for _ in hosts)
    last_first = rng.random() < 0.5
    return Scenario(
        runs,
        hosts,
        script(rng),
        name=name,
        concurrent=concurrent,
        last_first=last_first,
        agent_options=options,
        saved_by_version=1 if odd else None,
    )
