"""What ``Agent.run`` returns reads well: ``resumed`` means a save point was continued, and
``repr`` stays one short line however long the history is."""

from __future__ import annotations

from core_scripts import reading_script

from unbroken import Agent, ScriptedModel, Store, tool


@tool(effect="read_only")
def read_ticket(ticket_id: str) -> str:
    """Read one ticket."""
    return f"ticket {ticket_id}"


def agent_on(store: Store, turns: int) -> Agent:
    return Agent(model=ScriptedModel(reading_script(turns)), tools=[read_ticket], store=store)


def test_a_run_that_had_already_finished_is_not_reported_as_resumed(sqlite_store: Store) -> None:
    assert agent_on(sqlite_store, 2).run("t", run_id="done").status == "completed"
    again = agent_on(sqlite_store, 2).run("t", run_id="done")
    assert again.status == "completed" and again.resumed is False


def test_repr_of_a_result_leaves_out_the_history(sqlite_store: Store) -> None:
    result = agent_on(sqlite_store, 30).run("t", run_id="long")
    assert result.state is not None and len(result.state.messages) > 60
    text = repr(result)
    assert len(text) < 400 and "tool_use" not in text
    assert "run_id='long'" in text and "status='completed'" in text and "turns=31" in text
