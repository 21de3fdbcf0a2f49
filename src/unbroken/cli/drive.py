"""Commands that drive an agent: resume (any store) and demo (the built-in scenario)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from .. import ops
from ..agent_ref import load_agent
from ..errors import RunNotFound
from ._app import AGENT_HELP, friendly_errors, main, store_option
from ._render import make_console, next_command, print_result


@main.command("resume")
@click.argument("run_id", metavar="RUN")
@click.option("--agent", "agent_spec", required=True, help=AGENT_HELP)
@store_option
@click.pass_context
@friendly_errors
def resume_command(ctx: click.Context, run_id: str, agent_spec: str, store_url: str) -> None:
    """Resume a run from its last save point.

    Drives RUN on with the given agent until it completes, pauses or fails.
    The run is read from the agent's own store, unless --store (or UNBROKEN_STORE) is given,
    which then replaces it (a function taking the store always gets --store's).
    Exits 1 if the run ends failed."""
    explicit_store = ctx.get_parameter_source("store_url") is not click.core.ParameterSource.DEFAULT
    ref = load_agent(agent_spec)
    store = ops.open_existing_store(store_url) if explicit_store or ref.needs_store else None
    agent = None
    try:
        if store is not None and not store.exists(run_id):
            queued = ops.queued_run(store, run_id)
            if queued is not None:
                agent_text = queued.agent or agent_spec
                worker = next_command("worker", "--agent", agent_text, "--until-idle")
                raise RunNotFound(
                    f"run {run_id!r} is queued (submitted, not started yet): a worker starts it, e.g. {worker}"
                )
            raise RunNotFound(f"no run {run_id!r} in {store_url}")
        agent = ref.build(store)
        result = agent.resume(run_id)  # never a fresh start: a run the store lost is RunNotFound
    finally:
        if store is not None:
            store.close()
        elif agent is not None:
            agent.store.close()
    print_result(make_console(), result)
    if result.status == "failed":
        sys.exit(1)


@main.command("demo")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), help="Use this (empty) directory.")
@click.option("--keep", is_flag=True, help="Keep the temporary work dir (a --workdir is always kept).")
@click.option(
    "--live", is_flag=True, help="Use the real Anthropic/OpenAI API if an API key is set (else the scripted model)."
)
@friendly_errors
def demo_command(workdir: Path | None, keep: bool, live: bool) -> None:
    """Crash an agent run with SIGKILL, then resume it.

    Runs a ~30-turn scripted agent in a child process, kills it with SIGKILL right after it sent
    an email, resumes it in a new process and shows what happened. No network, no API key.
    Exits 1 if any of its checks fails."""
    if live:
        from .demo.live import run_live_demo

        sys.exit(run_live_demo(workdir, keep=keep, console=make_console()))
    from .demo.crash_resume import run_demo

    sys.exit(run_demo(workdir, keep=keep, console=make_console()))
