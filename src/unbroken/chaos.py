"""The crash sweep: run an agent in child processes, kill them, resume, check the invariants.

Used by the reliability tests, ``python -m unbroken.reliability`` and ``unbroken chaos``.

1. A crash-free *reference run* (in a child) lists every crash point the run reaches and how
   often (``crashpoints.observe``), and gives the final messages every other run must end with.
2. ``sweep``: for each point and several n, a fresh run is SIGKILLed at the n-th hit
   (``crashpoints.arm``, the same switch as ``UNBROKEN_CRASH_AT``), then resumed (re-armed
   a few times, so crashes during recovery are covered too) until it finishes.
   ``random_kills``: the parent SIGKILLs the child at seeded random instants instead.
3. After every death the parent checks the store and the world; at the end it compares the
   run with the reference.

Children are forked (POSIX only), so a kill costs milliseconds. Every tool of the agent is
wrapped to append ``enter``/``exit`` lines to a journal in the run's directory: the count of
side-effecting executions per idempotency key comes from there, not from the agent's word.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import json
import os
import random
import select
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import crashpoints
from .errors import ConfigError, CorruptCheckpoint, ModelCallFailed, RunNotFound
from .model import ModelTurn, ToolSpec
from .runner import Agent
from .state import JSONValue, RunState, ToolCall
from .stores import open_store
from .stores.base import Store
from .tools import Tool

WORLD_ENV = "UNBROKEN_CHAOS_DIR"
"""Set in every child to the run's own directory: a place for the agent's fake services."""

AgentFactory = Callable[[Store], Agent]
UNKNOWN_PREFIX = "UNKNOWN OUTCOME"
_CHILD_TIMEOUT = 120.0


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class StoreKind:
    """How to give a run its own store. ``in_world``: the store lives inside the run's directory
    (so the world can be copied to test recovery on the copy)."""

    name: str
    url: Callable[[Path], str]
    in_world: bool = True


STORE_KINDS: dict[str, StoreKind] = {
    "sqlite": StoreKind("sqlite", lambda world: f"sqlite:///{world / 'store.db'}"),
    "file": StoreKind("file", lambda world: f"file://{world / 'store'}"),
}
"""Stores the sweep knows. A server store is one more line: ``StoreKind("postgres", lambda
world: URL, in_world=False)`` (each run gets its own run id, so they can share a database)."""


def load_factory(spec: str) -> AgentFactory:
    """``module:attr`` or ``path/to/file.py:attr``; ``attr`` is an ``Agent`` (its store is
    replaced) or a callable taking the store and returning an ``Agent``."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise ConfigError(f"--agent {spec!r} must look like module:attr or path/to/file.py:attr")
    try:
        if target.endswith(".py"):
            path = Path(target).resolve()
            module_spec = importlib.util.spec_from_file_location(path.stem, path)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"cannot load {path}")
            sys.path.insert(0, str(path.parent))
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[path.stem] = module
            module_spec.loader.exec_module(module)
        else:
            if os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())
            module = importlib.import_module(target)
        found = getattr(module, attr)
    except (ImportError, AttributeError, OSError) as exc:
        raise ConfigError(f"cannot load agent {spec!r}: {exc}") from exc
    if isinstance(found, Agent):
        template = found

        def from_template(store: Store) -> Agent:
            template.store = store
            return template

        return from_template
    if not callable(found):
        raise ConfigError(f"{spec!r} is neither an Agent nor a function returning one")

    def from_factory(store: Store) -> Agent:
        agent = found(store)
        if not isinstance(agent, Agent):
            raise ConfigError(f"{spec!r} returned {type(agent).__name__}, not an unbroken Agent")
        return agent

    return from_factory


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Violation:
    """One broken invariant: where (``target``), which rule, and what was seen."""

    target: str
    invariant: str
    detail: str


@dataclass
class PointStats:
    """What happened at one crash point (or ``random`` for outside kills)."""

    label: str
    hits: int = 0
    runs: int = 0
    kills: int = 0
    resumes: int = 0
    unknown_results: int = 0
    violations: int = 0


