"""History strategies: how an agent runtime appends to, reads and compacts its conversation history.

The runtime calls only `on_append(message, ctx)` for every message it records and `on_read(ctx)`
before every model request. A strategy holds its current `MessageHistory` in its `history` attribute
and, because histories are immutable, advances by reassigning it.

ctxstore's strategies never separate a `tool_use` block from its `tool_result`:

- `summarizing_history_strategy` cuts its span after the last assistant message without `tool_use`;
- `selective_summary_history_strategy` *widens* a selection that would split a pair, so the whole
  tool exchange (the assistant message with the `tool_use` blocks and the message with their
  `tool_result` blocks) is summarised together. Widening rather than narrowing keeps the selector's
  intent (fold this noise away) and never leaves a half-exchange the API would reject.

The messages a summarizing strategy returns are ready for the Anthropic Messages API: the summary is a
user message, and adjacent messages of one role (a summary next to a user turn) are merged into one,
so roles alternate (see `api_messages`). The history itself keeps every entry separate.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

from ..errors import InvalidInput, ModelError, shown
from ..history.message_history import MessageHistory
from .models import Model, plain_messages
from .signals import AbortSignal, abortable

__all__ = [
    "CONVERSATION_SUMMARY_PREFIX",
    "SELECTED_SUMMARY_PREFIX",
    "AppendOnlyHistoryStrategy",
    "HistoryAppendContext",
    "HistoryReadContext",
    "HistoryStrategy",
    "SummaryMemory",
    "ReadResult",
    "SelectiveSummaryHistoryStrategy",
    "SummarizingHistoryStrategy",
    "api_messages",
    "append_only_history_strategy",
    "selective_summary_history_strategy",
    "summarizing_history_strategy",
]

CONVERSATION_SUMMARY_PREFIX = "[Conversation summary]"
SELECTED_SUMMARY_PREFIX = "[Selected history summary]"

_SUMMARY_SYSTEM = (
    "You summarize part of a conversation between a user and an AI assistant so that the summary can "
    "replace those messages in the assistant's context. Keep facts, decisions, names, numbers, open "
    "questions and tool results that still matter. Answer with the summary text only."
)
_CONVERSATION_REQUEST = "Summarize the following conversation messages:"


@dataclass(frozen=True, slots=True)
class HistoryReadContext:
    """What a strategy is told before a model request: the active model, the token budget, an abort signal.

    `signal` is an `asyncio.Event` or anything with `is_set()`; when it is set, a summarization call
    in flight stops (as it does when the awaiting task is cancelled).
    """

    model: Any
    budget_tokens: int
    signal: AbortSignal | None = None


@dataclass(frozen=True, slots=True)
class HistoryAppendContext(HistoryReadContext):
    """What a strategy is told when the runtime records a message; the run fields are advisory."""

    run_id: str | None = None
    step_index: int | None = None


class ReadResult(NamedTuple):
    """The outcome of `on_read`: the strategy's (possibly compacted) history and the messages to send."""

    history: MessageHistory
    messages: list[dict[str, Any]]


@runtime_checkable
class HistoryStrategy(Protocol):
    """Owns the conversation history policy of an agent (see the module docstring)."""

    history: MessageHistory

    async def on_append(self, message: Mapping[str, Any], ctx: HistoryAppendContext) -> None:
        """Record one inbound or generated message."""
        ...

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        """The history and the messages to send before a model request."""
        ...


@runtime_checkable
class SummaryMemory(Protocol):
    """Where summaries also go: anything with `async ingest([{"text": ..., "metadata": {...}}])`."""

    async def ingest(self, docs: list[dict[str, Any]]) -> Any: ...


def _blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A message's content as content blocks: string content is one text block, none is no block."""
    content = message.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if isinstance(content, list | tuple) and all(isinstance(block, Mapping) for block in content):
        return [dict(block) for block in content]
    raise InvalidInput(
        f"message content must be a string or a list of content block dicts, got {shown(content)}"
    )


