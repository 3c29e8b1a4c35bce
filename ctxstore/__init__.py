"""ctxstore: a git-style, content-addressed history store for AI-agent conversations.

The public names are listed, with one line each, in docs/api.md.
"""

from .agents.anthropic import AnthropicModel, anthropic_model
from .agents.loop import Agent, RunResult, Tool, tool
from .agents.models import GenerateResult, Model, Usage
from .agents.offline import OfflineModel, offline_model, tool_call
from .agents.recording import repository_history_strategy
from .agents.signals import Signal, signal_history_strategy
from .agents.strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    HistoryStrategy,
    ReadResult,
    SummaryMemory,
    append_only_history_strategy,
    selective_summary_history_strategy,
    summarizing_history_strategy,
)
from .errors import (
    AuthError,
    BadPack,
    CtxStoreError,
    DamagedData,
    DuplicateEntryId,
    EncodingError,
    InvalidInput,
    InvalidObject,
    InvalidRefName,
    MissingObject,
    ModelError,
    NonFastForward,
    NotARepository,
    RefError,
    RefMoved,
    RemoteError,
    RepositoryError,
    RepositoryExists,
    StoreError,
    SyncError,
    UnknownRef,
    UnknownRevision,
    UnknownSetting,
)
from .history.budget import PRICING, Pricing, cost_of, estimate_tokens, max_cost, max_tokens
from .history.message_history import MessageHistory, MessageHistoryEntry
from .ids import HexId
from .interop import ImportResult
from .repo import (
    CommitResult,
    FsckReport,
    GcReport,
    ReflogEntry,
    Repository,
    RepoStats,
    RevisionDiff,
    RevisionInfo,
    UnpackResult,
)
from .store import MemoryStore
from .sync.client import FetchResult, PullResult, PushResult, clone, fetch, pull, push

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AnthropicModel",
    "AuthError",
    "BadPack",
    "CommitResult",
    "CtxStoreError",
    "DamagedData",
    "DuplicateEntryId",
    "EncodingError",
    "FetchResult",
    "FsckReport",
    "GcReport",
    "GenerateResult",
    "HexId",
    "HistoryAppendContext",
    "HistoryReadContext",
    "HistoryStrategy",
    "ImportResult",
    "InvalidInput",
    "InvalidObject",
    "InvalidRefName",
    "MemoryStore",
    "MessageHistory",
    "MessageHistoryEntry",
    "MissingObject",
    "Model",
    "ModelError",
    "NonFastForward",
    "NotARepository",
    "OfflineModel",
    "PRICING",
    "Pricing",
    "PullResult",
    "PushResult",
    "ReadResult",
    "RefError",
    "RefMoved",
    "ReflogEntry",
    "RemoteError",
    "RepoStats",
    "Repository",
    "RepositoryError",
    "RepositoryExists",
    "RevisionDiff",
    "RevisionInfo",
    "RunResult",
    "Signal",
    "StoreError",
    "SummaryMemory",
    "SyncError",
    "Tool",
    "UnknownRef",
    "UnknownRevision",
    "UnknownSetting",
    "UnpackResult",
    "Usage",
    "anthropic_model",
    "append_only_history_strategy",
    "clone",
    "cost_of",
    "estimate_tokens",
    "fetch",
    "max_cost",
    "max_tokens",
    "offline_model",
    "pull",
    "push",
    "repository_history_strategy",
    "selective_summary_history_strategy",
    "signal_history_strategy",
    "summarizing_history_strategy",
    "tool",
    "tool_call",
]
