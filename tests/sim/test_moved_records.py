"""The "record moved" fault (``simulate.moves``): a stored record copied over another place by a
store bug or a hand edit, over the next save of its run or the same save of another run. The
run it lands in must be refused as damage (``CorruptCheckpoint``), never loaded with the copy."""

from __future__ import annotations

import contextlib

import pytest

from unbroken.errors import CorruptCheckpoint
from unbroken.stores.memory import InMemoryStore
from unbroken.testing.contract._support import RunWriter
from unbroken.testing.simulate import from_text, play, scenario_and_schedule
from unbroken.testing.simulate.moves import move_record
from unbroken.testing.simulate.mutations import MUTATIONS

TO_THE_NEXT_SEQ = """
step p0 1
crash_at p0 1 tool.before_execute
step p0 2
restart p0
freeze_at p0 step
step p0 2
move p1 47 seq
"""
"""Seed 36 shrunk with the seq check off: save 3 copied over save 4 (3 added no message, so the
msg_start chain cannot tell them apart; only the record's own seq can)."""

DELTA_FROM_ANOTHER_RUN = """
step p2 3
step p0 5
step p0 8
step p2 3
step p2 7
step p0 1
move p1 52 run
"""
"""Seed 151 shrunk: run-0's save 5 (a delta, at the same message position) over run-1's save 5."""


def test_a_record_copied_over_the_next_save_of_its_run_is_refused() -> None:
    scenario, _ = scenario_and_schedule(36)
    outcome = play(scenario, from_text(TO_THE_NEXT_SEQ))
    assert any("overwritten by a copy" in line for line in outcome.trace)
    assert not outcome.failed, [str(v) for v in outcome.violations]


def test_without_the_seq_check_the_simulator_finds_the_moved_record() -> None:
    scenario, _ = scenario_and_schedule(36)
    with MUTATIONS["record_seq_check"]():
        outcome = play(scenario, from_text(TO_THE_NEXT_SEQ))
    assert [v.invariant for v in outcome.violations] == ["moves_detected"], [str(v) for v in outcome.violations]


@pytest.mark.parametrize(
    ("bound", "refusal"),
    [
        (True, "record 1 of run 'run-b' is damaged: checksum mismatch .* a record of another run"),
        (False, "save of run 'run-a'"),
    ],
    ids=["run-bound", "written-before"],
)
def test_a_snapshot_copied_from_another_run_is_refused_even_when_a_newer_snapshot_follows(
    bound: bool, refusal: str
) -> None:
    # Run-bound records fail their checksum in another run; records written before runs were
    # bound (the mutation writes them so) are still refused: every snapshot's run_id is checked.
    with contextlib.nullcontext() if bound else MUTATIONS["run_binding"]():
        store = InMemoryStore()
        for run_id in ("run-a", "run-b"):
            writer = RunWriter(store, run_id, snapshot_every=1)  # every save a snapshot
            for _ in range(3):
                writer.save()
        moved = move_record(store, ["run-a", "run-b"], 0, "run")  # run-a's save 1 over run-b's save 1
        assert moved is not None and (moved.run_id, moved.seq) == ("run-b", 1)
        with pytest.raises(CorruptCheckpoint, match=refusal):
            store.load("run-b")
        assert store.load("run-a").run_id == "run-a"


def test_a_delta_copied_from_another_run_at_the_same_place_is_refused() -> None:
    scenario, _ = scenario_and_schedule(151)
    outcome = play(scenario, from_text(DELTA_FROM_ANOTHER_RUN))
    assert any("overwritten by a copy" in line for line in outcome.trace)
    assert any("a record of another run" in line for line in outcome.trace), outcome.trace
    assert not outcome.failed, [str(v) for v in outcome.violations]


def test_without_the_run_binding_the_simulator_finds_the_delta_from_another_run() -> None:
    scenario, _ = scenario_and_schedule(151)
    with MUTATIONS["run_binding"]():
        outcome = play(scenario, from_text(DELTA_FROM_ANOTHER_RUN))
    assert [v.invariant for v in outcome.violations] == ["moves_detected"], [str(v) for v in outcome.violations]
