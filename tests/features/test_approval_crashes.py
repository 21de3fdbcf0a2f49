"""Approvals under SIGKILL (issue 11 item 3): a real child process is killed while the request
is saved, while a decision is saved, and while the approved call executes. Nothing is lost,
nothing is sent twice, and a decision never applies to anything but its own call."""

from __future__ import annotations

from pathlib import Path

import pytest
from features_crash import child, sent

from unbroken import open_store, ops
from unbroken.errors import ApprovalError

BOTH = ["a@example.com", "b@example.com"]


@pytest.fixture(params=["sqlite", pytest.param("file", marks=pytest.mark.slow)])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    store = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else f"file://{tmp_path / 'runs'}"
    return {"store": store, "outbox": str(tmp_path / "outbox.jsonl")}


def run(where: dict[str, str], *, driver: str = "sync", crash_at: str | None = None) -> dict[str, object] | None:
    return child(
        "run", "--store", where["store"], "--run-id", "r1", "--outbox", where["outbox"], "--driver", driver,
        crash_at=crash_at,
    )  # fmt: skip


def decide(where: dict[str, str], mode: str, call: str, *, crash_at: str | None = None) -> None:
    """Approve or deny; in a child killed at ``crash_at``, else in this process (quicker)."""
    if crash_at is not None:
        child(mode, "--store", where["store"], "--run-id", "r1", "--call", call, crash_at=crash_at)
        return
    with open_store(where["store"]) as store:
        if mode == "approve":
            ops.approve(store, "r1", call)
        else:
            ops.deny(store, "r1", call, reason="not wanted")


def statuses(where: dict[str, str]) -> list[tuple[str, str]]:
    with open_store(where["store"]) as store:
        return [(request.call_id, request.status) for request in ops.pending_approvals(store, "r1")]


@pytest.mark.parametrize("driver", ["sync", pytest.param("async", marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    "point",
    [pytest.param("save.approval_requested.before:1", marks=pytest.mark.slow), "save.approval_requested.after:1"],
)
def test_a_crash_while_the_request_is_saved_sends_nothing_and_asks_again(
    where: dict[str, str], point: str, driver: str
) -> None:
    run(where, driver=driver, crash_at=point)
    assert run(where, driver=driver) == {"status": "awaiting_approval", "turns": 1}
    assert statuses(where) == [("toolu_a", "requested"), ("toolu_b", "requested")]
    assert sent(Path(where["outbox"])) == []
    decide(where, "approve", "toolu_a")
    decide(where, "approve", "toolu_b")
    assert run(where, driver=driver) == {"status": "completed", "turns": 2}
    assert sent(Path(where["outbox"])) == BOTH


def test_a_crash_before_the_decision_is_durable_leaves_the_request_open(where: dict[str, str]) -> None:
    run(where)
    decide(where, "approve", "toolu_a", crash_at="save.approval_decided.before:1")
    assert statuses(where) == [("toolu_a", "requested"), ("toolu_b", "requested")]
    assert run(where) == {"status": "awaiting_approval", "turns": 1}
    decide(where, "approve", "toolu_a")
    decide(where, "deny", "toolu_b")
    assert run(where) == {"status": "completed", "turns": 2}
    assert sent(Path(where["outbox"])) == ["a@example.com"]


def test_a_crash_after_the_decision_is_durable_keeps_it_and_it_applies_once(where: dict[str, str]) -> None:
    run(where)
    decide(where, "deny", "toolu_b", crash_at="save.approval_decided.after:1")
    assert statuses(where) == [("toolu_a", "requested"), ("toolu_b", "denied")]
    with open_store(where["store"]) as store, pytest.raises(ApprovalError):
        ops.approve(store, "r1", "toolu_b")  # decided: a second decision is refused
    decide(where, "approve", "toolu_a")
    assert run(where) == {"status": "completed", "turns": 2}
    assert sent(Path(where["outbox"])) == ["a@example.com"]


@pytest.mark.parametrize(
    "point",
    [
        "ledger.after_intent:1",
        pytest.param("tool.before_execute:1", marks=pytest.mark.slow),
        "tool.after_execute:1",
        pytest.param("tool.after_outcome:1", marks=pytest.mark.slow),
        pytest.param("tool.after_execute:2", marks=pytest.mark.slow),
        pytest.param("save.tools_done.before:1", marks=pytest.mark.slow),
    ],
)
def test_a_crash_while_approved_calls_execute_never_sends_twice(where: dict[str, str], point: str) -> None:
    run(where)
    decide(where, "approve", "toolu_a")
    decide(where, "approve", "toolu_b")
    run(where, crash_at=point)
    assert run(where) == {"status": "completed", "turns": 2}
    assert sent(Path(where["outbox"])) == BOTH
    assert statuses(where) == []  # the next turn dropped the decided requests (they stay in the history)


@pytest.mark.slow
def test_a_crash_while_an_approved_call_executes_under_arun_never_sends_twice(where: dict[str, str]) -> None:
    run(where, driver="async")
    decide(where, "approve", "toolu_a")
    decide(where, "approve", "toolu_b")
    run(where, driver="async", crash_at="tool.after_execute:1")
    assert run(where, driver="async") == {"status": "completed", "turns": 2}
    assert sent(Path(where["outbox"])) == BOTH
