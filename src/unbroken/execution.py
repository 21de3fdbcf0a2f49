"""Calling a tool: its exceptions become ``is_error`` results the model can react to (and a
logged traceback for the developer); a value that is not JSON is rendered, never turned into
a failure; a tool past its ``timeout`` is abandoned (``None``: the engine decides what that
means for its effect class); an oversized result is cut to a head with an honest note."""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any

from ._log import log
from .errors import LeaseError, OutcomeUnknown
from .fencing import keep_acting
from .reconcile import render_content
from .redact import log_failure
from .state import JSONValue, ToolCall, ToolResult
from .tools import Tool


def invoke_sync(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult | None:
    """Run ``tool`` for ``call``; an exception is an error result. ``None``: timed out."""
    if tool.timeout is None:
        return _call_sync(tool, call, business_state)
    box: list[ToolResult | LeaseError] = []
    context = contextvars.copy_context()  # the tool still reaches current_lease() in its thread

    def work() -> None:
        try:
            box.append(context.run(_call_sync, tool, call, business_state))
        except LeaseError as exc:  # handed to the caller's thread, which ends the session
            box.append(exc)

    # A thread cannot be killed: past the timeout (or when this thread is interrupted) it is left
    # running (daemon) and abandoned, still counted as able to act until it returns.
    _start_thread(tool, work).join(tool.timeout)
    if not box:
        return None
    if isinstance(box[0], LeaseError):
        raise box[0]
    return box[0]


def _call_sync(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult:
    try:
        value = tool.fn(**tool.arguments(call, business_state))
        if inspect.isawaitable(value):
            import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

            value = asyncio.run(_await(value))
    except LeaseError:
        raise  # the tool's own lease check (or fenced service) refused: nothing was done
    except OutcomeUnknown as exc:
        return outcome_unknown(call, exc)
    except Exception as exc:
        return failed(tool, call, exc)
    return ToolResult(call.id, render_content(value))


async def _await(value: Any) -> Any:
    return await value


async def invoke_async(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> ToolResult | None:
    """Async twin of ``invoke_sync``; a sync tool runs in a worker thread."""
    import asyncio  # lazily: importing asyncio costs ~35 ms at `import unbroken`

    scope = asyncio.timeout(tool.timeout)
    try:
        async with scope:
            if tool.is_async:
                value = await tool.fn(**tool.arguments(call, business_state))
            elif tool.timeout is not None:
                value = await _in_own_thread(tool, call, business_state)
            else:
                value = await _in_executor(tool, call, business_state)
            if inspect.isawaitable(value):
                value = await value
    except LeaseError:
        raise  # the tool's own lease check (or fenced service) refused: nothing was done
    except OutcomeUnknown as exc:
        return outcome_unknown(call, exc)
    except Exception as exc:
        if isinstance(exc, TimeoutError) and scope.expired():
            return None
        return failed(tool, call, exc)
    return ToolResult(call.id, render_content(value))


async def _in_own_thread(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> Any:
    """A sync tool with a timeout runs in its own daemon thread, not the loop's executor: a hung
    one is abandoned without holding up ``asyncio.run``'s shutdown, and still counts as able to
    act until it returns (``_start_thread``)."""
    import asyncio

    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def settle(value: Any, error: BaseException | None) -> None:
        if done.done():
            return  # abandoned past its timeout
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(value)

    def work() -> None:
        value, error = None, None
        try:
            value = context.run(tool.fn, **tool.arguments(call, business_state))
        except Exception as exc:
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits for this result
            loop.call_soon_threadsafe(settle, value, error)

    _start_thread(tool, work)
    return await done


async def _in_executor(tool: Tool, call: ToolCall, business_state: dict[str, JSONValue]) -> Any:
    """A sync tool without a timeout runs in the loop's default executor (as ``asyncio.to_thread``
    does: ``asyncio.run`` waits for it before the process exits), counted as able to act until it
    returns, even when the call awaiting it is cancelled (``fencing.keep_acting``). Cancelled
    before a worker thread picked it up, it never runs and stops counting at once."""
    import asyncio

    arguments = tool.arguments(call, business_state)
    context = contextvars.copy_context()  # the tool still reaches current_lease() in its thread
    done = keep_acting(tool.effect)
    state = ["waiting"]
    lock = threading.Lock()

    def work() -> Any:
        with lock:
            if state[0] == "abandoned":
                return None
            state[0] = "running"
        try:
            return context.run(tool.fn, **arguments)
        finally:
            done()

    def abandon_if_never_started(future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            return
        with lock:
            if state[0] != "waiting":
                return  # it runs (or ran): its own ``finally`` says when it ends
            state[0] = "abandoned"
        done()

    try:
        future = asyncio.get_running_loop().run_in_executor(None, work)
    except BaseException:
        done()
        raise
    future.add_done_callback(abandon_if_never_started)
    return await future


def _start_thread(tool: Tool, work: Callable[[], None]) -> threading.Thread:
    """Run ``work`` (the tool) in a daemon thread of its own, counted by the run's lease guard as
    able to act until it returns (``fencing.keep_acting``): the lease is not released, nor the run
    taken back by this process, while it may still act, even after its caller gave up on it.

    A Ctrl-C or a SIGTERM handler's ``sys.exit`` can interrupt ``start()`` itself after the thread
    began (the caller waits for it to signal that it started): whichever of the two comes first
    decides, under one lock, whether the tool runs (and the thread stops the count when it ends)
    or never runs (and the count stops at once)."""
    done = keep_acting(tool.effect)
    state = ["waiting"]
    lock = threading.Lock()

    def counted() -> None:
        with lock:
            if state[0] == "abandoned":
                return
            state[0] = "running"
        try:
            work()
        finally:
            done()

    thread = threading.Thread(target=counted, name=f"unbroken-tool-{tool.name}", daemon=True)
    try:
        thread.start()
    except BaseException:
        with lock:
            never_ran = state[0] == "waiting"
            if never_ran:
                state[0] = "abandoned"
        if never_ran:
            done()
        raise
    return thread


def failed(tool: Tool, call: ToolCall, exc: Exception) -> ToolResult:
    """The model sees the exception's type and message; the log gets its type and a short,
    redacted message (``redact.log_failure``: a secret in the message stays out of the log);
    the traceback is at DEBUG."""
    log_failure(log, f"tool {tool.name} raised (call {call.id})", exc)
    return ToolResult(call.id, f"{type(exc).__name__}: {exc}", is_error=True)


def outcome_unknown(call: ToolCall, exc: OutcomeUnknown) -> ToolResult:
    """The tool raised ``OutcomeUnknown``: a result marked ``how="unknown"`` whose content is
    the reason; the engine settles it as an unknown outcome (see ``engine._record``)."""
    log.warning("tool %s could not tell whether it acted (call %s): %s", call.name, call.id, exc)
    return ToolResult(call.id, str(exc), is_error=True, how="unknown")


def timed_out_result(tool: Tool, call: ToolCall) -> ToolResult:
    """The ``is_error`` result of a call abandoned past its timeout (not a side effect)."""
    text = (
        f"TIMED OUT: the call to {tool.name} (call id {call.id}) did not return within {tool.timeout:g} s "
        "and was abandoned; no result is available."
    )
    return ToolResult(call.id, text, is_error=True)


def cut_result(result: ToolResult, max_bytes: int | None) -> ToolResult:
    """Keep a result's head when its UTF-8 text is over ``max_bytes``, with a note saying the
    call succeeded (or failed) and its output was cut, so every save of it can be loaded."""
    if max_bytes is None or len(result.content) * 4 <= max_bytes:
        return result
    raw = result.content.encode("utf-8")
    if len(raw) <= max_bytes:
        return result
    head = raw[:max_bytes].decode("utf-8", errors="ignore")
    outcome = "failed" if result.is_error else "succeeded"
    note = (
        f"\n[unbroken: the call {outcome}; its output was {len(raw):,} bytes and was cut to the first "
        f"{len(head.encode('utf-8')):,} (Agent max_result_bytes) so that the run's saves stay loadable]"
    )
    return ToolResult(result.call_id, head + note, result.is_error, result.how)