def api_messages(messages: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages with adjacent same-role messages merged, so that user and assistant turns alternate.

    In a merged user message the `tool_result` blocks come first, as the Messages API requires. A
    message that needs no merging is returned as a copy, unchanged. A message that is not a dict of
    JSON data with string or content-block content is `InvalidInput`.
    """
    merged: list[dict[str, Any]] = []
    for message in plain_messages(messages):
        blocks = _blocks(message)  # checks the content of every message, merged or not
        if merged and merged[-1].get("role") == message.get("role"):
            previous = merged[-1]
            blocks = _blocks(previous) + blocks
            if message.get("role") == "user":
                # Stable: results keep their order, as do the other blocks.
                blocks = [b for b in blocks if b.get("type") == "tool_result"] + [
                    b for b in blocks if b.get("type") != "tool_result"
                ]
            merged[-1] = {**previous, "content": blocks}
        else:
            merged.append(message)
    return merged


def _tool_blocks(message: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == kind]


def _has_tool_use(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "assistant" and bool(_tool_blocks(message, "tool_use"))


def _tool_use_ids(message: Mapping[str, Any]) -> list[str]:
    if message.get("role") != "assistant":
        return []
    return [i for b in _tool_blocks(message, "tool_use") if isinstance(i := b.get("id"), str)]


def _tool_result_ids(message: Mapping[str, Any]) -> list[str]:
    return [i for b in _tool_blocks(message, "tool_result") if isinstance(i := b.get("tool_use_id"), str)]


def _transcript(messages: Iterable[Mapping[str, Any]]) -> str:
    """Messages as plain text for a summarization request (tool blocks spelled out)."""
    lines = []
    for message in messages:
        role = message.get("role", "?")
        content = message.get("content")
        if isinstance(content, str):
            lines.append(f"{role}: {content}")
            continue
        for block in _blocks(message):
            kind = block.get("type")
            if kind == "text":
                lines.append(f"{role}: {block.get('text', '')}")
            elif kind == "tool_use":
                arguments = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True, default=str)
                lines.append(f"{role}: [called tool {block.get('name')} with {arguments}]")
            elif kind == "tool_result":
                result = block.get("content", "")
                if isinstance(result, list):
                    result = " ".join(str(b.get("text", "")) for b in result if isinstance(b, Mapping))
                elif not isinstance(result, str):
                    result = json.dumps(result, ensure_ascii=False, default=str)
                label = "tool error" if block.get("is_error") else "tool result"
                lines.append(f"{role}: [{label}: {result}]")
            else:
                lines.append(f"{role}: [{kind} block]")
    return "\n".join(lines)


def _summary_text(result: Any) -> str:
    text = getattr(result, "text", None)
    if not isinstance(text, str) or not text.strip():
        raise ModelError(
            "the summarization model answered without text; the history was left unchanged (try again or "
            "use a model that answers in text)"
        )
    return text.strip()


class _Strategy:
    """Shared plumbing: the history attribute and plain appends."""

    def __init__(self, history: MessageHistory | None) -> None:
        if history is not None and not isinstance(history, MessageHistory):
            raise InvalidInput(f"history must be a MessageHistory (or None for a new one), got {shown(history)}")
        self.history: MessageHistory = history if history is not None else MessageHistory()

    async def on_append(self, message: Mapping[str, Any], ctx: HistoryAppendContext) -> None:
        """Append the message as a turn entry; appends are policy-free."""
        self.history = self.history.append(message)


class AppendOnlyHistoryStrategy(_Strategy):
    """Appends every message and reads the full active view."""

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        """The whole active view, unchanged."""
        return ReadResult(self.history, self.history.render())


def append_only_history_strategy(history: MessageHistory | None = None) -> AppendOnlyHistoryStrategy:
    """A strategy that appends every message and reads the full active view (pass a history to resume)."""
    return AppendOnlyHistoryStrategy(history)


class _SummarizingBase(_Strategy):
    """Replaces a span of entries with one summary entry made by one model call."""

    prefix: str
    memory_kind: str

    def __init__(self, model: Model, memory_store: SummaryMemory | None, history: MessageHistory | None) -> None:
        if not isinstance(model, Model):
            raise InvalidInput(f"model must be a Model (generate, count_tokens, name), got {shown(model)}")
        if memory_store is not None and not isinstance(memory_store, SummaryMemory):
            raise InvalidInput(f"memory_store must have an async ingest(docs) method, got {shown(memory_store)}")
        super().__init__(history)
        self.model = model
        self.memory_store = memory_store

    async def _summarize(self, ids: Sequence[str], messages: Sequence[Mapping[str, Any]], request: str,
                         ctx: HistoryReadContext) -> None:
        """Ask the model for a summary of `messages` and put it in place of entries `ids`."""
        started_from = self.history
        prompt = [{"role": "user", "content": f"{request}\n\n{_transcript(messages)}"}]
        call = self.model.generate(messages=prompt, system=_SUMMARY_SYSTEM, signal=ctx.signal)
        text = _summary_text(await abortable(call, ctx.signal, what="summarization"))
        current = self.history
        if current is not started_from:
            # Messages were appended while the model worked: apply the summary to the newer history
            # only if every source is still in its view, else drop it rather than misplace it.
            present = {entry.id for entry in current.refs()}
            if not set(ids) <= present:
                return
        entry = {
            "message": {"role": "user", "content": f"{self.prefix}\n{text}"},
            "kind": "summary",
            "sources": list(ids),
        }
        patch = {"op": "summary", "sourceIds": list(ids), "entry": entry, "replace": True}
        self.history = current.edit(patch)
        if self.memory_store is not None:
            await self.memory_store.ingest(
                [{"text": text, "metadata": {"kind": self.memory_kind, "sourceIds": list(ids)}}]
            )

    def _read(self) -> ReadResult:
        return ReadResult(self.history, api_messages(self.history.render()))


class SummarizingHistoryStrategy(_SummarizingBase):
    """Summarizes the oldest safe span of the view once it reaches `trigger_tokens` (see the factory)."""

    prefix = CONVERSATION_SUMMARY_PREFIX
    memory_kind = "conversation_summary"

    def __init__(self, *, model: Model, trigger_tokens: int, keep_recent: int,
                 memory_store: SummaryMemory | None = None, history: MessageHistory | None = None) -> None:
        if isinstance(trigger_tokens, bool) or not isinstance(trigger_tokens, int) or trigger_tokens < 0:
            raise InvalidInput(f"trigger_tokens must be a non-negative int, got {shown(trigger_tokens)}")
        if isinstance(keep_recent, bool) or not isinstance(keep_recent, int) or keep_recent < 0:
            raise InvalidInput(f"keep_recent must be a non-negative int, got {shown(keep_recent)}")
        super().__init__(model, memory_store, history)
        self.trigger_tokens = trigger_tokens
        self.keep_recent = keep_recent

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        """Compact the oldest span when the view's estimate reaches the trigger; then read the view."""
        history = self.history
        if history.estimate_tokens() < self.trigger_tokens:
            return self._read()
        refs = history.refs()
        # The kept part is the last `keep_recent` entries, all of a view shorter than that.
        older = refs[: max(0, len(refs) - self.keep_recent)]
        # Cut after the last assistant message with no tool_use: nothing after it can be a tool_result
        # answering a tool_use inside the span, so no pair is split.
        cut = next(
            (i for i in range(len(older) - 1, -1, -1)
             if older[i].message.get("role") == "assistant" and not _has_tool_use(older[i].message)),
            None,
        )
        if cut is None:
            return self._read()
        span = older[: cut + 1]
        await self._summarize([e.id for e in span], [e.message for e in span], _CONVERSATION_REQUEST, ctx)
        return self._read()


def summarizing_history_strategy(*, model: Model, trigger_tokens: int, keep_recent: int,
                                 memory_store: SummaryMemory | None = None,
                                 history: MessageHistory | None = None) -> SummarizingHistoryStrategy:
    """A strategy that lazily summarizes older entries on read.

    Appends are policy-free. When the active view's estimate reaches `trigger_tokens`, all but the last
    `keep_recent` entries are considered; the span up to and including the last assistant message in
    them without a `tool_use` block is summarized by `model` into one summary entry (role user, text
    prefixed `[Conversation summary]`, sources = the span's ids), so `history.restore()` still gives
    the originals. No such message: no change. Each summary text also goes to `memory_store` with
    `metadata.kind = "conversation_summary"`.
    """
    return SummarizingHistoryStrategy(model=model, trigger_tokens=trigger_tokens, keep_recent=keep_recent,
                                      memory_store=memory_store, history=history)


Selector = Callable[[MessageHistory, HistoryReadContext], "Iterable[str] | Awaitable[Iterable[str]]"]


def _call_selector(selector: Callable[..., Any], history: MessageHistory, ctx: HistoryReadContext) -> Any:
    # The seed's selectors often take only the history; accept both one- and two-argument callables.
    try:
        parameters = inspect.signature(selector).parameters.values()
    except (TypeError, ValueError):
        return selector(history, ctx)
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) == 1 and not any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return selector(history)
    return selector(history, ctx)


