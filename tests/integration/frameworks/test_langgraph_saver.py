"""``UnbrokenSaver`` under a real LangGraph graph, and what it writes to disk."""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Interrupt, Send

from unbroken import open_store
from unbroken.integrations._lgvalues import ValueCodec
from unbroken.integrations.langgraph import UnbrokenSaver


class Chat(TypedDict):
    messages: Annotated[list[Any], operator.add]
    turns: int


def reply(state: Chat) -> dict[str, Any]:
    said = state["messages"][-1].content
    return {"messages": [AIMessage(f"echo: {said}")], "turns": state.get("turns", 0) + 1}


def chat_graph(saver: UnbrokenSaver) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def test_a_graph_on_sqlite_keeps_its_thread_across_savers_and_processes_share_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    config = {"configurable": {"thread_id": "chat-1"}}
    first = chat_graph(UnbrokenSaver(open_store(url)))
    first.invoke({"messages": [HumanMessage("hello")]}, config)

    second = chat_graph(UnbrokenSaver(open_store(url)))  # as a fresh process would
    state = second.invoke({"messages": [HumanMessage("again")]}, config)
    assert [m.content for m in state["messages"]] == ["hello", "echo: hello", "again", "echo: again"]
    assert state["turns"] == 2

    # The first saver sees what the second wrote (it re-reads a thread another writer moved).
    seen = first.get_state(config).values
    assert [m.content for m in seen["messages"]][-1] == "echo: again"
    assert len(list(second.get_state_history(config))) == len(list(first.get_state_history(config)))


def put_growing_list(saver: UnbrokenSaver, thread_id: str, steps: int, start: int = 0) -> RunnableConfig:
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    latest = saver.get_tuple(config)
    if latest is not None:
        config = latest.config
    history = list(latest.checkpoint["channel_values"]["messages"]) if latest else []
    for step in range(start, start + steps):
        history.append({"role": "user", "content": f"message {step} " + "x" * 200})
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{step:08d}"
        checkpoint["channel_values"] = {"messages": list(history), "step": step}
        checkpoint["channel_versions"] = {"messages": step + 1, "step": step + 1}
        config = saver.put(config, checkpoint, {"step": step}, {"messages": step + 1, "step": step + 1})
    return config


def stored_bytes(saver: UnbrokenSaver, thread_id: str) -> int:
    return len(json.dumps(saver._thread(thread_id).log.items()))


