"""`unbroken import FILE --run-id ID`: a textbook checkpoint.json or a practice-article checkpoint
becomes a run in any store, and resuming it applies the normal reconcile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import Invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from unbroken import Agent, Found, ScriptedModel, Store, ToolCall, open_store, tool
from unbroken.errors import ConfigError, IncompatibleSchema
from unbroken.ops import import_run

USAGE = {"input_tokens": 100, "output_tokens": 10}
TASK = "Refund order 7 if it arrived broken"


def tool_use(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": arguments}


HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": TASK},
    {"role": "assistant", "content": [tool_use("toolu_1", "lookup", order_id="7")]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "arrived broken"}]},
]


def textbook(pending: dict[str, Any]) -> dict[str, Any]:
    """The textbook's six fields, saved after the model asked for ``pending`` and before it ran."""
    return {
        "version": 1,
        "task": TASK,
        "turns": 2,
        "tokensUsed": 220,
        "messages": [*HISTORY, {"role": "assistant", "content": [pending]}],
        "pendingToolUse": pending,
    }


def article(pending_action: dict[str, Any]) -> dict[str, Any]:
    return {
        "run_id": "order-7",
        "step_id": 2,
        "phase": "pre_tool",
        "messages": list(HISTORY),
        "business_state": {"order": "7"},
        "pending_action": pending_action,
        "schema_version": 3,
    }


class Shop:
    """The world the agent acts on: what was looked up and refunded."""

    def __init__(self) -> None:
        self.lookups: list[str] = []
        self.refunds: list[str] = []


