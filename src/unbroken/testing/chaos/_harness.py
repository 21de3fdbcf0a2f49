"""The harness: the crash-free reference run every other run is compared with, and the steps
the sweeps share (start a run, run one child and judge how it ended, resume to the end)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ...errors import ConfigError
from ...state import RunState
from ...stores import open_store
from ._child import CHILD_INFO, DRIVERS, WORLD_ENV, Job, run_child
from ._config import AgentFactory, Check, StoreKind, problems_of
from ._histories import tool_traffic
from ._journal import CHAOS_DIR
from ._report import ChaosReport, PointStats
from ._world import World


class Harness:
    """One sweep's agent, driver, store kind, working directory, reference run and report.

    ``check`` (named ``check_spec`` in messages) runs on every finished run's directory;
    ``keep`` keeps every run's directory (and store) instead of deleting it."""

    def __init__(
        self,
        factory: AgentFactory,
        task: str,
        kind: StoreKind,
        workdir: Path,
        mode: str,
        *,
        driver: str = "sync",
        check: Check | None = None,
        check_spec: str = "",
        keep: bool = False,
    ) -> None:
        if driver not in DRIVERS:
            raise ConfigError(f"driver must be one of {', '.join(DRIVERS)}, not {driver!r}")
        self.factory = factory
        self.task = task
        self.kind = kind
        self.workdir = workdir
        self.driver = driver
        self.check = check
        self.check_spec = check_spec or getattr(check, "__name__", "check")
        self.keep = keep
        self.report = ChaosReport(kind.name, f"{mode}, {driver}")
        self.reference: RunState
        self.reference_seconds = 0.0
        self.points: dict[str, int] = {}
        self.effects: dict[str, str] = {}
        self.call_tools: dict[str, str] = {}
        self.max_attempts = 3
        self._serial = 0

    def run_reference(self) -> None:
        """Run the agent once without crashing: the crash points it reaches, its final state,
        each tool's effect class and the tool of each call."""
        world = World(self, f"{self.driver}-reference", PointStats("reference"))
        started = time.perf_counter()
        exit_ = run_child(world.job(observe=True))
        self.reference_seconds = time.perf_counter() - started
        if exit_.code != 0:
            raise ConfigError(f"the crash-free run of the agent failed: {world.child_error()}")
        info = json.loads((world.dir / CHAOS_DIR / CHILD_INFO).read_text())
        if info["status"] != "completed":
            raise ConfigError(
                f"the crash-free run ended {info['status']!r}, not 'completed'; chaos needs an agent whose "
                "scripted model finishes the task"
            )
        self.points = dict(info["points"])
        state = world.load()
        assert state is not None
        self.reference = state
        with open_store(world.url) as store:
            agent = self.factory(store)
            self.effects = {name: tool.effect for name, tool in agent.tools.items()}
            self.max_attempts = agent.max_attempts
        for line in world.journal():
            self.effects.setdefault(line["tool"], line["effect"])
        self.call_tools = tool_traffic(state.messages).names
        if self.check is not None:
            problems = problems_of(self.check, self.check_spec, world.dir, WORLD_ENV)
            if problems:
                raise ConfigError(
                    f"the check {self.check_spec} finds problems in the crash-free run, so it would fail every "
                    f"run: {'; '.join(problems[:5])}"
                )
        world.discard()

    def new_world(self, prefix: str, stats: PointStats) -> World:
        """A fresh run (its own directory and store), counted in ``stats`` and the report."""
        self._serial += 1
        world = World(self, f"{self.driver}-{prefix}-{self._serial:04d}", stats)
        stats.runs += 1
        self.report.runs += 1
        return world

    def count_resume(self, world: World) -> None:
        world.stats.resumes += 1
        self.report.resumes += 1

    def attempt(self, world: World, job: Job, kill_after: float | None = None) -> bool:
        """Run ``job`` in a child. True when the run is settled: it finished (and the final
        checks ran) or it failed (a violation). False when it was killed: the kill is counted
        and the store checked, and the run needs resuming."""
        exit_ = run_child(job, kill_after)
        if exit_.code == 0:
            world.check_final()
            return True
        if not exit_.killed:
            world.fail("resumes cleanly", f"child exited {exit_.code}: {world.child_error()}")
            return True
        world.stats.kills += 1
        world.deaths += 1
        self.report.kills += 1
        world.check_after_death()
        return False

    def finish(self, world: World, max_resumes: int) -> None:
        """Resume (unarmed) until the run completes, then run the final checks."""
        for _ in range(max_resumes):
            exit_ = run_child(world.job())
            self.count_resume(world)
            if exit_.code == 0:
                world.check_final()
                return
            if exit_.killed:
                world.deaths += 1
                world.fail("finishes", "an unarmed resume was killed")
            else:
                world.fail("resumes cleanly", f"resume exited {exit_.code}: {world.child_error()}")
                return
        world.fail("finishes", f"not finished after {max_resumes} resumes")
