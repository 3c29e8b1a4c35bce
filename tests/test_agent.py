"""The agent loop: tools, history callbacks, usage and cost, stop conditions (seed examples included)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import httpx2
import pytest
from conftest import run

from ctxstore.agents.anthropic import anthropic_model
from ctxstore.agents.loop import Agent, RunResult, Tool, agent, tool
from ctxstore.agents.models import Usage
from ctxstore.agents.offline import OfflineModel, tool_call
from ctxstore.agents.strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    ReadResult,
    append_only_history_strategy,
)
from ctxstore.errors import InvalidInput
from ctxstore.history.budget import cost_of, max_cost, max_tokens


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    More text that is not part of the description.
    """
    return a * b


async def lookup(key: str, default: str | None = None) -> str:
    """Look a key up."""
    await asyncio.sleep(0)
    return {"x": "ex"}.get(key, default or "?")


class Recording:
    """An append-only strategy that logs every callback it receives."""

    def __init__(self) -> None:
        self.inner = append_only_history_strategy()
        self.calls: list[tuple[str, Any]] = []

    @property
    def history(self) -> Any:
        return self.inner.history

    @history.setter
    def history(self, value: Any) -> None:
        self.inner.history = value

    async def on_append(self, message: dict[str, Any], ctx: HistoryAppendContext) -> None:
        self.calls.append(("append", (message["role"], ctx.run_id, ctx.step_index)))
        await self.inner.on_append(message, ctx)

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        self.calls.append(("read", self.inner.history.size))
        return await self.inner.on_read(ctx)


def test_schema_is_derived_from_type_hints_and_docstring() -> None:
    made = tool(multiply)
    assert made.definition() == {
        "name": "multiply", "description": "Multiply two integers.",
        "input_schema": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                         "required": ["a", "b"]},
    }

    def pick(mode: Literal["fast", "slow"], tags: list[str], limit: float = 1.0, flag: bool = False,
             extra: dict[str, int] | None = None) -> None:
        pass

    schema = tool(pick).input_schema
    assert schema["properties"] == {"mode": {"enum": ["fast", "slow"]}, "tags": {"type": "array",
                                    "items": {"type": "string"}}, "limit": {"type": "number"},
                                    "flag": {"type": "boolean"}, "extra": {"type": "object"}}
    assert schema["required"] == ["mode", "tags"]
    assert tool(pick).description == "Call pick."


def test_explicit_schema_name_and_description_win() -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}

    @tool(name="search", description="Search things.", input_schema=schema)
    def anything(**kwargs: Any) -> str:
        return "found"

    assert isinstance(anything, Tool)
    expected = {"name": "search", "description": "Search things.", "input_schema": schema}
    assert anything.definition() == expected
    with pytest.raises(InvalidInput):
        tool(lambda: 1)


def test_a_tool_call_runs_the_function_and_records_its_result() -> None:
    model = OfflineModel([tool_call("multiply", {"a": 6, "b": 7}), "It is 42."])
    strategy = append_only_history_strategy()
    result = run(Agent(model, history=strategy, tools=[multiply]).generate("6 times 7?"))
    assert result.text == "It is 42." and len(result.steps) == 2
    messages = strategy.history.render()
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    use = messages[1]["content"][0]
    assert messages[2]["content"] == [{"type": "tool_result", "tool_use_id": use["id"], "content": "42"}]
    assert result.messages == messages
    assert model.requests[0].tools == [tool(multiply).definition()]


def test_async_tools_and_structured_results_are_supported() -> None:
    def listing() -> dict[str, Any]:
        """A dict result."""
        return {"n": 1}

    model = OfflineModel([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "a", "name": "lookup", "input": {"key": "x"}},
        {"type": "tool_use", "id": "b", "name": "listing", "input": {}}]}, "done"])
    strategy = append_only_history_strategy()
    run(Agent(model, history=strategy, tools=[lookup, listing]).generate("go"))
    results = strategy.history.render()[2]["content"]
    assert [(r["tool_use_id"], r["content"]) for r in results] == [("a", "ex"), ("b", json.dumps({"n": 1}))]