def agent_on(store: Store, shop: Shop, *, probe_finds: bool | None = None) -> Agent:
    @tool(effect="read_only")
    def lookup(order_id: str) -> str:
        """Look an order up."""
        shop.lookups.append(order_id)
        return "arrived broken"

    def refunded_already(call: ToolCall) -> Found:
        return Found("refund R-1 exists")

    @tool(effect="side_effect", probe=refunded_already if probe_finds else None)
    def refund(order_id: str) -> str:
        """Refund an order."""
        shop.refunds.append(order_id)
        return "refunded"

    final = {"content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "usage": USAGE}
    script = [final] * 2 + [final]  # answers 1-2 are in the imported history; answer 3 ends the run
    return Agent(ScriptedModel(script), tools=[lookup, refund], store=store)


def write(tmp_path: Path, document: Any, name: str = "checkpoint.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["sqlite", "file"])
def test_import_of_a_textbook_checkpoint_creates_the_run_with_its_counters(
    invoke: Invoke, tmp_path: Path, kind: str
) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}" if kind == "sqlite" else f"file://{tmp_path / 'runs'}"
    path = write(tmp_path, textbook(tool_use("toolu_2", "refund", order_id="7")))
    result = invoke("import", str(path), "--run-id", "order-7", "--store", url)
    assert result.exit_code == 0, result.output
    assert "pending calls: refund (toolu_2)" in " ".join(result.stdout.split())
    with open_store(url) as store:
        state = store.load("order-7")
    assert (state.task, state.turns, state.tokens_used, state.phase) == (TASK, 2, 220, "running_tools")
    assert [call.name for call in state.dangling_calls()] == ["refund"]


def test_a_pending_read_only_call_is_run_again_on_resume_and_counters_carry_on(tmp_path: Path) -> None:
    shop = Shop()
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        import_run(store, textbook(tool_use("toolu_2", "lookup", order_id="8")), "order-7")
        result = agent_on(store, shop).run(None, run_id="order-7")
    assert result.status == "completed" and shop.lookups == ["8"]
    assert (result.turns, result.tokens_used) == (3, 220 + 110)


def test_a_pending_side_effect_without_ledger_entry_is_an_unknown_outcome_told_to_the_model(tmp_path: Path) -> None:
    shop = Shop()
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        import_run(store, textbook(tool_use("toolu_2", "refund", order_id="7")), "order-7")
        result = agent_on(store, shop).run(None, run_id="order-7")
        state = store.load("order-7")
    assert result.status == "completed" and shop.refunds == []  # never run again blindly
    answer = next(
        block
        for message in state.messages
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("tool_use_id") == "toolu_2"
    )
    assert answer["is_error"] is True and "unknown" in json.dumps(answer).lower()


def test_an_article_checkpoint_keeps_its_idempotency_key_and_the_probe_settles_it(tmp_path: Path) -> None:
    shop = Shop()
    action = {"tool": "refund", "args": {"order_id": "7"}, "idempotency_key": "refund-order-7"}
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        state = import_run(store, article(action))  # run id taken from the file
        assert state.run_id == "order-7" and state.business_state == {"order": "7"}
        assert [(e.key, e.status) for e in store.ledger_list("order-7")] == [("refund-order-7", "pending")]
        result = agent_on(store, shop, probe_finds=True).run(None, run_id="order-7")
        assert store.ledger_get("order-7", "refund-order-7").status == "succeeded"  # type: ignore[union-attr]
    assert result.status == "completed" and shop.refunds == []
    assert state.pending_calls[0].id == "imported_1" and result.turns == 3


def test_import_works_on_a_memory_store_too() -> None:
    with open_store("memory://") as store:
        import_run(store, textbook(tool_use("toolu_2", "lookup", order_id="8")), "order-7")
        assert store.load("order-7").turns == 2


@pytest.mark.parametrize(
    ("content", "mentions"),
    [
        ("{not json", "not JSON"),
        ("[1, 2]", "a JSON list, not an object"),
        (json.dumps({"version": 1, "task": "t"}), "neither a textbook checkpoint.json"),
        (json.dumps({**textbook(tool_use("a", "lookup")), "messages": [{"role": "system"}]}), "messages[0]"),
        (json.dumps({**textbook(tool_use("a", "lookup")), "turns": -1}), "turns is -1"),
    ],
    ids=["not-json", "not-object", "unknown-shape", "bad-message", "bad-count"],
)
def test_a_file_it_cannot_read_is_one_clear_line_and_writes_nothing(
    invoke: Invoke, tmp_path: Path, content: str, mentions: str
) -> None:
    path = tmp_path / "checkpoint.json"
    path.write_text(content, encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    result = invoke("import", str(path), "--run-id", "order-7", "--store", url)
    assert result.exit_code == 2 and result.stderr.startswith("error: cannot import") and mentions in result.stderr
    with open_store(url) as store:
        assert not store.exists("order-7")


def test_import_never_overwrites_an_existing_run(tmp_path: Path) -> None:
    with open_store(f"sqlite:///{tmp_path / 'runs.db'}") as store:
        import_run(store, textbook(tool_use("toolu_2", "lookup", order_id="8")), "order-7")
        with pytest.raises(ConfigError, match="already exists"):
            import_run(store, textbook(tool_use("toolu_9", "refund", order_id="9")), "order-7")
        assert store.load("order-7").pending_calls[0].id == "toolu_2"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
FIELDS = sorted({"version", "task", "turns", "tokensUsed", "messages", "pendingToolUse", "run_id", "step_id"})


@settings(max_examples=300, deadline=None)
@given(
    shape=st.sampled_from(["textbook", "article"]),
    field=st.sampled_from([*FIELDS, "phase", "business_state", "pending_action", "schema_version"]),
    value=JSON_VALUES,
)
def test_a_checkpoint_with_any_field_replaced_imports_or_is_refused_with_a_config_error(
    shape: str, field: str, value: Any
) -> None:
    document = textbook(tool_use("toolu_2", "refund", order_id="7")) if shape == "textbook" else article({"tool": "x"})
    document[field] = value
    with open_store("memory://") as store:
        try:
            state = import_run(store, document, "order-7")
        except (ConfigError, IncompatibleSchema):  # (a version newer than the importer reads)
            assert not store.exists("order-7")
        else:
            assert store.load("order-7").messages == state.messages
