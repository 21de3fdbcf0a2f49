"""The inspector's web application (Starlette) and ``serve`` (uvicorn).

Reads are always on. Actions (resolve, approve, deny, fork, export) run the same ``ops``
functions as the command line and are refused unless all of these hold:

* the server was started with actions enabled;
* the request carries the per-start token in the ``X-Unbroken-Token`` header (the token is
  printed at start, in the URL's ``#fragment``, which browsers never send to a server);
* it is JSON (``Content-Type: application/json``: a cross-site form cannot send that without
  a CORS preflight, which this server never answers);
* ``Sec-Fetch-Site``, when sent, is ``same-origin``, and ``Origin``, when sent, is this server.

Every request's ``Host`` must be one this server answers to (a DNS-rebinding page cannot read it):
the names it was bound to, the loopback names, and those given with ``--allow-host``.

Reads are open on a loopback address. Bound to any other address (``--host 0.0.0.0``) every
read under ``/api/`` needs the token too (header ``X-Unbroken-Token``, or ``?token=`` for the
live event stream, which a browser cannot give headers), so a page on the network sees nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import queue
import secrets
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import asdict
from importlib import resources
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from .. import ops
from ..errors import (
    ApprovalError,
    ConfigError,
    LeaseError,
    RunNotFound,
    StoreError,
    UnbrokenError,
)
from ..message_parts import PART_CAP
from ..state import check_run_id
from ..stores.base import Store
from .views import RunDetails, RunIndex, ledger_before, messages_before, part_text, run_page, timeline_before

TOKEN_HEADER = "x-unbroken-token"
_SECURITY_HEADERS = {
    # No script, style or image from anywhere but this server; no framing (clickjacking).
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}


def _static(name: str) -> bytes:
    return resources.files("unbroken.ui").joinpath("static", name).read_bytes()


class HostCheck:
    """Answer only requests addressed to one of ``hosts`` ("host:port"); None accepts any."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and self.hosts is not None:
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1").lower()
            if host not in self.hosts:
                await JSONResponse({"error": f"this server does not answer to host {host!r}"}, 421)(
                    scope, receive, send
                )
                return
        await self.app(scope, receive, send)


