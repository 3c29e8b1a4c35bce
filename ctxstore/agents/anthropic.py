"""The Anthropic adapter: a `Model` over the anthropic SDK's `AsyncAnthropic` client.

This is the only module that imports `anthropic`, and only when `anthropic_model` is called, so
`import ctxstore` does not pay for the SDK. Every failure of the API or the SDK reaches the caller as
`ModelError`, with the SDK's error attached as its cause.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InvalidInput, ModelError, shown
from .models import DEFAULT_MAX_TOKENS, GenerateResult, Usage, message_text, plain_messages
from .signals import AbortSignal, abortable

__all__ = ["DEFAULT_MODEL", "AnthropicModel", "anthropic_model"]

DEFAULT_MODEL = "claude-sonnet-4-6"
"""The Anthropic model id `anthropic_model` uses unless given another."""


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
        request: dict[str, Any] = {"model": self.name, "messages": plain_messages(messages, "message")}
        if system is not None:
            if not isinstance(system, str):
                raise InvalidInput(f"system must be a str, got {shown(system)}")
            request["system"] = system
        if tools:
            request["tools"] = plain_messages(tools, "tool")
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
        if max_tokens is not None:
            _check_max_tokens(max_tokens)
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
    model: str = DEFAULT_MODEL, client: Any = None, max_tokens: int = DEFAULT_MAX_TOKENS
) -> AnthropicModel:
    """A `Model` for an Anthropic model id, over `client` (an `anthropic.AsyncAnthropic`) or a default one.

    No request is made and no client is created until the first call, so this works without an API
    key until the model is actually used.
    """
    import anthropic  # imported here so that `import ctxstore` does not pay for the SDK

    if not isinstance(model, str) or not model:
        raise InvalidInput(f"model must be an Anthropic model id such as {DEFAULT_MODEL!r}, got {shown(model)}")
    _check_max_tokens(max_tokens)
    return AnthropicModel(model, client, max_tokens, anthropic)


def _check_max_tokens(max_tokens: object) -> None:
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidInput(f"max_tokens must be an int of at least 1, got {shown(max_tokens)}")