class SelectiveSummaryHistoryStrategy(_SummarizingBase):
    """Summarizes a selector-chosen subset of the view on every read (see the factory)."""

    prefix = SELECTED_SUMMARY_PREFIX
    memory_kind = "selected_history_summary"

    def __init__(self, *, model: Model, selector: Selector, summary_prompt: str,
                 memory_store: SummaryMemory | None = None, history: MessageHistory | None = None) -> None:
        if not callable(selector):
            raise InvalidInput(f"selector must be a function of (history, ctx), got {shown(selector)}")
        if not isinstance(summary_prompt, str) or not summary_prompt.strip():
            raise InvalidInput(f"summary_prompt must be a non-empty str, got {shown(summary_prompt)}")
        super().__init__(model, memory_store, history)
        self.selector = selector
        self.summary_prompt = summary_prompt

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        """Summarize the selected entries (widened to whole tool exchanges); then read the view."""
        history = self.history
        chosen = _call_selector(self.selector, history, ctx)
        if inspect.isawaitable(chosen):
            chosen = await chosen
        refs = history.refs()
        position = {entry.id: i for i, entry in enumerate(refs)}
        selected = {position[i] for i in _selected_ids(chosen) if i in position}
        if not selected:
            return self._read()
        selected = _widen_to_tool_exchanges(refs, selected)
        if len(selected) == 1 and refs[next(iter(selected))].kind == "summary":
            # Re-summarizing a lone summary would cost a model call per read and change nothing useful.
            return self._read()
        span = [refs[i] for i in sorted(selected)]
        await self._summarize([e.id for e in span], [e.message for e in span], self.summary_prompt, ctx)
        return self._read()


