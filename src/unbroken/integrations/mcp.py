"""An MCP server's tools as unbroken tools (``pip install unbroken[mcp]``).

::

    with MCPTools(StdioServerParameters(command="python", args=["server.py"])) as server:
        agent = Agent(model=..., tools=server.tools, store=store)
        agent.run("...", run_id="job-1")

Each tool's effect class comes from the server's annotations (``readOnlyHint`` -> read_only,
``idempotentHint`` -> idempotent, anything else, ``destructiveHint`` included, -> side_effect),
and ``effects={"name": ...}`` overrides it per tool. Every call carries the call's idempotency
key in its ``_meta`` (``unbroken/idempotency_key``), so a server that honours it can make a
repeated call harmless. The connection lives on an event loop in a background thread, so the
tools work under ``Agent.run`` and ``Agent.arun`` alike.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Collection, Mapping
from concurrent.futures import Future
from contextlib import AbstractContextManager, ExitStack
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit, urlunsplit

import anyio.from_thread
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client import Transport
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .. import clock
from ..errors import ConfigError, OutcomeUnknown, ToolDefinitionError
from ..state import EFFECTS, Effect, JSONValue, ToolCall
from ..tools import Probe, Tool, effect_from_mcp

IDEMPOTENCY_KEY_META = "unbroken/idempotency_key"
"""The ``_meta`` entry of every ``tools/call`` that holds the call's idempotency key."""

CALL_ID_META = "unbroken/call_id"
"""The ``_meta`` entry holding the model's call id (for the server's logs)."""

ServerSpec = str | StdioServerParameters | Transport
_T = TypeVar("_T")


class MCPToolError(Exception):
    """The MCP server answered the call with an error."""


class MCPServerUnavailable(MCPToolError):
    """The MCP server stayed unreachable through every reconnection attempt; nothing was sent."""


