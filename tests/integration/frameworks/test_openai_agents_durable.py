"""The real ``openai-agents`` package against a local Responses server on 127.0.0.1, with
unbroken's session and durable tools; the agent process is SIGKILLed inside a side-effecting
tool and a fresh process resumes it."""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from agents_child import run
from crash_helpers import effects, kill_once_effect_recorded, start
from provider_server import ProviderServer, Reply, _function_call, response_body, responses_turns

from unbroken import TaskMismatch, open_store
from unbroken.integrations.openai_agents import UnbrokenSession, run_durably

CHILD = str(Path(__file__).with_name("agents_child.py"))


def final_message(text: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}]
    return {"type": "message", "id": "msg_final", "role": "assistant", "status": "completed", "content": content}


class PaymentModel:
    """Reads a balance, pays acme 40, reads the balance again, answers. Every request gets
    fresh call ids, as a real model's would: a re-asked model makes a *new* call."""

    def __init__(self) -> None:
        self.counter = itertools.count()
        self.turns_asked: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, path: str, body: dict[str, Any]) -> Reply:
        turn = responses_turns(body)
        with self.lock:
            n = next(self.counter)
            self.turns_asked.append(turn)
        if turn == 0:
            output = [_function_call(f"fc_{n}", f"call_{n}", "balance", '{"account": "acme"}')]
        elif turn == 1:
            output = [_function_call(f"fc_{n}", f"call_{n}", "pay", '{"account": "acme", "amount": 40}')]
        elif turn == 2:
            output = [_function_call(f"fc_{n}", f"call_{n}", "balance", '{"account": "acme"}')]
        else:
            output = [final_message("Paid acme 40.")]
        return 200, response_body(output), {}


@pytest.fixture
def model_server() -> Iterator[tuple[ProviderServer, PaymentModel]]:
    server, model = ProviderServer(), PaymentModel()
    server.responder = model
    server.start()
    try:
        yield server, model
    finally:
        server.stop()


def assert_valid_history(items: list[Any]) -> None:
    """Every function call is answered exactly once, after it: what the Responses API demands."""
    calls = [i["call_id"] for i in items if i.get("type") == "function_call"]
    outputs = [i["call_id"] for i in items if i.get("type") == "function_call_output"]
    assert sorted(calls) == sorted(outputs) and len(set(calls)) == len(calls)
    for call_id in calls:
        at_call = next(k for k, i in enumerate(items) if i.get("type") == "function_call" and i["call_id"] == call_id)
        at_out = next(
            k for k, i in enumerate(items) if i.get("type") == "function_call_output" and i["call_id"] == call_id
        )
        assert at_call < at_out


def session_items(url: str) -> list[Any]:
    return asyncio.run(UnbrokenSession("pay-acme", open_store(url)).get_items())


def pay_output(items: list[Any]) -> str:
    pay_id = next(i["call_id"] for i in items if i.get("type") == "function_call" and i["name"] == "pay")
    output = next(i["output"] for i in items if i.get("type") == "function_call_output" and i["call_id"] == pay_id)
    assert isinstance(output, str)
    return output


