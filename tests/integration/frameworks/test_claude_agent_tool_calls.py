"""``durable_tools`` in one process, the CLI's part played by the test: the ``PreToolUse`` hook
announces each call, the wrapped handler (which receives only the arguments) takes its call;
parallel calls of one tool are told apart by their arguments; a settled call asked again is
answered from the ledger, one in doubt is an unknown outcome; a call that never passed the hook
is refused, nothing run."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

import pytest
from claude_agent_sdk import SdkMcpTool, tool

from unbroken import NotExecuted, ToolCall, open_store
from unbroken.errors import ConfigError
from unbroken.integrations.claude_agent import DurableTools, call_key, current_call, durable_tools, tools_run_id
from unbroken.ledger import EffectLedger
from unbroken.stores.base import Store

made: list[tuple[str, str, dict[str, Any]]] = []


@tool("charge", "Charge an invoice", {"invoice": str, "amount": int})
async def charge(args: dict[str, Any]) -> dict[str, Any]:
    call = current_call()
    made.append((call.id, call.idempotency_key, dict(args)))
    return {"content": [{"type": "text", "text": f"charged {args['amount']} for {args['invoice']}"}]}


@tool("balance", "Read the balance", {})
async def balance(args: dict[str, Any]) -> dict[str, Any]:
    made.append((current_call().id, "", {}))
    return {"content": [{"type": "text", "text": "12"}]}


def tools(store: Store) -> DurableTools:
    made.clear()
    return durable_tools([charge, balance], store, server="pay", effects={"balance": "read_only"})


async def announce(
    durable: DurableTools,
    session: str,
    use_id: str,
    name: str,
    arguments: dict[str, Any],
    event: Literal["PreToolUse", "PostToolUseFailure"] = "PreToolUse",
) -> None:
    """What the CLI does before (or after) a call: run the hooks registered for ``event``."""
    hook = durable.hooks[event][0].hooks[0]
    hook_input: Any = {"hook_event_name": event, "session_id": session, "tool_use_id": use_id}
    hook_input |= {"tool_name": f"mcp__pay__{name}", "tool_input": arguments}
    assert await hook(hook_input, use_id, {"signal": None}) == {}


def handler(durable: DurableTools, name: str) -> SdkMcpTool[Any]:
    return next(each for each in durable.tools if each.name == name)


async def call(durable: DurableTools, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """What the CLI's call of the wrapped tool returns."""
    return await handler(durable, name).handler(arguments)


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def test_parallel_calls_of_one_tool_are_each_run_as_their_own_call() -> None:
    durable = tools(open_store("memory://"))

    async def go() -> None:
        await announce(durable, "s1", "toolu_01", "charge", {"invoice": "A", "amount": 5})
        await announce(durable, "s1", "toolu_02", "charge", {"amount": 7, "invoice": "B"})
        b, a = await asyncio.gather(
            call(durable, "charge", {"invoice": "B", "amount": 7}),
            call(durable, "charge", {"invoice": "A", "amount": 5}),
        )
        assert (text(a), text(b)) == ("charged 5 for A", "charged 7 for B")

    asyncio.run(go())
    assert sorted((args["invoice"], use_id) for use_id, _, args in made) == [("A", "toolu_01"), ("B", "toolu_02")]


def test_a_settled_call_asked_again_in_another_process_is_answered_from_the_ledger() -> None:
    store = open_store("memory://")

    async def ask(durable: DurableTools, arguments: dict[str, Any]) -> str:
        await announce(durable, "s1", "toolu_01", "charge", arguments)
        return text(await call(durable, "charge", arguments))

    first = tools(store)
    assert asyncio.run(ask(first, {"invoice": "A", "amount": 5})) == "charged 5 for A"
    again = durable_tools([charge, balance], store, server="pay")  # a new process: nothing in memory
    assert asyncio.run(ask(again, {"invoice": "A", "amount": 5})) == "charged 5 for A"
    assert len(made) == 1  # answered from the ledger, not run
    assert asyncio.run(ask(again, {"invoice": "B", "amount": 7})) == "charged 7 for B"
    assert len(made) == 2  # same id, other arguments: another call


def test_a_read_only_tool_runs_every_time() -> None:
    durable = tools(open_store("memory://"))

    async def read() -> str:
        await announce(durable, "s1", "toolu_09", "balance", {})
        return text(await call(durable, "balance", {}))

    assert [asyncio.run(read()), asyncio.run(read())] == ["12", "12"]
    assert len(made) == 2


