"""The agent loop: ask a model, run the tools it calls, record every message through a history strategy.

`Agent(model, history=..., tools=[...])` and `await agent.generate(prompt)`. Each step reads the
history through the strategy (`on_read`, which may compact it), sends the messages to the model,
records the answer (`on_append`), runs any tools it called and records their results. The run stops
when the model ends its turn, or when a `stop_when` predicate says so after a step.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

from ..errors import InvalidInput, ModelError, shown
from ..history.budget import PRICING, Pricing, cost_of
from .models import GenerateResult, Model, Usage
from .signals import AbortSignal
from .strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    HistoryStrategy,
    api_messages,
    append_only_history_strategy,
)

__all__ = ["DEFAULT_BUDGET_TOKENS", "Agent", "RunResult", "RunState", "Step", "Tool", "agent", "tool"]

DEFAULT_BUDGET_TOKENS = 200_000
"""The token budget strategies are told about unless the agent is given another."""

_JSON_TYPES: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean",
                               dict: "object", list: "array", tuple: "array", type(None): "null"}


def _schema_of(annotation: Any) -> dict[str, Any]:
    """A JSON schema for a type hint (str, int, float, bool, list[X], dict, Literal, X | None)."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = get_origin(annotation)
    if origin is Literal:
        return {"enum": list(get_args(annotation))}
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        return _schema_of(options[0]) if len(options) == 1 else {"anyOf": [_schema_of(a) for a in options]}
    if origin in (list, tuple, set, frozenset, Sequence, Iterable):
        args = get_args(annotation)
        schema: dict[str, Any] = {"type": "array"}
        if args and args[0] is not Ellipsis:
            schema["items"] = _schema_of(args[0])
        return schema
    if origin in (dict, Mapping):
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    return {}


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, description, JSON input schema and the function."""

    name: str
    description: str
    input_schema: dict[str, Any]
    function: Callable[..., Any]

    def definition(self) -> dict[str, Any]:
        """The tool as the Messages API takes it."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    async def __call__(self, arguments: Mapping[str, Any]) -> Any:
        """Run the function (awaiting it if it is async) with the model's arguments."""
        value = self.function(**arguments)
        if inspect.isawaitable(value):
            value = await value
        return value


def tool(function: Callable[..., Any] | None = None, *, name: str | None = None,
         description: str | None = None, input_schema: Mapping[str, Any] | None = None) -> Any:
    """Make a `Tool` from a sync or async function; usable as `tool(f)`, `@tool` or `@tool(name=...)`.

    Unless given, the schema comes from the signature's type hints (parameters without a default are
    required) and the description from the docstring's first line.
    """

    def make(fn: Callable[..., Any]) -> Tool:
        if isinstance(fn, Tool):
            return fn
        if not callable(fn):
            raise InvalidInput(f"a tool must be a function, got {shown(fn)}")
        tool_name = name or getattr(fn, "__name__", None)
        if not tool_name or tool_name == "<lambda>":
            raise InvalidInput("a tool made from a lambda needs a name: tool(fn, name='...')")
        if not isinstance(tool_name, str):
            raise InvalidInput(f"a tool name is a str, got {shown(tool_name)}")
        if description is not None and not isinstance(description, str):
            raise InvalidInput(f"a tool description is a str, got {shown(description)}")
        if input_schema is not None and not isinstance(input_schema, Mapping):
            raise InvalidInput(f"input_schema must be a JSON schema dict, got {shown(input_schema)}")
        doc = inspect.getdoc(fn) or ""
        text = description or (doc.strip().splitlines()[0] if doc.strip() else f"Call {tool_name}.")
        schema = dict(input_schema) if input_schema is not None else _derive_schema(fn, tool_name)
        return Tool(tool_name, text, schema, fn)

    return make if function is None else make(function)


def _derive_schema(fn: Callable[..., Any], name: str) -> dict[str, Any]:
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: fall back to untyped parameters
        hints = {}
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        raise InvalidInput(f"cannot read the parameters of tool {shown(name)}; give its schema with "
                           "tool(fn, input_schema={...})") from None
    properties: dict[str, Any] = {}
    required: list[str] = []
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        properties[parameter.name] = _schema_of(hints.get(parameter.name, parameter.annotation))
        if parameter.default is inspect.Parameter.empty:
            required.append(parameter.name)
    return {"type": "object", "properties": properties, "required": required}