def test_a_growing_message_list_is_stored_once_not_once_per_checkpoint(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    saver = UnbrokenSaver(open_store(url))
    put_growing_list(saver, "t", 150)
    first_half = stored_bytes(saver, "t")
    restarted = UnbrokenSaver(open_store(url))  # its first put must extend, not rewrite
    put_growing_list(restarted, "t", 150, start=150)
    second_half = stored_bytes(restarted, "t") - first_half

    latest = UnbrokenSaver(open_store(url)).get_tuple({"configurable": {"thread_id": "t"}})
    assert latest is not None
    messages = latest.checkpoint["channel_values"]["messages"]
    assert [m["content"].split()[1] for m in messages] == [str(i) for i in range(300)]
    # Each put adds what is new: the second 150 puts cost what the first 150 did. Storing the
    # whole list at every checkpoint would make them cost three times as much, and the total
    # about 150 times the history.
    assert second_half < 1.2 * first_half
    assert first_half + second_half < 4 * len(json.dumps(messages))


def test_an_older_checkpoint_still_reads_its_own_shorter_list(tmp_path: Path) -> None:
    saver = UnbrokenSaver(open_store(f"sqlite:///{tmp_path / 'graph.db'}"))
    put_growing_list(saver, "t", 20)
    old = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": f"{4:08d}"}})
    assert old is not None and len(old.checkpoint["channel_values"]["messages"]) == 5


def test_values_that_are_not_json_round_trip_and_stay_json_on_disk() -> None:
    codec = ValueCodec()
    values: list[object] = [(1, "a"), b"\x00raw", {1: "int key"}, {"__ub__": "looks like a tag"}, frozenset({3})]
    values += [HumanMessage("hi", id="m1"), Send("node", {"a": 1}), Interrupt(value="ask", id="i1")]
    for value in values:
        encoded = codec.encode(value)
        assert codec.decode(json.loads(json.dumps(encoded))) == value


@dataclass
class Custom:
    x: int


def test_a_stored_object_of_a_type_outside_the_allowlist_is_not_rebuilt() -> None:
    encoded = ValueCodec().encode(Custom(3))
    assert ValueCodec().decode(encoded) == {"x": 3}  # its data, not an instance
    assert ValueCodec(allowed_types=[Custom]).decode(encoded) == Custom(3)


def test_a_graph_killed_inside_a_node_resumes_from_its_last_checkpoint(tmp_path: Path) -> None:
    from crash_helpers import kill_once_effect_recorded, start
    from langgraph_child import CONFIG, build

    url, child = f"sqlite:///{tmp_path / 'graph.db'}", str(Path(__file__).with_name("langgraph_child.py"))
    (tmp_path / "hang").touch()
    kill_once_effect_recorded(start([child, url, str(tmp_path)]), tmp_path)
    (tmp_path / "hang").unlink()

    graph = build(url, tmp_path)  # another process than the one killed
    assert graph.get_state(CONFIG).next == ("work",)  # "plan" was saved; "work" was not
    final = graph.invoke(None, CONFIG)
    assert final["log"] == ["started", "planned", "worked", "finished"]
    # As with LangGraph's own savers, the interrupted node ran again: twice in all.
    assert len((tmp_path / "effects.jsonl").read_text().splitlines()) == 2


def test_pruning_to_the_latest_checkpoint_keeps_the_whole_list_it_extends(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'graph.db'}"
    saver = UnbrokenSaver(open_store(url))
    put_growing_list(saver, "t", 30)  # the latest list is stored as 29 appends to the first
    before = stored_bytes(saver, "t")

    saver.prune(["t"])

    fresh = UnbrokenSaver(open_store(url))
    assert len(list(fresh.list({"configurable": {"thread_id": "t"}}))) == 1
    latest = fresh.get_tuple({"configurable": {"thread_id": "t"}})
    assert latest is not None and len(latest.checkpoint["channel_values"]["messages"]) == 30
    assert latest.checkpoint["channel_values"]["step"] == 29
    assert stored_bytes(fresh, "t") < before


def test_deleting_a_run_keeps_what_a_later_run_still_reads(tmp_path: Path) -> None:
    saver = UnbrokenSaver(open_store(f"sqlite:///{tmp_path / 'graph.db'}"))
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    for step, run_id in enumerate(["run-a", "run-a", "run-b"]):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"{step:08d}"
        checkpoint["channel_values"] = {"messages": [f"m{i}" for i in range(step + 1)]}
        checkpoint["channel_versions"] = {"messages": step + 1}
        config = saver.put(config, checkpoint, {"run_id": run_id}, {"messages": step + 1})

    saver.delete_for_runs(["run-a"])

    [left] = list(saver.list({"configurable": {"thread_id": "t"}}))
    assert left.metadata["run_id"] == "run-b"
    assert left.checkpoint["channel_values"]["messages"] == ["m0", "m1", "m2"]


def test_list_with_limit_zero_yields_no_checkpoint_as_langgraphs_savers_do() -> None:
    saver = UnbrokenSaver(open_store("memory://"))
    graph = chat_graph(saver)
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("hi")], "turns": 0}, config)
    assert len(list(saver.list(config, limit=1))) == 1
    assert list(saver.list(config, limit=0)) == []
    assert list(saver.list(None, limit=0)) == []


def test_ainvoke_hands_every_store_call_to_the_stores_threads(tmp_path: Path) -> None:
    import asyncio
    import threading

    from faults_kit.store_threads import watch

    store = open_store(f"sqlite:///{tmp_path / 'graph.db'}")
    threads = watch(store)
    graph = chat_graph(UnbrokenSaver(store))
    config: RunnableConfig = {"configurable": {"thread_id": "chat-async"}}

    async def main() -> Any:
        threads.loop_thread = threading.get_ident()
        await graph.ainvoke({"messages": [HumanMessage("hello")]}, config)
        return await graph.ainvoke({"messages": [HumanMessage("again")]}, config)

    state = asyncio.run(main())
    assert [m.content for m in state["messages"]] == ["hello", "echo: hello", "again", "echo: again"]
    assert threads.calls and threads.on_loop() == []
