"""unbroken: long-running LLM agents that survive crashes.

A run saves twice per turn (after the model answers, after the tools answer), each save one
atomic append; on restart it resumes from the last save point, reconciles every tool call
left without a result by what the tool is, and never repeats a side effect it cannot prove
safe to repeat.
"""

from __future__ import annotations

from importlib import import_module

from .errors import (
    ApprovalError,
    ApprovalExpired,
    ConcurrentSave,
    ConfigError,
    CorruptCheckpoint,
    IdempotencyConflict,
    IncompatibleSchema,
    InsufficientDurability,
    InvalidRunId,
    InvalidStoreURL,
    InvalidTask,
    LeaseError,
    LeaseHeld,
    LeaseLost,
    MissingStoreFeature,
    ModelCallFailed,
    NotJSONValue,
    RecordTooLarge,
    RunNotFound,
    RunQueued,
    StateError,
    StoreDataLost,
    StoreError,
    StoreUnavailable,
    TaskMismatch,
    ToolDefinitionError,
    UnbrokenError,
    UnloadableState,
    Unsupported,
)

# typing.TYPE_CHECKING without importing typing (6-25 ms here); type checkers read it as True
TYPE_CHECKING = False

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time each name loads on first use
    from .codec import Migrations
    from .fencing import LeaseGuard, current_lease
    from .ledger import EffectLedger
    from .model import Model, ModelTurn, ProposedCall, ToolSpec
    from .providers.scripted import ScriptedModel
    from .resolve import resolve_call
    from .resources import resource
    from .runner import Agent
    from .session import RunResult
    from .state import SCHEMA_VERSION, Lease, LedgerEntry, RunState, RunSummary, SaveInfo, ToolCall, ToolResult
    from .stores import open_store
    from .stores.base import Store
    from .tools import Found, NotExecuted, Tool, Unknown, effect_from_mcp, tool

# `import unbroken` loads only the errors: each other public name is imported from its module
# on first use (PEP 562), so a process pays for what it touches (the CLI's --help, a worker
# that only opens a store) and not for the engine, codec and providers it never runs.
_LAZY: dict[str, str] = {
    "Migrations": ".codec",
    "LeaseGuard": ".fencing",
    "current_lease": ".fencing",
    "EffectLedger": ".ledger",
    "Model": ".model",
    "ModelTurn": ".model",
    "ProposedCall": ".model",
    "ToolSpec": ".model",
    "ScriptedModel": ".providers.scripted",
    "resolve_call": ".resolve",
    "resource": ".resources",
    "Agent": ".runner",
    "RunResult": ".session",
    "SCHEMA_VERSION": ".state",
    "Lease": ".state",
    "LedgerEntry": ".state",
    "RunState": ".state",
    "RunSummary": ".state",
    "SaveInfo": ".state",
    "ToolCall": ".state",
    "ToolResult": ".state",
    "open_store": ".stores",
    "Store": ".stores.base",
    "Found": ".tools",
    "NotExecuted": ".tools",
    "Tool": ".tools",
    "Unknown": ".tools",
    "effect_from_mcp": ".tools",
    "tool": ".tools",
}


if not TYPE_CHECKING:  # (hidden from type checkers, so that a misspelt name stays an error there)

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'unbroken' has no attribute {name!r}")
        value = getattr(import_module(module, __name__), name)
        globals()[name] = value  # resolved once: later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted(set(globals()) | set(_LAZY))


__version__ = "0.1.0"

__all__ = [
    "SCHEMA_VERSION",
    "Agent",
    "ApprovalError",
    "ApprovalExpired",
    "ConcurrentSave",
    "ConfigError",
    "CorruptCheckpoint",
    "EffectLedger",
    "Found",
    "IdempotencyConflict",
    "IncompatibleSchema",
    "InvalidRunId",
    "InvalidTask",
    "InsufficientDurability",
    "InvalidStoreURL",
    "MissingStoreFeature",
    "Lease",
    "LeaseError",
    "LeaseGuard",
    "LeaseHeld",
    "LeaseLost",
    "LedgerEntry",
    "Migrations",
    "Model",
    "ModelCallFailed",
    "ModelTurn",
    "NotExecuted",
    "NotJSONValue",
    "ProposedCall",
    "RecordTooLarge",
    "RunNotFound",
    "RunQueued",
    "RunResult",
    "RunState",
    "RunSummary",
    "SaveInfo",
    "ScriptedModel",
    "StateError",
    "Store",
    "StoreDataLost",
    "StoreError",
    "StoreUnavailable",
    "TaskMismatch",
    "Tool",
    "ToolCall",
    "ToolDefinitionError",
    "ToolResult",
    "ToolSpec",
    "UnbrokenError",
    "Unknown",
    "UnloadableState",
    "Unsupported",
    "__version__",
    "current_lease",
    "effect_from_mcp",
    "open_store",
    "resolve_call",
    "resource",
    "tool",
]
