"""A local HTTP server on 127.0.0.1 that plays scripted provider responses to the real SDK
clients and records every request body it receives, byte for byte.

Responses are chosen by what the request holds (how many model turns its history has), not by
arrival order, so a resumed process that re-sends a request gets the same answer again.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Reply = tuple[int, dict[str, Any], dict[str, str]]
Responder = Callable[[str, dict[str, Any]], Reply]


@dataclass(frozen=True)
class Recorded:
    path: str
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        data = json.loads(self.body)
        assert isinstance(data, dict)
        return data


class ProviderServer:
    """``responder(path, body) -> (status, payload, headers)``; set it before each scenario."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.responder: Responder = lambda path, body: (404, {"error": "no responder"}, {})
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with server._lock:
                    server.requests.append(Recorded(self.path, body))
                status, payload, headers = server.responder(self.path, json.loads(body))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_port}"

    def start(self) -> ProviderServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)

    def bodies(self) -> list[bytes]:
        with self._lock:
            return [r.body for r in self.requests]

    def sent(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.json for r in self.requests]


# --------------------------------------------------------------------------- how far a request is


def assistant_turns(body: Mapping[str, Any]) -> int:
    """Anthropic and Chat Completions: assistant messages in the request."""
    return sum(1 for m in body.get("messages", []) if m.get("role") == "assistant")


def responses_turns(body: Mapping[str, Any]) -> int:
    """Responses: runs of model output items in the input."""
    count, previous = 0, False
    for item in body.get("input", []):
        output = item.get("role") == "assistant" or item.get("type") not in (None, "message", "function_call_output")
        if output and not previous:
            count += 1
        previous = output
    return count


def scripted(payloads: Sequence[dict[str, Any]], turn_of: Callable[[Mapping[str, Any]], int]) -> Responder:
    """Answer the n-th model turn of a history with ``payloads[n]``."""

    def respond(path: str, body: dict[str, Any]) -> Reply:
        index = turn_of(body)
        if index >= len(payloads):
            return 400, {"error": f"no scripted answer {index}"}, {}
        return 200, payloads[index], {}

    return respond


def failing_first(times: int, status: int, then: Responder, *, headers: Mapping[str, str] | None = None) -> Responder:
    """Answer the first ``times`` requests with an HTTP error, then as ``then``."""
    seen = [0]
    lock = threading.Lock()

    def respond(path: str, body: dict[str, Any]) -> Reply:
        with lock:
            seen[0] += 1
            failing = seen[0] <= times
        if failing:
            error = {"type": "error", "error": {"type": "rate_limit_error", "message": f"scripted HTTP {status}"}}
            return status, error, dict(headers or {})
        return then(path, body)

    return respond


# --------------------------------------------------------------------------- response bodies


def anthropic_message(content: list[dict[str, Any]], stop_reason: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "msg_scripted",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def chat_completion(message: dict[str, Any], finish_reason: str, **usage: int) -> dict[str, Any]:
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15, **usage},
    }


def response_body(output: list[dict[str, Any]], status: str = "completed", **extra: Any) -> dict[str, Any]:
    return {
        "id": "resp_scripted",
        "object": "response",
        "created_at": 1_700_000_000,
        "model": "gpt-test",
        "status": status,
        "output": output,
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 4},
            "output_tokens": 5,
            "output_tokens_details": {"reasoning_tokens": 2},
            "total_tokens": 15,
        },
        **extra,
    }


# --------------------------------------------------------------------------- the three-turn scripts

SIGNATURE = "EqQBCkgIARABGAIiQL2sig+scripted/signature=="

ANTHROPIC_SCRIPT = [
    anthropic_message(
        [
            {"type": "thinking", "thinking": "Weather first, then a note.", "signature": SIGNATURE},
            {"type": "text", "text": "Checking.", "citations": None},
            {"type": "tool_use", "id": "toolu_01", "name": "lookup", "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_02", "name": "save_note", "input": {"text": "Paris"}},
        ],
        "tool_use",
        cache_creation_input_tokens=7,
        cache_read_input_tokens=3,
    ),
    anthropic_message(
        [
            {"type": "redacted_thinking", "data": "ENCRYPTED+redacted=="},
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "Oslo"}},
            {
                "type": "web_search_tool_result",
                "tool_use_id": "srvtoolu_01",
                "content": [{"type": "web_search_result", "url": "https://example.test", "title": "Oslo"}],
            },
            {"type": "block_from_the_future", "payload": {"kept": [1, 2.5, None]}},
            {"type": "tool_use", "id": "toolu_03", "name": "no_such_tool", "input": {}},
            {"type": "tool_use", "id": "toolu_04", "name": "lookup", "input": {"city": "Oslo"}},
        ],
        "tool_use",
    ),
    anthropic_message([{"type": "text", "text": "Paris and Oslo are done."}], "end_turn"),
]


