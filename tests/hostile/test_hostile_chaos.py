"""Issue 9.8 as an outside auditor would try it: an invoice tool declared idempotent that
*reads* its idempotency key (it logs it) but never deduplicates by it, swept by ``unbroken
chaos`` on both drivers. Reading the key must not hide the repeat."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import unbroken.cli.chaos  # noqa: F401  (registers the command)
from unbroken.cli import main

AGENT = str(Path(__file__).with_name("hostile_agents.py")) + ":make_key_logging_agent"


def chaos(*args: str) -> tuple[int, str]:
    command = ["chaos", "--agent", AGENT, "--task", "invoice acme", "--point", "tool.after_execute:1", "--kills", "0"]
    result = CliRunner().invoke(main, [*command, *args], catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def test_an_idempotent_tool_that_reads_but_ignores_its_key_fails_the_sweep_with_the_repeated_change() -> None:
    code, output = chaos("--driver", "both")
    assert "send_invoice call toolu_i1" in output, output
    assert "$UNBROKEN_CHAOS_DIR changed on" in output and "never read" not in output
    assert code == 1  # the invoice went out twice under one key: a violation, like a side effect's


def test_strict_fails_the_sweep_on_the_key_logging_invoice_tool() -> None:
    code, output = chaos("--driver", "async", "--strict")
    assert code == 1, output