@dataclass(frozen=True)
class Step:
    """One model request of a run: the answer, its usage and cost, and the tool results it led to."""

    index: int
    result: GenerateResult
    usage: Usage
    cost: float
    tool_results: list[dict[str, Any]]

    @property
    def stop_reason(self) -> str | None:
        """Why the model stopped (`end_turn`, `tool_use`, `max_tokens`, ...)."""
        return self.result.stop_reason


@dataclass
class RunState:
    """What stop predicates see: accumulated `usage` and `cost`, the steps so far, the run id."""

    run_id: str
    usage: Usage = field(default_factory=Usage)
    cost: float = 0.0
    steps: list[Step] = field(default_factory=list)


@dataclass(frozen=True)
class RunResult:
    """The outcome of `Agent.generate`: final text, the messages this run recorded, usage, cost, steps."""

    text: str
    messages: list[dict[str, Any]]
    usage: Usage
    cost: float
    steps: list[Step]
    run_id: str = ""


StopWhen = Callable[[RunState, Step], bool]


def _first_message(prompt: object) -> dict[str, Any]:
    """The user message a run starts with: `prompt` as text, content blocks, or a whole message."""
    if isinstance(prompt, Mapping):
        return dict(prompt)
    if isinstance(prompt, str):
        return {"role": "user", "content": prompt}
    if isinstance(prompt, list | tuple) and all(isinstance(block, Mapping) for block in prompt):
        return {"role": "user", "content": [dict(block) for block in prompt]}
    raise InvalidInput(f"a prompt is text, a list of content block dicts or a user message dict, got {shown(prompt)}")


def _result_content(value: Any) -> Any:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(b, Mapping) and "type" in b for b in value):
        return [dict(b) for b in value]  # already content blocks
    return json.dumps(value, ensure_ascii=False, default=str)


def _strategy(history: HistoryStrategy | Callable[[], HistoryStrategy] | None) -> HistoryStrategy:
    """The agent's strategy: the one given, one made by a factory (or a strategy class), or append-only."""
    made: object = history
    if history is None:
        made = append_only_history_strategy()
    elif isinstance(history, type) or (callable(history) and not hasattr(history, "on_read")):
        try:
            made = history()  # a factory (or a strategy class): one strategy per agent
        except TypeError as err:
            raise InvalidInput(f"the history factory {shown(history)} cannot be called without arguments: {err}; "
                               "pass a strategy, or a function that makes one") from err
    if not isinstance(made, HistoryStrategy):
        raise InvalidInput(
            f"history must be a strategy (history, on_append, on_read) or a factory of one, got {shown(made)}"
        )
    return made


def _listed(items: Any, what: str) -> list[Any]:
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise InvalidInput(f"{what} must be a list, got {shown(items)}")
    return list(items)