def _chat_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CHAT_SCRIPT = [
    chat_completion(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "annotations": [],
            "tool_calls": [
                _chat_call("call_01", "lookup", '{"city": "Paris"}'),
                _chat_call("call_02", "save_note", '{"text": "Paris"}'),
            ],
        },
        "tool_calls",
    ),
    chat_completion(
        {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "reasoning_content": "a field this SDK version does not model",
            "tool_calls": [
                _chat_call("call_03", "lookup", '{"city": "Oslo"'),
                _chat_call("call_04", "lookup", '{"city": "Rome"}'),
            ],
        },
        "tool_calls",
    ),
    chat_completion({"role": "assistant", "content": "Paris and Rome are done.", "refusal": None}, "stop"),
]


def _function_call(item_id: str, call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": item_id,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


RESPONSES_SCRIPT = [
    response_body(
        [
            {
                "type": "reasoning",
                "id": "rs_01",
                "summary": [{"type": "summary_text", "text": "Weather first."}],
                "encrypted_content": "gAAAA-encrypted-reasoning-01",
            },
            _function_call("fc_01", "call_01", "lookup", '{"city": "Paris"}'),
            _function_call("fc_02", "call_02", "save_note", '{"text": "Paris"}'),
        ]
    ),
    response_body(
        [
            {"type": "reasoning", "id": "rs_02", "summary": []},
            {"type": "web_search_call", "id": "ws_01", "status": "completed", "action": {"type": "search"}},
            _function_call("fc_03", "call_03", "lookup", "{city: Oslo}"),
            _function_call("fc_04", "call_04", "lookup", '{"city": "Rome"}'),
        ]
    ),
    response_body(
        [
            {
                "type": "message",
                "id": "msg_01",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Paris and Rome are done.", "annotations": []}],
            }
        ]
    ),
]

SCRIPTS: dict[str, tuple[list[dict[str, Any]], Callable[[Mapping[str, Any]], int]]] = {
    "anthropic": (ANTHROPIC_SCRIPT, assistant_turns),
    "openai-chat": (CHAT_SCRIPT, assistant_turns),
    "openai-responses": (RESPONSES_SCRIPT, responses_turns),
}


# --------------------------------------------------------------------------- a long run, for compaction

STEPS = 8
SUMMARY_MARKER = "You compress the working memory"


def _last_step(messages: list[dict[str, Any]]) -> int:
    last = 0
    for message in messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_result":
                found = re.search(r"step (\d+) done", str(block.get("content")))
                last = int(found.group(1)) if found else last
    return last


def stepping(path: str, body: dict[str, Any]) -> Reply:
    """Anthropic: call ``step(n+1)`` after the result of ``step(n)``, up to ``STEPS``; answer a
    summary request (the compaction's system prompt) with the steps it was shown."""
    if SUMMARY_MARKER in str(body.get("system", "")):
        text = json.dumps(body["messages"])
        earlier = re.search(r"Finished steps: \[([\d, ]*)\]", text)
        seen = {int(n) for n in re.findall(r"step (\d+) done", text)}
        seen |= {int(n) for n in earlier.group(1).split(",") if n.strip()} if earlier else set()
        seen_list = sorted(seen)
        return 200, anthropic_message([{"type": "text", "text": f"Finished steps: {seen_list}."}], "end_turn"), {}
    last = _last_step(body["messages"])
    if last >= STEPS:
        return 200, anthropic_message([{"type": "text", "text": f"All {STEPS} steps done."}], "end_turn"), {}
    step = last + 1
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": f"Now step {step}. " + "Think it through. " * 12, "signature": f"sig-{step}"},
        {"type": "tool_use", "id": f"toolu_step_{step}", "name": "step", "input": {"n": step}},
    ]
    return 200, anthropic_message(content, "tool_use"), {}