def test_tool_exceptions_unknown_tools_and_bad_arguments_become_error_results() -> None:
    def broken(x: int) -> int:
        """Always fails."""
        raise RuntimeError("disk on fire")

    model = OfflineModel([{"role": "assistant", "content": [
        {"type": "tool_use", "id": "1", "name": "broken", "input": {"x": 1}},
        {"type": "tool_use", "id": "2", "name": "missing", "input": {}},
        {"type": "tool_use", "id": "3", "name": "broken", "input": {"y": 1}}]}, "sorry"])
    strategy = append_only_history_strategy()
    result = run(Agent(model, history=strategy, tools=[broken]).generate("go"))
    results = strategy.history.render()[2]["content"]
    assert all(r["is_error"] for r in results)
    assert "disk on fire" in results[0]["content"] and "missing" in results[1]["content"]
    assert "TypeError" in results[2]["content"]
    assert result.text == "sorry"


def test_history_callbacks_carry_run_id_and_step_index_and_reads_precede_requests() -> None:
    strategy = Recording()
    model = OfflineModel([tool_call("multiply", {"a": 2, "b": 3}), "six"])
    result = run(Agent(model, history=strategy, tools=[multiply]).generate("2*3"))
    rid = result.run_id
    assert strategy.calls == [
        ("append", ("user", rid, 0)), ("read", 1), ("append", ("assistant", rid, 0)),
        ("append", ("user", rid, 0)), ("read", 3), ("append", ("assistant", rid, 1)),
    ]
    second = run(Agent(model, history=strategy).generate("again"))
    assert second.run_id != rid


def test_usage_and_cost_accumulate_over_steps() -> None:
    model = OfflineModel([tool_call("multiply", {"a": 2, "b": 3}), "six"], name="claude-sonnet-4-6")
    result = run(Agent(model, tools=[multiply]).generate("2*3"))
    expected = result.steps[0].usage + result.steps[1].usage
    assert result.usage == expected and expected.input_tokens > 0
    assert result.cost == pytest.approx(cost_of(expected, "claude-sonnet-4-6")) and result.cost > 0
    assert run(Agent(OfflineModel()).generate("x")).cost == 0  # an unpriced model costs nothing


def endless_tool_model(name: str = "claude-sonnet-4-6") -> OfflineModel:
    return OfflineModel([tool_call("multiply", {"a": i, "b": 2}) for i in range(100)], name=name)


def test_seed_max_tokens_stops_the_loop() -> None:
    """Seed: agent({model, stopWhen: maxTokens(50000)}) — here with a small budget that trips."""
    result = run(agent(endless_tool_model(), tools=[multiply], stop_when=max_tokens(300)).generate("go"))
    assert result.usage.total_tokens >= 300
    before_last = result.usage.total_tokens - result.steps[-1].usage.total_tokens
    assert before_last < 300 and len(result.steps) < 100


def test_seed_max_cost_stops_the_loop() -> None:
    """Seed: agent({model, stopWhen: maxCost(2.50)}) — here with a budget a few steps exceed."""
    result = run(Agent(endless_tool_model(), tools=[multiply], stop_when=[max_cost(0.002)]).generate("go"))
    assert result.cost >= 0.002 and result.cost - result.steps[-1].cost < 0.002


def test_custom_stop_predicate_sees_state_and_step() -> None:
    seen: list[tuple[int, int]] = []

    def three_steps(state: Any, info: Any) -> bool:
        seen.append((len(state.steps), info.index))
        assert isinstance(state.usage, Usage) and isinstance(state.cost, float)
        return len(state.steps) >= 3

    strategy = append_only_history_strategy()
    result = run(Agent(endless_tool_model(), history=strategy, tools=[multiply],
                       stop_when=three_steps).generate("go"))
    assert len(result.steps) == 3 and seen == [(1, 0), (2, 1), (3, 2)]
    # Stopping mid-exchange still answered every tool_use: the history can be resumed.
    assert strategy.history.render()[-1]["content"][0]["type"] == "tool_result"


def test_max_steps_bounds_a_run_and_a_factory_makes_the_strategy() -> None:
    made: list[Any] = []

    def factory() -> Any:
        made.append(append_only_history_strategy())
        return made[-1]

    bot = Agent(endless_tool_model(), history=factory, tools=[multiply], max_steps=4)
    assert bot.strategy is made[0]
    assert len(run(bot.generate("go")).steps) == 4
    assert isinstance(Agent(OfflineModel(), history=Recording).strategy, Recording)
    with pytest.raises(InvalidInput):
        Agent(OfflineModel(), tools=[multiply, multiply])
    with pytest.raises(InvalidInput):
        Agent(OfflineModel(), history=42)  # type: ignore[arg-type]


def test_a_resumed_history_continues_the_conversation() -> None:
    first = append_only_history_strategy()
    run(Agent(OfflineModel(), history=first).generate("remember: blue"))
    model = OfflineModel()
    second = append_only_history_strategy(first.history)
    run(Agent(model, history=second).generate("what colour?"))
    assert model.requests[0].messages[0] == {"role": "user", "content": "remember: blue"}
    assert second.history.size == 4


