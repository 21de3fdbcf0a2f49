"""``unbroken approvals RUN``, ``unbroken approve RUN CALL`` and ``unbroken deny RUN CALL
--reason ...``: decide the tool calls a run is waiting on (``unbroken.approvals``)."""

from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.table import Table

from ..approvals import ApprovalRequest
from ..ops import approve, deny, pending_approvals
from ..ops import open_existing_store as open_run_store
from ._app import friendly_errors, main, store_option
from ._render import make_console, next_command, print_hint, resume_hint, when


def _arguments(request: ApprovalRequest) -> str:
    return json.dumps(request.input, ensure_ascii=False, sort_keys=True)


@main.command("approvals")
@click.argument("run_id", metavar="RUN")
@store_option
@friendly_errors
def approvals_command(run_id: str, store_url: str) -> None:
    """List the approval requests of RUN's current turn, with each call's arguments and digest."""
    with open_run_store(store_url) as store:
        requests = pending_approvals(store, run_id)
    console = make_console()
    if not requests:
        console.print(f"run {escape(run_id)} has no approval request")
        return
    table = Table(title=f"approval requests of run {escape(run_id)}", title_justify="left")
    for column in ("call", "tool", "arguments", "status", "asked", "expires", "digest"):
        table.add_column(column, overflow="fold")
    ids = [request.call_id for request in requests]
    for request in requests:
        # A call id the provider repeated names no single call: show the key to decide by.
        name = request.call_id if ids.count(request.call_id) == 1 else f"{request.call_id} (key {request.key})"
        table.add_row(
            escape(name),
            escape(request.tool),
            escape(_arguments(request)),
            escape(request.status + (f": {request.reason}" if request.reason else "")),
            when(request.requested_at),
            when(request.expires_at) if request.expires_at else "never",
            request.digest,
        )
    console.print(table)
    for request in requests:
        if request.status == "requested" and ids.count(request.call_id) == 1:
            approve_it = next_command("approve", run_id, request.call_id, "--digest", request.digest)
            deny_it = next_command("deny", run_id, request.call_id, "--reason", "TEXT")
            print_hint(
                console, f"{escape(request.call_id)}: approve with {escape(approve_it)} or deny with {escape(deny_it)}"
            )


@main.command("approve")
@click.argument("run_id", metavar="RUN")
@click.argument("call_id", metavar="CALL")
@click.option("--digest", default=None, help="Approve only if the call's argument digest is this one (as listed).")
@click.option("--by", default=None, help="Who approves (recorded with the decision).")
@store_option
@friendly_errors
def approve_command(run_id: str, call_id: str, digest: str | None, by: str | None, store_url: str) -> None:
    """Approve the tool call CALL that RUN is waiting on. The decision is bound to that call and
    its arguments and is saved at once; the resumed run executes the call exactly once."""
    with open_run_store(store_url) as store:
        request = approve(store, run_id, call_id, digest=digest, by=by)
    console = make_console()
    console.print(
        f"approved call {escape(request.call_id)}: {escape(request.tool)}({escape(_arguments(request))}) "
        f"[dim]{request.digest}[/]"
    )
    print_hint(console, f"resume it with: {escape(resume_hint(run_id))} (or Agent.run)")


@main.command("deny")
@click.argument("run_id", metavar="RUN")
@click.argument("call_id", metavar="CALL")
@click.option("--reason", required=True, help="Why: the model is told this, as the call's error result.")
@click.option("--digest", default=None, help="Deny only if the call's argument digest is this one (as listed).")
@click.option("--by", default=None, help="Who denies (recorded with the decision).")
@store_option
@friendly_errors
def deny_command(run_id: str, call_id: str, reason: str, digest: str | None, by: str | None, store_url: str) -> None:
    """Deny the tool call CALL that RUN is waiting on: it is never executed, and the model gets
    an error result carrying REASON when the run resumes."""
    with open_run_store(store_url) as store:
        request = deny(store, run_id, call_id, reason=reason, digest=digest, by=by)
    console = make_console()
    console.print(f"denied call {escape(request.call_id)}: {escape(request.tool)}({escape(_arguments(request))})")
    print_hint(console, f"resume it with: {escape(resume_hint(run_id))} (or Agent.run)")
