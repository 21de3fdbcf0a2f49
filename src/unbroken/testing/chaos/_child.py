"""One child process of the sweep: forked, armed to die at a crash point, waited for or killed.

Children are forked (POSIX only), so a kill costs milliseconds. A child drives the run with
``Agent.run`` or ``Agent.arun`` (the job's ``driver``), its tools wrapped by the journal. It
writes ``child.json`` (how the run ended, the crash points it reached) or, if it raised,
``child-error.txt`` into its run's ``.chaos/`` directory; the parent reads them back."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ... import crashpoints
from ...errors import ModelCallFailed
from ...model import ModelTurn, ToolSpec
from ...runner import Agent
from ...session import RunResult
from ...state import JSONValue
from ...stores import open_store
from ...stores.base import Store
from ._config import AgentFactory
from ._journal import CHAOS_DIR, Journal, capped_recorder

WORLD_ENV = "UNBROKEN_CHAOS_DIR"
"""Set in every child to the run's own directory: a place for the agent's fake services."""
DRIVERS = ("sync", "async")
"""``sync`` drives a run with ``Agent.run``, ``async`` with ``Agent.arun``."""

CHILD_INFO = "child.json"
CHILD_ERROR = "child-error.txt"
_CHILD_TIMEOUT = 120.0


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


@dataclass(frozen=True)
class Job:
    """What one child does: run (or only recover) ``run_id`` on the store at ``url``."""

    factory: AgentFactory
    task: str
    run_id: str
    url: str
    world: Path
    crash_at: str | None = None
    recover_only: bool = False
    observe: bool = False
    driver: str = "sync"


def instrumented(agent: Agent, journal: Journal, *, recover_only: bool) -> Agent:
    """The user's agent with every tool journaled (and, for a recovery-only run, a model that
    refuses to be called). Only chaos's child sees this agent."""
    agent = agent.replace(
        tools=[journal.wrap(tool) for tool in agent.tools.values()],
        hooks=[*agent.hooks, capped_recorder(journal.world)],
    )
    if recover_only:
        agent = agent.replace(model=_RefusingModel(agent.model))
    return agent


def _drive(agent: Agent, store: Store, job: Job) -> RunResult:
    if job.driver == "async":
        import asyncio

        return asyncio.run(agent.arun(job.task, run_id=job.run_id, store=store))
    return agent.run(job.task, run_id=job.run_id, store=store)


def _child_main(job: Job) -> int:
    os.environ[WORLD_ENV] = str(job.world)
    if job.crash_at:
        os.environ[crashpoints.ENV_VAR] = job.crash_at
    crashpoints.arm(job.crash_at)
    seen: dict[str, int] = {}
    crashpoints.observe((lambda label: seen.__setitem__(label, seen.get(label, 0) + 1)) if job.observe else None)
    store = open_store(job.url)
    journal = Journal(job.world, job.run_id, job.driver)
    try:
        agent = instrumented(job.factory(store), journal, recover_only=job.recover_only)
        status = _drive(agent, store, job).status
    except ModelCallFailed:
        if not job.recover_only:
            raise
        status = "recovered"
    finally:
        store.close()
    (job.world / CHAOS_DIR / CHILD_INFO).write_text(json.dumps({"status": status, "points": seen}))
    return 0


def _fork(job: Job) -> int:
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
            (job.world / CHAOS_DIR / CHILD_ERROR).write_text(traceback.format_exc())
        code = 1
    finally:
        os._exit(code)


@dataclass(frozen=True)
class Exit:
    """How a child ended."""

    killed: bool  # died of SIGKILL
    by_parent: bool
    code: int | None
    seconds: float


def _wait(pid: int, kill_after: float | None = None) -> Exit:
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
        return Exit(os.WTERMSIG(status) == signal.SIGKILL, by_parent, None, seconds)
    return Exit(False, False, os.WEXITSTATUS(status), seconds)


def run_child(job: Job, kill_after: float | None = None) -> Exit:
    """Run ``job`` in a forked child and wait for it; with ``kill_after`` (seconds), SIGKILL
    it if it is still running by then."""
    return _wait(_fork(job), kill_after)


def child_error(world: Path, default: str = "no details") -> str:
    """The last line of the traceback a failed child left in ``world`` (``default`` if none)."""
    path = world / CHAOS_DIR / CHILD_ERROR
    return path.read_text().strip().splitlines()[-1] if path.exists() else default