def test_agent_over_the_anthropic_adapter_with_a_mock_transport() -> None:
    """The whole loop through the real SDK: tool_use, tool_result, final answer, usage and cost."""
    import anthropic

    bodies: list[dict[str, Any]] = []
    replies = [
        [{"type": "tool_use", "id": "toolu_1", "name": "multiply", "input": {"a": 3, "b": 4}}],
        [{"type": "text", "text": "12"}],
    ]

    def handler(request: httpx2.Request) -> httpx2.Response:
        bodies.append(json.loads(request.content))
        content = replies[len(bodies) - 1]
        return httpx2.Response(200, json={
            "id": f"msg_{len(bodies)}", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": content, "stop_reason": "tool_use" if len(bodies) == 1 else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1000, "output_tokens": 100}})

    client = anthropic.AsyncAnthropic(api_key="test", max_retries=0,
                                      http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(handler)))
    bot = Agent(anthropic_model("claude-haiku-4-5", client=client), system="terse", tools=[multiply])
    result: RunResult = run(bot.generate("3*4?"))
    assert result.text == "12"
    assert bodies[1]["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12"}]}
    assert bodies[0]["system"] == "terse" and bodies[0]["tools"][0]["name"] == "multiply"
    assert result.usage == Usage(2000, 200)
    assert result.cost == pytest.approx((2000 * 1 + 200 * 5) / 1_000_000)


# Bad input: refused with InvalidInput (a CtxStoreError), a misbehaving model with ModelError ---------


def test_agent_refuses_bad_settings_when_made() -> None:
    model = OfflineModel()
    bad: list[dict[str, Any]] = [
        {"history": object()}, {"history": 42}, {"tools": "multiply"}, {"tools": 3}, {"tools": [42]},
        {"stop_when": [42]}, {"stop_when": 3}, {"max_steps": 0}, {"max_steps": "3"}, {"max_steps": True},
        {"budget_tokens": -1}, {"budget_tokens": 1.5}, {"max_tokens": 0}, {"system": ["s"]},
        {"pricing": [("offline", 1)]},
    ]
    for options in bad:
        with pytest.raises(InvalidInput):
            Agent(model, **options)
    with pytest.raises(InvalidInput):
        Agent(object())  # type: ignore[arg-type]


def test_a_history_factory_that_needs_arguments_is_bad_input() -> None:
    from ctxstore.agents.strategies import SummarizingHistoryStrategy

    with pytest.raises(InvalidInput, match="without arguments"):
        Agent(OfflineModel(), history=SummarizingHistoryStrategy)  # type: ignore[arg-type]


def test_tool_refuses_bad_names_descriptions_schemas_and_unreadable_signatures() -> None:
    with pytest.raises(InvalidInput):
        tool(multiply, name=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        tool(multiply, description=["x"])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        tool(multiply, input_schema="object")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="input_schema"):
        tool(type)  # a builtin without a readable signature
    assert tool(type, input_schema={"type": "object"}).name == "type"


def test_generate_refuses_a_prompt_that_is_not_text_blocks_or_a_message() -> None:
    for prompt in (42, None, ["text"], b"bytes"):
        strategy = append_only_history_strategy()
        with pytest.raises(InvalidInput):
            run(Agent(OfflineModel(), history=strategy).generate(prompt))  # type: ignore[arg-type]
        assert strategy.history.size == 0


def test_generate_refuses_messages_the_model_could_not_be_sent() -> None:
    """JSON content that is no Messages API content fails the read with InvalidInput, not a crash."""
    for content in (["a", "b"], 5, {"text": "x"}):
        with pytest.raises(InvalidInput):
            run(Agent(OfflineModel()).generate({"role": "user", "content": content}))


def test_a_strategy_whose_read_is_not_a_read_result_is_bad_input() -> None:
    class Broken(Recording):
        async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
            return "everything"  # type: ignore[return-value]

    with pytest.raises(InvalidInput, match="ReadResult"):
        run(Agent(OfflineModel(), history=Broken()).generate("hi"))


def test_a_model_that_answers_without_a_generate_result_is_a_model_error() -> None:
    from ctxstore.errors import ModelError

    class Sloppy(OfflineModel):
        async def generate(self, **request: Any) -> Any:
            return {"text": "hi"}

    with pytest.raises(ModelError, match="GenerateResult"):
        run(Agent(Sloppy()).generate("hi"))
