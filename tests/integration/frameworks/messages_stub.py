"""A local stand-in for the Anthropic Messages API, enough for the ``claude`` CLI bundled in
``claude-agent-sdk``: every POST to /v1/messages is recorded and answered with one streamed turn (server-sent
events, as the CLI asks for them): a text, or a ``ToolUse`` the CLI then runs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class ToolUse:
    """A scripted ``tool_use`` answer (the stop reason is then ``tool_use``)."""

    id: str
    name: str
    input: dict[str, Any]


Answer = Callable[[dict[str, Any]], "str | ToolUse"]


def _events(answer: str | ToolUse, model: str) -> bytes:
    usage = {"input_tokens": 10, "output_tokens": 5}
    message = {"id": "msg_stub", "type": "message", "role": "assistant", "model": model, "content": []}
    if isinstance(answer, ToolUse):
        block: dict[str, Any] = {"type": "tool_use", "id": answer.id, "name": answer.name, "input": {}}
        delta: dict[str, Any] = {"type": "input_json_delta", "partial_json": json.dumps(answer.input)}
        stop = "tool_use"
    else:
        block, delta, stop = {"type": "text", "text": ""}, {"type": "text_delta", "text": answer}, "end_turn"
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": {**message, "stop_reason": None, "usage": usage}}),
        ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}},
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events).encode()


class MessagesStub:
    """Start with ``start()``; ``requests`` holds every /v1/messages body received, in order."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(size) or b"{}")
                if self.path.startswith("/v1/messages") and "count_tokens" not in self.path:
                    stub.requests.append(body)
                    data = _events(stub.answer(body), str(body.get("model")))
                    kind = "text/event-stream"
                else:
                    data, kind = json.dumps({"input_tokens": 10}).encode(), "application/json"
                self.send_response(200)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> MessagesStub:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def texts(body: dict[str, Any]) -> list[str]:
    """Every text a request's messages hold, in order (strings and text blocks)."""
    found: list[str] = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            found.append(content)
        elif isinstance(content, list):
            found += [block.get("text", "") for block in content if isinstance(block, dict)]
    return found


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``tool_result`` block a request's messages hold, in order."""
    return [
        block
        for message in body.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