def crash_inside_pay_then_resume(
    tmp_path: Path, server: ProviderServer, *, probe: bool, streamed: bool = False
) -> tuple[str, str]:
    """SIGKILL a child process inside ``pay``, then resume the run here (another process)."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    state = tmp_path / "state"
    state.mkdir()
    (state / "hang").touch()
    args = [CHILD, url, server.url, str(state)] + (["--probe"] if probe else []) + (["--streamed"] if streamed else [])
    kill_once_effect_recorded(start(args), state)
    (state / "hang").unlink()
    return url, asyncio.run(run(url, server.url, state, probe, streamed))


def test_an_agents_sdk_agent_killed_inside_a_side_effect_resumes_with_one_effect_and_reports_it_unknown(
    tmp_path: Path, model_server: tuple[ProviderServer, PaymentModel]
) -> None:
    server, model = model_server
    url, output = crash_inside_pay_then_resume(tmp_path, server, probe=False)

    assert output == "Paid acme 40."
    assert len(effects(tmp_path / "state")) == 1
    items = session_items(url)
    assert_valid_history(items)
    assert pay_output(items).startswith("UNKNOWN OUTCOME")
    # The answer holding the pay call was saved before the tool ran and replayed on resume:
    # the model was asked for that turn once, so the call (and its key) never changed.
    assert model.turns_asked.count(1) == 1


@pytest.mark.slow  # a child process importing the SDK: ~4-8 s; the in-process streamed tests run by default
def test_a_streamed_run_killed_inside_a_side_effect_resumes_streamed_with_one_effect_and_reports_it_unknown(
    tmp_path: Path, model_server: tuple[ProviderServer, PaymentModel]
) -> None:
    server, model = model_server
    url, output = crash_inside_pay_then_resume(tmp_path, server, probe=False, streamed=True)

    assert output == "Paid acme 40."
    assert len(effects(tmp_path / "state")) == 1
    items = session_items(url)
    assert_valid_history(items)
    assert pay_output(items).startswith("UNKNOWN OUTCOME")
    assert model.turns_asked.count(1) == 1  # the streamed answer was saved before pay ran, then replayed


def test_a_probe_turns_the_interrupted_side_effect_into_its_real_result(
    tmp_path: Path, model_server: tuple[ProviderServer, PaymentModel]
) -> None:
    server, _ = model_server
    url, output = crash_inside_pay_then_resume(tmp_path, server, probe=True)

    [effect] = effects(tmp_path / "state")
    items = session_items(url)
    assert_valid_history(items)
    assert pay_output(items) == f"sent 40 to acme (receipt {effect['key']})"
    assert output == "Paid acme 40."


def contents(items: Sequence[Mapping[str, object]]) -> list[object]:
    """The ``content`` of each session item (items are a union of TypedDicts to mypy)."""
    return [item["content"] for item in items]


def test_the_session_keeps_items_across_instances_and_pops_and_clears(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"

    async def scenario() -> None:
        first = UnbrokenSession("chat/1 with spaces", open_store(url))
        await first.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
        await first.add_items([{"role": "user", "content": "c"}])
        again = UnbrokenSession("chat/1 with spaces", open_store(url))
        assert contents(await again.get_items()) == ["a", "b", "c"]
        assert contents(await again.get_items(limit=2)) == ["b", "c"]
        popped: Mapping[str, object] | None = await again.pop_item()
        assert popped is not None and popped["content"] == "c"
        assert contents(await UnbrokenSession("chat/1 with spaces", open_store(url)).get_items()) == ["a", "b"]
        await again.clear_session()
        assert await UnbrokenSession("chat/1 with spaces", open_store(url)).get_items() == []
        assert await again.pop_item() is None

    asyncio.run(scenario())


def test_an_unfinished_input_blocks_another_and_is_resumed_by_passing_it_again(
    model_server: tuple[ProviderServer, PaymentModel],
) -> None:
    from agents_child import agent_for

    server, model = model_server
    server.responder = lambda path, body: (500, {"error": {"message": "down", "type": "server_error"}}, {})
    session = UnbrokenSession("pay-acme", open_store("memory://"))
    agent = agent_for(session, server.url, probe=False)
    with pytest.raises(Exception, match="down"):
        asyncio.run(run_durably(agent, "Pay acme 40", session=session))
    before = asyncio.run(session.get_items())

    with pytest.raises(TaskMismatch):
        asyncio.run(run_durably(agent, "Pay globex 10", session=session))
    assert asyncio.run(session.get_items()) == before == [{"role": "user", "content": "Pay acme 40"}]

    server.responder = model
    result = asyncio.run(run_durably(agent, "Pay acme 40", session=session))
    assert result.final_output == "Paid acme 40."
    assert [i.get("content") for i in asyncio.run(session.get_items())].count("Pay acme 40") == 1
