"""Human approval before a tool runs (issue 11 item 3): in-process behaviour of the gate, the
decisions and their binding. The crash tests are in test_approval_crashes.py."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from features_scripts import final_turn, tool_results, tool_turn

from unbroken import Agent, RunResult, ScriptedModel, Store, Tool, ToolCall, open_store, ops, tool
from unbroken.approvals import args_digest
from unbroken.cli import main
from unbroken.errors import ApprovalError, ApprovalExpired, ConfigError


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'runs.db'}"
    opened = open_store(url)
    yield opened
    opened.close()


class Mailer:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def tool(self, **options: Any) -> Tool:
        @tool(effect="side_effect", **options)
        def send_email(to: str) -> str:
            """Send an email."""
            self.sent.append(to)
            return f"sent to {to}"

        return send_email


TWO_EMAILS = [
    tool_turn(("toolu_a", "send_email", {"to": "a@example.com"}), ("toolu_b", "send_email", {"to": "b@example.com"})),
    final_turn(),
]


def agent_for(store: Store, mailer: Mailer, script: list[dict[str, Any]] = TWO_EMAILS, **options: Any) -> Agent:
    return Agent(ScriptedModel(script), [mailer.tool(**options)], store)


def drive(agent: Agent, driver: str, task: str | None, run_id: str) -> RunResult:
    if driver == "async":
        return asyncio.run(agent.arun(task, run_id=run_id))
    return agent.run(task, run_id=run_id)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_gated_call_stops_the_run_awaiting_approval_before_anything_runs(store: Store, driver: str) -> None:
    mailer = Mailer()
    result = drive(agent_for(store, mailer, approval=True), driver, "email", "r1")
    assert result.status == "awaiting_approval"
    assert mailer.sent == []
    assert store.ledger_list("r1") == []  # not even an intent: nothing was started
    last = store.history("r1")[-1]
    assert (last.label, last.phase, last.snapshot) == ("approval_requested", "awaiting_approval", True)
    assert [(r.call_id, r.status) for r in ops.pending_approvals(store, "r1")] == [
        ("toolu_a", "requested"),
        ("toolu_b", "requested"),
    ]


def test_resuming_an_undecided_run_stops_again_without_a_new_save(store: Store) -> None:
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True)
    agent.run("email", run_id="r1")
    saves = len(store.history("r1"))
    assert agent.run(run_id="r1").status == "awaiting_approval"
    assert len(store.history("r1")) == saves
    assert mailer.sent == []


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_approved_calls_run_once_when_the_run_resumes(store: Store, driver: str) -> None:
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True)
    drive(agent, driver, "email", "r1")
    ops.approve(store, "r1", "toolu_a")
    ops.approve(store, "r1", "toolu_b")
    result = drive(agent, driver, None, "r1")
    assert result.status == "completed"
    assert mailer.sent == ["a@example.com", "b@example.com"]
    assert drive(agent, driver, None, "r1").status == "completed"
    assert mailer.sent == ["a@example.com", "b@example.com"]


def test_a_denied_call_gives_the_model_an_error_result_with_the_reason_and_never_runs(store: Store) -> None:
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True)
    agent.run("email", run_id="r1")
    ops.approve(store, "r1", "toolu_a")
    ops.deny(store, "r1", "toolu_b", reason="b has unsubscribed")
    result = agent.run(run_id="r1")
    assert result.status == "completed"
    assert mailer.sent == ["a@example.com"]
    assert result.state is not None
    denied = tool_results(result.state.messages)[1]
    assert denied["is_error"] is True
    assert "b has unsubscribed" in denied["content"]
    assert [entry.call_id for entry in store.ledger_list("r1")] == ["toolu_a"]


def test_approving_one_call_leaves_the_other_waiting(store: Store) -> None:
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True)
    agent.run("email", run_id="r1")
    ops.approve(store, "r1", "toolu_a")
    assert agent.run(run_id="r1").status == "awaiting_approval"
    assert mailer.sent == []  # no call of the turn starts while one still waits


def test_an_approval_rule_gates_only_the_calls_it_names(store: Store) -> None:
    mailer = Mailer()

    def outside(call: ToolCall) -> bool:
        return not str(call.input["to"]).endswith("@a.example.com")

    script = [
        tool_turn(("toolu_a", "send_email", {"to": "x@a.example.com"}), ("toolu_b", "send_email", {"to": "b@b.org"})),
        final_turn(),
    ]
    agent = agent_for(store, mailer, script, approval=outside)
    agent.run("email", run_id="r1")
    assert [r.call_id for r in ops.pending_approvals(store, "r1")] == ["toolu_b"]
    ops.approve(store, "r1", "toolu_b")
    assert agent.run(run_id="r1").status == "completed"
    assert mailer.sent == ["x@a.example.com", "b@b.org"]


def test_an_approval_with_the_digest_of_other_arguments_is_refused_and_records_nothing(store: Store) -> None:
    agent = agent_for(store, Mailer(), approval=True)
    agent.run("email", run_id="r1")
    saves = len(store.history("r1"))
    other = ToolCall("toolu_a", "send_email", {"to": "mallory@example.com"}, "any")
    with pytest.raises(ApprovalError, match="not the ones you were shown"):
        ops.approve(store, "r1", "toolu_a", digest=args_digest(other))
    assert len(store.history("r1")) == saves
    shown = ops.pending_approvals(store, "r1")[0].digest
    assert ops.approve(store, "r1", "toolu_a", digest=shown).status == "approved"


def test_a_stored_approval_for_other_arguments_is_not_applied(store: Store) -> None:
    """An approval record whose digest no longer matches the call (edited by hand, or a bug)
    is asked again instead of being applied."""
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True)
    agent.run("email", run_id="r1")
    ops.approve(store, "r1", "toolu_a")
    ops.approve(store, "r1", "toolu_b")
    state = store.decode("r1").state
    assert state.approvals is not None
    key = state.pending_calls[0].idempotency_key
    state.approvals[key]["digest"] = args_digest(ToolCall("x", "send_email", {"to": "mallory@example.com"}, "k"))
    from unbroken.codec import encode_full

    head = store.history("r1")[-1].seq
    state.save_seq = head + 1
    store.rewrite("r1", [encode_full(state, "edited")], expect_seq=head)
    assert agent.run(run_id="r1").status == "awaiting_approval"
    assert mailer.sent == []
    assert [(r.call_id, r.status) for r in ops.pending_approvals(store, "r1")] == [
        ("toolu_a", "requested"),
        ("toolu_b", "approved"),
    ]


def test_an_expired_request_cannot_be_approved_and_is_asked_again(store: Store) -> None:
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True, approval_ttl=0.2)
    agent.run("email", run_id="r1")
    first = ops.pending_approvals(store, "r1")[0]
    time.sleep(0.3)
    with pytest.raises(ApprovalExpired):
        ops.approve(store, "r1", "toolu_a")
    assert agent.run(run_id="r1").status == "awaiting_approval"
    again = ops.pending_approvals(store, "r1")[0]
    assert again.requested_at > first.requested_at
    assert mailer.sent == []


def test_a_denial_needs_a_reason_and_an_unknown_call_names_the_open_ones(store: Store) -> None:
    agent_for(store, Mailer(), approval=True).run("email", run_id="r1")
    with pytest.raises(ConfigError, match="reason"):
        ops.deny(store, "r1", "toolu_a", reason=" ")
    with pytest.raises(ApprovalError, match="open requests: toolu_a, toolu_b"):
        ops.approve(store, "r1", "toolu_zzz")


def test_a_run_waiting_for_approval_is_not_handed_to_workers(store: Store) -> None:
    store.submit("r1", "email")
    claimed = store.claim_runnable("w", 30.0)
    agent_for(store, Mailer(), approval=True).run("email", run_id="r1", owner=claimed[0].lease.owner)
    assert store.claim_runnable("w2", 30.0) == []


def test_the_cli_lists_approves_and_denies(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'cli.db'}")
    mailer = Mailer()
    agent = agent_for(store, mailer, approval=True)
    agent.run("email", run_id="r1")
    runner = CliRunner()
    listed = runner.invoke(main, ["approvals", "r1", "--store", store.url])
    assert listed.exit_code == 0, listed.output
    assert "toolu_a" in listed.output and "b@example.com" in listed.output
    assert runner.invoke(main, ["approve", "r1", "toolu_a", "--store", store.url]).exit_code == 0
    no_reason = runner.invoke(main, ["deny", "r1", "toolu_b", "--store", store.url])
    assert no_reason.exit_code == 2
    denied = runner.invoke(main, ["deny", "r1", "toolu_b", "--reason", "no", "--store", store.url])
    assert denied.exit_code == 0, denied.output
    again = runner.invoke(main, ["approve", "r1", "toolu_b", "--store", store.url])
    assert again.exit_code == 2 and "no open approval request" in again.output
    assert agent.run(run_id="r1").status == "completed"
    assert mailer.sent == ["a@example.com"]
