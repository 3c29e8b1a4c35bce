"""Recording: a history strategy whose conversation is committed to a repository ref as the agent runs.

`repository_history_strategy(repo, ref, inner)` wraps any strategy. The wrapper lets `inner` decide
what to append and what the model sees, and after every `on_append`, and every `on_read` that changed
the history (a summary), it commits the inner history to `ref`. So:

- a process that dies mid-run leaves every message recorded so far on the ref;
- an agent started on an existing ref resumes that conversation (the inner strategy starts from the
  ref's history), in this process or any other;
- several processes can record into one ref at once: a commit that finds the ref moved rebases the
  new revisions onto it and commits again, so nobody's messages are lost; before every read the
  wrapper also takes in what others committed, so the model sees the whole conversation;
- summaries only change the model-facing view: the summary entry lists its sources, the originals stay
  in the repository, and `restore()` (or `repo.history(ref).restore()` anywhere) gives them back.

A rebase replays the wrapper's new revisions onto the ref's head. A summary whose sources are no longer
all in the view there (another process summarised the same span first) is dropped rather than placed
at the end of the view, as the summarizing strategies do for appends that race a summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import islice
from typing import Any, Final

from ..errors import InvalidInput, RefMoved, shown
from ..history.message_history import MessageHistory
from ..ids import HexId
from ..repo.repository import Repository
from .strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    HistoryStrategy,
    ReadResult,
    append_only_history_strategy,
)

__all__ = ["COMMIT_RETRIES", "RepositoryHistoryStrategy", "repository_history_strategy"]

COMMIT_RETRIES: Final = 50
"""How many times a commit that lost a race rebases and tries again before giving up."""


class RepositoryHistoryStrategy:
    """A strategy that commits its inner strategy's history to a repository ref (see the module)."""

    def __init__(self, repo: Repository, ref: str, inner: HistoryStrategy | None = None, *,
                 retries: int = COMMIT_RETRIES) -> None:
        if not (hasattr(repo, "commit") and hasattr(repo, "history")):
            raise InvalidInput(f"repo must be a ctxstore Repository, got {shown(repo)}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 1:
            raise InvalidInput(f"retries must be an int of at least 1, got {shown(retries)}")
        self.repo = repo
        self.ref: str = repo.ref_name(ref)
        """The full name of the ref the conversation is recorded into."""
        self.inner: HistoryStrategy = inner if inner is not None else append_only_history_strategy()
        if not isinstance(self.inner, HistoryStrategy):
            raise InvalidInput(f"inner must be a history strategy (on_append/on_read), got {shown(self.inner)}")
        if not isinstance(self.inner.history, MessageHistory):
            raise InvalidInput(f"inner's history must be a MessageHistory, got {shown(self.inner.history)}")
        self.retries = retries
        self._base: HexId | None = repo.head(self.ref)
        self.inner.history = self._starting_history(self.inner.history)
        # The revision last committed (or loaded): a history still at it has nothing to commit.
        self._synced: str = self.inner.history.revision_id

    def _starting_history(self, held: MessageHistory) -> MessageHistory:
        """The ref's conversation, or the inner's own history when that is compatible with the ref."""
        if _is_fresh(held):
            return self.repo.history(self.ref)
        if self._base is None:
            return held  # an unborn ref takes the inner's conversation at the first commit
        if self._base in set(held.lineage()):
            return held  # the inner already continues the ref
        raise InvalidInput(
            f"the inner strategy already holds a conversation ({held.revision_id[:12]}) that does not "
            f"continue ref {self.ref} ({self._base[:12]}); give it a fresh history to resume the ref, "
            "or record into another ref"
        )

    # -- the strategy protocol -----------------------------------------------------------------------
    @property
    def history(self) -> MessageHistory:
        """The inner strategy's current history; an assignment is committed at the next operation."""
        return self.inner.history

    @history.setter
    def history(self, value: MessageHistory) -> None:
        self.inner.history = value

    async def on_append(self, message: Mapping[str, Any], ctx: HistoryAppendContext) -> None:
        """Let the inner strategy record the message, then commit it to the ref."""
        await self.inner.on_append(message, ctx)
        self.commit(message=_describe("append", ctx))

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        """Take in what others committed, let the inner strategy read (and maybe compact), commit a change.

        When a commit has to rebase after the inner strategy read, the returned messages are those the
        inner strategy computed; what others added shows at the next read.
        """
        self._take_in_ref()
        result = await self.inner.on_read(ctx)
        if self.inner.history.revision_id != self._synced:
            self.commit(message=_describe("compact", ctx))
            return ReadResult(self.inner.history, result.messages)
        return result

    # -- repository side -----------------------------------------------------------------------------
    @property
    def head(self) -> HexId | None:
        """The ref's head as this strategy last committed or loaded it (None for a ref not yet made)."""
        return self._base

    def restore(self, entry_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The original messages of the view (summaries expanded into their sources, recursively)."""
        return self.inner.history.restore(entry_ids)

    def commit(self, *, message: str = "record") -> HexId:
        """Commit the inner history to the ref now if it changed (rebasing if the ref moved); the head id.

        A lost race rebases through the repository's one loop (`Repository.commit(rebase=True)`); the
        inner strategy then continues from what landed. After `retries` rebases: `RefMoved`, with the
        conversation in memory intact.
        """
        history = self.inner.history
        if history.revision_id == self._synced:
            return HexId(history.revision_id)
        try:
            moved = self.repo.commit(self.ref, history, rebase=True, retries=self.retries, message=message)
        except RefMoved as error:
            raise RefMoved(
                f"ref {self.ref} kept moving while recording ({self.retries} rebases, now at "
                f"{(error.current or '(deleted)')[:12]}); the conversation in memory is intact: call "
                "commit() again, or record into another ref",
                ref=self.ref, current=error.current, expected=self._base,
            ) from None
        if moved.new != history.revision_id:  # rebased: continue from what landed
            self.inner.history = self.repo.history(moved.new)
        self._base = self._synced = moved.new
        return moved.new

    def _take_in_ref(self) -> None:
        """Bring the ref's new revisions (another process's messages) into the inner history."""
        current = self.repo.head(self.ref)
        if current is None or current == self._base:
            return
        if self.inner.history.revision_id == self._synced:
            self.inner.history = self.repo.history(self.ref)
            self._base = self._synced = current
        else:
            self.commit(message="record (took in the ref)")

    def __repr__(self) -> str:
        return f"repository_history_strategy({self.repo!r}, {self.ref!r}, {self.inner!r})"


def repository_history_strategy(repo: Repository, ref: str, inner: HistoryStrategy | None = None, *,
                                retries: int = COMMIT_RETRIES) -> RepositoryHistoryStrategy:
    """A strategy that records `inner`'s conversation into `ref` of `repo` as it happens.

    `inner` defaults to `append_only_history_strategy()`. Given a fresh strategy (an empty history),
    the inner history starts from the ref's conversation, so an agent on an existing ref resumes it; a
    strategy that already holds a conversation is accepted when the ref is new or the conversation
    continues the ref. The inner history is committed after every `on_append` and every `on_read` that
    changed it; a commit that finds the ref moved by another writer rebases and tries again, up to
    `retries` times (then `RefMoved`, with nothing lost in memory).
    """
    return RepositoryHistoryStrategy(repo, ref, inner, retries=retries)


def _is_fresh(history: MessageHistory) -> bool:
    """Whether a history is a new empty one (one root revision, no entries)."""
    return history.size == 0 and next(islice(history.lineage(), 1, 2), None) is None


def _describe(what: str, ctx: HistoryReadContext) -> str:
    run_id = getattr(ctx, "run_id", None)
    step = getattr(ctx, "step_index", None)
    if run_id is None:
        return what
    return f"{what} ({run_id} step {step})" if step is not None else f"{what} ({run_id})"


