"""The effect ledger: idempotency keys, intents, outcomes and the never-twice rules (issue 3)."""

from __future__ import annotations

import pytest

from unbroken import EffectLedger, IdempotencyConflict, LeaseLost, Store, ToolCall, ToolResult
from unbroken.ledger import args_hash, unknown_result
from unbroken.state import idempotency_key

RUN = "ledger-run"


def email_call(call_id: str = "toolu_1", **overrides: object) -> ToolCall:
    arguments = {"to": "customer@example.com", "subject": "Your refund", **overrides}
    return ToolCall(call_id, "send_email", arguments, idempotency_key=idempotency_key(RUN, call_id))


class Counter:
    """An ``execute`` callable for ``run_once`` that counts how often it runs."""

    def __init__(self, content: str = "sent", is_error: bool = False) -> None:
        self.runs = 0
        self.content = content
        self.is_error = is_error

    def __call__(self) -> ToolResult:
        self.runs += 1
        return ToolResult("toolu_1", self.content, self.is_error)


def test_idempotency_key_depends_on_run_and_call_id_only() -> None:
    key = idempotency_key(RUN, "toolu_1")
    assert key == idempotency_key(RUN, "toolu_1")
    assert key != idempotency_key("other-run", "toolu_1")
    assert key != idempotency_key(RUN, "toolu_2")
    assert key.startswith("ub_") and len(key) == 43


def test_argument_hash_ignores_key_order_but_not_values_or_tool() -> None:
    call = email_call()
    reordered = ToolCall(call.id, call.name, dict(reversed(list(call.input.items()))), call.idempotency_key)
    assert args_hash(reordered) == args_hash(call)
    assert args_hash(email_call(subject="Other")) != args_hash(call)
    assert args_hash(ToolCall(call.id, "send_sms", call.input, call.idempotency_key)) != args_hash(call)


def test_claim_makes_a_pending_intent_durable_before_the_tool_runs(store: Store) -> None:
    call = email_call()
    claim = EffectLedger(store, RUN).claim(call)
    assert claim.outcome == "claimed"
    stored = store.ledger_get(RUN, call.idempotency_key)
    assert stored is not None
    assert (stored.status, stored.attempts, stored.tool, stored.call_id) == ("pending", 1, "send_email", "toolu_1")
    assert stored.args_hash == args_hash(call)
    assert stored.result is None


def test_claiming_a_pending_key_again_is_in_doubt_not_a_second_claim(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    ledger.claim(email_call())
    again = ledger.claim(email_call())
    assert (again.outcome, again.entry.status) == ("in_doubt", "pending")


def test_same_key_with_other_arguments_raises_conflict_and_executes_nothing(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    first = Counter()
    ledger.run_once(email_call(), first)
    second = Counter()
    with pytest.raises(IdempotencyConflict, match="Nothing was executed"):
        ledger.run_once(email_call(subject="Something else"), second)
    assert second.runs == 0
    stored = store.ledger_get(RUN, email_call().idempotency_key)
    assert stored is not None and stored.args_hash == args_hash(email_call())


def test_same_key_for_another_tool_raises_conflict(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    ledger.run_once(email_call(), Counter())
    call = email_call()
    with pytest.raises(IdempotencyConflict):
        ledger.claim(ToolCall(call.id, "send_sms", call.input, call.idempotency_key))


def test_a_succeeded_call_is_never_run_again_and_its_result_is_reused(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    execute = Counter("sent message 7")
    first = ledger.run_once(email_call(), execute)
    second = ledger.run_once(email_call(), execute)
    assert execute.runs == 1
    assert (first.how, second.how) == ("executed", "reused")
    assert second.content == "sent message 7" and not second.is_error
    stored = store.ledger_get(RUN, email_call().idempotency_key)
    assert stored is not None and (stored.status, stored.attempts) == ("succeeded", 1)


def test_a_failed_call_is_never_run_again_and_its_error_is_reused(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    execute = Counter("SMTPError: mailbox full", is_error=True)
    ledger.run_once(email_call(), execute)
    again = ledger.run_once(email_call(), execute)
    assert execute.runs == 1
    assert (again.content, again.is_error, again.how) == ("SMTPError: mailbox full", True, "reused")
    stored = store.ledger_get(RUN, email_call().idempotency_key)
    assert stored is not None and stored.status == "failed"


def test_a_reused_result_answers_the_asking_call_id(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    ledger.run_once(email_call(), Counter())
    call = email_call()
    other_id = ToolCall("toolu_again", call.name, call.input, call.idempotency_key)
    assert ledger.run_once(other_id, Counter()).call_id == "toolu_again"


def test_run_once_on_a_call_left_pending_waits_then_reports_unknown_without_running(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    ledger.claim(email_call())  # an executor that died before recording an outcome
    execute = Counter()
    result = ledger.run_once(email_call(), execute, wait=0.1)
    assert execute.runs == 0
    assert (result.is_error, result.how) == (True, "unknown")


def test_an_execute_that_raises_leaves_the_outcome_unknown_not_pending(store: Store) -> None:
    ledger = EffectLedger(store, RUN)

    def explode() -> ToolResult:
        raise ConnectionError("SMTP connection dropped mid-send")

    with pytest.raises(ConnectionError):
        ledger.run_once(email_call(), explode)
    stored = store.ledger_get(RUN, email_call().idempotency_key)
    assert stored is not None and stored.status == "unknown"
    execute = Counter()
    later = ledger.run_once(email_call(), execute, wait=5.0)
    assert execute.runs == 0 and later.how == "unknown"


def test_retry_counts_a_new_attempt_under_the_same_key(store: Store) -> None:
    ledger = EffectLedger(store, RUN)
    entry = ledger.claim(email_call()).entry
    again = ledger.retry(entry)
    stored = store.ledger_get(RUN, entry.key)
    assert stored is not None
    assert (again.key, again.attempts, stored.attempts, stored.status) == (entry.key, 2, 2, "pending")


def test_ledger_writes_are_refused_once_the_lease_is_lost(store: Store) -> None:
    lease = store.acquire_lease(RUN, "worker-a", 30.0)
    store.acquire_lease(RUN, "worker-b", 30.0, takeover_from="worker-a")
    ledger = EffectLedger(store, RUN, fence=lambda: lease.fence)
    with pytest.raises(LeaseLost):
        ledger.claim(email_call())
    assert store.ledger_get(RUN, email_call().idempotency_key) is None


def test_unknown_result_says_interrupted_unknown_and_verify_before_retrying() -> None:
    result = unknown_result(email_call(), "the tool has no probe")
    assert result.is_error and result.how == "unknown"
    text = result.content.lower()
    assert "interrupted" in text
    assert "may or may not have taken effect" in text
    assert "verify" in text and "before trying it again" in text
    assert email_call().idempotency_key in result.content and "the tool has no probe" in result.content