@dataclass
class ChaosReport:
    """The outcome of a sweep. ``ok`` when no invariant was broken."""

    store_kind: str
    mode: str
    points: dict[str, PointStats] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    runs: int = 0
    kills: int = 0
    resumes: int = 0
    loads: int = 0
    corrupt_loads: int = 0
    double_effects: int = 0
    recoveries_compared: int = 0
    unknown_results: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.violations

    def merge(self, other: ChaosReport) -> None:
        for label, stats in other.points.items():
            mine = self.points.setdefault(label, PointStats(label, stats.hits))
            mine.runs += stats.runs
            mine.kills += stats.kills
            mine.resumes += stats.resumes
            mine.unknown_results += stats.unknown_results
            mine.violations += stats.violations
        self.violations += other.violations
        for name in ("runs", "kills", "resumes", "loads", "corrupt_loads", "double_effects", "recoveries_compared"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.unknown_results += other.unknown_results
        self.seconds += other.seconds


# --------------------------------------------------------------------------- the child


class _RefusingModel:
    """Wraps the agent's model for a recovery-only run: reconciliation happens, then the first
    model call fails, so the run stops right after recovering (at its save point)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.provider = inner.provider

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def complete(self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None) -> ModelTurn:
        raise RuntimeError("recovery only: no model call")

    async def acomplete(
        self, messages: Sequence[JSONValue], tools: Sequence[ToolSpec], system: str | None
    ) -> ModelTurn:
        raise RuntimeError("recovery only: no model call")


def _journal_line(world: Path, entry: dict[str, Any]) -> None:
    fd = os.open(world / "journal.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def _journaled(tool: Tool, world: Path) -> Tool:
    """The same tool, logging each execution's start and end to the world's journal."""
    original = tool.fn
    wants_call = tool.takes_call

    def args_for(call: ToolCall, kwargs: dict[str, Any]) -> dict[str, Any]:
        return {**kwargs, "call": call} if wants_call else kwargs

    def mark(what: str, call: ToolCall) -> None:
        _journal_line(world, {"at": what, "key": call.idempotency_key, "tool": tool.name, "effect": tool.effect})

    if tool.is_async:

        async def run_async(*, call: ToolCall, **kwargs: Any) -> Any:
            mark("enter", call)
            value = await original(**args_for(call, kwargs))
            mark("exit", call)
            return value

        return dataclasses.replace(tool, fn=run_async, takes_call=True)

    def run_sync(*, call: ToolCall, **kwargs: Any) -> Any:
        mark("enter", call)
        value = original(**args_for(call, kwargs))
        mark("exit", call)
        return value

    return dataclasses.replace(tool, fn=run_sync, takes_call=True)


@dataclass(frozen=True)
class _Job:
    factory: AgentFactory
    task: str
    run_id: str
    url: str
    world: Path
    crash_at: str | None = None
    recover_only: bool = False
    observe: bool = False


def _child_main(job: _Job) -> int:
    os.environ[WORLD_ENV] = str(job.world)
    if job.crash_at:
        os.environ[crashpoints.ENV_VAR] = job.crash_at
    crashpoints.arm(job.crash_at)
    seen: dict[str, int] = {}
    crashpoints.observe((lambda label: seen.__setitem__(label, seen.get(label, 0) + 1)) if job.observe else None)
    store = open_store(job.url)
    agent = job.factory(store)
    agent.tools = {name: _journaled(tool, job.world) for name, tool in agent.tools.items()}
    if job.recover_only:
        agent.model = _RefusingModel(agent.model)
    try:
        result = agent.run(job.task, run_id=job.run_id)
        status = result.status
    except ModelCallFailed:
        if not job.recover_only:
            raise
        status = "recovered"
    finally:
        store.close()
    (job.world / "child.json").write_text(json.dumps({"status": status, "points": seen}))
    return 0


def _fork(job: _Job) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return pid
    code = 70
    try:
        code = _child_main(job)
    except BaseException:
        with contextlib.suppress(BaseException):
            (job.world / "child-error.txt").write_text(traceback.format_exc())
        code = 1
    finally:
        os._exit(code)


@dataclass(frozen=True)
class _Exit:
    killed: bool  # died of SIGKILL
    by_parent: bool
    code: int | None
    seconds: float


def _wait(pid: int, kill_after: float | None = None) -> _Exit:
    """Wait for the child; with ``kill_after``, SIGKILL it if it is still running by then."""
    started = time.perf_counter()
    by_parent = False
    limit = _CHILD_TIMEOUT if kill_after is None else kill_after
    pidfd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([pidfd], [], [], limit)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            by_parent = kill_after is not None
    finally:
        os.close(pidfd)
    _, status = os.waitpid(pid, 0)
    seconds = time.perf_counter() - started
    if os.WIFSIGNALED(status):
        return _Exit(os.WTERMSIG(status) == signal.SIGKILL, by_parent, None, seconds)
    return _Exit(False, False, os.WEXITSTATUS(status), seconds)


# --------------------------------------------------------------------------- checks


def _tool_uses(messages: Sequence[JSONValue]) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    """(tool_use ids in order, results per id) for Anthropic, OpenAI Chat and Responses shapes."""
    uses: list[str] = []
    results: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        kind = message.get("type")
        if kind == "function_call":
            uses.append(str(message.get("call_id")))
        elif kind == "function_call_output":
            results.setdefault(str(message.get("call_id")), []).append(dict(message))
        elif message.get("role") == "tool":
            results.setdefault(str(message.get("tool_call_id")), []).append(dict(message))
        for call in message.get("tool_calls") or []:
            if isinstance(call, Mapping):
                uses.append(str(call.get("id")))
        content = message.get("content")
        if isinstance(content, list):
            for block in content:
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "tool_use":
                    uses.append(str(block.get("id")))
                elif block.get("type") == "tool_result":
                    results.setdefault(str(block.get("tool_use_id")), []).append(dict(block))
    return uses, results


def _result_text(result: Mapping[str, Any]) -> str:
    content = result.get("content", result.get("output", ""))
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, Mapping))
    return str(content)


def _is_unknown(result: Mapping[str, Any]) -> bool:
    return _result_text(result).startswith(UNKNOWN_PREFIX)


def _comparable(state: RunState) -> dict[str, Any]:
    fields = state.small_fields()
    fields.pop("updated_at")
    return {"fields": fields, "messages": state.messages}


class _World:
    """One run's directory, store and checks against the reference."""

    def __init__(self, harness: _Harness, name: str, stats: PointStats) -> None:
        self.harness = harness
        self.name = name
        self.stats = stats
        self.dir = harness.workdir / name
        if self.dir.exists():
            shutil.rmtree(self.dir)
        self.dir.mkdir(parents=True)
        self.run_id = f"chaos-{name}"
        self.url = harness.kind.url(self.dir)
        self.previous: RunState | None = None
        self.finished: RunState | None = None
        self.reported: set[str] = set()

    def job(self, crash_at: str | None = None, *, observe: bool = False) -> _Job:
        h = self.harness
        return _Job(h.factory, h.task, self.run_id, self.url, self.dir, crash_at=crash_at, observe=observe)

    def fail(self, invariant: str, detail: str) -> None:
        self.harness.report.violations.append(Violation(self.name, invariant, detail))
        self.stats.violations += 1

    def child_error(self) -> str:
        path = self.dir / "child-error.txt"
        return path.read_text().strip().splitlines()[-1] if path.exists() else "no details"

    def journal(self) -> list[dict[str, Any]]:
        path = self.dir / "journal.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def load(self) -> RunState | None:
        """Load the run as a fresh process would; record a violation if it does not load."""
        report = self.harness.report
        report.loads += 1
        store = open_store(self.url)
        try:
            return store.load(self.run_id)
        except RunNotFound:
            return None
        except CorruptCheckpoint as exc:
            report.corrupt_loads += 1
            self.fail("store loads", f"CorruptCheckpoint: {exc}")
            return None
        finally:
            store.close()

    def check_after_death(self) -> RunState | None:
        state = self.load()
        if state is None:
            if self.previous is not None:
                self.fail("store loads", "the run disappeared")
            self.check_journal()
            return None
        prev = self.previous
        if prev is not None:
            for name in ("turns", "tokens_used", "save_seq"):
                if getattr(state, name) < getattr(prev, name):
                    self.fail("never goes backwards", f"{name} went {getattr(prev, name)} -> {getattr(state, name)}")
            if state.messages[: len(prev.messages)] != prev.messages:
                self.fail("never goes backwards", "saved messages were changed or lost")
        uses, results = _tool_uses(state.messages)
        for call_id, answers in results.items():
            if len(answers) > 1:
                self.fail("one result per tool_use", f"{call_id} has {len(answers)} results")
            if call_id not in uses:
                self.fail("one result per tool_use", f"a result answers unknown call {call_id}")
        self.check_journal()
        self.previous = state
        return state

    def check_journal(self) -> None:
        done: dict[str, int] = {}
        for line in self.journal():
            if line["effect"] != "side_effect":
                continue
            key = line["key"]
            if line["at"] == "enter" and done.get(key) and key not in self.reported:
                self.reported.add(key)
                self.harness.report.double_effects += 1
                self.fail("side effect at most once", f"{line['tool']} ran again for key {key} after it completed")
            if line["at"] == "exit":
                done[key] = done.get(key, 0) + 1

    def check_final(self) -> None:
        state = self.check_after_death()
        reference = self.harness.reference
        if state is None:
            self.fail("finishes", "the run never saved anything")
            return
        self.finished = state
        if state.phase != reference.phase:
            self.fail("finishes", f"phase {state.phase}, the crash-free run ended {reference.phase}")
            return
        uses, results = _tool_uses(state.messages)
        for call_id in uses:
            if len(results.get(call_id, [])) != 1:
                self.fail("one result per tool_use", f"{call_id} has {len(results.get(call_id, []))} results")
        self.compare_messages(state)
        store = open_store(self.url)
        try:
            pending = [e.key for e in store.ledger_list(self.run_id) if e.status == "pending"]
        finally:
            store.close()
        if pending:
            self.fail("ledger settled", f"{len(pending)} ledger entries still pending after the run finished")

    def compare_messages(self, state: RunState) -> None:
        reference = self.harness.reference
        if len(state.messages) != len(reference.messages):
            self.fail(
                "same messages as a crash-free run",
                f"{len(state.messages)} messages, the crash-free run has {len(reference.messages)}",
            )
            return
        effects = self.harness.effects
        _, got_results = _tool_uses(state.messages)
        _, want_results = _tool_uses(reference.messages)
        honest_unknown: set[str] = set()
        for call_id, answers in got_results.items():
            wanted = want_results.get(call_id, [])
            if answers and wanted and answers[0] != wanted[0] and _is_unknown(answers[0]):
                tool = self.harness.call_tools.get(call_id)
                if effects.get(tool or "") != "side_effect":
                    self.fail(
                        "honest unknown outcomes", f"{call_id} ({tool}) reported unknown but is not a side effect"
                    )
                honest_unknown.add(call_id)
        self.stats.unknown_results += len(honest_unknown)
        self.harness.report.unknown_results += len(honest_unknown)
        for index, (got, want) in enumerate(zip(state.messages, reference.messages, strict=True)):
            if got == want:
                continue
            if _without_unknowns(got, honest_unknown) != _without_unknowns(want, honest_unknown):
                self.fail("same messages as a crash-free run", f"message {index} differs")
                return

    def recover_twice(self) -> None:
        """On a copy of this world, recover (no model call) twice: the second must change nothing."""
        copy = self.harness.workdir / f"{self.name}-recovery"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(self.dir, copy)
        url = self.harness.kind.url(copy)
        h = self.harness
        snapshots = []
        for attempt in (1, 2):
            (copy / "child.json").unlink(missing_ok=True)
            job = _Job(h.factory, h.task, self.run_id, url, copy, recover_only=True)
            exit_ = _wait(_fork(job))
            if exit_.code != 0:
                error = copy / "child-error.txt"
                detail = error.read_text().strip().splitlines()[-1] if error.exists() else f"exit {exit_}"
                self.fail("recovering twice = once", f"recovery {attempt} failed: {detail}")
                return
            store = open_store(url)
            try:
                state = store.load(self.run_id)
                ledger = [
                    {k: v for k, v in e.to_json().items() if k != "updated_at"} for e in store.ledger_list(self.run_id)
                ]
            finally:
                store.close()
            journal = (copy / "journal.jsonl").read_text() if (copy / "journal.jsonl").exists() else ""
            snapshots.append((_comparable(state), ledger, journal))
        h.report.recoveries_compared += 1
        first, second = snapshots
        for index, what in enumerate(("state", "effect ledger", "tool executions")):
            if first[index] != second[index]:
                self.fail("recovering twice = once", f"the second recovery changed the {what}")
        shutil.rmtree(copy, ignore_errors=True)


def _without_unknowns(message: Any, call_ids: set[str]) -> Any:
    """``message`` with the tool results of ``call_ids`` blanked (to compare the rest)."""
    if not isinstance(message, Mapping):
        return message
    if message.get("tool_call_id") in call_ids or message.get("call_id") in call_ids:
        return {"blank": True}
    content = message.get("content")
    if not isinstance(content, list):
        return message
    blanked = [{"blank": True} if isinstance(b, Mapping) and b.get("tool_use_id") in call_ids else b for b in content]
    return {**message, "content": blanked}


# --------------------------------------------------------------------------- the harness


class _Harness:
    def __init__(self, factory: AgentFactory, task: str, kind: StoreKind, workdir: Path, mode: str) -> None:
        self.factory = factory
        self.task = task
        self.kind = kind
        self.workdir = workdir
        self.report = ChaosReport(kind.name, mode)
        self.reference: RunState
        self.reference_seconds = 0.0
        self.points: dict[str, int] = {}
        self.effects: dict[str, str] = {}
        self.call_tools: dict[str, str] = {}
        self._serial = 0

    def name(self, prefix: str) -> str:
        self._serial += 1
        return f"{prefix}-{self._serial:04d}"

    def run_reference(self) -> None:
        world = _World(self, "reference", PointStats("reference"))
        started = time.perf_counter()
        exit_ = _wait(_fork(world.job(observe=True)))
        self.reference_seconds = time.perf_counter() - started
        if exit_.code != 0:
            raise ConfigError(f"the crash-free run of the agent failed: {world.child_error()}")
        info = json.loads((world.dir / "child.json").read_text())
        if info["status"] != "completed":
            raise ConfigError(
                f"the crash-free run ended {info['status']!r}, not 'completed'; chaos needs an agent whose "
                "scripted model finishes the task"
            )
        self.points = dict(info["points"])
        state = world.load()
        assert state is not None
        self.reference = state
        store = open_store(world.url)
        try:
            agent = self.factory(store)
            self.effects = {name: tool.effect for name, tool in agent.tools.items()}
        finally:
            store.close()
        for line in world.journal():
            self.effects.setdefault(line["tool"], line["effect"])
        for message in state.messages:
            content = message.get("content") if isinstance(message, Mapping) else None
            for block in content if isinstance(content, list) else []:
                if isinstance(block, Mapping) and block.get("type") == "tool_use":
                    self.call_tools[str(block.get("id"))] = str(block.get("name"))
            for call in (message.get("tool_calls") or []) if isinstance(message, Mapping) else []:
                self.call_tools[str(call.get("id"))] = str((call.get("function") or {}).get("name"))
            if isinstance(message, Mapping) and message.get("type") == "function_call":
                self.call_tools[str(message.get("call_id"))] = str(message.get("name"))
        shutil.rmtree(world.dir, ignore_errors=True)

    def finish(self, world: _World, max_resumes: int) -> None:
        """Resume (unarmed) until the run completes, then run the final checks."""
        for _ in range(max_resumes):
            exit_ = _wait(_fork(world.job()))
            world.stats.resumes += 1
            self.report.resumes += 1
            if exit_.code == 0:
                world.check_final()
                return
            if exit_.killed:
                world.fail("finishes", "an unarmed resume was killed")
            else:
                world.fail("resumes cleanly", f"resume exited {exit_.code}: {world.child_error()}")
                return
        world.fail("finishes", f"not finished after {max_resumes} resumes")


def crash_points(factory: AgentFactory, task: str, *, store_kind: str = "sqlite", workdir: Path) -> dict[str, int]:
    """The crash points a crash-free run of the agent reaches, with how many times each."""
    harness = _Harness(factory, task, STORE_KINDS[store_kind], workdir, "listing")
    harness.run_reference()
    return dict(harness.points)


def _pick(count: int, per_label: int | None) -> list[int]:
    if per_label is None or count <= per_label:
        return list(range(1, count + 1))
    if per_label == 1:
        return [1]
    step = (count - 1) / (per_label - 1)
    return sorted({1 + round(i * step) for i in range(per_label)})


def sweep(
    factory: AgentFactory,
    task: str,
    *,
    store_kind: str = "sqlite",
    workdir: Path,
    per_label: int | None = 3,
    rearm: int = 2,
    max_resumes: int = 6,
    recover_checks: bool = True,
    labels: Sequence[str] | None = None,
) -> ChaosReport:
    """Kill a run at every crash point the reference run reaches, at ``per_label`` values of n
    spread over its hits (None: every n), resume until done and check every invariant."""
    started = time.perf_counter()
    harness = _Harness(factory, task, STORE_KINDS[store_kind], workdir, "crash points")
    harness.run_reference()
    report = harness.report
    for label, hits in sorted(harness.points.items()):
        if labels is not None and label not in labels:
            continue
        stats = report.points.setdefault(label, PointStats(label, hits))
        for n in _pick(hits, per_label):
            world = _World(harness, harness.name(label.replace(".", "_")), stats)
            stats.runs += 1
            report.runs += 1
            finished = False
            for attempt in range(rearm):
                exit_ = _wait(_fork(world.job(f"{label}:{n}")))
                if exit_.code == 0:
                    world.check_final()
                    finished = True
                    break
                if not exit_.killed:
                    world.fail("resumes cleanly", f"child exited {exit_.code}: {world.child_error()}")
                    finished = True
                    break
                stats.kills += 1
                report.kills += 1
                if attempt:
                    stats.resumes += 1
                    report.resumes += 1
                world.check_after_death()
                if attempt == 0 and recover_checks and harness.kind.in_world:
                    world.recover_twice()
            if not finished:
                harness.finish(world, max_resumes)
            shutil.rmtree(world.dir, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report


def random_kills(
    factory: AgentFactory,
    task: str,
    *,
    store_kind: str = "sqlite",
    workdir: Path,
    kills: int = 30,
    seed: int = 0,
    kills_per_run: int = 6,
    max_resumes: int = 6,
) -> ChaosReport:
    """SIGKILL children from outside at seeded random instants (anywhere, not only at crash
    points) until ``kills`` kills have landed, resuming each run until it finishes. The seed
    fixes the sequence of delays; where each one lands depends on the machine's timing."""
    started = time.perf_counter()
    harness = _Harness(factory, task, STORE_KINDS[store_kind], workdir, f"random kills (seed {seed})")
    harness.run_reference()
    report = harness.report
    stats = report.points.setdefault("random", PointStats("random", 0))
    rng = random.Random(seed)
    span = max(harness.reference_seconds, 0.01) * 1.2
    while report.kills < kills:
        world = _World(harness, harness.name("random"), stats)
        stats.runs += 1
        report.runs += 1
        finished = False
        for attempt in range(kills_per_run):
            exit_ = _wait(_fork(world.job()), kill_after=rng.uniform(0.0, span))
            if attempt:
                stats.resumes += 1
                report.resumes += 1
            if exit_.code == 0:
                world.check_final()
                finished = True
                break
            if not exit_.killed:
                world.fail("resumes cleanly", f"child exited {exit_.code}: {world.child_error()}")
                finished = True
                break
            stats.kills += 1
            report.kills += 1
            world.check_after_death()
        if not finished:
            harness.finish(world, max_resumes)
        shutil.rmtree(world.dir, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report
