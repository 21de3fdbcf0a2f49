"""Child process for the LangGraph crash test: a three-node graph on ``UnbrokenSaver``.
Usage: python langgraph_child.py STORE_URL STATE_DIR

``work`` records that it started in STATE_DIR/effects.jsonl and, while STATE_DIR/hang
exists, stops there, so the test can SIGKILL the process inside the node.
"""

from __future__ import annotations

import json
import operator
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from unbroken import open_store
from unbroken.integrations.langgraph import UnbrokenSaver

CONFIG: Any = {"configurable": {"thread_id": "job-1"}}


class Job(TypedDict):
    log: Annotated[list[str], operator.add]


def build(store_url: str, state_dir: Path) -> Any:
    # LangGraph types a node as a callable whose parameter is named ``state``.
    def plan(state: Job) -> dict[str, Any]:
        return {"log": ["planned"]}

    def work(state: Job) -> dict[str, Any]:
        with open(state_dir / "effects.jsonl", "a") as f:
            f.write(json.dumps({"node": "work", "pid": os.getpid()}) + "\n")
        while (state_dir / "hang").exists():
            time.sleep(0.05)
        return {"log": ["worked"]}

    def finish(state: Job) -> dict[str, Any]:
        return {"log": ["finished"]}

    builder = StateGraph(Job)
    builder.add_node("plan", plan)
    builder.add_node("work", work)
    builder.add_node("finish", finish)
    builder.add_edge(START, "plan")
    builder.add_edge("plan", "work")
    builder.add_edge("work", "finish")
    builder.add_edge("finish", END)
    return builder.compile(checkpointer=UnbrokenSaver(open_store(store_url)))


if __name__ == "__main__":
    graph = build(sys.argv[1], Path(sys.argv[2]))
    print(json.dumps(graph.invoke({"log": ["started"]}, CONFIG, durability="sync")))