def test_a_call_that_did_not_pass_the_hook_is_refused_and_not_run() -> None:
    durable = tools(open_store("memory://"))
    result = asyncio.run(call(durable, "charge", {"invoice": "A", "amount": 5}))
    assert result["is_error"]
    assert "without its PreToolUse hook" in text(result) and "hooks=durable.hooks" in text(result)
    assert made == []


def test_a_call_denied_after_its_hook_is_never_taken_for_a_later_call() -> None:
    durable = tools(open_store("memory://"))

    async def go() -> None:
        await announce(durable, "s1", "toolu_01", "charge", {"invoice": "A", "amount": 5})
        await announce(durable, "s1", "toolu_01", "charge", {"invoice": "A", "amount": 5}, "PostToolUseFailure")
        await announce(durable, "s1", "toolu_02", "charge", {"invoice": "A", "amount": 5})
        assert text(await call(durable, "charge", {"invoice": "A", "amount": 5})) == "charged 5 for A"

    asyncio.run(go())
    assert [use_id for use_id, _, _ in made] == ["toolu_02"]


def test_a_payment_left_in_doubt_and_asked_again_is_an_unknown_outcome_without_a_probe() -> None:
    store = open_store("memory://")
    arguments: dict[str, Any] = {"invoice": "A", "amount": 5}
    key = call_key("s1", "toolu_01", "charge", arguments)
    # What a process killed inside the payment leaves: the intent, no outcome.
    EffectLedger(store, tools_run_id("s1")).claim(ToolCall("toolu_01", "charge", arguments, key))
    durable = tools(store)

    async def go() -> dict[str, Any]:
        await announce(durable, "s1", "toolu_01", "charge", arguments)
        return await call(durable, "charge", arguments)

    result = asyncio.run(go())
    assert result["is_error"] and text(result).startswith("UNKNOWN OUTCOME")
    assert made == []
    entry = store.ledger_get(tools_run_id("s1"), key)
    assert entry is not None and entry.status == "unknown"


def test_a_probe_for_a_tool_that_is_not_there_is_refused_with_the_names_to_use() -> None:
    with pytest.raises(ConfigError, match=r"probes name chrage, which are not among the tools \(balance, charge\)"):
        durable_tools([charge, balance], open_store("memory://"), probes={"chrage": lambda call: NotExecuted()})


def test_a_retry_with_a_new_id_of_a_payment_left_in_doubt_is_not_made_again() -> None:
    store = open_store("memory://")
    arguments: dict[str, Any] = {"invoice": "A", "amount": 5}
    first = ToolCall("toolu_01", "charge", arguments, call_key("s1", "toolu_01", "charge", arguments))
    EffectLedger(store, tools_run_id("s1")).claim(first)  # a process killed inside it left this
    durable = tools(store)

    async def go() -> dict[str, Any]:
        await announce(durable, "s1", "toolu_02", "charge", arguments)  # the model retries, new id
        return await call(durable, "charge", arguments)

    assert text(asyncio.run(go())).startswith("UNKNOWN OUTCOME")
    assert made == []


def test_an_identical_call_made_while_the_first_is_running_is_its_own_call() -> None:
    made.clear()
    arguments: dict[str, Any] = {"invoice": "A", "amount": 5}
    inside, release = asyncio.Event(), asyncio.Event()

    @tool("charge", "Charge an invoice", {"invoice": str, "amount": int})
    async def slow(args: dict[str, Any]) -> dict[str, Any]:
        if not inside.is_set():  # the first call waits inside the tool until released
            inside.set()
            await release.wait()
        return await charge.handler(args)

    durable = durable_tools([slow], open_store("memory://"), server="pay")

    async def go() -> list[str]:
        await announce(durable, "s1", "toolu_01", "charge", arguments)
        first = asyncio.create_task(call(durable, "charge", arguments))
        await inside.wait()  # the first is inside the tool: pending in the ledger, not crashed
        await announce(durable, "s1", "toolu_02", "charge", arguments)
        second = text(await call(durable, "charge", arguments))
        release.set()
        return [text(await first), second]

    assert asyncio.run(go()) == ["charged 5 for A", "charged 5 for A"]
    assert [use_id for use_id, _, _ in made] == ["toolu_02", "toolu_01"]
