"""Fork and rewind (issue 11 item 4). The run: one turn that emails a and b (two side-effect
calls), then a final answer. Save points: 1 start, 2 model_turn (both calls open), 3 tool_result
(a), 4 tools_done, 5 completed. The last tests kill a real child process while forking."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from features_child import SCRIPT, make_agent
from features_crash import child, sent
from features_scripts import tool_results

from unbroken import Agent, ConfigError, LeaseHeld, open_store, ops
from unbroken.cli import main
from unbroken.leases import acquire

BOTH = ["a@example.com", "b@example.com"]


class World:
    def __init__(self, tmp_path: Path) -> None:
        self.url = f"sqlite:///{tmp_path / 'runs.db'}"
        self.outbox = tmp_path / "outbox.jsonl"

    def agent(self) -> Agent:
        return make_agent(self.url, str(self.outbox), SCRIPT, approval=False)

    def sent(self) -> list[str]:
        return sent(self.outbox)


@pytest.fixture
def world(tmp_path: Path) -> World:
    made = World(tmp_path)
    assert made.agent().run("Email a and b", run_id="r1").status == "completed"
    assert made.sent() == BOTH
    return made


def test_a_fork_shares_the_history_up_to_its_save_point_and_leaves_the_original_alone(world: World) -> None:
    with open_store(world.url) as store:
        before = store.history("r1")
        made = ops.fork(store, "r1", at=4, new_run_id="f")
        assert store.history("r1") == before
        original, forked = store.load("r1"), store.load("f")
    assert made.run_id == "f" and made.forked_from == "r1"
    assert forked.messages == original.messages[: len(forked.messages)]
    assert (forked.turns, forked.phase) == (1, "awaiting_model")
    assert world.agent().run(run_id="f").status == "completed"


def test_calls_open_at_the_fork_point_that_the_original_ran_are_settled_never_re_run(world: World) -> None:
    with open_store(world.url) as store:
        made = ops.fork(store, "r1", at=2, new_run_id="f")
    assert sorted(entry.call_id for entry in made.settled) == ["toolu_a", "toolu_b"]
    assert made.effects_after == []
    result = world.agent().run(run_id="f")
    assert result.status == "completed"
    assert world.sent() == BOTH  # nothing sent again
    assert result.state is not None
    assert [block["content"] for block in tool_results(result.state.messages)] == [
        "sent to a@example.com",
        "sent to b@example.com",
    ]


def test_effects_the_original_made_after_the_fork_point_are_listed(world: World) -> None:
    with open_store(world.url) as store:
        made = ops.fork(store, "r1", at=1, new_run_id="f")
    assert [(entry.call_id, entry.status) for entry in made.effects_after] == [
        ("toolu_a", "succeeded"),
        ("toolu_b", "succeeded"),
    ]
    assert made.settled == []


def test_a_call_the_original_never_started_runs_in_the_fork_under_its_own_key(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "outbox.jsonl"
    gated = make_agent(url, str(outbox), SCRIPT, approval=True)
    assert gated.run("Email a and b", run_id="r1").status == "awaiting_approval"
    with open_store(url) as store:
        ops.fork(store, "r1", at=store.history("r1")[-1].seq, new_run_id="f")
        original_keys = {call.idempotency_key for call in store.load("r1").pending_calls}
        fork_keys = {call.idempotency_key for call in store.load("f").pending_calls}
    assert original_keys.isdisjoint(fork_keys)
    assert make_agent(url, str(outbox), SCRIPT, approval=False).run(run_id="f").status == "completed"
    assert sent(outbox) == BOTH
    with open_store(url) as store:
        assert ops.pending_approvals(store, "r1")[0].status == "requested"  # the original still waits


def test_a_fork_asks_again_for_approvals_given_to_the_original(tmp_path: Path) -> None:
    url, outbox = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path / "outbox.jsonl"
    gated = make_agent(url, str(outbox), SCRIPT, approval=True)
    gated.run("Email a and b", run_id="r1")
    with open_store(url) as store:
        ops.approve(store, "r1", "toolu_a")
        ops.approve(store, "r1", "toolu_b")
        ops.fork(store, "r1", at=store.history("r1")[-1].seq, new_run_id="f")
    assert gated.run(run_id="f").status == "awaiting_approval"
    assert sent(outbox) == []


def test_a_fork_at_a_save_point_with_a_call_in_doubt_is_refused(world: World) -> None:
    with open_store(world.url) as store:
        entry = next(e for e in store.ledger_list("r1") if e.call_id == "toolu_b")
        store.ledger_put(replace(entry, status="pending", result=None))
        with pytest.raises(ConfigError, match="in doubt"):
            ops.fork(store, "r1", at=2, new_run_id="f")
        assert not store.exists("f")


def test_forking_twice_returns_the_same_fork_and_another_origin_is_refused(world: World) -> None:
    with open_store(world.url) as store:
        first = ops.fork(store, "r1", at=2, new_run_id="f")
        assert ops.fork(store, "r1", at=2, new_run_id="f") == first
        assert len(store.history("f")) == 1
        with pytest.raises(ConfigError, match="already exists"):
            ops.fork(store, "r1", at=1, new_run_id="f")
        with pytest.raises(ConfigError, match="no save point 99"):
            ops.fork(store, "r1", at=99, new_run_id="g")


def test_rewind_keeps_the_old_branch_and_goes_on_from_the_save_point(world: World) -> None:
    with open_store(world.url) as store:
        made = ops.rewind(store, "r1", to=2)
        assert made.kept_as == "r1.branch-5"
        assert store.load("r1.branch-5").phase == "completed"
        assert store.history("r1")[-1].seq == 6  # save numbers go on: new calls get new keys
        assert store.load("r1").phase == "running_tools"
    assert world.agent().run(run_id="r1").status == "completed"
    assert world.sent() == BOTH  # the calls open at save 2 were settled from the ledger


def test_rewind_is_refused_while_the_run_is_live(world: World) -> None:
    with open_store(world.url) as store:
        lease = acquire(store, "r1", "someone-else:1:2:3", 60.0)
        with pytest.raises(LeaseHeld):
            ops.rewind(store, "r1", to=2)
        store.release_lease(lease)
        assert not store.exists("r1.branch-5")


def test_the_cli_forks_and_lists_the_effects_made_after_the_save_point(world: World) -> None:
    runner = CliRunner()
    forked = runner.invoke(main, ["fork", "r1", "--at", "1", "--as", "f", "--store", world.url])
    assert forked.exit_code == 0, forked.output
    assert "made 2 side effect(s) after save 1" in forked.output and "send_email" in forked.output
    rewound = runner.invoke(main, ["rewind", "r1", "--to", "4", "--store", world.url])
    assert rewound.exit_code == 0, rewound.output
    assert "r1.branch-5" in rewound.output


# --------------------------------------------------------------------------- crashes


@pytest.mark.parametrize("point", ["fork.before:1", "fork.after:1"])
def test_a_crash_while_forking_loses_nothing_and_the_fork_never_re_sends(world: World, point: str) -> None:
    args = ["fork", "--store", world.url, "--run-id", "r1", "--at", "2", "--as", "f"]
    child(*args, crash_at=point)
    with open_store(world.url) as store:
        assert store.exists("f") == (point == "fork.after:1")
        assert store.load("r1").phase == "completed"
    assert child(*args) == {"run_id": "f", "after": []}
    resumed = child("run", "--store", world.url, "--run-id", "f", "--outbox", str(world.outbox), "--no-approval")
    assert resumed == {"status": "completed", "turns": 2}
    assert world.sent() == BOTH


@pytest.mark.slow
@pytest.mark.parametrize("point", ["fork.after:1", "rewind.before:1", "rewind.after:1"])
def test_a_crash_while_rewinding_keeps_both_branches(world: World, point: str) -> None:
    code = f"from unbroken import open_store, ops; ops.rewind(open_store({world.url!r}), 'r1', to=2)"
    env = dict(os.environ, UNBROKEN_CRASH_AT=point)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with open_store(world.url) as store:
        made = ops.rewind(store, "r1", to=2) if store.history("r1")[-1].seq == 5 else None
        assert store.load("r1.branch-5").phase == "completed"
        assert store.load("r1").phase == "running_tools"
        assert made is None or made.kept_as == "r1.branch-5"
    assert world.agent().run(run_id="r1").status == "completed"
    assert world.sent() == BOTH
