"""A tool's ``call: ToolCall`` is given by the engine: declared positionally, it is refused with
an error that says to make it keyword-only (not "cannot describe type ToolCall")."""

from __future__ import annotations

import pytest

from unbroken import ToolCall, ToolDefinitionError, tool


def test_a_positional_call_parameter_is_refused_with_make_it_keyword_only() -> None:
    def send(to: str, call: ToolCall) -> str:
        return to

    with pytest.raises(ToolDefinitionError, match="make 'call' keyword-only") as caught:
        tool(effect="side_effect")(send)
    assert "cannot describe" not in str(caught.value)


def test_a_keyword_only_call_parameter_is_accepted_and_hidden_from_the_model() -> None:
    def send(to: str, *, call: ToolCall) -> str:
        return to

    built = tool(effect="side_effect")(send)
    assert built.takes_call and list(built.input_schema["properties"]) == ["to"]
