"""Commands for a fleet of workers: ``submit`` queues a run, ``worker`` runs queued runs."""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

import click

from .. import RunResult
from ..agent_ref import load_agent, parse_agent_ref
from ..worker import Worker, WorkerStats
from ._app import AGENT_HELP, friendly_errors, main, open_cli_store, store_option
from ._render import CleanLogFormatter, echo


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@", 1)))


@main.command("submit")
@click.option("--agent", "agent_spec", required=True, help=f"The --agent of the workers that will run it: {AGENT_HELP}")
@click.option("--task", required=True, help="What the run must do.")
@click.option("--run-id", default=None, help="Run id to use (default: a new run-... id).")
@store_option
@friendly_errors
def submit_command(agent_spec: str, task: str, run_id: str | None, store_url: str) -> None:
    """Queue a run for the workers of --agent and print its run id.

    The run is recorded for workers started with the same --agent text; it shows as queued in
    `runs` and `show` until one starts it. Safe to repeat with the same --run-id and task."""
    parse_agent_ref(agent_spec)
    with open_cli_store(store_url) as store:
        echo(store.submit(task, run_id, agent=agent_spec))


@main.command("worker")
@click.option("--agent", "agent_spec", required=True, help=AGENT_HELP)
@click.option("--concurrency", type=click.IntRange(1, 256), default=1, show_default=True, help="Runs at once.")
@click.option("--poll-interval", type=click.FloatRange(0.01), default=1.0, show_default=True, help="Seconds.")
@click.option("--until-idle", is_flag=True, help="Exit once no run is left to claim.")
@click.option("--max-runs", type=click.IntRange(1), default=None, help="Exit after claiming this many runs.")
@click.option("-v", "--verbose", count=True, help="-v: the SDKs' and drivers' INFO lines too; -vv: DEBUG.")
@store_option
@friendly_errors
def worker_command(
    agent_spec: str,
    concurrency: int,
    poll_interval: float,
    until_idle: bool,
    max_runs: int | None,
    verbose: int,
    store_url: str,
) -> None:
    """Claim runs submitted for --agent, run each to its end, and claim more.

    Runs left by a dead worker are picked up once their lease expires. SIGTERM or Ctrl-C: the
    worker finishes its current save points, releases its leases and exits."""
    build = load_agent(agent_spec).factory()
    configure_logging(verbose)

    def report(result: RunResult) -> None:
        echo(f"{result.run_id}\t{result.status}\t{result.turns} turns\t{result.tokens_used} tokens")

    with open_cli_store(store_url) as store:
        where = _redacted(store.url)
        worker = Worker(
            build,
            store,
            concurrency=concurrency,
            agent_name=agent_spec,
            poll_interval=poll_interval,
            on_finish=report,
            on_ready=lambda: echo(
                f"worker: {concurrency} slot(s) on {where} for {agent_spec}; SIGTERM to stop", err=True
            ),
        )
        stats = worker.run(until_idle=until_idle, max_runs=max_runs)
    echo(f"worker: {summary(stats)}", err=True)


LIBRARY_LOGGERS = ("httpx", "httpx2", "httpcore", "openai", "anthropic", "urllib3", "botocore", "mcp")
"""The SDKs and drivers whose INFO lines (one per HTTP request) would bury the worker's own."""


def configure_logging(verbose: int) -> None:
    """The worker's own lines (``unbroken.*``) at INFO, every other library at WARNING; ``-v``
    lets the libraries' INFO through, ``-vv`` is DEBUG for all."""
    level = logging.DEBUG if verbose >= 2 else logging.INFO
    handler = logging.StreamHandler()
    handler.setFormatter(CleanLogFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))  # stored text made safe
    logging.basicConfig(level=level, handlers=[handler])
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(level if verbose else logging.WARNING)


def summary(stats: WorkerStats) -> str:
    """One line: what the worker did, with what needs a person last."""
    parts = [
        f"{stats.finished} finished ({stats.took_over} taken over from an earlier process)",
        f"{stats.interrupted} interrupted",
        f"{stats.lost} lost to another worker",
        f"{stats.errors} failed and left for retry",
    ]
    if stats.data_lost:
        parts.append(f"{stats.data_lost} LOST BY THE STORE (not started over; see the log)")
    if stats.settled:
        parts.append("calls settled on resume: " + ", ".join(f"{n} {how}" for how, n in sorted(stats.settled.items())))
    parts.append(f"{stats.awaiting_approval} awaiting approval")
    parts.append(f"{stats.paused} paused on an unknown outcome")
    return "; ".join(parts)
