"""The simulator runs the real engine in a seeded world and its invariants hold on correct code."""

from __future__ import annotations

import os
import subprocess
import sys

from sim_seeds import KNOWN_HOLES, WITHIN

from unbroken.testing.simulate import Action, from_text, run_seed, scenario_and_schedule, to_text


def test_a_seed_replays_the_same_schedule_and_outcome() -> None:
    first = run_seed(7)
    again = run_seed(7)
    assert first.actions == again.actions
    assert first.trace == again.trace
    assert [str(v) for v in first.violations] == [str(v) for v in again.violations]


def test_a_seed_replays_the_same_in_another_interpreter_whatever_its_hash_seed() -> None:
    program = (
        "from unbroken.testing.simulate import run_seed\n"
        "for seed in (11, 12):\n"
        "    outcome = run_seed(seed)\n"
        "    print(outcome.trace, [str(v) for v in outcome.violations])\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in ("1", "2")
    }
    assert len(outputs) == 1 and "run call" in next(iter(outputs))


def test_a_schedule_reads_back_from_its_text() -> None:
    _, actions = scenario_and_schedule(3)
    assert from_text(to_text(actions)) == actions
    assert Action.parse("fault p2 3 write_record:lost_reply") == Action("fault", 2, 3.0, "write_record:lost_reply")


def test_correct_code_keeps_every_invariant_on_the_fixed_seeds() -> None:
    outcomes = [run_seed(seed) for seed in range(WITHIN)]
    failing = {outcome.seed: [str(v) for v in outcome.violations] for outcome in outcomes if outcome.failed}
    assert sorted(failing) == sorted(KNOWN_HOLES), failing