class ReadTokenCheck:
    """Refuse every ``/api/`` request that does not carry ``token`` (header or ``?token=``)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        api = scope["type"] == "http" and str(scope.get("path", "")).startswith("/api/")
        if api and not read_token_matches(scope, self.token):
            why = "this inspector needs its token for reads: open the URL `unbroken ui` printed (#token=...)"
            await JSONResponse({"error": why}, 401, headers=_SECURITY_HEADERS)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def read_token_matches(scope: Scope, token: bytes) -> bool:
    """Whether a request carries ``token`` in its header or its ``token`` query parameter."""
    given = dict(scope["headers"]).get(TOKEN_HEADER.encode(), b"")
    if not given:
        for pair in bytes(scope.get("query_string", b"")).split(b"&"):
            name, _, value = pair.partition(b"=")
            if name == b"token":
                given = unquote_to_bytes(value)
    return bool(given) and hmac.compare_digest(given, token)


def refusal(request: Request, *, enabled: bool, token: str) -> str | None:
    """Why an action request is refused, or None when it may run."""
    if not enabled:
        return "actions are off: start the server with `unbroken ui --enable-actions`"
    site = request.headers.get("sec-fetch-site")
    if site is not None and site != "same-origin":
        return f"cross-site request refused (Sec-Fetch-Site: {site})"
    origin = request.headers.get("origin")
    if origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
        return f"cross-site request refused (Origin: {origin})"
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return "actions take a JSON body (Content-Type: application/json)"
    given = request.headers.get(TOKEN_HEADER, "")
    if not given or not hmac.compare_digest(given.encode(), token.encode()):
        return "missing or wrong action token: open the URL `unbroken ui` printed (it ends with #token=...)"
    return None


def _status(exc: UnbrokenError) -> int:
    if isinstance(exc, RunNotFound):
        return 404
    if isinstance(exc, LeaseError):
        return 409
    if isinstance(exc, (ConfigError, ApprovalError)):
        return 400
    if isinstance(exc, StoreError):
        return 503
    return 409


def create_app(
    store: Store,
    *,
    actions: bool = False,
    token: str | None = None,
    hosts: frozenset[str] | None = None,
    poll_interval: float = 0.5,
    reads_need_token: bool = False,
) -> ASGIApp:
    """The inspector over an open ``store``. ``hosts``: the "host:port" values it answers to
    (None: any). ``token``: the action token (default: a new random one, in ``app.state.token``);
    ``reads_need_token``: every ``/api/`` read needs it too (a server reachable from the network)."""
    lock = threading.RLock()
    index = RunIndex(store, lock)
    details = RunDetails(store, lock)
    token = token or secrets.token_urlsafe(24)

    def page(name: str, media: str) -> Callable[[Request], Awaitable[Response]]:
        body = _static(name)

        async def endpoint(request: Request) -> Response:
            return Response(body, media_type=media, headers=_SECURITY_HEADERS)

        return endpoint

    run_html = _static("index.html")

    async def run_shell(request: Request) -> Response:
        """The run page; its run is read meanwhile, while the browser fetches the script."""
        run_id = request.path_params["run_id"]

        def warm() -> None:
            with contextlib.suppress(UnbrokenError, ValueError):
                details.get(check_run_id(run_id))

        threading.Thread(target=warm, name="unbroken-ui-warm", daemon=True).start()
        return Response(run_html, media_type="text/html; charset=utf-8", headers=_SECURITY_HEADERS)

    def reply(data: Any, status: int = 200) -> Response:
        return JSONResponse(data, status, headers=_SECURITY_HEADERS)

    def guarded(read: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                if "run_id" in request.path_params:
                    check_run_id(request.path_params["run_id"])
                return reply(await run_in_threadpool(read, request))
            except UnbrokenError as exc:
                return reply({"error": str(exc), "type": type(exc).__name__}, _status(exc))
            except ValueError as exc:
                return reply({"error": f"bad request: {exc}"}, 400)

        return endpoint

    def number(request: Request, name: str) -> int | None:
        value = request.query_params.get(name)
        return int(value) if value not in (None, "") else None

    def runs(request: Request) -> Any:
        query = request.query_params
        return index.page(
            phase=query.get("phase") or None,
            text=query.get("q") or None,
            attention=query.get("attention") in ("1", "true", "on"),
            after=query.get("after") or None,
            limit=max(1, min(200, number(request, "limit") or 50)),
        )

    def run(request: Request) -> Any:
        data = run_page(details, request.path_params["run_id"])
        data["actions"] = actions
        return data

    def earlier_messages(request: Request) -> Any:
        return messages_before(
            details, request.path_params["run_id"], number(request, "before") or 0, number(request, "limit")
        )

    def earlier_saves(request: Request) -> Any:
        return timeline_before(
            details, request.path_params["run_id"], number(request, "before") or 0, number(request, "limit")
        )

    def earlier_effects(request: Request) -> Any:
        query = request.query_params
        at = float(query.get("at") or "inf")
        if at != at:  # NaN compares false with every entry
            raise ValueError("at must be a number")
        run_id, key = request.path_params["run_id"], query.get("key") or ""
        return ledger_before(details, run_id, at, key, number(request, "limit"))

    async def whole_part(request: Request) -> Response:
        """One message part whole, as plain text in chunks (the page's "show all")."""
        try:
            run_id = check_run_id(request.path_params["run_id"])
            index, part = int(request.path_params["index"]), int(request.path_params["part"])
            text = await run_in_threadpool(part_text, details, run_id, index, part)
        except UnbrokenError as exc:
            return reply({"error": str(exc), "type": type(exc).__name__}, _status(exc))
        except ValueError as exc:
            return reply({"error": f"bad request: {exc}"}, 400)

        def chunks() -> Iterator[str]:
            for start in range(0, len(text), PART_CAP):
                yield text[start : start + PART_CAP]

        headers = {**_SECURITY_HEADERS, "cache-control": "no-store"}
        return StreamingResponse(chunks(), media_type="text/plain; charset=utf-8", headers=headers)

    async def events(request: Request) -> Response:
        run_id = check_run_id(request.path_params["run_id"])

        async def stream() -> AsyncIterator[str]:
            last = -1
            quiet = 0.0
            while not await request.is_disconnected():
                seq = await run_in_threadpool(details.head_seq, run_id)
                if seq != last:
                    last, quiet = seq, 0.0
                    yield f"event: head\ndata: {json.dumps({'seq': seq})}\n\n"
                elif quiet > 15:
                    quiet = 0.0
                    yield ": still here\n\n"
                await asyncio.sleep(poll_interval)
                quiet += poll_interval

        headers = {**_SECURITY_HEADERS, "cache-control": "no-store"}
        return StreamingResponse(stream(), media_type="text/event-stream", headers=headers)

    def action(perform: Callable[[str, dict[str, Any]], Any]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            why = refusal(request, enabled=actions, token=token)
            if why is not None:
                return reply({"error": why}, 403)
            try:
                run_id = check_run_id(request.path_params["run_id"])
                body = await request.json()
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")

                def locked() -> Any:
                    with lock:
                        return perform(run_id, body)

                done = await run_in_threadpool(locked)
                index.refresh()
                return reply(done)
            except UnbrokenError as exc:
                return reply({"error": str(exc), "type": type(exc).__name__}, _status(exc))
            except (ValueError, KeyError, TypeError) as exc:
                return reply({"error": f"bad request: {exc}"}, 400)

        return endpoint

    def text(body: dict[str, Any], name: str, required: bool = True) -> str | None:
        value = body.get(name)
        if value is None and not required:
            return None
        if not isinstance(value, str) or (required and not value):
            raise ValueError(f"{name!r} must be a non-empty string")
        return value

    def resolve(run_id: str, body: dict[str, Any]) -> Any:
        call_id = text(body, "call_id")
        assert call_id is not None
        if body.get("outcome") == "not_executed":
            ops.resolve_call(store, run_id, call_id, not_executed=True)
        elif body.get("outcome") == "took_effect":
            result = text(body, "result")
            ops.resolve_call(store, run_id, call_id, result=result, is_error=bool(body.get("is_error", False)))
        else:
            raise ValueError("'outcome' must be 'took_effect' or 'not_executed'")
        return {"resolved": call_id}

    def approve(run_id: str, body: dict[str, Any]) -> Any:
        call_id = text(body, "call_id")
        assert call_id is not None
        done = ops.approve(store, run_id, call_id, digest=text(body, "digest", False), by="unbroken ui")
        return asdict(done)

    def deny(run_id: str, body: dict[str, Any]) -> Any:
        call_id, reason = text(body, "call_id"), text(body, "reason")
        assert call_id is not None and reason is not None
        done = ops.deny(store, run_id, call_id, reason=reason, digest=text(body, "digest", False), by="unbroken ui")
        return asdict(done)

    def fork(run_id: str, body: dict[str, Any]) -> Any:
        at = body.get("at")
        if not isinstance(at, int) or isinstance(at, bool):
            raise ValueError("'at' must be a save point number")
        made = ops.fork(store, run_id, at=at, new_run_id=text(body, "new_run_id", False) or None)
        return {"run_id": made.run_id, "forked_from": made.forked_from, "at": made.at}

    async def export(request: Request) -> Response:
        """The run's export (``ops.export_run``'s document), streamed as it is read: the server
        holds a page of records and a few chunks, never the whole history."""
        why = refusal(request, enabled=actions, token=token)
        if why is not None:
            return reply({"error": why}, 403)
        try:
            run_id = check_run_id(request.path_params["run_id"])
            if not isinstance(await request.json(), dict):
                raise ValueError("the body must be a JSON object")

            def exists() -> bool:
                with lock:
                    return store.exists(run_id)

            if not await run_in_threadpool(exists):
                raise RunNotFound(f"no run {run_id!r} in {store.url}")
        except UnbrokenError as exc:
            return reply({"error": str(exc), "type": type(exc).__name__}, _status(exc))
        except (ValueError, KeyError, TypeError) as exc:
            return reply({"error": f"bad request: {exc}"}, 400)
        headers = {**_SECURITY_HEADERS, "cache-control": "no-store"}
        return StreamingResponse(_exported(store, run_id), media_type="application/json", headers=headers)

    routes = [
        Route("/", page("index.html", "text/html; charset=utf-8")),
        Route("/runs/{run_id}", run_shell),
        Route("/static/app.js", page("app.js", "text/javascript; charset=utf-8")),
        Route("/static/strip.js", page("strip.js", "text/javascript; charset=utf-8")),
        Route("/static/style.css", page("style.css", "text/css; charset=utf-8")),
        Route("/api/runs", guarded(runs)),
        Route("/api/runs/{run_id}", guarded(run)),
        Route("/api/runs/{run_id}/messages", guarded(earlier_messages)),
        Route("/api/runs/{run_id}/timeline", guarded(earlier_saves)),
        Route("/api/runs/{run_id}/ledger", guarded(earlier_effects)),
        Route("/api/runs/{run_id}/events", events),
        Route("/api/runs/{run_id}/messages/{index:int}/parts/{part:int}", whole_part),
        Route("/api/runs/{run_id}/resolve", action(resolve), methods=["POST"]),
        Route("/api/runs/{run_id}/approve", action(approve), methods=["POST"]),
        Route("/api/runs/{run_id}/deny", action(deny), methods=["POST"]),
        Route("/api/runs/{run_id}/fork", action(fork), methods=["POST"]),
        Route("/api/runs/{run_id}/export", export, methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    app.state.token = token
    guarded_app: ASGIApp = ReadTokenCheck(app, token) if reads_need_token else app
    return HostCheck(guarded_app, hosts)


def _exported(store: Store, run_id: str) -> Iterator[str]:
    """``ops.export_run_to`` as an iterator of text chunks: a thread writes into a small queue
    (so memory stays a few chunks), and stops if the client goes away."""
    chunks: queue.Queue[str | None] = queue.Queue(maxsize=64)
    gone = threading.Event()
    failure: list[BaseException] = []

    def put(text: str | None) -> None:
        while not gone.is_set():
            try:
                chunks.put(text, timeout=0.5)
                return
            except queue.Full:
                continue
        raise _ClientGone

    def produce() -> None:
        try:  # without the page lock: a slow download must not stall the other pages (stores are thread-safe)
            ops.export_run_to(store, run_id, put)
        except _ClientGone:
            return
        except BaseException as exc:  # reported as the stream's end, below
            failure.append(exc)
        with contextlib.suppress(_ClientGone):
            put(None)

    threading.Thread(target=produce, name="unbroken-ui-export", daemon=True).start()
    try:
        batch: list[str] = []
        while (text := chunks.get()) is not None:
            batch.append(text)
            if len(batch) >= 256 or chunks.empty():
                yield "".join(batch)
                batch = []
        if batch:
            yield "".join(batch)
        if failure:
            raise failure[0]  # the response is cut short: the client sees an incomplete document
    finally:
        gone.set()


class _ClientGone(Exception):
    """The export's reader went away: its writer stops."""


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def answered_hosts(host: str, port: int, allowed: Iterable[str] = ()) -> frozenset[str]:
    """The Host header values a server bound to ``host`` answers to: that address, the loopback
    names, the machine's own name when bound to every interface, and ``allowed`` (names the user
    gave: a DNS name or a proxy's). Any other name is refused, bound to 0.0.0.0 too, so a page
    whose DNS name was rebound to this machine is refused."""
    names = {"127.0.0.1", "localhost", "[::1]", *(name.lower() for name in allowed)}
    if host in ("0.0.0.0", "::", ""):
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    else:
        names |= {f"[{host}]"} if ":" in host else {host.lower()}
    with_port = {f"{name}:{port}" for name in names}
    return frozenset(with_port | names if port == 80 else with_port)


def serve(
    store: Store,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    actions: bool = False,
    announce: Callable[[str], None] = print,
    token: str | None = None,
    allowed_hosts: Iterable[str] = (),
) -> None:
    """Serve the inspector until interrupted; prints the URL to open (with the token when
    actions are on or the address is not loopback: then every read needs it)."""
    import uvicorn

    token = token or secrets.token_urlsafe(24)
    reads_need_token = host not in LOOPBACK
    app = create_app(
        store,
        actions=actions,
        token=token,
        hosts=answered_hosts(host, port, allowed_hosts),
        reads_need_token=reads_need_token,
    )
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    if reads_need_token:
        what = "actions enabled" if actions else "read-only"
        announce(f"unbroken ui: {url}#token={token}  ({what}; reachable from the network: every read needs the token)")
    elif actions:
        announce(f"unbroken ui: {url}#token={token}  (actions enabled; the token is for this start only)")
    else:
        announce(f"unbroken ui: {url}  (read-only; start with --enable-actions to act on runs)")
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=1)
    uvicorn.Server(config).run()
