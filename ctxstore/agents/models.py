"""Model adapters: the `Model` protocol the agent loop and strategies call, and the Anthropic adapter.

A model takes messages in the anthropic SDK's `MessageParam` shape (plain dicts) and answers with a
`GenerateResult` whose `message` is the assistant message as a plain dict, ready to append to a
`MessageHistory`. This module is the only one that imports `anthropic`, and only when
`anthropic_model` is called, so `import ctxstore` stays light. The deterministic offline model lives
in `ctxstore.agents.offline`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ..errors import InvalidInput, ModelError
from .signals import AbortSignal, abortable

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "AnthropicModel",
    "GenerateResult",
    "Model",
    "Usage",
    "anthropic_model",
    "message_text",
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
            return None if value is None else int(value)

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
        return [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"]


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


def _block_dict(block: Any) -> dict[str, Any]:
    """An SDK content block as a plain `MessageParam` block dict."""
    kind = getattr(block, "type", None)
    if kind == "text":
        return {"type": "text", "text": block.text}
    if kind == "tool_use":
        # Built by hand: a generic dump would drop None values inside the tool's input.
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if hasattr(block, "model_dump"):
        return dict(block.model_dump(mode="json", exclude_none=True))
    return dict(block)


class AnthropicModel:
    """A `Model` backed by the anthropic SDK's `AsyncAnthropic` client. Make one with `anthropic_model`."""

    def __init__(self, name: str, client: Any, max_tokens: int, sdk: Any) -> None:
        self.name = name
        self.max_tokens = max_tokens
        self._client = client
        self._sdk = sdk

    @property
    def client(self) -> Any:
        """The `AsyncAnthropic` client, created on first use (the SDK reads `ANTHROPIC_API_KEY`)."""
        if self._client is None:
            try:
                self._client = self._sdk.AsyncAnthropic()
            except self._sdk.AnthropicError as err:
                raise ModelError(
                    f"cannot create an Anthropic client for {self.name}: {err}; set ANTHROPIC_API_KEY "
                    "or pass client=anthropic.AsyncAnthropic(api_key=...)"
                ) from err
        return self._client

    def _request(self, messages: Sequence[Mapping[str, Any]], system: str | None,
                 tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
        request: dict[str, Any] = {"model": self.name, "messages": [dict(m) for m in messages]}
        if system is not None:
            request["system"] = system
        if tools:
            request["tools"] = [dict(t) for t in tools]
        return request

    def _failure(self, err: Exception, what: str) -> ModelError:
        status = getattr(err, "status_code", None)
        detail = f"HTTP {status}: {err}" if status is not None else str(err) or type(err).__name__
        return ModelError(
            f"Anthropic {what} for {self.name} failed ({detail}); check the API key, the request and "
            "the service status, then retry"
        )

    async def generate(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        signal: AbortSignal | None = None,
    ) -> GenerateResult:
        """Send one Messages API request; API failures raise `ModelError` with the SDK error as cause."""
        request = self._request(messages, system, tools)
        request["max_tokens"] = max_tokens or self.max_tokens
        client = self.client

        async def call() -> Any:
            try:
                return await client.messages.create(**request)
            except self._sdk.AnthropicError as err:
                raise self._failure(err, "request") from err

        response = await abortable(call(), signal, what=f"{self.name} request")
        blocks = [_block_dict(block) for block in response.content]
        message = {"role": "assistant", "content": blocks}
        return GenerateResult(
            text=message_text(message),
            message=message,
            usage=Usage.of(response.usage),
            stop_reason=response.stop_reason,
        )

    async def count_tokens(
        self,
        messages: Sequence[Mapping[str, Any]],
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Input tokens of a request, counted by the API."""
        try:
            counted = await self.client.messages.count_tokens(**self._request(messages, system, tools))
        except self._sdk.AnthropicError as err:
            raise self._failure(err, "token count") from err
        return int(counted.input_tokens)

    def __repr__(self) -> str:
        return f"anthropic_model({self.name!r})"


def anthropic_model(
    model: str = "claude-sonnet-4-6", client: Any = None, max_tokens: int = DEFAULT_MAX_TOKENS
) -> AnthropicModel:
    """A `Model` for an Anthropic model id, over `client` (an `anthropic.AsyncAnthropic`) or a default one.

    No request is made and no client is created until the first call, so this works without an API
    key until the model is actually used.
    """
    import anthropic  # imported here so that `import ctxstore` does not pay for the SDK

    if max_tokens < 1:
        raise InvalidInput(f"max_tokens must be at least 1, got {max_tokens}")
    return AnthropicModel(model, client, max_tokens, anthropic)