def _selected_ids(chosen: Any) -> list[str]:
    """What a selector returned, as entry ids (None: none); anything but an iterable of str is refused."""
    if chosen is None:
        return []
    if isinstance(chosen, str | bytes | Mapping) or not isinstance(chosen, Iterable):
        raise InvalidInput(f"a selector returns an iterable of entry ids, got {shown(chosen)}")
    ids = list(chosen)
    for entry_id in ids:
        if not isinstance(entry_id, str):
            raise InvalidInput(f"a selector returns entry ids (str), got {shown(entry_id)} among {shown(ids)}")
    return ids


def _widen_to_tool_exchanges(refs: Sequence[Any], selected: set[int]) -> set[int]:
    """`selected` plus every entry in a tool exchange (tool_use and its tool_result) it touches."""
    uses: dict[str, int] = {}
    for i, entry in enumerate(refs):
        for use_id in _tool_use_ids(entry.message):
            uses[use_id] = i
    links: dict[int, set[int]] = {}
    for i, entry in enumerate(refs):
        for use_id in _tool_result_ids(entry.message):
            if use_id in uses:
                links.setdefault(i, set()).add(uses[use_id])
                links.setdefault(uses[use_id], set()).add(i)
    widened = set(selected)
    pending = list(selected)
    while pending:
        for other in links.get(pending.pop(), ()):
            if other not in widened:
                widened.add(other)
                pending.append(other)
    return widened


def selective_summary_history_strategy(
    *, model: Model, selector: Selector, summary_prompt: str, memory_store: SummaryMemory | None = None,
    history: MessageHistory | None = None,
) -> SelectiveSummaryHistoryStrategy:
    """A strategy that summarizes a selector-chosen subset on every read.

    `selector(history, ctx)` (or `selector(history)`; sync or async) returns entry ids; unknown ids
    are ignored, none: no change. The selection is widened to whole tool exchanges, then summarized by
    `model` with `summary_prompt` in one call and replaced by one summary entry (role user, text
    prefixed `[Selected history summary]`) at the position of the first selected entry; unselected
    entries keep their order. A selection that is a single summary entry is left alone. Each summary
    text also goes to `memory_store` with `metadata.kind = "selected_history_summary"`.
    """
    return SelectiveSummaryHistoryStrategy(model=model, selector=selector, summary_prompt=summary_prompt,
                                           memory_store=memory_store, history=history)
