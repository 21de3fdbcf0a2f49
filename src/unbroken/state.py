"""The run's state as plain data: no I/O, no SDKs, no stores.

A run's durable state is split in two on purpose:

* ``messages``: the full history in the provider's own shape. It only ever grows (compaction
  keeps it whole and adds a separate summary), so each message is written exactly once.
* the *small fields* (counters, phase, pending calls, business_state, ...): rewritten as a
  snapshot; they stay small whatever the length of the history.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Literal, TypeAlias, get_args

from . import clock
from ._plain import Frozen, Plain

SCHEMA_VERSION = 2
"""Version of unbroken's own checkpoint format (docs/format.md). Version 1 records are still read
as they are (version 2 changed only how records are written); older ones are migrated on load."""

JSONValue: TypeAlias = Any
"""A value made only of dict (str keys), list, str, int, finite float, bool and None."""

Effect = Literal["read_only", "idempotent", "side_effect"]
EFFECTS: tuple[str, ...] = get_args(Effect)

Phase = Literal["awaiting_model", "running_tools", "paused", "awaiting_approval", "completed", "max_turns", "failed"]
PHASES: tuple[str, ...] = get_args(Phase)
TERMINAL_PHASES: frozenset[str] = frozenset({"completed", "max_turns", "failed"})

ResultHow = Literal[
    "executed", "reused", "probed", "unknown", "invalid", "resolved", "skipped", "denied", "attempts_exhausted"
]
RESULT_HOWS: tuple[str, ...] = get_args(ResultHow)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex (the same digest as ``hashlib``'s)."""
    digest: str = _sha256()(data).hexdigest()
    return digest


@functools.cache
def _sha256() -> Any:
    """CPython's own SHA-256 where there is one: ``hashlib`` loads OpenSSL (~7 ms), and a resume
    computes the keys of its pending calls before it can ask its model (issue 24)."""
    try:
        from _sha256 import sha256  # type: ignore[import-not-found,unused-ignore]  # CPython 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]  # CPython 3.12+
        except ImportError:
            from hashlib import sha256  # type: ignore[assignment,unused-ignore]
    return sha256


def idempotency_key(run_id: str, call_id: str) -> str:
    """A key from the run id and a call id alone. Runs saved before keys named call
    occurrences hold keys made this way in their pending calls, and those keep working; new
    calls get ``occurrence_key`` (a provider may reuse its call ids)."""
    digest = sha256_hex(f"{run_id}\x00{call_id}".encode())
    return f"ub_{digest[:40]}"


@functools.lru_cache(maxsize=1024)
def occurrence_key(run_id: str, save_seq: int, position: int, call_id: str) -> str:
    """The idempotency key of one call occurrence: the run, the save point that first recorded
    the call (save A), its position in that turn and the provider's id. Two calls never share
    a key even when a provider reuses ``call_0`` every turn or twice in one turn. Fixed in
    ``pending_calls`` at save A, so it is the same across retries and resumes."""
    digest = sha256_hex(f"{run_id}\x00{save_seq}\x00{position}\x00{call_id}".encode())
    return f"ub_{digest[:40]}"


class ToolCall(Plain):
    """One tool call the model made. ``error`` is set when the call itself is malformed
    (unknown tool, arguments that are not a JSON object): such a call is answered with an
    ``is_error`` result and never executed."""

    __slots__ = ("error", "id", "idempotency_key", "input", "name")
    id: str
    name: str
    input: dict[str, JSONValue]
    idempotency_key: str
    error: str | None

    def __init__(
        self, id: str, name: str, input: dict[str, JSONValue], idempotency_key: str, error: str | None = None
    ) -> None:
        self.id = id
        self.name = name
        self.input = input
        self.idempotency_key = idempotency_key
        self.error = error

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {
            "id": self.id,
            "name": self.name,
            "input": self.input,
            "idempotency_key": self.idempotency_key,
        }
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSONValue]) -> ToolCall:
        return cls(
            id=data["id"],
            name=data["name"],
            input=data["input"],
            idempotency_key=data["idempotency_key"],
            error=data.get("error"),
        )