def _check_count(value: object, what: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidInput(f"{what} must be an int of at least {least}, got {shown(value)}")


class Agent:
    """An agent: a model, a history strategy, tools and stop conditions. Run it with `generate`."""

    def __init__(
        self,
        model: Model,
        history: HistoryStrategy | Callable[[], HistoryStrategy] | None = None,
        system: str | None = None,
        tools: Iterable[Callable[..., Any] | Tool] = (),
        stop_when: StopWhen | Iterable[StopWhen] = (),
        budget_tokens: int = DEFAULT_BUDGET_TOKENS,
        *,
        max_steps: int = 50,
        max_tokens: int | None = None,
        pricing: Mapping[str, Pricing] | None = None,
    ) -> None:
        if not isinstance(model, Model):
            raise InvalidInput(f"model must be a Model (generate, count_tokens, name), got {shown(model)}")
        self.model = model
        self.strategy: HistoryStrategy = _strategy(history)
        if system is not None and not isinstance(system, str):
            raise InvalidInput(f"system must be a str, got {shown(system)}")
        self.system = system
        self.tools: dict[str, Tool] = {}
        for item in _listed(tools, "tools"):
            made = tool(item)
            if made.name in self.tools:
                raise InvalidInput(
                    f"two tools are named {shown(made.name)}; give one another name with tool(fn, name=...)"
                )
            self.tools[made.name] = made
        self.stop_when: list[StopWhen] = (
            [stop_when] if callable(stop_when) else _listed(stop_when, "stop_when")
        )
        for predicate in self.stop_when:
            if not callable(predicate):
                raise InvalidInput(f"stop_when takes functions of (state, step), got {shown(predicate)}")
        _check_count(max_steps, "max_steps", 1)
        _check_count(budget_tokens, "budget_tokens", 0)
        if max_tokens is not None:
            _check_count(max_tokens, "max_tokens", 1)
        if pricing is not None and not isinstance(pricing, Mapping):
            raise InvalidInput(f"pricing must map model ids to Pricing, got {shown(pricing)}")
        self.budget_tokens = budget_tokens
        self.max_steps = max_steps
        self.max_tokens = max_tokens
        self.pricing = PRICING if pricing is None else pricing

    @property
    def history(self) -> Any:
        """The strategy's current `MessageHistory`."""
        return self.strategy.history

    async def _record(self, message: dict[str, Any], state: RunState, step: int,
                      signal: AbortSignal | None) -> None:
        ctx = HistoryAppendContext(self.model, self.budget_tokens, signal, state.run_id, step)
        await self.strategy.on_append(message, ctx)

    async def _run_tools(self, uses: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        results = []
        for use in uses:
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": use.get("id")}
            found = self.tools.get(str(use.get("name")))
            arguments = use.get("input") or {}
            try:
                if found is None:
                    raise LookupError(f"no tool named {shown(use.get('name'))}; available: {sorted(self.tools)}")
                if not isinstance(arguments, Mapping):
                    raise TypeError(f"tool input must be an object, got {shown(arguments)}")
                inspect.signature(found.function).bind(**arguments)  # wrong arguments: a clear error
                block["content"] = _result_content(await found(arguments))
            except Exception as err:  # the model sees the failure and can correct itself
                block["content"] = f"{type(err).__name__}: {err}"
                block["is_error"] = True
            results.append(block)
        return results

    async def generate(self, prompt: str | Mapping[str, Any] | list[dict[str, Any]], *,
                       signal: AbortSignal | None = None) -> RunResult:
        """Run the agent on `prompt` (text, content blocks, or a user message) until it is done."""
        first = _first_message(prompt)
        state = RunState(run_id=f"run-{uuid.uuid4().hex[:12]}")
        recorded = [first]
        await self._record(first, state, 0, signal)
        text = ""
        tools = [t.definition() for t in self.tools.values()] or None
        for index in range(self.max_steps):
            read = await self.strategy.on_read(HistoryReadContext(self.model, self.budget_tokens, signal))
            messages = getattr(read, "messages", None)
            if not isinstance(messages, list):
                raise InvalidInput(f"strategy {shown(self.strategy)} read {shown(read)}; on_read must return a "
                                   "ReadResult(history, messages)")
            result = await self.model.generate(
                messages=api_messages(messages), system=self.system, tools=tools,
                max_tokens=self.max_tokens, signal=signal,
            )
            if not isinstance(result, GenerateResult):
                raise ModelError(f"model {shown(self.model.name)} answered {shown(result)}; a Model's generate must "
                                 "return a GenerateResult")
            usage = Usage.of(result.usage)
            cost = cost_of(usage, self.model.name, self.pricing)
            state.usage += usage
            state.cost += cost
            recorded.append(result.message)
            await self._record(result.message, state, index, signal)
            text = result.text
            uses = result.tool_uses
            results: list[dict[str, Any]] = []
            if uses:
                # Answer every tool_use, even when stopping now, so the history stays valid to resume.
                results = await self._run_tools(uses)
                tool_message = {"role": "user", "content": results}
                recorded.append(tool_message)
                await self._record(tool_message, state, index, signal)
            step = Step(index, result, usage, cost, results)
            state.steps.append(step)
            if not uses or result.stop_reason != "tool_use":
                break
            if any(predicate(state, step) for predicate in self.stop_when):
                break
        return RunResult(text, recorded, state.usage, state.cost, list(state.steps), state.run_id)

    def __repr__(self) -> str:
        return f"Agent({self.model!r}, tools={sorted(self.tools)})"


def agent(model: Model, **options: Any) -> Agent:
    """An `Agent` (the seed's `agent({...})` spelling)."""
    return Agent(model, **options)

