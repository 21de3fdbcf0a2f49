"""One run of the sweep (its directory, store and journal) and the invariants checked on it.

After every death of the run's child: the store loads (no ``CorruptCheckpoint``), the run never
goes backwards, each tool call has at most one result. At the end: the run finishes like the
crash-free reference run, with the same messages (an honest "unknown outcome" aside) and a
settled ledger; the journal shows no side effect ran twice (``_repeats``); the user's check
finds no problem. On a copy of the world, recovering twice changes nothing that recovering
once did not."""

from __future__ import annotations

import dataclasses
import shutil
from typing import TYPE_CHECKING, Any

from ...errors import CorruptCheckpoint, RunNotFound
from ...state import RunState
from ...stores import open_store
from ._child import CHILD_INFO, WORLD_ENV, Job, child_error, run_child
from ._config import problems_of, sweep_token
from ._histories import comparable, is_unknown, tool_traffic, without_unknowns
from ._journal import CHAOS_DIR, capped_calls, journal_text, read_journal
from ._repeats import calls_of, judge, tally
from ._report import PointStats, Violation

if TYPE_CHECKING:
    from ._harness import Harness


class World:
    """One run's directory, store and checks against the reference."""

    def __init__(self, harness: Harness, name: str, stats: PointStats) -> None:
        self.harness = harness
        self.name = name
        self.stats = stats
        self.dir = harness.workdir / name
        if self.dir.exists():
            shutil.rmtree(self.dir)
        (self.dir / CHAOS_DIR).mkdir(parents=True)
        self.run_id = f"chaos-{sweep_token(harness.workdir)}-{name}"
        self.url = harness.kind.url(self.dir)
        self.previous: RunState | None = None
        self.deaths = 0
        """How many of this run's processes were killed (the crash-loop cap counts them too)."""
        self.finished: RunState | None = None

    def job(self, crash_at: str | None = None, *, observe: bool = False) -> Job:
        h = self.harness
        return Job(
            h.factory, h.task, self.run_id, self.url, self.dir, crash_at=crash_at, observe=observe, driver=h.driver
        )

    def fail(self, invariant: str, detail: str) -> None:
        self.harness.report.violations.append(Violation(self.name, invariant, detail))
        self.stats.violations += 1

    def child_error(self) -> str:
        return child_error(self.dir)

    def journal(self) -> list[dict[str, Any]]:
        return read_journal(self.dir)

    def discard(self) -> None:
        """Judge the journal, then delete the run's directory and store (unless the sweep keeps them)."""
        self.judge_journal()
        kind = self.harness.kind
        if self.harness.keep:
            return
        shutil.rmtree(self.dir, ignore_errors=True)
        if kind.drop_store is not None:
            kind.drop_store(self.dir)
        elif not kind.in_world:
            with open_store(self.url) as store:
                store.delete_run(self.run_id)

    def judge_journal(self) -> None:
        """Every execution of every tool call in every process of this run: count the repeats
        per tool, and report those that repeated a side effect (``_repeats``)."""
        report = self.harness.report
        calls = calls_of(self.name, self.journal())
        tally(report.tools, calls)
        for call in calls:
            violations, warnings = judge(call)
            for finding in violations:
                if finding.invariant == "side effect at most once":
                    report.double_effects += 1
                self.fail(finding.invariant, finding.detail)
            for finding in warnings:
                report.add_finding(finding, warning=True)

    def run_check(self) -> None:
        """The user's check on this finished run's directory: each problem is a violation."""
        harness = self.harness
        if harness.check is None:
            return
        harness.report.checks += 1
        for problem in problems_of(harness.check, harness.check_spec, self.dir, WORLD_ENV):
            self.fail("user check", problem)

    def load(self) -> RunState | None:
        """Load the run as a fresh process would; record a violation if it does not load."""
        report = self.harness.report
        report.loads += 1
        with open_store(self.url) as store:
            try:
                return store.load(self.run_id)
            except RunNotFound:
                return None
            except CorruptCheckpoint as exc:
                report.corrupt_loads += 1
                self.fail("store loads", f"CorruptCheckpoint: {exc}")
                return None

    def check_after_death(self) -> RunState | None:
        state = self.load()
        if state is None:
            if self.previous is not None:
                self.fail("store loads", "the run disappeared")
            return None
        prev = self.previous
        if prev is not None:
            for name in ("turns", "tokens_used", "save_seq"):
                if getattr(state, name) < getattr(prev, name):
                    self.fail("never goes backwards", f"{name} went {getattr(prev, name)} -> {getattr(state, name)}")
            if state.messages[: len(prev.messages)] != prev.messages:
                self.fail("never goes backwards", "saved messages were changed or lost")
        traffic = tool_traffic(state.messages)
        for call_id, answers in traffic.results.items():
            if len(answers) > 1:
                self.fail("one result per tool_use", f"{call_id} has {len(answers)} results")
            if call_id not in traffic.uses:
                self.fail("one result per tool_use", f"a result answers unknown call {call_id}")
        self.previous = state
        return state

    def check_final(self) -> None:
        state = self.check_after_death()
        reference = self.harness.reference
        self.run_check()
        if state is None:
            self.fail("finishes", "the run never saved anything")
            return
        self.finished = state
        if state.phase != reference.phase:
            self.fail("finishes", f"phase {state.phase}, the crash-free run ended {reference.phase}")
            return
        traffic = tool_traffic(state.messages)
        for call_id in traffic.uses:
            if len(traffic.results.get(call_id, [])) != 1:
                self.fail("one result per tool_use", f"{call_id} has {len(traffic.results.get(call_id, []))} results")
        self.compare_messages(state)
        with open_store(self.url) as store:
            pending = [e.key for e in store.ledger_list(self.run_id) if e.status == "pending"]
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
        got_results = tool_traffic(state.messages).results
        want_results = tool_traffic(reference.messages).results
        honest_unknown: set[str] = set()
        capped = capped_calls(self.dir)  # noted by the engine's hook event, not read from the text
        for call_id, answers in got_results.items():
            wanted = want_results.get(call_id, [])
            if answers and wanted and answers[0] != wanted[0] and call_id in capped:
                # The engine's crash-loop cap: honest only if this run really died that often.
                if self.deaths < self.harness.max_attempts:
                    self.fail(
                        "honest crash-loop settlements",
                        f"{call_id} was settled as not run again after {self.deaths} deaths "
                        f"(max_attempts={self.harness.max_attempts})",
                    )
                self.harness.report.capped_results += 1
                honest_unknown.add(call_id)
            elif answers and wanted and answers[0] != wanted[0] and is_unknown(answers[0]):
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
            if without_unknowns(got, honest_unknown) != without_unknowns(want, honest_unknown):
                self.fail("same messages as a crash-free run", f"message {index} differs")
                return

    def recover_twice(self) -> None:
        """On a copy of this world, recover (no model call) twice: the second must change nothing."""
        copy = self.harness.workdir / f"{self.name}-recovery"
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(self.dir, copy)
        kind = self.harness.kind
        if kind.copy_store is not None:
            kind.copy_store(self.dir, copy)
        url = kind.url(copy)
        recovery = dataclasses.replace(self.job(), url=url, world=copy, recover_only=True)
        snapshots = []
        for attempt in (1, 2):
            (copy / CHAOS_DIR / CHILD_INFO).unlink(missing_ok=True)
            exit_ = run_child(recovery)
            if exit_.code != 0:
                detail = child_error(copy, default=f"exit {exit_}")
                self.fail("recovering twice = once", f"recovery {attempt} failed: {detail}")
                return
            with open_store(url) as store:
                state = store.load(self.run_id)
                ledger = [
                    {k: v for k, v in e.to_json().items() if k != "updated_at"} for e in store.ledger_list(self.run_id)
                ]
            snapshots.append((_without_account(comparable(state)), ledger, journal_text(copy)))
        self.harness.report.recoveries_compared += 1
        first, second = snapshots
        if second[0].pop("account") != _next_resume(first[0].pop("account"), first[0]["fields"]["phase"]):
            self.fail("recovering twice = once", "the second recovery was not recorded as one more resume")
        for index, what in enumerate(("state", "effect ledger", "tool executions")):
            if first[index] != second[index]:
                self.fail("recovering twice = once", f"the second recovery changed the {what}")
        shutil.rmtree(copy, ignore_errors=True)
        if kind.drop_store is not None:
            kind.drop_store(copy)


def _without_account(state: dict[str, Any]) -> dict[str, Any]:
    """A recovery is a resume, and each resume writes one record counting it (issue 21 item 6):
    the save point and the resume count are set aside, compared by ``_next_resume``."""
    fields = dict(state["fields"])
    account = (fields.pop("save_seq"), fields.pop("resumes", 0))
    return {**state, "fields": fields, "account": account}


def _next_resume(account: tuple[int, int], phase: str) -> tuple[int, int]:
    """The account after one more recovery of a run left in ``phase``: a running run is resumed
    (one record); a finished one, or one waiting for a person, is not."""
    save_seq, resumes = account
    return (save_seq + 1, resumes + 1) if phase in ("awaiting_model", "running_tools") else account
