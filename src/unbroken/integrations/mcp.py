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

import json
from collections.abc import Collection, Mapping
from contextlib import AbstractContextManager, ExitStack
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import anyio.from_thread
import mcp_types
from mcp import Client, StdioServerParameters
from mcp.client import Transport

from ..errors import ConfigError, ToolDefinitionError
from ..state import EFFECTS, Effect, JSONValue, ToolCall
from ..tools import Probe, Tool, effect_from_mcp

IDEMPOTENCY_KEY_META = "unbroken/idempotency_key"
"""The ``_meta`` entry of every ``tools/call`` that holds the call's idempotency key."""

CALL_ID_META = "unbroken/call_id"
"""The ``_meta`` entry holding the model's call id (for the server's logs)."""

ServerSpec = str | StdioServerParameters | Transport


class MCPToolError(Exception):
    """The MCP server answered the call with an error."""


class MCPTools:
    """A connection to one MCP server whose tools are offered as unbroken tools.

    ``server``: a Streamable HTTP URL, ``StdioServerParameters`` (the server is started as a
    child process) or any ``mcp`` transport. ``effects`` overrides the effect class of named
    tools; ``probes`` gives side-effecting tools a probe; ``include`` keeps only the named
    tools; ``rename`` changes the name the model sees (MCP allows names unbroken does not).
    ``timeout`` bounds each call in seconds. Use it as a context manager: the connection
    opens on enter (and the tool list is read then) and closes on exit."""

    def __init__(
        self,
        server: ServerSpec,
        *,
        effects: Mapping[str, Effect] | None = None,
        probes: Mapping[str, Probe] | None = None,
        include: Collection[str] | None = None,
        rename: Mapping[str, str] | None = None,
        timeout: float = 60.0,
    ) -> None:
        self.server = server
        self.effects = dict(effects or {})
        self.probes = dict(probes or {})
        self.include = set(include) if include is not None else None
        self.rename = dict(rename or {})
        self.timeout = timeout
        self._stack: ExitStack | None = None
        self._portal: anyio.from_thread.BlockingPortal | None = None
        self._client: Client | None = None
        self._tools: list[Tool] = []
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
            client = Client(self.server, read_timeout_seconds=self.timeout, cache=None)
            try:
                self._client = stack.enter_context(self._portal.wrap_async_context_manager(client))
                listed = self._portal.call(self._list_all)
            except Exception as exc:
                cause = _root_cause(exc)
                raise ConfigError(
                    f"cannot connect to the MCP server {_describe(self.server)}: {type(cause).__name__}: {cause}. "
                    "Check that the command exists (stdio) or that the server is running at that URL (HTTP)."
                ) from exc
            self._tools = self._build_tools(listed)
        except BaseException:
            self._client = self._portal = None
            stack.close()
            raise
        self._stack = stack

    def close(self) -> None:
        """Close the connection (and stop a stdio server). Safe to call twice."""
        stack, self._stack = self._stack, None
        self._client = self._portal = None
        if stack is not None:
            stack.close()

    @property
    def tools(self) -> list[Tool]:
        """The server's tools as unbroken tools, in the server's order."""
        if self._stack is None:
            raise ConfigError("MCPTools is not connected: use it as `with MCPTools(...) as server:`")
        return list(self._tools)

    def call(self, name: str, arguments: Mapping[str, Any], *, meta: Mapping[str, Any] | None = None) -> Any:
        """Call a tool of the server directly (not through the ledger), for example from a
        probe; returns what the unbroken tool would return. Raises ``MCPToolError`` when
        the server reports an error."""
        if self._portal is None or self._client is None:
            raise ConfigError("MCPTools is not connected: use it as `with MCPTools(...) as server:`")
        client = self._client

        request_meta = cast(mcp_types.RequestParamsMeta, dict(meta)) if meta else None

        async def send() -> mcp_types.CallToolResult:
            return await client.call_tool(name, dict(arguments), meta=request_meta)

        result = self._portal.call(send)
        return result_value(result)

    async def _list_all(self) -> list[mcp_types.Tool]:
        assert self._client is not None
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await self._client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return listed

    # ------------------------------------------------------------------ tools

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
        annotations = spec.annotations.model_dump(by_alias=True, exclude_none=True) if spec.annotations else None
        effect = self.effects.get(spec.name) or effect_from_mcp(annotations)
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
            try:
                return self.call(server_name, arguments, meta=meta)
            except (MCPToolError, ConfigError):
                raise
            except Exception as exc:
                raise MCPToolError(
                    f"the call to MCP tool {server_name!r} failed in transit ({type(exc).__name__}: {exc}); "
                    "whether the server acted on it is unknown. Verify before calling it again."
                ) from exc

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
