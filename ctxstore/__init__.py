"""ctxstore: a git-style, content-addressed history store for AI-agent conversations.

The public names are listed, with one line each, in docs/api.md. The histories, the repository and the
errors load with the package; the token budget helpers (`decimal`) and the agent, sync and import/export
layers (and what they bring: asyncio, the model SDK, HTTP) load on first use of one of their names, so a
command that needs none of them starts fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
from .history.message_history import MessageHistory, MessageHistoryEntry
from .ids import HexId
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

# Names loaded on first access (PEP 562): the token budget helpers and the upper layers. The TYPE_CHECKING
# imports below say the same to type checkers; tests/test_public_api.py checks that the two agree.
_LAZY: dict[str, str] = {
    **dict.fromkeys(["PRICING", "Pricing", "cost_of", "estimate_tokens", "max_cost", "max_tokens"],
                    "ctxstore.history.budget"),
    **dict.fromkeys(["AnthropicModel", "anthropic_model"], "ctxstore.agents.anthropic"),
    **dict.fromkeys(["Agent", "RunResult", "Tool", "tool"], "ctxstore.agents.loop"),
    **dict.fromkeys(["GenerateResult", "Model", "Usage"], "ctxstore.agents.models"),
    **dict.fromkeys(["OfflineModel", "offline_model", "tool_call"], "ctxstore.agents.offline"),
    **dict.fromkeys(["repository_history_strategy"], "ctxstore.agents.recording"),
    **dict.fromkeys(["Signal", "signal_history_strategy"], "ctxstore.agents.signals"),
    **dict.fromkeys(["HistoryAppendContext", "HistoryReadContext", "HistoryStrategy", "ReadResult",
                     "SummaryMemory", "append_only_history_strategy", "selective_summary_history_strategy",
                     "summarizing_history_strategy"], "ctxstore.agents.strategies"),
    **dict.fromkeys(["ImportResult"], "ctxstore.interop"),
    **dict.fromkeys(["FetchResult", "PullResult", "PushResult", "clone", "fetch", "pull", "push"],
                    "ctxstore.sync.client"),
}

if TYPE_CHECKING:
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
    from .history.budget import PRICING, Pricing, cost_of, estimate_tokens, max_cost, max_tokens
    from .interop import ImportResult
    from .sync.client import FetchResult, PullResult, PushResult, clone, fetch, pull, push


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ctxstore' has no attribute {name!r}")
    value = getattr(__import__(module, fromlist=[name]), name)  # the import `-X importtime` times
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

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
