"""The model protocol: what the agent loop and strategies call, and the types a model answers with.

A model takes messages in the anthropic SDK's `MessageParam` shape (plain dicts) and answers with a
`GenerateResult` whose `message` is the assistant message as a plain dict, ready to append to a
`MessageHistory`. The adapters live beside this module: Anthropic's API in `ctxstore.agents.anthropic`
(the only module that imports the `anthropic` SDK), the deterministic offline model in
`ctxstore.agents.offline`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidInput, shown
from .signals import AbortSignal

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "GenerateResult",
    "Model",
    "Usage",
    "message_text",
    "plain_messages",
]

DEFAULT_MAX_TOKENS = 4096
"""Output tokens a model may generate per request unless told otherwise."""


def _add(a: int | None, b: int | None) -> int | None:
    # A cache figure stays "not reported" (None) until some response reports it.
    if a is None:
        return b
    if b is None:
        return a
    return a + b


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage of one or more model requests, in the anthropic SDK's field names.

    Cache figures are None when no response reported them, so `cost_of` bills them only when known.
    `a + b` sums two usages.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            _add(self.cache_read_input_tokens, other.cache_read_input_tokens),
            _add(self.cache_creation_input_tokens, other.cache_creation_input_tokens),
        )

    @classmethod
    def of(cls, usage: Any) -> Usage:
        """Usage from an anthropic `Usage`, a mapping, or any object with the same field names."""
        if isinstance(usage, Usage):
            return usage

        def figure(name: str) -> int | None:
            value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
            if value is None:
                return None
            whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
            if isinstance(value, bool) or not whole:
                raise InvalidInput(f"usage figure {name} must be a whole number of tokens, got {shown(value)}")
            return int(value)

        return cls(
            figure("input_tokens") or 0,
            figure("output_tokens") or 0,
            figure("cache_read_input_tokens"),
            figure("cache_creation_input_tokens"),
        )

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens (what `max_tokens` stops on)."""
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True, slots=True)
class GenerateResult:
    """One model response: its text, the assistant message dict, usage and why it stopped."""

    text: str
    message: dict[str, Any]
    usage: Usage
    stop_reason: str | None

    @property
    def tool_uses(self) -> list[dict[str, Any]]:
        """The `tool_use` blocks of the message, in order."""
        content = self.message.get("content")
        if not isinstance(content, list):
            return []
        return [dict(b) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]


@runtime_checkable
class Model(Protocol):
    """What the agent loop and the summarizing strategies call to generate text."""

    name: str

    async def generate(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        signal: AbortSignal | None = None,
    ) -> GenerateResult:
        """Answer `messages`; a set `signal` aborts the call with `ModelError`."""
        ...

    async def count_tokens(
        self,
        messages: Sequence[Mapping[str, Any]],
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Input tokens the request would cost."""
        ...


def message_text(message: Mapping[str, Any]) -> str:
    """The text of a message: its string content, or its text blocks joined."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text"
    )


def _dump(value: Any) -> Any:
    # SDK objects (pydantic models) in a request become the plain data they stand for.
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_none=True)
    raise TypeError(f"{type(value).__name__} is not JSON data")


def plain_messages(items: Iterable[Mapping[str, Any]], what: str = "message") -> list[dict[str, Any]]:
    """Deep copies of request items (messages, tools) as plain JSON dicts; anything else is `InvalidInput`.

    SDK objects inside are dumped to plain data, so a request can carry what a model returned.
    """
    if isinstance(items, str | bytes | Mapping):
        raise InvalidInput(f"{what}s must be a list of {what} dicts, got {shown(items)}")
    try:
        listed = list(items)
    except TypeError:
        raise InvalidInput(f"{what}s must be a list of {what} dicts, got {shown(items)}") from None
    out: list[dict[str, Any]] = []
    for item in listed:
        if not isinstance(item, Mapping):
            raise InvalidInput(f"a {what} must be a dict in the Messages API shape, got {shown(item)}")
        try:
            out.append(json.loads(json.dumps(dict(item), ensure_ascii=False, default=_dump)))
        except (TypeError, ValueError, RecursionError) as err:
            raise InvalidInput(f"a {what} must hold JSON data only ({err}): {shown(item)}") from None
    return out
