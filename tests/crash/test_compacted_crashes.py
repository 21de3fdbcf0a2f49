"""Crash safety of a compacted run resumed from its tail (issue 16 item 4).

A child process runs a long agent with compaction on and snapshots every 5 saves, and is
SIGKILLed at a named crash point: around a compaction save, inside the store's write of a
snapshot record, or after an email was sent and before its outcome was saved. A second child
resumes it through the windowed load (``window.load_window``: the newest snapshot and the records
after it) and finishes. Then: no acknowledged save was lost or changed, no email was sent twice
or never, and the history is one a provider accepts. The long sweep and random kills are slow.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crash_checks import history_problems, tool_results
from crash_service import CountingService

from unbroken import open_store
from unbroken.codec import StoredRecord
from unbroken.crashpoints import ENV_VAR

DRIVER = Path(__file__).with_name("compacted_driver.py")
TURNS = 30
FIRST_SPAN = 8  # the tail read a 30-turn run needs to take the path a 1,000,000-turn run takes


@dataclass
class Case:
    store_url: str
    run_id: str
    service: CountingService
    turns: int = TURNS

    def args(self, *extra: str) -> list[str]:
        return [
            sys.executable,
            str(DRIVER),
            "--store",
            self.store_url,
            "--run-id",
            self.run_id,
            "--service",
            str(self.service.path),
            "--turns",
            str(self.turns),
            "--first-span",
            str(FIRST_SPAN),
            *extra,
        ]

    def run(self, *extra: str, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
        env = {key: value for key, value in os.environ.items() if key != ENV_VAR}
        if crash_at is not None:
            env[ENV_VAR] = crash_at
        return subprocess.run(self.args(*extra), env=env, capture_output=True, text=True, timeout=60, check=False)

    def records(self) -> list[StoredRecord]:
        store = open_store(self.store_url)
        try:
            return store.backend.records_after(self.run_id, 0)
        finally:
            store.close()

    def labels(self) -> list[tuple[str, bool]]:
        store = open_store(self.store_url)
        try:
            return [(info.label, info.snapshot) for info in store.history(self.run_id)]
        finally:
            store.close()

    def resume_and_check(self) -> dict[str, Any]:
        """Resume after a kill; check the resume read only the tail (if the run was compacted by
        then), finished, kept every acknowledged record, and sent each email exactly once."""
        before = self.records()
        compacted = any(label == "compacted" for label, _ in self.labels())
        done = self.run()
        assert done.returncode == 0, done.stderr
        outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        assert outcome["status"] == "completed" and outcome["resumed"]
        assert (outcome["message_base"] > 0) == compacted, "a compacted run must resume from its tail"
        after = self.records()
        assert [(r.seq, _text(r.body), r.checksum) for r in after[: len(before)]] == [
            (r.seq, _text(r.body), r.checksum) for r in before
        ], "an acknowledged save was lost or changed"
        self.check_final()
        return outcome

    def check_final(self) -> None:
        store = open_store(self.store_url)
        try:
            final = store.load(self.run_id)  # strict: any damage raises CorruptCheckpoint
        finally:
            store.close()
        assert final.phase == "completed" and final.turns == self.turns + 1
        assert None not in final.messages and final.summary_upto > 0
        assert history_problems(final.messages) == []
        assert sorted(tool_results(final.messages)) == sorted(f"c{i}" for i in range(self.turns))
        sent = self.service.requests("send")
        assert len(sent) == self.turns and set(sent.values()) == {1}, f"emails sent: {sent}"


def _text(body: str | bytes) -> str:
    return body.decode() if isinstance(body, bytes) else body


@pytest.fixture
def case(store_url: str, run_id: str, service: CountingService) -> Case:
    return Case(store_url, run_id, service)


def killed(done: subprocess.CompletedProcess[str]) -> bool:
    return done.returncode == -9


def test_kill_before_a_compaction_save_resumes_from_the_tail_and_compacts_again(case: Case) -> None:
    assert killed(case.run(crash_at="save.compacted.before:2"))
    labels = [label for label, _ in case.labels()]
    assert labels.count("compacted") == 1 and labels[-1] != "compacted"

    case.resume_and_check()


def test_kill_after_a_compaction_save_resumes_with_that_summary_from_the_tail(case: Case) -> None:
    assert killed(case.run(crash_at="save.compacted.after:2"))
    labels = [label for label, _ in case.labels()]
    assert labels.count("compacted") == 2 and labels[-1] == "compacted"

    case.resume_and_check()


def test_kill_inside_a_snapshot_write_leaves_no_part_of_it_and_resumes_from_an_older_snapshot(case: Case) -> None:
    assert killed(case.run("--kill-in-snapshot", "7"))
    snapshots = [snapshot for _, snapshot in case.labels()]
    assert sum(snapshots) == 6  # the seventh snapshot record never landed, not even in part

    case.resume_and_check()


def test_kill_after_an_email_was_sent_of_a_compacted_run_never_sends_it_again(case: Case) -> None:
    assert killed(case.run(crash_at="tool.after_execute:20"))
    sent = case.service.requests("send")
    assert len(sent) == 20 and set(sent.values()) == {1}  # the 20th was sent, its outcome not saved

    case.resume_and_check()  # the probe finds it in the outbox: sent once in all


# ---------------------------------------------------------------------- the long sweep (slow)

SWEEP = [
    *(f"{label}:{n}" for label in ("save.model_turn.before", "save.model_turn.after") for n in (12, 19, 27)),
    *(f"{label}:{n}" for label in ("save.tools_done.before", "save.tools_done.after") for n in (12, 19, 27)),
    *(f"{label}:{n}" for label in ("tool.before_execute", "tool.after_execute") for n in (13, 22, 29)),
    *(f"save.compacted.{when}:{n}" for when in ("before", "after") for n in (1, 2, 3)),
    *(f"{label}:{n}" for label in ("model.before_call",) for n in (14, 25)),
]


@pytest.mark.slow
@pytest.mark.parametrize("crash_at", SWEEP)
def test_sweep_kill_at_each_point_of_a_compacted_run_loses_nothing_and_repeats_nothing(
    case: Case, crash_at: str
) -> None:
    assert killed(case.run(crash_at=crash_at)), f"{crash_at} was never reached"
    case.resume_and_check()


@pytest.mark.slow
@pytest.mark.parametrize("nth", range(5, 14))
def test_sweep_kill_inside_each_snapshot_write_loses_nothing_and_repeats_nothing(case: Case, nth: int) -> None:
    assert killed(case.run("--kill-in-snapshot", str(nth)))
    case.resume_and_check()


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
def test_random_kills_of_a_compacted_run_until_it_finishes_lose_nothing_and_repeat_nothing(
    store_url: str, run_id: str, service: CountingService, seed: int
) -> None:
    case = Case(store_url, run_id, service, turns=300)
    chance = random.Random(seed)
    kills = 0
    for _ in range(100):
        child = subprocess.Popen(case.args(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(chance.uniform(0.1, 0.6))
        child.kill()  # SIGKILL, wherever it is (no effect if it has finished)
        out, err = child.communicate(timeout=60)
        if child.returncode == 0:
            assert json.loads(out.strip().splitlines()[-1])["status"] == "completed", err
            break
        assert child.returncode == -9, err
        kills += 1
    else:
        pytest.fail("the run never finished between kills")
    assert kills > 0, "no kill landed: the run finished before the first one"
    case.check_final()
