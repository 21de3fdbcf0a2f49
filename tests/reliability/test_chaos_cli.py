"""Guarantee 8: ``unbroken chaos`` runs the sweep on a user's agent, in forked children it really
SIGKILLs, and fails CI on the user errors it exists to catch: a side effect repeated (whatever
class the tool was declared), a problem the user's own check finds."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from chaos_postgres import drop_schema, postgres_server, skip_unless_postgres
from click.testing import CliRunner
from reliability_agents import (
    AGENT,
    FORGETFUL_AGENT,
    INVOICE_AGENT,
    INVOICE_CHECK,
    KEYLESS_AGENT,
    RECEIPT_CHECK,
    TASK,
)

import unbroken.cli.chaos  # noqa: F401  (registers the command)
from unbroken import open_store
from unbroken.cli import main


def _chaos(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["chaos", "--task", TASK, *args], catch_exceptions=False)
    return result.exit_code, result.output


def _one_kill(*args: str) -> tuple[int, str]:
    """One run killed right after its first tool executed, resumed until done: the fast case."""
    return _chaos("--point", "tool.after_execute:1", "--kills", "0", *args)


def test_a_correct_agent_passes_on_both_drivers(scratch: Path) -> None:
    code, output = _chaos(
        "--agent", AGENT, "--point", "tool.after_execute", "--per-point", "2", "--kills", "2", "--seed", "3",
        "--workdir", str(scratch),
    )  # fmt: skip
    assert code == 0, output
    assert " 0 violations" in output and "driver both" in output
    for column in ("crash point", "kills", "resumes", "violations", "run more than once"):
        assert column in output
    assert "tool.after_execute" in output and "random" in output
    assert re.search(r"tool\.after_execute\s+.\s+\d+\s+.\s+4\s+.", output)  # 2 runs per driver, 2 drivers
    for tool_name in ("lookup_order", "reserve_stock", "charge_card", "send_email"):
        assert tool_name in output


def test_a_tool_declared_read_only_that_sends_twice_fails_naming_the_tool_and_the_call(scratch: Path) -> None:
    code, output = _one_kill("--agent", INVOICE_AGENT, "--driver", "sync", "--workdir", str(scratch))
    assert code == 1, output
    violation = next(line for line in output.splitlines() if line.startswith("VIOLATION"))
    assert "side effect at most once" in violation and "send_invoice is declared read_only" in violation
    assert re.search(r"call toolu_i1 .* ran [2-9] times", output.replace("\n", " "))
    assert re.search(r"send_invoice\s+.\s+read_only\s+.\s+\d+\s+.\s+1\s", output)  # one call run more than once


def _invoices_sent(output: str) -> list[dict[str, object]]:
    kept = Path(output.split("kept: ", 1)[1].split()[0])
    try:
        return [json.loads(line) for book in kept.glob("**/invoices") for line in book.read_text().splitlines()]
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_the_async_driver_runs_the_agent_through_arun_and_catches_the_invoice_tool_too(scratch: Path) -> None:
    code, output = _one_kill("--agent", INVOICE_AGENT, "--driver", "async", "--keep", "--workdir", str(scratch))
    assert code == 1, output
    assert "VIOLATION async-tool_after_execute" in output and "send_invoice" in output
    sent = _invoices_sent(output)
    assert sent and not any(invoice["main_thread"] for invoice in sent)  # arun runs sync tools in threads


def test_the_sync_driver_runs_the_agent_through_run(scratch: Path) -> None:
    code, output = _one_kill("--agent", INVOICE_AGENT, "--driver", "sync", "--keep", "--workdir", str(scratch))
    assert code == 1, output
    sent = _invoices_sent(output)
    assert sent and all(invoice["main_thread"] for invoice in sent)


def test_an_idempotent_tool_that_ignores_its_key_and_applies_it_twice_fails_with_the_evidence(scratch: Path) -> None:
    code, output = _one_kill("--agent", KEYLESS_AGENT, "--driver", "sync", "--workdir", str(scratch))
    assert code == 1, output
    flat = " ".join(output.split())
    assert "add_loyalty_points call toolu_k1" in flat
    assert "never read call.idempotency_key" in flat and "$UNBROKEN_CHAOS_DIR changed on" in flat


def test_a_problem_found_by_the_users_check_fails_the_sweep(scratch: Path) -> None:
    # Killed after saving the intent to send the receipt and before sending it: the email tool has
    # no probe, so the outcome is unknown and never retried. Only the user's check can see that.
    code, output = _chaos(
        "--agent", AGENT, "--check", RECEIPT_CHECK, "--point", "tool.before_execute:4", "--kills", "0",
        "--driver", "sync", "--workdir", str(scratch),
    )  # fmt: skip
    assert code == 1, output
    assert "user check: no receipt was sent to ann@example.com" in output
    assert "side effect at most once" not in output


def test_a_check_that_finds_nothing_runs_on_every_finished_run_and_passes(scratch: Path) -> None:
    code, output = _chaos(
        "--agent", AGENT, "--check", RECEIPT_CHECK, "--point", "tool.after_execute:4", "--kills", "0",
        "--driver", "sync", "--workdir", str(scratch),
    )  # fmt: skip
    assert code == 0, output
    assert re.search(r"\b[1-9]\d* user checks", output)


def test_a_check_that_fails_on_the_crash_free_run_is_refused(scratch: Path) -> None:
    # The invoice agent sends no receipt at all: a check that fails without any crash would fail every run.
    code, output = _one_kill("--agent", INVOICE_AGENT, "--check", RECEIPT_CHECK, "--workdir", str(scratch))
    assert code == 2, output
    assert "problems in the crash-free run" in output and "no receipt was sent" in output


def test_the_users_check_also_names_the_invoice_sent_twice(scratch: Path) -> None:
    code, output = _one_kill(
        "--agent", INVOICE_AGENT, "--check", INVOICE_CHECK, "--driver", "sync", "--workdir", str(scratch)
    )
    assert code == 1, output
    assert re.search(r"user check: ann@example.com got [2-9] invoices", output)


def test_keep_keeps_every_runs_directory_with_its_journal_and_prints_where(scratch: Path) -> None:
    code, output = _one_kill("--agent", INVOICE_AGENT, "--driver", "sync", "--keep", "--workdir", str(scratch))
    assert code == 1, output
    kept = Path(output.split("kept: ", 1)[1].split()[0])
    try:
        journals = sorted(kept.glob("**/.chaos/journal.jsonl"))
        assert len(journals) >= 2  # the crash-free reference run and the killed run
        killed = next(j for j in journals if "tool_after_execute" in str(j))
        lines = [json.loads(line) for line in killed.read_text().splitlines()]
        assert [line["at"] for line in lines][:2] == ["start", "finish"]
        assert {line["tool"] for line in lines} == {"send_invoice"}
        assert (killed.parent.parent / "invoices").exists()  # the fake service, next to .chaos/
    finally:
        shutil.rmtree(kept, ignore_errors=True)


def test_without_keep_nothing_is_left_behind(scratch: Path) -> None:
    code, output = _one_kill("--agent", INVOICE_AGENT, "--driver", "sync", "--workdir", str(scratch))
    assert code == 1 and "kept:" not in output
    assert list(scratch.iterdir()) == []


def test_chaos_exits_1_and_names_the_violation_when_the_store_forgets_intents(scratch: Path) -> None:
    code, output = _chaos(
        "--agent", FORGETFUL_AGENT, "--kills", "0", "--point", "tool.after_execute", "--per-point", "2",
        "--driver", "sync", "--workdir", str(scratch),
    )  # fmt: skip
    assert code == 1
    assert "side effect at most once" in output


def test_chaos_refuses_an_attribute_that_is_not_an_agent(scratch: Path) -> None:
    code, output = _chaos("--agent", f"{AGENT.rsplit(':', 1)[0]}:SCRIPT", "--workdir", str(scratch))
    assert code == 2
    assert "Agent" in output


def test_postgres_needs_a_store_url_and_no_test_server_is_assumed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("UNBROKEN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    code, output = _chaos("--agent", AGENT, "--store-kind", "postgres")
    assert code == 2
    assert "--store-url" in output


def test_a_postgres_sweep_saves_every_run_under_its_own_id_and_deletes_them_all(scratch: Path) -> None:
    skip_unless_postgres()
    schema = f"chaos_cli_{os.getpid()}"
    url = f"{postgres_server().split('?')[0]}?schema={schema}"
    try:
        code, output = _one_kill(
            "--agent", INVOICE_AGENT, "--store-kind", "postgres", "--store-url", url, "--driver", "sync",
            "--workdir", str(scratch),
        )  # fmt: skip
        assert code == 1, output
        assert "send_invoice is declared read_only" in output
        with open_store(url) as store:
            assert store.list_runs() == []
    finally:
        drop_schema(schema)


@pytest.mark.slow
def test_a_full_sweep_of_the_correct_agent_on_both_drivers_breaks_nothing(scratch: Path) -> None:
    code, output = _chaos(
        "--agent", AGENT, "--per-point", "3", "--kills", "20", "--seed", "5", "--workdir", str(scratch)
    )
    assert code == 0, output
    assert " 0 warnings" in output


@pytest.mark.slow
def test_a_full_sweep_catches_the_read_only_invoice_tool_without_being_pointed_at_it(scratch: Path) -> None:
    code, output = _chaos("--agent", INVOICE_AGENT, "--kills", "10", "--workdir", str(scratch))
    assert code == 1, output
    assert "send_invoice is declared read_only" in output
