"""The incident unbroken exists to prevent: the agent process is OOM-killed (SIGKILL) after
send_email ran but before its result was recorded. On resume the customer must still have
received exactly one email."""

from __future__ import annotations

from crash_checks import history_problems, is_unknown, run_child, tool_results
from crash_driver import CUSTOMER
from crash_service import CountingService

from unbroken import open_store, resolve_call
from unbroken.state import occurrence_key

KILL_AFTER_SEND = "tool.after_execute:1"


def crash_then_resume(store_url: str, run_id: str, service: CountingService, *extra: str) -> dict[str, object]:
    args = ["agent", "--script", "seed", "--store", store_url, "--run-id", run_id, "--service", str(service.path)]
    crashed = run_child([*args, *extra], crash_at=KILL_AFTER_SEND)
    assert crashed.killed, crashed.stderr
    email_key = occurrence_key(run_id, 2, 0, "toolu_email")  # the first turn's save A is save point 2
    assert service.effects("send") == {email_key: 1}, "the email went out before the kill"
    resumed = run_child([*args, *extra])
    assert resumed.returncode == 0, resumed.stderr
    return resumed.outcome


def emails_to_customer(service: CountingService) -> int:
    return sum(1 for row in service.rows() if row["endpoint"] == "send" and row["body"].startswith(CUSTOMER))


def test_with_an_outbox_probe_the_customer_gets_one_email_and_the_model_its_real_result(
    store_url: str, run_id: str, service: CountingService
) -> None:
    outcome = crash_then_resume(store_url, run_id, service, "--probe")
    assert outcome["status"] == "completed"
    assert emails_to_customer(service) == 1
    with open_store(store_url) as store:
        state = store.load(run_id)
        (entry,) = store.ledger_list(run_id)
    (answer,) = tool_results(state.messages)["toolu_email"]
    assert answer["content"] == f"sent message 1 to {CUSTOMER}"
    assert not answer.get("is_error")
    assert (entry.status, entry.attempts) == ("succeeded", 1)
    assert history_problems(state.messages) == []


def test_without_a_probe_the_customer_gets_one_email_and_the_model_is_told_the_outcome_is_unknown(
    store_url: str, run_id: str, service: CountingService
) -> None:
    outcome = crash_then_resume(store_url, run_id, service)
    assert outcome["status"] == "completed"
    assert outcome["reconciled"] == [["toolu_email", "send_email", "unknown"]]
    assert emails_to_customer(service) == 1
    with open_store(store_url) as store:
        state = store.load(run_id)
        (entry,) = store.ledger_list(run_id)
    (answer,) = tool_results(state.messages)["toolu_email"]
    assert is_unknown(answer)
    assert "interrupted" in answer["content"]
    assert entry.status == "unknown"
    assert history_problems(state.messages) == []


def test_with_the_pause_policy_a_person_settles_it_and_the_run_finishes_with_one_email(
    store_url: str, run_id: str, service: CountingService
) -> None:
    outcome = crash_then_resume(store_url, run_id, service, "--policy", "pause")
    assert outcome["status"] == "paused"
    with open_store(store_url) as store:
        resolve_call(store, run_id, "toolu_email", result="the customer confirmed they got it")
    args = ["agent", "--script", "seed", "--store", store_url, "--run-id", run_id, "--service", str(service.path)]
    finished = run_child([*args, "--policy", "pause"])
    assert finished.outcome["status"] == "completed"
    assert emails_to_customer(service) == 1
    with open_store(store_url) as store:
        state = store.load(run_id)
        (entry,) = store.ledger_list(run_id)
    (answer,) = tool_results(state.messages)["toolu_email"]
    assert answer["content"] == "the customer confirmed they got it"
    assert entry.status == "succeeded"
    assert history_problems(state.messages) == []
