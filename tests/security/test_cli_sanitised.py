"""Nothing a run contains can drive the terminal: every command that prints stored text, run
over runs full of escape sequences, C1 controls and bidi overrides, prints none of them raw."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hostile_runs import APPROVAL_CALL, APPROVAL_RUN, CALL, FORBIDDEN, PAYLOAD, QUEUED_RUN, RUN, HostileStore

from unbroken.cli import main
from unbroken.cli._safe import clean

COMMANDS = [
    ["runs"],
    ["runs", "--all"],
    ["show", RUN],
    ["show", RUN, "--messages", "20"],
    ["show", APPROVAL_RUN],
    ["show", QUEUED_RUN],
    ["history", RUN],
    ["effects", RUN],
    ["effects", RUN, "--all"],
    ["approvals", APPROVAL_RUN],
    ["export", RUN],
    ["watch", RUN, "--timeout", "0.2", "--interval", "0.05"],
    ["resolve", RUN, CALL, "--result", "x"],  # an error that names the run and call
    ["approve", APPROVAL_RUN, "nope"],  # an error
    ["deny", APPROVAL_RUN, APPROVAL_CALL, "--reason", "no " + PAYLOAD],
    ["approvals", APPROVAL_RUN],  # the denial's reason is stored text now
    ["show", "\x1b]0;title\x07"],  # a run id echoed back in an error
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: " ".join(command)[:40])
def test_no_control_character_reaches_the_terminal(hostile: HostileStore, command: list[str]) -> None:
    result = CliRunner().invoke(main, [*command, "--store", hostile.url])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        raw = sorted({f"U+{ord(char):04X}" for char in text if char in FORBIDDEN})
        assert not raw, f"{command} wrote {raw} to {stream}:\n{text!r}"


def test_show_says_what_it_escaped(hostile: HostileStore) -> None:
    result = CliRunner().invoke(main, ["show", RUN, "--messages", "20", "--store", hostile.url])
    assert "\\x1b]52;c;" in result.stdout  # the clipboard write is visible as text, not executed
    assert "\\u202e" in result.stdout


def test_export_to_a_terminal_is_the_same_document() -> None:
    import json

    from unbroken.cli._safe import json_for_terminal

    document = json.dumps({"text": PAYLOAD}, ensure_ascii=False)
    safe = json_for_terminal(document)
    assert json.loads(safe) == {"text": PAYLOAD}
    assert not FORBIDDEN & set(safe)


def test_clean_keeps_layout_and_ordinary_text() -> None:
    text = "naïve 東京 عربى\ttab\nline — ok"
    assert clean(text) == text
    assert clean(clean(PAYLOAD)) == clean(PAYLOAD)
