"""One exception tree for everything unbroken raises on purpose.

::

    UnbrokenError
    ├── ConfigError                 the caller asked for something that cannot work
    │   ├── InvalidStoreURL         open_store() got a URL it cannot use
    │   ├── InvalidRunId            a run id that is not a safe name
    │   ├── InvalidTask             a task that is not a string (also a TypeError)
    │   ├── ToolDefinitionError     a @tool that cannot be described to a model
    │   ├── TaskMismatch            an existing run id was given a different task
    │   ├── EncryptionUnavailable   encryption asked for, pyca cryptography not installed
    │   └── InvalidEncryptionKey    a key that is not 32 bytes (raw or base64)
    ├── StateError                  the state itself is not storable
    │   ├── NotJSONValue            a value that is not plain JSON (names its path)
    │   ├── RecordTooLarge          a save no load could read back (over the record cap)
    │   └── UnloadableState         a save no load would accept (a field out of its rules)
    ├── StoreError                  the store could not do what was asked
    │   ├── StoreUnavailable        cannot reach / open / write the store
    │   ├── RunNotFound             no checkpoint under that run id
    │   │   └── RunQueued           submitted for workers, not started yet
    │   ├── CorruptCheckpoint       a record failed its checksum or does not parse
    │   │   └── WrongEncryptionKey  the run's data key does not unwrap under the key named
    │   ├── EncryptionKeyMissing    an encrypted run, read without the key it needs (names it)
    │   ├── IncompatibleSchema      written by a newer unbroken, or no migration path
    │   ├── ConcurrentSave          someone else advanced the run first
    │   ├── Unsupported             this store cannot do that (says which can)
    │   │   └── MissingStoreFeature the storage service lacks a feature (names it)
    │   ├── InsufficientDurability  the server persists less than the URL asks
    │   └── StoreDataLost           a run's head or records vanished under its live holder
    ├── LeaseError
    │   ├── LeaseHeld               another live worker owns the run
    │   └── LeaseLost               our lease was taken over; our write changed nothing
    ├── IdempotencyConflict         one idempotency key, two different argument sets
    ├── OutcomeUnknown              raised by a tool: it cannot tell whether it acted
    ├── ApprovalError               no such approval request, or it names other arguments
    │   └── ApprovalExpired         the request is older than its tool's approval_ttl
    ├── ModelCallFailed             the model call raised; the run stays at its last save point
    └── RunInterrupted              asked to stop (worker shutdown); stopped at a save point

Each class's docstring is its default message. Every error leaves the stored run as it was.
"""

from __future__ import annotations


class UnbrokenError(Exception):
    """unbroken failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or " ".join((type(self).__doc__ or "").split()))


class ConfigError(UnbrokenError):
    """The configuration cannot work."""


class InvalidStoreURL(ConfigError):
    """The store URL is not one of sqlite:///PATH, file:///DIR, memory:// or postgresql://..."""


class InvalidRunId(ConfigError):
    """The run id is not a safe name: use 1-200 characters from A-Z a-z 0-9 . _ - (not starting with . or -)."""


class InvalidTask(ConfigError, TypeError):
    """The task must be a string (the user message that starts the run): put structured input in business_state."""


class ToolDefinitionError(ConfigError):
    """The tool cannot be described to a model."""


class TaskMismatch(ConfigError):
    """This run id already holds a run with a different task; pick a new run id or pass the same task."""


class EncryptionUnavailable(ConfigError):
    """Encryption at rest needs pyca cryptography: pip install 'unbroken[encryption]'."""


class InvalidEncryptionKey(ConfigError):
    """An encryption key must be 32 bytes: raw, or as base64 text (`openssl rand -base64 32` makes one)."""


class StateError(UnbrokenError):
    """The run state cannot be stored."""


class NotJSONValue(StateError):
    """A value in the run state is not plain JSON."""

    def __init__(self, path: str, value: object, why: str = "") -> None:
        self.path = path
        kind = type(value).__name__
        reason = why or f"a {kind} is not JSON"
        self.why = reason
        super().__init__(
            f"{path}: {reason}. Only dict (str keys), list, str, int, finite float, bool and None "
            "can be saved; store a descriptor (an id, a URL, a path) instead of a live object."
        )


class RecordTooLarge(StateError):
    """This save would be larger than the record cap every load enforces; nothing was saved."""


class UnloadableState(StateError):
    """This save holds a field that every load would refuse (docs/format.md, "Acceptance"); nothing was saved."""


class StoreError(UnbrokenError):
    """The store failed."""


class StoreUnavailable(StoreError):
    """The store cannot be reached or written."""


class RunNotFound(StoreError):
    """No run is stored under that run id."""


class RunQueued(RunNotFound):
    """The run was submitted for workers and has not started yet: it has no save point to load."""


class CorruptCheckpoint(StoreError):
    """A stored record failed its checksum or does not parse."""

    def __init__(self, message: str | None = None, *, last_good_seq: int | None = None) -> None:
        self.last_good_seq = last_good_seq
        super().__init__(message)


class WrongEncryptionKey(CorruptCheckpoint):
    """The run's data key does not unwrap under the key this store was given for its key id: the wrong
    key under that id, or an edited key envelope. Nothing was changed; open the store with the right key."""


class EncryptionKeyMissing(StoreError):
    """This run is encrypted at rest and the store has no key for it: open the store with its key
    provider (`open_store(url, encryption=...)`, or set UNBROKEN_ENCRYPTION_KEY / UNBROKEN_ENCRYPTION_KEY_FILE)."""


class IncompatibleSchema(StoreError):
    """The checkpoint was written by a newer unbroken, or no migration leads to this version."""


class ConcurrentSave(StoreError):
    """Another writer saved this run first; reload it before saving again."""


class Unsupported(StoreError):
    """This store cannot do that."""


class MissingStoreFeature(Unsupported):
    """The storage service lacks a feature this store needs (the message names it); nothing was written."""


class InsufficientDurability(StoreError):
    """The store's server keeps writes less durably than the store URL asks (the message says what to set)."""


class StoreDataLost(StoreError):
    """The store lost this run's data while this process held its lease (its head vanished, or its fence
    or save number went backwards): a server restarted without its data, keys evicted under memory
    pressure, or the run deleted or restored from an older backup. Nothing was written and the run
    stopped. Starting it again from its task would begin from nothing or an older save point and could
    repeat side effects already done: restore the store from a backup or settle the run's effects by
    hand, and fix what lost the data (docs/guarantees.md, section 12)."""


class LeaseError(UnbrokenError):
    """The run's lease is not ours."""


class LeaseHeld(LeaseError):
    """Another live worker holds this run's lease."""


class LeaseLost(LeaseError):
    """Our lease on the run was taken over by another worker; the write was refused and changed nothing."""


class IdempotencyConflict(UnbrokenError):
    """This idempotency key was already used with different arguments; nothing was executed."""


class OutcomeUnknown(UnbrokenError):
    """The tool cannot tell whether it acted (its request may have reached the service before the connection broke)."""


class ApprovalError(UnbrokenError):
    """No approval request of this run matches that call and those arguments; nothing was recorded."""


class ApprovalExpired(ApprovalError):
    """The approval request is older than its tool's approval_ttl; resume the run to ask again."""


class ModelCallFailed(UnbrokenError):
    """The model call failed; the run is saved at its last save point and can be resumed."""


class RunInterrupted(UnbrokenError):
    """The run was asked to stop (its worker is shutting down) and stopped after a save point; it resumes from there."""