class ToolResult(Plain):
    """The answer to one tool call, before it is put in the provider's format.
    ``how`` records where it came from (executed now, reused from the ledger, unknown, ...)."""

    __slots__ = ("call_id", "content", "how", "is_error")
    call_id: str
    content: str
    is_error: bool
    how: ResultHow

    def __init__(self, call_id: str, content: str, is_error: bool = False, how: ResultHow = "executed") -> None:
        self.call_id = call_id
        self.content = content
        self.is_error = is_error
        self.how = how

    def to_json(self) -> dict[str, JSONValue]:
        return {
            "call_id": self.call_id,
            "content": self.content,
            "is_error": self.is_error,
            "how": self.how,
        }

    @classmethod
    def from_json(cls, data: dict[str, JSONValue]) -> ToolResult:
        return cls(
            call_id=data["call_id"],
            content=data["content"],
            is_error=bool(data["is_error"]),
            how=data.get("how", "executed"),
        )


ProbeAnswer = Literal["found", "not_executed", "unknown", "raised", "none"]
"""What a call's probe answered: ``Found``, ``NotExecuted``, ``Unknown``, it raised, or the tool
has no probe (``none``)."""

SettlementOutcome = Literal["ran", "reused", "probed", "not_run", "unknown", "resolved"]


class Settlement(Frozen):
    """How the engine settled one call, saved in the record that settles it (a save record's
    ``settled``, docs/format.md): what it found, what it asked, what it decided and why.
    ``unbroken history``, ``show``, ``watch`` and the inspector render this; they never
    reconstruct it from the results and the ledger."""

    __slots__ = ("attempt", "call_id", "grace", "ledger", "outcome", "policy", "probe", "reason", "resumed", "tool")
    call_id: str
    tool: str
    outcome: SettlementOutcome
    """``ran``: the tool was started now; ``reused``: the ledger's recorded result; ``probed``:
    the probe's result; ``not_run``: answered with an error and not run (``reason``);
    ``unknown``: the outcome could not be established (``policy`` says what was done);
    ``resolved``: settled by a person (``unbroken resolve``)."""
    ledger: str | None
    """The ledger status found before deciding (``pending`` = started, outcome never recorded);
    None: no entry (never started as a side effect, or read-only)."""
    probe: ProbeAnswer | None
    """The probe's answer; None: the probe was not asked (nothing was in doubt)."""
    policy: str | None
    """The unknown-outcome policy applied (``tell_model``, ``pause``, ``fail``)."""
    attempt: int
    """Which start of the call this was (1: the first); 0: it was not started now."""
    grace: float
    """Seconds waited for the previous holder to be unable to act before trusting the probe."""
    resumed: bool
    """The call was left without a result by a crash or a stop (settled on resume)."""
    reason: str

    def __init__(
        self,
        call_id: str,
        tool: str,
        outcome: SettlementOutcome,
        ledger: str | None = None,
        probe: ProbeAnswer | None = None,
        policy: str | None = None,
        attempt: int = 0,
        grace: float = 0.0,
        resumed: bool = False,
        reason: str = "",
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "call_id", call_id)
        set_field(self, "tool", tool)
        set_field(self, "outcome", outcome)
        set_field(self, "ledger", ledger)
        set_field(self, "probe", probe)
        set_field(self, "policy", policy)
        set_field(self, "attempt", attempt)
        set_field(self, "grace", grace)
        set_field(self, "resumed", resumed)
        set_field(self, "reason", reason)

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {"call_id": self.call_id, "tool": self.tool, "outcome": self.outcome}
        for name in ("ledger", "probe", "policy"):
            if getattr(self, name) is not None:
                data[name] = getattr(self, name)
        if self.attempt:
            data["attempt"] = self.attempt
        if self.grace:
            data["grace"] = self.grace
        if self.resumed:
            data["resumed"] = True
        if self.reason:
            data["reason"] = self.reason
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSONValue]) -> Settlement:
        return cls(
            call_id=str(data["call_id"]),
            tool=str(data["tool"]),
            outcome=data["outcome"],
            ledger=data.get("ledger"),
            probe=data.get("probe"),
            policy=data.get("policy"),
            attempt=int(data.get("attempt", 0)),
            grace=float(data.get("grace", 0.0)),
            resumed=bool(data.get("resumed", False)),
            reason=str(data.get("reason", "")),
        )


