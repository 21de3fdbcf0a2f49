"""unbroken: long-running LLM agents that survive crashes.

A run saves twice per turn (after the model answers, after the tools answer), each save one
atomic append; on restart it resumes from the last save point, reconciles every tool call
left without a result by what the tool is, and never repeats a side effect it cannot prove
safe to repeat.
"""

from __future__ import annotations

from .codec import Migrations
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
