"""``unbroken simulate``: seeds, one seed replayed, a schedule file, a user's backend."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from unbroken.cli import main

HERE = Path(__file__).parent


def simulate(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.output


def test_seeds_that_keep_every_invariant_exit_0() -> None:
    code, output = simulate("--seeds", "4")
    assert code == 0, output
    assert "4 schedules on memory, 0 failed" in output


def test_replay_prints_the_schedule_and_what_happened() -> None:
    code, output = simulate("--replay", "--seed", "5")
    assert code == 0, output
    assert output.startswith("# seed 5: ")
    assert "# what happened:" in output


def test_a_schedule_file_replays_a_hole_and_exits_1(tmp_path: Path) -> None:
    # seed 760's world: p0 is frozen with its payment in flight; p1 takes over, its first save
    # is torn (the run call fails and releases the lease), p1 takes the released run and pays
    # again; p0's payment lands (the grace is not inherited: test_known_holes).
    schedule = tmp_path / "hole.txt"
    schedule.write_text(
        "step p0 3\nfault p1 2 write_record:torn\nfreeze_at p0 in_tool\nstep p0 1\nadvance p0 31\nstep p1 7\n"
    )
    code, output = simulate("--replay", "--seed", "760", "--schedule", str(schedule))
    assert code == 1
    assert "effects_once: payments applied key" in output


def test_a_users_broken_backend_is_caught_with_its_seed_and_a_shrunk_schedule() -> None:
    code, output = simulate("--seeds", "6", "--backend", f"{HERE / 'broken_backend.py'}:make")
    assert code == 1
    assert "FAILED; replay: unbroken simulate --replay --seed" in output
    assert "effects_once" in output and "schedule (shrunk):" in output


def test_the_same_users_backend_done_right_passes() -> None:
    code, output = simulate("--seeds", "6", "--backend", f"{HERE / 'broken_backend.py'}:correct")
    assert code == 0, output


def test_a_backend_that_is_not_a_store_is_a_clear_error() -> None:
    code, output = simulate("--seeds", "1", "--backend", "os:getcwd")
    assert code == 2
    assert "returned str, not a Store" in output
