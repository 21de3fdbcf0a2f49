"""The public API is pinned: adding or removing a name is a deliberate act."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import unbroken

PUBLIC = {
    "Agent", "ApprovalError", "ApprovalExpired", "ConcurrentSave", "ConfigError", "CorruptCheckpoint",
    "EffectLedger", "Found", "IdempotencyConflict", "IncompatibleSchema", "InsufficientDurability", "InvalidRunId",
    "InvalidTask", "InvalidStoreURL", "Lease", "LeaseError", "LeaseGuard", "LeaseHeld", "LeaseLost", "LedgerEntry",
    "Migrations", "MissingStoreFeature", "Model", "ModelCallFailed", "ModelTurn", "NotExecuted", "NotJSONValue",
    "ProposedCall", "RecordTooLarge", "RunNotFound", "RunQueued", "RunResult", "RunState", "RunSummary",
    "SCHEMA_VERSION", "SaveInfo", "ScriptedModel", "StateError", "Store", "StoreDataLost", "StoreError",
    "StoreUnavailable", "TaskMismatch", "Tool", "ToolCall", "ToolDefinitionError", "ToolResult", "ToolSpec",
    "UnbrokenError", "Unknown", "UnloadableState",
    "Unsupported", "__version__", "current_lease", "effect_from_mcp", "open_store", "resolve_call", "resource", "tool"
}  # fmt: skip


def test_all_is_exactly_the_public_api() -> None:
    assert set(unbroken.__all__) == PUBLIC
    for name in unbroken.__all__:
        assert hasattr(unbroken, name), name


def test_the_issue_names_are_public() -> None:
    for name in ("Agent", "tool", "open_store", "ScriptedModel"):
        assert name in unbroken.__all__
    assert callable(unbroken.Agent.run) and callable(unbroken.Agent.arun)


def test_every_error_is_an_unbroken_error() -> None:
    errors = [getattr(unbroken, name) for name in unbroken.__all__ if name.endswith(("Error", "Lost", "Held"))]
    errors += [unbroken.RunNotFound, unbroken.CorruptCheckpoint, unbroken.IncompatibleSchema, unbroken.TaskMismatch]
    for error in errors:
        assert issubclass(error, unbroken.UnbrokenError), error


def test_importing_unbroken_loads_no_sdk_driver_or_cli_library() -> None:
    code = (
        "import sys, unbroken\n"
        "heavy = ('anthropic', 'openai', 'psycopg', 'click', 'rich', 'httpx2', 'agents', 'mcp', 'langgraph',\n"
        "         'google.adk')\n"
        "heavy = [m for m in heavy + ('unbroken.integrations',) if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_importing_unbroken_loads_no_heavy_standard_library_module() -> None:
    # Each of these costs 5-60 ms at import (asyncio alone ~25 ms); a store or feature that
    # needs one imports it where it is used, so `import unbroken` stays well under 150 ms.
    code = (
        "import sys, unbroken\n"
        "heavy = ('asyncio', 'sqlite3', 'subprocess', 'ssl', 'http.client', 'email', 'concurrent.futures',\n"
        "         'multiprocessing', 'xml', 'decimal', 'zoneinfo', 'tomllib', 'importlib.metadata',\n"
        "         'msgspec', 'xxhash', 'typing_extensions')  # (the last three: when a run with segments loads)\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_importing_unbroken_loads_only_its_errors_until_a_name_is_used() -> None:
    # Issue 24: the public names resolve on first use (PEP 562), so `import unbroken` stays
    # ~1-3 ms (-X importtime) and a process pays only for what it touches.
    code = (
        "import sys, unbroken\n"
        "before = sorted(m for m in sys.modules if m.partition('.')[0] == 'unbroken')\n"
        "unbroken.Agent\n"
        "print(','.join(before), 'unbroken.runner' in sys.modules, 'Agent' in vars(unbroken))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["unbroken,unbroken.errors", "True", "True"]


_RESUMER = """
import os, sys
from unbroken import Agent, ScriptedModel, open_store, tool

class Ask(ScriptedModel):
    def complete(self, messages, tools, system):
        if len(messages) > 1:  # the resumed run asks for its next turn: what has it loaded?
            print(",".join(sorted(sys.modules)), flush=True)
            os._exit(0)
        return super().complete(messages, tools, system)

@tool(effect="read_only")
def lookup(key: str) -> str:
    \"\"\"Look a key up.\"\"\"
    if sys.argv[2] == "start":
        os._exit(9)  # the first process dies in its tool call: the resume finds the call pending
    return key

call = {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"key": "a"}}
turn = {"content": [call], "stop_reason": "tool_use"}
task = None if sys.argv[2] == "resume" else "a task"
Agent(Ask([turn]), [lookup], open_store(sys.argv[1])).run(task, run_id="pinned")
"""


_ASKED = """
import os, sys
from unbroken import Agent, ScriptedModel, open_store, tool

class Ask(ScriptedModel):
    def complete(self, messages, tools, system):
        if sys.argv[2] == "start":
            os._exit(9)  # the first process dies while its model is asked: no call is left to settle
        print(",".join(sorted(sys.modules)), flush=True)
        os._exit(0)

@tool(effect="side_effect")
def send(key: str) -> str:
    \"\"\"Send a key.\"\"\"
    return key

task = None if sys.argv[2] == "resume" else "a task"
Agent(Ask([]), [send], open_store(sys.argv[1])).run(task, run_id="asked")
"""


def test_a_resume_with_no_call_to_settle_loads_no_tool_machinery(tmp_path: Path) -> None:
    # Issue 24: a run that crashed while its model was asked (the crash benchmark's case) has no
    # call to settle, so its resume reaches the model request without approvals, reconcile and
    # execution: the engine imports them when it first settles a call.
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    started = subprocess.run([sys.executable, "-c", _ASKED, url, "start"], capture_output=True, timeout=60)
    assert started.returncode == 9, started.stderr
    done = subprocess.run(
        [sys.executable, "-c", _ASKED, url, "resume"], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.strip().split(","))
    assert "unbroken.engine" in loaded and "unbroken.window" in loaded  # (it did resume)
    assert sorted(loaded & {"unbroken.approvals", "unbroken.reconcile", "unbroken.execution"}) == []


def test_a_resume_imports_nothing_it_does_not_use(tmp_path: Path) -> None:
    # Issue 24: a crash's cost is judged against a fresh python that only parses the history.
    # Modules a resume without hooks never uses stay unloaded up to its model request: hooks'
    # event classes (emitters.py imports them for the first event), hashlib/OpenSSL (the keys of
    # the pending call use CPython's own SHA-256), socket (uname gives the host name), difflib,
    # shutil, and logging (``_log.log`` imports it when something is first logged); pathlib and
    # urllib.parse (with ipaddress): the SQLite URL is split and its file opened without them.
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    started = subprocess.run([sys.executable, "-c", _RESUMER, url, "start"], capture_output=True, timeout=60)
    assert started.returncode == 9, started.stderr
    done = subprocess.run(
        [sys.executable, "-c", _RESUMER, url, "resume"], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = set(done.stdout.strip().split(","))
    assert "unbroken.runner" in loaded and "unbroken.window" in loaded  # (it did resume)
    unused: tuple[str, ...] = ("unbroken.hooks", "hashlib", "_hashlib", "socket", "difflib", "shutil", "bz2")
    unused += ("lzma", "logging", "pathlib", "urllib.parse", "ipaddress")
    assert [name for name in unused if name in loaded] == []
