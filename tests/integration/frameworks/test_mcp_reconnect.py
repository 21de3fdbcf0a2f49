"""``MCPTools`` when its stdio server process dies: a call cut by the death is an unknown
outcome (the server may have acted), the connection is opened again (bounded, with backoff)
for the next request, and a server that stays down is named in a clear error. Also: a changed
tool list is read again, and resources and prompts are reachable. A real ``mcp`` server over
stdio, SIGKILLed by the test."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from crash_helpers import effects, stop_pid
from mcp_agent_child import SCRIPT, stdio_server

from unbroken import Agent, ScriptedModel, ToolCall, open_store
from unbroken.integrations.mcp import MCPServerUnavailable, MCPTools

TOOLS = ["get_balance", "send_payment", "server_pid"]


def kill_server_once_effect_recorded(state: Path) -> threading.Thread:
    """SIGKILL the stdio server as soon as it has recorded its effect (it then hangs)."""

    def kill() -> None:
        deadline = time.monotonic() + 60
        while not effects(state) and time.monotonic() < deadline:
            time.sleep(0.02)
        stop_pid(int(effects(state)[0]["pid"]))

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    return killer


def pay(tools: MCPTools, call_id: str) -> object:
    send_payment = next(t for t in tools.tools if t.name == "send_payment")
    call = ToolCall(id=call_id, name="send_payment", input={"account": "acme", "amount": 40}, idempotency_key=call_id)
    return send_payment.fn(**send_payment.arguments(call, {}))


def test_a_payment_cut_by_the_server_dying_pauses_the_run_and_the_next_call_reconnects(tmp_path: Path) -> None:
    store = open_store("memory://")
    (tmp_path / "hang").touch()
    with MCPTools(stdio_server(str(tmp_path)), include=TOOLS, reconnect_delay=0.01) as tools:
        killer = kill_server_once_effect_recorded(tmp_path)
        agent = Agent(model=ScriptedModel(SCRIPT), tools=tools.tools, store=store, unknown_policy="pause")
        result = agent.run("Pay acme 40", run_id="pay-acme")
        killer.join()
        (tmp_path / "hang").unlink()

        assert result.status == "paused"  # not "failed", not a plain error the model might retry
        [entry] = [e for e in store.ledger_list("pay-acme") if e.tool == "send_payment"]
        assert entry.status == "unknown"
        assert [e["tool"] for e in effects(tmp_path)] == ["send_payment"]
        assert tools.call("get_balance", {"account": "acme"}) == "acme: 960"  # a new server process


def test_a_server_found_dead_before_a_payment_is_reconnected_to_and_a_server_that_stays_down_is_named(
    tmp_path: Path,
) -> None:
    with MCPTools(stdio_server(str(tmp_path)), include=TOOLS, reconnect_attempts=3, reconnect_delay=0.01) as tools:
        first = int(tools.call("server_pid", {}))
        stop_pid(first)
        time.sleep(0.2)  # died while idle: the payment below was never in flight when it died
        assert pay(tools, "call_1") == "sent 40 to acme (receipt call_1)"
        [payment] = effects(tmp_path)
        assert payment["pid"] != first

        (tmp_path / "down").touch()
        stop_pid(int(tools.call("server_pid", {})))
        with pytest.raises(MCPServerUnavailable, match=r"3 attempt\(s\) to open it again failed.*not sent"):
            tools.call("get_balance", {"account": "acme"})
        with pytest.raises(MCPServerUnavailable):
            pay(tools, "call_2")
        assert len(effects(tmp_path)) == 1


def test_a_changed_tool_list_is_read_again_and_resources_and_prompts_are_reachable(tmp_path: Path) -> None:
    with MCPTools(stdio_server(str(tmp_path)), include=None, rename={"audit.log": "audit_log"}) as tools:
        assert "refund" not in [t.name for t in tools.tools]
        assert tools.call("enable_refunds", {}) == "refunds enabled"
        deadline = time.monotonic() + 10
        while "refund" not in [t.name for t in tools.tools] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "refund" in [t.name for t in tools.tools]

        assert [r.uri for r in tools.resources()] == ["payments://effects"]
        assert json.loads(tools.read_resource("payments://effects")) == []
        assert [p.name for p in tools.prompts()] == ["pay_invoice"]
        prompt = tools.get_prompt("pay_invoice", {"account": "acme"})
        assert "Pay the open invoice of acme" in str(prompt.messages[0].content)