class MCPTools:
    """A connection to one MCP server whose tools are offered as unbroken tools.

    ``server``: a Streamable HTTP URL, ``StdioServerParameters`` (the server is started as a
    child process) or any ``mcp`` transport. ``effects`` overrides the effect class of named
    tools; ``probes`` gives side-effecting tools a probe; ``include`` keeps only the named
    tools; ``rename`` changes the name the model sees (MCP allows names unbroken does not).
    ``timeout`` bounds each call in seconds. Use it as a context manager: the connection
    opens on enter (and the tool list is read then) and closes on exit.

    A lost connection (a stdio server that died, an HTTP server restarted) is opened again
    on the next request, up to ``reconnect_attempts`` times with a doubling delay from
    ``reconnect_delay`` seconds; when it stays down the request raises
    ``MCPServerUnavailable`` (nothing was sent). A read-only call cut by the loss is sent
    again on the new connection; any other call cut by it raises ``OutcomeUnknown`` (the
    server may have acted), which the run settles by its ``unknown_policy``."""

    def __init__(
        self,
        server: ServerSpec,
        *,
        effects: Mapping[str, Effect] | None = None,
        probes: Mapping[str, Probe] | None = None,
        include: Collection[str] | None = None,
        rename: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        reconnect_attempts: int = 3,
        reconnect_delay: float = 0.25,
    ) -> None:
        self.server = server
        self.effects = dict(effects or {})
        self.probes = dict(probes or {})
        self.include = set(include) if include is not None else None
        self.rename = dict(rename or {})
        self.timeout = timeout
        if reconnect_attempts < 0 or not reconnect_delay >= 0:
            raise ConfigError("reconnect_attempts and reconnect_delay must not be negative")
        self.reconnect_attempts = reconnect_attempts
        self.reconnect_delay = reconnect_delay
        self._stack: ExitStack | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._connection: _Connection | None = None
        self._lock = threading.RLock()  # one reconnection at a time; tools run in many threads
        self._tools: list[Tool] = []
        self._server_effects: dict[str, Effect] = {}
        self._tools_stale = False
        for name, effect in self.effects.items():
            if effect not in EFFECTS:
                raise ConfigError(f"effects[{name!r}] must be one of {', '.join(EFFECTS)}, not {effect!r}")

    # ------------------------------------------------------------------ connection

    def __enter__(self) -> MCPTools:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Connect, read the server's tool list and build the tools. Safe to call twice."""
        if self._stack is not None:
            return
        stack = ExitStack()
        try:
            portal_cm: AbstractContextManager[anyio.from_thread.BlockingPortal] = (
                anyio.from_thread.start_blocking_portal()
            )
            self._portal = stack.enter_context(portal_cm)
            try:
                self._connect()
            except (ConfigError, ToolDefinitionError):
                raise
            except Exception as exc:
                cause = _root_cause(exc)
                raise ConfigError(
                    f"cannot connect to the MCP server {_describe(self.server)}: {type(cause).__name__}: {cause}. "
                    "Check that the command exists (stdio) or that the server is running at that URL (HTTP)."
                ) from exc
            stack.callback(self._disconnect)
        except BaseException:
            self._disconnect()
            self._portal = None
            stack.close()
            raise
        self._stack = stack

    def close(self) -> None:
        """Close the connection (and stop a stdio server). Safe to call twice."""
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()
        self._portal = None

    def _connect(self) -> None:
        """Open a connection, follow the server's tools/list_changed, read the tool list."""
        assert self._portal is not None
        client = Client(self.server, read_timeout_seconds=self.timeout, cache=None, message_handler=self._on_message)
        connection = _Connection(client, self._portal.wrap_async_context_manager(client))
        connection.context.__enter__()
        try:
            listed = self._portal.call(self._list_all, client)
            self._use_tool_list(listed)
            if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                connection.listener = self._portal.start_task_soon(self._listen, client)
        except BaseException:
            connection.close()
            raise
        self._connection = connection

    def _disconnect(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def _live(self, broken: _Connection | None = None) -> _Connection:
        """The open connection; a new one when there is none, or when ``broken`` (the one a
        request just found lost) is still the current one."""
        with self._lock:
            if self._portal is None:
                raise ConfigError("MCPTools is not connected: use it as `with MCPTools(...) as server:`")
            if self._connection is None or self._connection is broken:
                self._reconnect()
            assert self._connection is not None
            return self._connection

    def _reconnect(self) -> None:
        """Drop the lost connection and open a new one, backing off between attempts."""
        self._disconnect()
        last: BaseException | None = None
        for attempt in range(self.reconnect_attempts):
            if attempt:
                clock.sleep(self.reconnect_delay * 2 ** (attempt - 1))
            try:
                self._connect()
                return
            except (ConfigError, ToolDefinitionError):
                raise
            except Exception as exc:
                last = _root_cause(exc)
        reason = f"{type(last).__name__}: {last}" if last is not None else "reconnection is disabled"
        raise MCPServerUnavailable(
            f"the connection to the MCP server {_describe(self.server)} was lost and "
            f"{self.reconnect_attempts} attempt(s) to open it again failed ({reason}); the request was not sent. "
            "Start the server again, then resume the run."
        )

    def _request(self, send: Callable[[Client], Awaitable[_T]], *, read_only: bool, what: str) -> _T:
        """Send one request. The one place a lost connection is handled: reconnect (bounded,
        before sending when a probe finds the server gone), send a read-only request once more
        on the new connection, and report any other request cut by the loss (or by the
        timeout) as ``OutcomeUnknown``: the server may have acted."""
        connection = self._live()
        if not read_only and not self._alive(connection):
            connection = self._live(broken=connection)  # found dead before sending: nothing in doubt
        for attempt in range(2 if read_only else 1):
            assert self._portal is not None
            try:
                return self._portal.call(send, connection.client)
            except (MCPToolError, ConfigError, OutcomeUnknown):
                raise
            except Exception as exc:
                cause = _root_cause(exc)
                lost = _lost_connection(cause)
                if isinstance(cause, MCPError) and not lost and cause.code != mcp_types.REQUEST_TIMEOUT:
                    raise MCPToolError(f"the MCP server refused {what}: {cause.error.message}") from exc
                if not read_only:
                    raise _unanswered(what, cause, lost, self.timeout) from exc
                if lost is None or attempt == 1:
                    raise MCPToolError(f"{what} failed: {type(cause).__name__}: {cause}") from exc
                connection = self._live(broken=connection)
        raise AssertionError("unreachable")

    def _alive(self, connection: _Connection) -> bool:
        """Whether ``connection`` still answers (asked before a call that may act, so that a
        server found dead is reconnected to before the call is sent, not after). The probe is
        one tools/list page: ``ping`` is gone from the 2026 protocol."""
        assert self._portal is not None

        async def probe(client: Client) -> object:
            return await client.list_tools()

        try:
            self._portal.call(probe, connection.client)
        except Exception as exc:
            return _lost_connection(exc) is None
        return True

    async def _on_message(self, message: Any) -> None:
        """Notifications of a handshake-era server: a changed tool list is read again."""
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._tools_stale = True

    async def _listen(self, client: Client) -> None:
        """A 2026-era server publishes a changed tool list to a listen stream."""
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    self._tools_stale = True

    @property
    def tools(self) -> list[Tool]:
        """The server's tools as unbroken tools, in the server's order; read again when the
        server said its list changed (pass ``server.tools`` to each new ``Agent``)."""
        if self._stack is None:
            raise ConfigError("MCPTools is not connected: use it as `with MCPTools(...) as server:`")
        if self._tools_stale:
            self.refresh_tools()
        return list(self._tools)

    def refresh_tools(self) -> list[Tool]:
        """Read the server's tool list again (done by ``tools`` after a list_changed)."""
        self._tools_stale = False
        listed = self._request(self._list_all, read_only=True, what="tools/list")
        with self._lock:
            self._use_tool_list(listed)
            return list(self._tools)

    def call(self, name: str, arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None) -> Any:
        """Call a tool of the server directly (not through the ledger), for example from a
        probe; returns what the unbroken tool would return. Raises ``MCPToolError`` when
        the server reports an error, ``OutcomeUnknown`` when the connection broke during a
        call that is not read-only."""
        request_meta = cast(mcp_types.RequestParamsMeta, dict(meta)) if meta else None
        effect = self.effects.get(name) or self._server_effects.get(name, "side_effect")

        async def send(client: Client) -> mcp_types.CallToolResult:
            return await client.call_tool(name, dict(arguments), meta=request_meta)

        result = self._request(send, read_only=effect == "read_only", what=f"the call to MCP tool {name!r}")
        return result_value(result)

    # ------------------------------------------------------------------ resources and prompts

    def resources(self) -> list[mcp_types.Resource]:
        """The server's resources (every page of resources/list)."""

        async def send(client: Client) -> list[mcp_types.Resource]:
            found: list[mcp_types.Resource] = []
            cursor: str | None = None
            while True:
                page = await client.list_resources(cursor=cursor)
                found.extend(page.resources)
                if (cursor := page.next_cursor) is None:
                    return found

        return self._request(send, read_only=True, what="resources/list")

    def read_resource(self, uri: str) -> str:
        """The text of resource ``uri`` (its text parts joined; a binary part as JSON)."""

        async def send(client: Client) -> mcp_types.ReadResourceResult:
            return await client.read_resource(uri)

        result = self._request(send, read_only=True, what=f"reading resource {uri!r}")
        parts = []
        for content in result.contents:
            if isinstance(content, mcp_types.TextResourceContents):
                parts.append(content.text)
            else:
                parts.append(json.dumps(content.model_dump(mode="json", by_alias=True, exclude_none=True)))
        return "\n".join(parts)

    def prompts(self) -> list[mcp_types.Prompt]:
        """The server's prompts (every page of prompts/list)."""

        async def send(client: Client) -> list[mcp_types.Prompt]:
            found: list[mcp_types.Prompt] = []
            cursor: str | None = None
            while True:
                page = await client.list_prompts(cursor=cursor)
                found.extend(page.prompts)
                if (cursor := page.next_cursor) is None:
                    return found

        return self._request(send, read_only=True, what="prompts/list")

    def get_prompt(self, name: str, arguments: Mapping[str, str] | None = None) -> mcp_types.GetPromptResult:
        """Prompt ``name`` filled with ``arguments``, as the server renders it."""

        async def send(client: Client) -> mcp_types.GetPromptResult:
            return await client.get_prompt(name, dict(arguments or {}))

        return self._request(send, read_only=True, what=f"getting prompt {name!r}")

    @staticmethod
    async def _list_all(client: Client) -> list[mcp_types.Tool]:
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return listed

    # ------------------------------------------------------------------ tools

    def _use_tool_list(self, listed: list[mcp_types.Tool]) -> None:
        self._tools = self._build_tools(listed)
        self._server_effects = {spec.name: self._effect_of(spec) for spec in listed}

    def _effect_of(self, spec: mcp_types.Tool) -> Effect:
        annotations = spec.annotations.model_dump(by_alias=True, exclude_none=True) if spec.annotations else None
        return self.effects.get(spec.name) or effect_from_mcp(annotations)

    def _build_tools(self, listed: list[mcp_types.Tool]) -> list[Tool]:
        names = {t.name for t in listed}
        for option, keys in (("effects", self.effects), ("probes", self.probes), ("rename", self.rename)):
            unknown = sorted(set(keys) - names)
            if unknown:
                raise ConfigError(
                    f"{option} names {', '.join(map(repr, unknown))}, which the MCP server does not offer; "
                    f"its tools are: {', '.join(sorted(names)) or '(none)'}"
                )
        if self.include is not None and self.include - names:
            missing = ", ".join(sorted(self.include - names))
            raise ConfigError(f"include names {missing}, which the MCP server does not offer")
        return [self._tool_for(spec) for spec in listed if self.include is None or spec.name in self.include]

    def _tool_for(self, spec: mcp_types.Tool) -> Tool:
        effect = self._effect_of(spec)
        probe = self.probes.get(spec.name)
        model_name = self.rename.get(spec.name, spec.name)
        if probe is not None and effect != "side_effect":
            raise ToolDefinitionError(
                f"MCP tool {spec.name!r} is {effect}; a probe only makes sense for a side_effect tool"
            )
        if not model_name.replace("_", "a").replace("-", "a").isalnum() or len(model_name) > 64:
            raise ToolDefinitionError(
                f"MCP tool name {model_name!r} is not 1-64 characters of a-z A-Z 0-9 _ -; "
                f"pass rename={{{spec.name!r}: 'a_valid_name'}} or leave it out with include=[...]"
            )
        server_name = spec.name

        def call_server(*, call: ToolCall, **arguments: Any) -> Any:
            meta = {IDEMPOTENCY_KEY_META: call.idempotency_key, CALL_ID_META: call.id}
            return self.call(server_name, arguments, meta=meta)

        schema: dict[str, JSONValue] = json.loads(json.dumps(spec.input_schema))
        return Tool(
            name=model_name,
            description=spec.description or spec.title or model_name,
            effect=effect,
            fn=call_server,
            input_schema=schema,
            probe=probe,
            takes_call=True,
        )


class _Connection:
    """One open client session (a stdio server process, an HTTP session) and its listener."""

    def __init__(self, client: Client, context: AbstractContextManager[Client]) -> None:
        self.client = client
        self.context = context
        self.listener: Future[None] | None = None

    def close(self) -> None:
        if self.listener is not None:
            self.listener.cancel()
        with contextlib.suppress(Exception):  # a dead server's transport may fail to close cleanly
            self.context.__exit__(None, None, None)


def _unanswered(what: str, cause: BaseException, lost: str | None, timeout: float) -> Exception:
    """What a request that may act and got no answer raises: ``OutcomeUnknown`` (the server
    may have acted before the connection broke or the timeout passed), which the run settles
    by its ``unknown_policy``; never a plain failure the model might simply retry."""
    if lost is not None:
        why = f"lost the connection ({lost})"
    elif isinstance(cause, MCPError) and cause.code == mcp_types.REQUEST_TIMEOUT:
        why = f"got no answer within {timeout:g} s"
    else:
        why = f"failed in transit ({type(cause).__name__}: {cause})"
    return OutcomeUnknown(
        f"{what} {why}; whether the MCP server acted on it is unknown. Verify before calling it again."
    )


def _lost_connection(exc: BaseException) -> str | None:
    """How the connection was lost, when ``exc`` says it was (else None: the server answered)."""
    cause = _root_cause(exc)
    if isinstance(cause, MCPError):
        return "closed" if cause.code == mcp_types.CONNECTION_CLOSED else None
    if isinstance(cause, (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, OSError)):
        return f"broken ({type(cause).__name__})"
    if type(cause).__module__.startswith(("httpx", "httpcore")):
        return f"broken ({type(cause).__name__}: {cause})"
    return None


def _root_cause(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio task groups wrap transport errors)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(server: ServerSpec) -> str:
    if isinstance(server, StdioServerParameters):
        return " ".join([server.command, *server.args])
    if isinstance(server, str):
        parts = urlsplit(server)  # never show credentials given in the URL
        return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2], query=""))
    return type(server).__name__


def result_value(result: mcp_types.CallToolResult) -> Any:
    """What a ``tools/call`` result gives the model: its text blocks joined (other blocks as
    JSON), or its structured content when it has no content blocks. ``isError`` raises."""
    parts = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(json.dumps(block.model_dump(mode="json", by_alias=True, exclude_none=True)))
    if result.is_error:
        raise MCPToolError("\n".join(parts) or "the MCP server reported an error without a message")
    if not parts and result.structured_content is not None:
        return result.structured_content
    return "\n".join(parts)
