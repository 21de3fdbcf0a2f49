"""The script file format in docs/scripted-model.md is what ``ScriptedModel.from_file`` reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from unbroken import Agent, ConfigError, ScriptedModel, Store, tool

DOC = Path(__file__).resolve().parents[2] / "docs" / "scripted-model.md"


def documented_script() -> list[dict[str, object]]:
    (block,) = re.findall(r"```json\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    script: list[dict[str, object]] = json.loads(block)
    return script


def test_the_documented_script_runs_an_agent_to_its_final_answer(tmp_path: Path, sqlite_store: Store) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(documented_script()), encoding="utf-8")

    @tool(effect="read_only")
    def read_ticket(ticket_id: str) -> str:
        """Read one ticket."""
        return "Login fails on mobile"

    agent = Agent(ScriptedModel.from_file(path), tools=[read_ticket], store=sqlite_store)
    result = agent.run("Summarise T-1", run_id="doc")
    assert (result.status, result.output, result.turns) == ("completed", "T-1 is a login problem on mobile.", 2)
    assert result.tokens_used == 400 + 60 + 450 + 20


def test_a_tool_use_block_without_an_id_is_refused_when_the_script_is_loaded() -> None:
    script = documented_script()
    blocks = script[0]["content"]
    assert isinstance(blocks, list)
    del blocks[1]["id"]
    with pytest.raises(ConfigError, match="tool_use block needs a non-empty string 'id'"):
        ScriptedModel(script)
