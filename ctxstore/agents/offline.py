"""A deterministic offline model for the tour, the docs and tests: no network, same input, same output.

`OfflineModel` plays a script of replies first (text, assistant messages, tool calls or functions of
the request) and then falls back to a default behaviour that is enough to drive an agent:

- asked to summarise (the system prompt or the last user text mentions summarising or condensing),
  it answers with a short digest of the text it was given;
- given tools and a user prompt that names one of them, it calls that tool, filling numeric
  arguments with the numbers in the prompt and string arguments with the first quoted string;
- after tool results, it reports them and ends its turn;
- otherwise it answers "Offline answer to: <prompt>".

Usage figures are computed with `estimate_tokens`, so runs and their costs are reproducible.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput, shown
from ..history.budget import estimate_tokens
from .models import GenerateResult, Usage, message_text, plain_messages
from .signals import AbortSignal, abortable

__all__ = ["OfflineModel", "OfflineRequest", "offline_model", "tool_call"]

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_QUOTED = re.compile(r"\"([^\"]*)\"|'([^']*)'")
_SUMMARY_WORDS = ("summar", "condense")
_DIGEST_CHARS = 600


@dataclass(frozen=True)
class OfflineRequest:
    """One request the offline model received (kept in `OfflineModel.requests` for inspection)."""

    messages: list[dict[str, Any]]
    system: str | None
    tools: list[dict[str, Any]] | None
    max_tokens: int | None


Reply = str | Mapping[str, Any] | Callable[[OfflineRequest], "str | Mapping[str, Any]"]


def tool_call(name: str, input: Mapping[str, Any] | None = None, *, text: str | None = None,
              id: str | None = None) -> dict[str, Any]:
    """An assistant message that calls tool `name` with `input` (a script item for `OfflineModel`)."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"a tool name is a non-empty str, got {shown(name)}")
    if input is not None and not isinstance(input, Mapping):
        raise InvalidInput(f"tool input is a dict of arguments, got {shown(input)}")
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": dict(input or {})}
    if id is not None:
        block["id"] = id
    content.append(block)
    return {"role": "assistant", "content": content}


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class OfflineModel:
    """A deterministic `Model`: scripted replies first, then the default behaviour (see the module)."""

    script: Sequence[Reply] = ()
    name: str = "offline"
    latency: float = 0.0
    """Seconds each request takes (asyncio sleep), to exercise cancellation and abort signals."""
    requests: list[OfflineRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.script, str | bytes | Mapping) or not isinstance(self.script, Iterable):
            raise InvalidInput(f"an offline script is a list of replies, got {shown(self.script)}")
        self._script = list(self.script)
        for item in self._script:
            if not (isinstance(item, str | Mapping) or callable(item)):
                raise InvalidInput(
                    f"offline script item {shown(item)} is not a str, an assistant message dict or a function "
                    "returning one; use tool_call(name, input) for tool calls"
                )
        if not isinstance(self.name, str) or not self.name:
            raise InvalidInput(f"a model name is a non-empty str, got {shown(self.name)}")
        if isinstance(self.latency, bool) or not isinstance(self.latency, int | float) or not (
            0 <= self.latency < math.inf
        ):
            raise InvalidInput(f"latency is a number of seconds, at least 0, got {shown(self.latency)}")
        self._next = 0

    async def generate(
        self,
        *,
        messages: Sequence[Mapping[str, Any]],
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_tokens: int | None = None,
        signal: AbortSignal | None = None,
    ) -> GenerateResult:
        """Answer deterministically; a set `signal` aborts with `ModelError`."""
        if system is not None and not isinstance(system, str):
            raise InvalidInput(f"system must be a str, got {shown(system)}")
        request = OfflineRequest(
            messages=plain_messages(messages),
            system=system,
            tools=None if tools is None else plain_messages(tools, "tool"),
            max_tokens=max_tokens,
        )
        return await abortable(self._answer(request), signal, what=f"{self.name} request")

    async def _answer(self, request: OfflineRequest) -> GenerateResult:
        if self.latency > 0:
            await asyncio.sleep(self.latency)
        self.requests.append(request)
        if self._next < len(self._script):
            reply = self._script[self._next]
            self._next += 1
            if callable(reply):
                reply = reply(request)
            message = self._as_message(reply, request)
        else:
            message = self._default(request)
        uses = [b for b in message["content"] if b.get("type") == "tool_use"]
        usage = Usage(
            input_tokens=await self.count_tokens(request.messages, request.system, request.tools),
            output_tokens=estimate_tokens([message]),
        )
        return GenerateResult(message_text(message), message, usage, "tool_use" if uses else "end_turn")

    async def count_tokens(
        self,
        messages: Sequence[Mapping[str, Any]],
        system: str | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> int:
        """Estimated input tokens: `estimate_tokens` of the messages plus system and tools text."""
        listed = plain_messages(messages)
        tool_text = json.dumps(plain_messages(tools, "tool"), separators=(",", ":")) if tools else ""
        extra = len(system if isinstance(system, str) else "") + len(tool_text)
        return estimate_tokens(listed) + math.ceil(extra / 4)

    def _as_message(self, reply: Any, request: OfflineRequest) -> dict[str, Any]:
        if isinstance(reply, str):
            return {"role": "assistant", "content": [{"type": "text", "text": reply}]}
        if not isinstance(reply, Mapping) or "content" not in reply:
            raise InvalidInput(
                f"offline script item {shown(reply)} is not a str, an assistant message dict or a function "
                "returning one; use tool_call(name, input) for tool calls"
            )
        content = reply["content"]
        if isinstance(content, str):
            blocks = [{"type": "text", "text": content}]
        elif isinstance(content, list | tuple) and all(isinstance(b, Mapping) for b in content):
            blocks = [dict(b) for b in content]
        else:
            raise InvalidInput(
                f"offline script item {shown(reply)} has content that is neither a str nor a list of blocks"
            )
        for index, block in enumerate(blocks):
            if block.get("type") == "tool_use" and "id" not in block:
                block["id"] = self._tool_use_id(request, index)
        return {"role": "assistant", "content": blocks}

    @staticmethod
    def _tool_use_id(request: OfflineRequest, index: int) -> str:
        # Derived from the request so that reruns give the same ids and distinct requests do not collide.
        return f"toolu_{_digest([request.messages, index])[:24]}"

    def _default(self, request: OfflineRequest) -> dict[str, Any]:
        last = request.messages[-1] if request.messages else {"role": "user", "content": ""}
        text = message_text(last)
        results = _tool_results(last)
        if results:
            return self._report(request, results)
        if request.tools and last.get("role") == "user":
            tool = _named_tool(request.tools, text)
            if tool is not None:
                return self._as_message(tool_call(tool["name"], _arguments(tool, text)), request)
        asked = f"{request.system or ''}\n{text}".lower()
        if any(word in asked for word in _SUMMARY_WORDS):
            return self._as_message(_summary(text), request)
        answer = text.strip() or "(nothing)"
        return self._as_message(f"Offline answer to: {answer}", request)

    def _report(self, request: OfflineRequest, results: list[Mapping[str, Any]]) -> dict[str, Any]:
        names = {}
        for message in request.messages:
            content = message.get("content")
            if message.get("role") == "assistant" and isinstance(content, list):
                names.update({b["id"]: b.get("name") for b in content
                              if isinstance(b, Mapping) and b.get("type") == "tool_use"
                              and isinstance(b.get("id"), str)})
        parts = []
        for result in results:
            use_id = result.get("tool_use_id")
            name = names.get(use_id, "tool") if isinstance(use_id, str) else "tool"
            content = result.get("content", "")
            if not isinstance(content, str):
                content = message_text({"content": content})
            verdict = "failed" if result.get("is_error") else "returned"
            parts.append(f"{name} {verdict} {content}")
        return self._as_message("; ".join(parts) + ".", request)


def _tool_results(message: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"]


def _named_tool(tools: Iterable[Mapping[str, Any]], text: str) -> Mapping[str, Any] | None:
    words = set(re.findall(r"[\w-]+", text.lower()))
    for tool in tools:
        if str(tool.get("name", "")).lower() in words:
            return tool
    return None


def _arguments(tool: Mapping[str, Any], text: str) -> dict[str, Any]:
    # A schema the offline model cannot read is taken as "no arguments" rather than refused: the
    # model stands in for one that would answer the tool's definition as best it could.
    schema = _mapping(tool.get("input_schema"))
    properties = _mapping(schema.get("properties"))
    required = schema.get("required")
    names = [str(n) for n in required] if isinstance(required, list) else [str(n) for n in properties]
    numbers = [float(n) for n in _NUMBER.findall(text)]
    quoted = [a or b for a, b in _QUOTED.findall(text)]
    arguments: dict[str, Any] = {}
    for name in names:
        kind = _mapping(properties.get(name)).get("type", "string")
        if kind in ("integer", "number"):
            value = numbers.pop(0) if numbers else 0.0
            arguments[name] = int(value) if kind == "integer" or value.is_integer() else value
        elif kind == "boolean":
            arguments[name] = True
        elif kind == "array":
            arguments[name] = []
        elif kind == "object":
            arguments[name] = {}
        else:
            arguments[name] = quoted.pop(0) if quoted else text.strip()
    return arguments


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _summary(text: str) -> str:
    """A short digest: the opening words of each non-empty line of what was to be summarised."""
    body = text.split("\n\n", 1)[1] if "\n\n" in text else text
    lines = [" ".join(line.split()[:10]) for line in body.splitlines() if line.strip()]
    digest = " / ".join(lines)
    if len(digest) > _DIGEST_CHARS:
        digest = digest[: _DIGEST_CHARS - 3] + "..."
    return digest or "(nothing to summarize)"


def offline_model(
    script: Sequence[Reply] = (), *, name: str = "offline", latency: float = 0.0
) -> OfflineModel:
    """A deterministic offline `Model` (see `OfflineModel`)."""
    return OfflineModel(script=script, name=name, latency=latency)