class Resumption(Frozen):
    """What a resume found, saved in the first record the resuming process writes (a save
    record's ``resumed``): one per resume, so resumes are counted, never guessed."""

    __slots__ = ("by_hand", "calls", "dangling", "last_seq", "phase")
    phase: str
    """The phase the previous process left the run in (``awaiting_model``: it ended during a
    model call or before one; ``running_tools``: while settling calls; ...)."""
    last_seq: int
    """The last save point the previous process wrote."""
    dangling: int
    """Calls of the turn left without a result."""
    calls: int
    """Calls of the turn."""
    by_hand: int
    """Calls of the turn a person settled while the run was paused (``unbroken resolve``)."""

    def __init__(self, phase: str, last_seq: int, dangling: int = 0, calls: int = 0, by_hand: int = 0) -> None:
        set_field = object.__setattr__
        set_field(self, "phase", phase)
        set_field(self, "last_seq", last_seq)
        set_field(self, "dangling", dangling)
        set_field(self, "calls", calls)
        set_field(self, "by_hand", by_hand)

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {
            "phase": self.phase,
            "last_seq": self.last_seq,
            "dangling": self.dangling,
            "calls": self.calls,
        }
        if self.by_hand:
            data["by_hand"] = self.by_hand
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSONValue]) -> Resumption:
        return cls(
            phase=str(data["phase"]),
            last_seq=int(data["last_seq"]),
            dangling=int(data.get("dangling", 0)),
            calls=int(data.get("calls", 0)),
            by_hand=int(data.get("by_hand", 0)),
        )


