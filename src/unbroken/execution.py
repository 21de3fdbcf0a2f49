"""Calling a tool: its exceptions become ``is_error`` results the model can react to."""

from __future__ import annotations

import inspect
from typing import Any

from .reconcile import to_content
from .state import JSONValue, ToolCall, ToolResult
from .tools import Tool


def invoke_sync(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult:
    """Run ``tool`` for ``call``; an exception (or a result that is not JSON) is an error result."""
    try:
        value = tool.fn(**tool.arguments(call, business_state))
        if inspect.isawaitable(value):
            import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

            value = asyncio.run(_await(value))
        return ToolResult(call.id, to_content(value))
    except Exception as exc:
        return ToolResult(call.id, f"{type(exc).__name__}: {exc}", is_error=True)


async def _await(value: Any) -> Any:
    return await value


async def invoke_async(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult:
    """Async twin of ``invoke_sync``; a sync tool runs in a worker thread."""
    try:
        if tool.is_async:
            value = await tool.fn(**tool.arguments(call, business_state))
        else:
            import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

            value = await asyncio.to_thread(tool.fn, **tool.arguments(call, business_state))
        return ToolResult(call.id, to_content(value))
    except Exception as exc:
        return ToolResult(call.id, f"{type(exc).__name__}: {exc}", is_error=True)
