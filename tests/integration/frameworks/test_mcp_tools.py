"""MCP tools through unbroken, against a real MCP server (the official ``mcp`` package) started
by the test over stdio and over Streamable HTTP; the agent is SIGKILLed inside a destructive tool."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from crash_helpers import effects, kill_once_effect_recorded, start, stop_pid
from mcp_agent_child import SERVER, run, stdio_server

from unbroken import ConfigError, ScriptedModel, ToolCall, ToolDefinitionError, open_store
from unbroken.integrations.mcp import CALL_ID_META, IDEMPOTENCY_KEY_META, MCPTools

CHILD = str(Path(__file__).with_name("mcp_agent_child.py"))
VALID = ["get_balance", "set_limit", "send_payment", "find_payment", "show_meta"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_http_server(state: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The test MCP server over Streamable HTTP on 127.0.0.1, in its own process."""
    port = free_port()
    server = subprocess.Popen([sys.executable, SERVER, str(state), "http", str(port)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise AssertionError("the MCP server did not start") from None
            time.sleep(0.05)


def stop(server: subprocess.Popen[bytes]) -> None:
    server.kill()
    server.wait(timeout=10)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One HTTP server for the tests that record no effects they assert on."""
    server, url = start_http_server(tmp_path_factory.mktemp("mcp-shared"))
    yield url
    stop(server)


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A fresh HTTP server (and state directory) for one test."""
    state = tmp_path / "server-state"
    state.mkdir()
    server, url = start_http_server(state)
    yield url, state
    stop(server)


@pytest.fixture(scope="module")
def http_tools(shared_server: str) -> Iterator[MCPTools]:
    with MCPTools(shared_server, include=VALID, effects={"set_limit": "side_effect"}) as tools:
        yield tools


def call(name: str, call_id: str, **arguments: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, input=dict(arguments), idempotency_key=f"ub_key_{call_id}")


def test_effect_classes_come_from_the_servers_annotations_and_a_users_override_wins(http_tools: MCPTools) -> None:
    effect = {t.name: t.effect for t in http_tools.tools}
    assert effect == {
        "get_balance": "read_only",  # readOnlyHint
        "set_limit": "side_effect",  # idempotentHint, overridden by the user
        "send_payment": "side_effect",  # destructiveHint
        "find_payment": "read_only",
        "show_meta": "side_effect",  # no annotations: never re-run blindly
    }


def test_tools_over_stdio_get_their_effect_and_schema_from_the_server(tmp_path: Path) -> None:
    with MCPTools(stdio_server(str(tmp_path)), include=["set_limit", "get_balance"]) as tools:
        get_balance, set_limit = tools.tools  # in the server's order
        assert get_balance.fn(account="acme", call=call("get_balance", "toolu_1")) == "acme: 1000"
    assert (set_limit.name, set_limit.effect, get_balance.effect) == ("set_limit", "idempotent", "read_only")
    assert set_limit.input_schema["required"] == ["account", "limit"]


def test_each_call_carries_its_idempotency_key_and_call_id_in_meta(http_tools: MCPTools) -> None:
    show_meta = next(t for t in http_tools.tools if t.name == "show_meta")
    sent = call("show_meta", "toolu_9")
    echoed = json.loads(show_meta.fn(**show_meta.arguments(sent, {})))
    assert echoed == {IDEMPOTENCY_KEY_META: "ub_key_toolu_9", CALL_ID_META: "toolu_9"}


def test_an_error_reported_by_the_server_raises_with_its_message(http_tools: MCPTools) -> None:
    get_balance = next(t for t in http_tools.tools if t.name == "get_balance")
    with pytest.raises(Exception, match="account"):
        get_balance.fn(call=call("get_balance", "toolu_1"))


def test_an_override_naming_a_tool_the_server_lacks_is_refused(shared_server: str) -> None:
    with pytest.raises(ConfigError, match=r"'send_paymnt'.*send_payment"):
        MCPTools(shared_server, effects={"send_paymnt": "read_only"}).open()


def test_a_server_tool_name_unbroken_cannot_use_must_be_renamed(shared_server: str) -> None:
    with pytest.raises(ToolDefinitionError, match="rename"):
        MCPTools(shared_server).open()
    with MCPTools(shared_server, rename={"audit.log": "audit_log"}) as tools:
        assert "audit_log" in [t.name for t in tools.tools]


def assert_valid_history(url: str) -> list[dict[str, object]]:
    """Every tool call answered (the provider would reject the history otherwise); returns
    the tool results."""
    state = open_store(url).load("pay-acme")
    assert ScriptedModel([]).dangling_call_ids(state.messages) == []
    blocks = [b for m in state.messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]
    return [b for b in blocks if b.get("type") == "tool_result"]


@pytest.mark.slow  # three process start-ups with the mcp package: ~10 s on a loaded machine
def test_killed_inside_a_destructive_tool_over_stdio_it_resumes_with_one_effect_reported_unknown(
    tmp_path: Path,
) -> None:
    url, state = f"sqlite:///{tmp_path / 'runs.db'}", tmp_path
    (state / "hang").touch()
    effect = kill_once_effect_recorded(start([CHILD, url, str(state), "stdio"]), state)
    stop_pid(int(effect["pid"]))  # the orphaned stdio server, still inside send_payment
    (state / "hang").unlink()

    result = run(url, str(state), "stdio", probe=False)

    assert result == {"status": "completed", "output": "Paid.", "resumed": True}
    assert [e["tool"] for e in effects(state)] == ["send_payment"]
    payment = assert_valid_history(url)[1]
    assert payment["is_error"] and "UNKNOWN OUTCOME" in str(payment["content"])


def test_killed_inside_a_destructive_tool_over_http_a_probe_finds_the_one_effect(
    tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    url, (server_url, state) = f"sqlite:///{tmp_path / 'runs.db'}", http_server
    (state / "hang").touch()
    kill_once_effect_recorded(start([CHILD, url, str(state), server_url, "--probe"]), state)
    (state / "hang").unlink()

    result = run(url, str(state), server_url, probe=True)

    assert result["status"] == "completed"
    [effect] = effects(state)
    payment = assert_valid_history(url)[1]
    assert not payment.get("is_error") and payment["content"] == f"sent 40 to acme (receipt {effect['key']})"


def test_a_server_that_cannot_be_reached_is_named_without_its_credentials() -> None:
    with pytest.raises(ConfigError, match=r"cannot connect to the MCP server http://127\.0\.0\.1:1/mcp: ") as caught:
        MCPTools("http://user:s3cret@127.0.0.1:1/mcp?token=s3cret", timeout=5).open()
    assert "s3cret" not in str(caught.value)