class RunState(Plain):
    """Everything needed to continue a run. ``store.load(run_id)`` returns one."""

    __slots__ = (
        "approvals",
        "attempts",
        "business_state",
        "business_state_version",
        "conversation",
        "created_at",
        "error",
        "history_checked",
        "messages",
        "output",
        "pending_calls",
        "phase",
        "provider",
        "resolutions",
        "results",
        "resumes",
        "run_id",
        "save_seq",
        "schema_version",
        "summary",
        "summary_upto",
        "task",
        "tokens_used",
        "turns",
        "updated_at",
        "usage",
    )
    run_id: str
    task: str
    provider: str
    schema_version: int
    save_seq: int
    turns: int
    tokens_used: int
    usage: dict[str, JSONValue]
    phase: Phase
    messages: list[JSONValue]
    business_state: dict[str, JSONValue]
    business_state_version: int
    pending_calls: list[ToolCall]
    results: dict[str, ToolResult]
    """Results of this turn's calls so far, by the call's idempotency key (one per occurrence)."""
    resolutions: dict[str, str]
    attempts: dict[str, int]
    """Re-starts of this turn's read-only calls after a crash, by idempotency key (each saved
    right before the tool runs again), so that a call that kills its process is not run
    forever. Other calls count their starts in their ledger intents."""
    approvals: dict[str, dict[str, JSONValue]] | None
    """Approval requests and decisions of this turn's calls, by idempotency key (``approvals.py``).
    None until a run first asks for one, so runs without approvals keep their exact format."""
    conversation: dict[str, JSONValue] | None
    """Follow-up messages (``conversation.py``): the current request's turn limit, messages queued
    until the calls in flight are settled, ids of messages already received. None until used."""
    output: str | None
    error: str | None
    summary: JSONValue
    summary_upto: int
    resumes: int
    """How many times the run was resumed (each resume's record holds a ``Resumption``):
    the count the operator sees, whatever part of the history is read."""
    history_checked: int
    """Messages before this index were checked for tool calls left without a result and held none
    other than ``pending_calls`` (``RunSession.repair_dangling``), so a resumed run scans only from
    here. 0 (the whole history is scanned) for runs imported, forked, rewound or recovered."""
    created_at: float
    updated_at: float

    def __init__(
        self,
        run_id: str,
        task: str,
        provider: str = "anthropic",
        schema_version: int = SCHEMA_VERSION,
        save_seq: int = 0,
        turns: int = 0,
        tokens_used: int = 0,
        usage: dict[str, JSONValue] | None = None,
        phase: Phase = "awaiting_model",
        messages: list[JSONValue] | None = None,
        business_state: dict[str, JSONValue] | None = None,
        business_state_version: int = 1,
        pending_calls: list[ToolCall] | None = None,
        results: dict[str, ToolResult] | None = None,
        resolutions: dict[str, str] | None = None,
        attempts: dict[str, int] | None = None,
        approvals: dict[str, dict[str, JSONValue]] | None = None,
        conversation: dict[str, JSONValue] | None = None,
        output: str | None = None,
        error: str | None = None,
        summary: JSONValue = None,
        summary_upto: int = 0,
        resumes: int = 0,
        history_checked: int = 0,
        created_at: float | None = None,
        updated_at: float | None = None,
    ) -> None:
        self.run_id = run_id
        self.task = task
        self.provider = provider
        self.schema_version = schema_version
        self.save_seq = save_seq
        self.turns = turns
        self.tokens_used = tokens_used
        self.usage = {} if usage is None else usage
        self.phase = phase
        self.messages = [] if messages is None else messages
        self.business_state = {} if business_state is None else business_state
        self.business_state_version = business_state_version
        self.pending_calls = [] if pending_calls is None else pending_calls
        self.results = {} if results is None else results
        self.resolutions = {} if resolutions is None else resolutions
        self.attempts = {} if attempts is None else attempts
        self.approvals = approvals
        self.conversation = conversation
        self.output = output
        self.error = error
        self.summary = summary
        self.summary_upto = summary_upto
        self.resumes = resumes
        self.history_checked = history_checked
        self.created_at = clock.wall() if created_at is None else created_at
        self.updated_at = clock.wall() if updated_at is None else updated_at

    @property
    def finished(self) -> bool:
        return self.phase in TERMINAL_PHASES

    def small_fields(self) -> dict[str, JSONValue]:
        """The snapshot part of the state: everything except the messages."""
        fields: dict[str, JSONValue] = {  # (every save builds it: one call, not two)
            "run_id": self.run_id,
            "task": self.task,
            "provider": self.provider,
            "schema_version": self.schema_version,
            "save_seq": self.save_seq,
            "turns": self.turns,
            "tokens_used": self.tokens_used,
            "usage": self.usage,
            "phase": self.phase,
            "message_count": len(self.messages),
            "business_state": self.business_state,
            "business_state_version": self.business_state_version,
            "pending_calls": [call.to_json() for call in self.pending_calls] if self.pending_calls else [],
            "results": {key: result.to_json() for key, result in self.results.items()} if self.results else {},
            "resolutions": self.resolutions,
            "attempts": self.attempts,
            "output": self.output,
            "error": self.error,
            "summary": self.summary,
            "summary_upto": self.summary_upto,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.approvals is not None:
            fields["approvals"] = self.approvals
        if self.conversation is not None:
            fields["conversation"] = self.conversation
        if self.history_checked:
            fields["history_checked"] = self.history_checked
        if self.resumes:
            fields["resumes"] = self.resumes
        return fields

    @classmethod
    def from_parts(cls, fields: dict[str, JSONValue], messages: list[JSONValue]) -> RunState:
        state = cls._from_parts(fields, messages)
        state._key_by_occurrence()
        return state

    def _key_by_occurrence(self) -> None:
        """Runs saved before results were keyed by occurrence hold them by provider call id."""
        keys = {call.idempotency_key for call in self.pending_calls}
        by_id = {call.id: call.idempotency_key for call in self.pending_calls}
        for table in (self.results, self.resolutions):
            for old in [name for name in table if name not in keys and name in by_id]:
                table[by_id[old]] = table.pop(old)  # type: ignore[assignment]

    @classmethod
    def _from_parts(cls, fields: dict[str, JSONValue], messages: list[JSONValue]) -> RunState:
        return cls(
            run_id=fields["run_id"],
            task=fields["task"],
            provider=fields.get("provider", "anthropic"),
            schema_version=fields["schema_version"],
            save_seq=fields["save_seq"],
            turns=fields["turns"],
            tokens_used=fields["tokens_used"],
            usage=fields.get("usage", {}),
            phase=fields["phase"],
            messages=messages,
            business_state=fields.get("business_state", {}),
            business_state_version=fields.get("business_state_version", 1),
            pending_calls=[ToolCall.from_json(c) for c in fields.get("pending_calls", [])],
            results={k: ToolResult.from_json(v) for k, v in fields.get("results", {}).items()},
            resolutions=fields.get("resolutions", {}),
            attempts=fields.get("attempts", {}),
            approvals=fields.get("approvals"),
            conversation=fields.get("conversation"),
            output=fields.get("output"),
            error=fields.get("error"),
            summary=fields.get("summary"),
            summary_upto=fields.get("summary_upto", 0),
            history_checked=fields.get("history_checked", 0),
            resumes=fields.get("resumes", 0),
            created_at=fields["created_at"],
            updated_at=fields["updated_at"],
        )

    def dangling_calls(self) -> list[ToolCall]:
        """Pending calls that have no recorded result yet."""
        return [call for call in self.pending_calls if call.idempotency_key not in self.results]

    def result_of(self, call: ToolCall) -> ToolResult | None:
        """The recorded result of one pending call (occurrence), if any."""
        return self.results.get(call.idempotency_key)


class RunSummary(Frozen):
    """One row of ``store.list_runs()``: cheap to read, no messages."""

    __slots__ = ("phase", "run_id", "save_seq", "task", "tokens_used", "turns", "updated_at")
    run_id: str
    task: str
    phase: str
    turns: int
    tokens_used: int
    save_seq: int
    updated_at: float

    def __init__(
        self, run_id: str, task: str, phase: str, turns: int, tokens_used: int, save_seq: int, updated_at: float
    ) -> None:
        # Every save builds one: each field set by its slot's own setter (~2x object.__setattr__'s speed).
        setters = _SUMMARY_SETTERS
        setters[0](self, run_id)
        setters[1](self, task)
        setters[2](self, phase)
        setters[3](self, turns)
        setters[4](self, tokens_used)
        setters[5](self, save_seq)
        setters[6](self, updated_at)


_SUMMARY_SETTERS = tuple(
    vars(RunSummary)[name].__set__
    for name in ("run_id", "task", "phase", "turns", "tokens_used", "save_seq", "updated_at")
)


class SaveInfo(Frozen):
    """One entry of a run's timeline (``store.history(run_id)``)."""

    __slots__ = ("at", "label", "messages_added", "phase", "seq", "snapshot", "tokens_used", "turns")
    seq: int
    label: str
    phase: str
    turns: int
    tokens_used: int
    messages_added: int
    at: float
    snapshot: bool

    def __init__(
        self,
        seq: int,
        label: str,
        phase: str,
        turns: int,
        tokens_used: int,
        messages_added: int,
        at: float,
        snapshot: bool,
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "seq", seq)
        set_field(self, "label", label)
        set_field(self, "phase", phase)
        set_field(self, "turns", turns)
        set_field(self, "tokens_used", tokens_used)
        set_field(self, "messages_added", messages_added)
        set_field(self, "at", at)
        set_field(self, "snapshot", snapshot)


LedgerStatus = Literal["pending", "succeeded", "failed", "unknown"]
LEDGER_STATUSES: tuple[str, ...] = get_args(LedgerStatus)


class LedgerEntry(Plain):
    """What the effect ledger knows about one idempotency key.

    ``pending`` means the intent was saved and the tool may or may not have run;
    ``succeeded``/``failed`` carry the recorded result; ``unknown`` means the outcome
    could not be established and was reported as such."""

    __slots__ = (
        "args_hash",
        "attempts",
        "call_id",
        "created_at",
        "fence",
        "key",
        "result",
        "run_id",
        "status",
        "tool",
        "updated_at",
    )
    run_id: str
    key: str
    call_id: str
    tool: str
    args_hash: str
    status: LedgerStatus
    attempts: int
    result: ToolResult | None
    created_at: float
    updated_at: float
    fence: int | None
    """The lease fence under which this attempt started (``claim``, ``retry``): who may still be
    acting on it if it is left in doubt (``fencing.LeaseGuard.absence_needs_wait``). None for an
    entry written outside a lease, or before the field existed (such entries omit it in JSON, so
    their checksums are unchanged)."""

    def __init__(
        self,
        run_id: str,
        key: str,
        call_id: str,
        tool: str,
        args_hash: str,
        status: LedgerStatus,
        attempts: int = 1,
        result: ToolResult | None = None,
        created_at: float | None = None,
        updated_at: float | None = None,
        fence: int | None = None,
    ) -> None:
        self.run_id = run_id
        self.key = key
        self.call_id = call_id
        self.tool = tool
        self.args_hash = args_hash
        self.status = status
        self.attempts = attempts
        self.result = result
        self.created_at = clock.wall() if created_at is None else created_at
        self.updated_at = clock.wall() if updated_at is None else updated_at
        self.fence = fence

    def to_json(self) -> dict[str, JSONValue]:
        data: dict[str, JSONValue] = {
            "run_id": self.run_id,
            "key": self.key,
            "call_id": self.call_id,
            "tool": self.tool,
            "args_hash": self.args_hash,
            "status": self.status,
            "attempts": self.attempts,
            "result": self.result.to_json() if self.result else None,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }
        if self.fence is not None:
            data["fence"] = self.fence
        return data

    @classmethod
    def from_json(cls, data: dict[str, JSONValue]) -> LedgerEntry:
        result = data.get("result")
        return cls(
            run_id=data["run_id"],
            key=data["key"],
            call_id=data["call_id"],
            tool=data["tool"],
            args_hash=data["args_hash"],
            status=data["status"],
            attempts=data["attempts"],
            result=ToolResult.from_json(result) if result else None,
            created_at=data["created_at"],
            updated_at=data["updated_at"],
            fence=data.get("fence"),
        )


class Lease(Frozen):
    """Proof that this worker may write a run. Every save carries ``fence``; the store refuses
    a save whose fence is not the run's current one."""

    __slots__ = ("expires_at", "fence", "owner", "previous_fence", "run_id")
    _not_compared = frozenset({"previous_fence"})
    run_id: str
    owner: str
    fence: int
    expires_at: float
    previous_fence: int | None
    """The run's fence just before this lease was taken (0: it had none), which tells whom it
    was taken from (fences are not consecutive: ``stores.base.next_fence``); None: not known.
    Not part of equality."""

    def __init__(
        self, run_id: str, owner: str, fence: int, expires_at: float, previous_fence: int | None = None
    ) -> None:
        set_field = object.__setattr__
        set_field(self, "run_id", run_id)
        set_field(self, "owner", owner)
        set_field(self, "fence", fence)
        set_field(self, "expires_at", expires_at)
        set_field(self, "previous_fence", previous_fence)


_RUN_ID_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
MAX_RUN_ID_LENGTH = 200


def check_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a safe name (usable as a file name, a SQL value and a URL
    segment), else raise ``InvalidRunId`` saying what is wrong."""
    if type(run_id) is str and run_id in _CHECKED_RUN_IDS:
        return run_id
    checked = _check_run_id(run_id)
    if len(_CHECKED_RUN_IDS) < 4096:  # bounded: a cache of names already judged safe
        _CHECKED_RUN_IDS.add(checked)
    return checked


_CHECKED_RUN_IDS: set[str] = set()


def new_run_id() -> str:
    """A fresh run id for a run started without one: ``run-`` and 12 random hex digits."""
    return f"run-{os.urandom(6).hex()}"


def check_task(task: object) -> None:
    """Raise ``InvalidTask`` naming the type unless ``task`` is a string or None (resume): checked
    before anything is written, so a dict passed as the task is never half-saved or bound to SQL."""
    from .errors import InvalidTask

    if task is not None and not isinstance(task, str):
        raise InvalidTask(
            f"the task must be a string (the user message that starts the run), not {type(task).__name__}: "
            "put structured input in business_state=..., or json.dumps it into the task"
        )


def _check_run_id(run_id: object) -> str:
    """Return ``run_id`` if it is a safe name (usable as a file name, a SQL value and a URL
    segment), else raise ``InvalidRunId`` saying what is wrong."""
    from .errors import InvalidRunId

    if not isinstance(run_id, str):
        raise InvalidRunId(f"run id must be a str, got {type(run_id).__name__}")
    if not run_id:
        raise InvalidRunId("run id is empty; use 1-200 characters from A-Z a-z 0-9 . _ -")
    if len(run_id) > MAX_RUN_ID_LENGTH:
        raise InvalidRunId(f"run id is {len(run_id)} characters long; the limit is {MAX_RUN_ID_LENGTH}")
    bad = sorted({ch for ch in run_id if ch not in _RUN_ID_CHARS})
    if bad:
        shown = ", ".join(repr(ch) for ch in bad[:5])
        raise InvalidRunId(f"run id {run_id[:40]!r} contains {shown}; use only A-Z a-z 0-9 . _ -")
    if run_id[0] in ".-":
        raise InvalidRunId(f"run id {run_id!r} must not start with '.' or '-'")
    return run_id
