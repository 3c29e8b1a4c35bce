"""History strategies and signals: the seed's examples, and the tool-pairing and abort guarantees."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from conftest import assistant_blocks as assistant
from conftest import user

from ctxstore.agents.anthropic import anthropic_model
from ctxstore.agents.loop import Agent
from ctxstore.agents.offline import OfflineModel
from ctxstore.agents.signals import Signal, abortable, signal_history_strategy
from ctxstore.agents.strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    HistoryStrategy,
    ReadResult,
    api_messages,
    append_only_history_strategy,
    selective_summary_history_strategy,
    summarizing_history_strategy,
)
from ctxstore.errors import InvalidInput, ModelError
from ctxstore.history.message_history import MessageHistory


def run(coro: Any) -> Any:
    return asyncio.run(coro)


class Memory:
    """A memory store that keeps what it was given."""

    def __init__(self) -> None:
        self.docs: list[dict[str, Any]] = []

    async def ingest(self, docs: list[dict[str, Any]]) -> None:
        self.docs.extend(docs)


def tool_exchange(n: int) -> list[dict[str, Any]]:
    use = {"type": "tool_use", "id": f"toolu_{n}", "name": "look", "input": {"n": n}}
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": f"result {n}"}
    return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


def history_of(*messages: dict[str, Any]) -> MessageHistory:
    return MessageHistory().extend(list(messages))


READ = HistoryReadContext(OfflineModel(), 100_000)


# Seed examples ------------------------------------------------------------------------------------


def test_seed_read_context_append_only_on_read() -> None:
    """Seed HistoryReadContext: appendOnlyHistoryStrategy().onRead({model, budgetTokens: 100000})."""
    model = anthropic_model("claude-sonnet-4-6")
    strategy = append_only_history_strategy()
    result = run(strategy.on_read(HistoryReadContext(model=model, budget_tokens=100_000)))
    assert isinstance(result, ReadResult)
    assert result.messages == [] and result.history is strategy.history


def test_seed_append_context_on_append_with_run_metadata() -> None:
    """Seed HistoryAppendContext: onAppend(hello, {model, budgetTokens, runId: 'run-42', stepIndex: 0})."""
    strategy = append_only_history_strategy()
    ctx = HistoryAppendContext(anthropic_model("claude-sonnet-4-6"), 100_000, run_id="run-42", step_index=0)
    before = strategy.history
    run(strategy.on_append({"role": "user", "content": "hello"}, ctx))
    assert strategy.history.render() == [{"role": "user", "content": "hello"}]
    assert before.size == 0  # the old history is untouched; the strategy reassigned its attribute
    assert (ctx.run_id, ctx.step_index, ctx.signal) == ("run-42", 0, None)


class LastTen:
    """Seed HistoryStrategy example: a hand-written strategy that reads the last ten entries."""

    def __init__(self) -> None:
        self.history = MessageHistory()

    async def on_append(self, message: dict[str, Any], ctx: HistoryAppendContext) -> None:
        self.history = self.history.append(message)

    async def on_read(self, ctx: HistoryReadContext) -> ReadResult:
        recent = [entry.id for entry in self.history.refs()[-10:]]
        return ReadResult(self.history, self.history.render(recent))


def test_seed_custom_strategy_last_ten_drives_an_agent() -> None:
    strategy = LastTen()
    assert isinstance(strategy, HistoryStrategy)
    model = OfflineModel()
    bot = Agent(model, history=strategy)
    for i in range(8):
        run(bot.generate(f"message {i}"))
    assert strategy.history.size == 16
    sent = model.requests[-1].messages
    assert len(sent) == 10 and sent[-1] == {"role": "user", "content": "message 7"}


def test_seed_summarizing_options() -> None:
    """Seed SummarizingHistoryStrategyOptions: haiku, triggerTokens 50000, keepRecent 20."""
    strategy = summarizing_history_strategy(model=anthropic_model("claude-haiku-4-5"), trigger_tokens=50_000,
                                            keep_recent=20)
    settings = (strategy.trigger_tokens, strategy.keep_recent, strategy.model.name)
    assert settings == (50_000, 20, "claude-haiku-4-5")
    assert strategy.history.size == 0
    with pytest.raises(InvalidInput):
        summarizing_history_strategy(model=OfflineModel(), trigger_tokens=-1, keep_recent=0)


def test_seed_selective_options_fold_entries_labelled_tool_noise() -> None:
    """Seed SelectiveSummaryHistoryStrategyOptions: a selector over meta.labels 'tool-noise'."""
    noisy = {"message": user("raw log lines ..."), "meta": {"labels": ["tool-noise"]}}
    history = history_of(user("deploy friday?"), assistant("ok"), noisy, assistant("seen"), user("thanks"))
    memory = Memory()
    strategy = selective_summary_history_strategy(
        model=OfflineModel(),
        summary_prompt="Condense these tool results into key facts.",
        selector=lambda history: [
            e.id for e in history.refs() if "tool-noise" in ((e.meta or {}).get("labels") or [])
        ],
        memory_store=memory,
        history=history,
    )
    result = run(strategy.on_read(READ))
    refs = strategy.history.refs()
    assert [e.kind for e in refs] == ["turn", "turn", "summary", "turn", "turn"]
    assert refs[2].message["role"] == "user"
    assert refs[2].message["content"].startswith("[Selected history summary]")
    assert refs[2].sources == [history.refs()[2].id]
    assert memory.docs[0]["metadata"]["kind"] == "selected_history_summary"
    assert memory.docs[0]["text"] in refs[2].message["content"]
    assert strategy.history.restore() == history.render()
    assert result.history is strategy.history
    # Nothing is labelled any more: a second read changes nothing.
    before = strategy.history
    run(strategy.on_read(READ))
    assert strategy.history is before and len(memory.docs) == 1


def test_seed_signal_history_strategy_publishes_as_the_agent_runs() -> None:
    """Seed signalHistoryStrategy: subscribe and log h.size while bot.generate('hello') runs."""
    strategy, history = signal_history_strategy(append_only_history_strategy())
    sizes: list[int] = []
    history.subscribe(lambda h: sizes.append(h.size))
    bot = Agent(OfflineModel(), history=strategy)
    run(bot.generate("hello"))
    assert sizes == [1, 2]  # after the user message, after the answer (not at once; reads change nothing)
    assert history.value is strategy.history


def test_seed_append_only_agent_keeps_the_full_transcript() -> None:
    """Seed appendOnlyHistoryStrategy: after bot.generate('hello') the history renders everything."""
    strategy = append_only_history_strategy()
    run(Agent(OfflineModel(), history=strategy).generate("hello"))
    assert strategy.history.render() == [user("hello"), assistant("Offline answer to: hello")]


def test_seed_summarizing_strategy_in_an_agent_compacts_and_restores() -> None:
    """Seed summarizingHistoryStrategy with an agent (small trigger so that it fires)."""
    model = OfflineModel()
    memory = Memory()
    strategy = summarizing_history_strategy(model=model, trigger_tokens=30, keep_recent=2,
                                            memory_store=memory)
    bot = Agent(model, history=strategy)
    prompts = [f"question number {i} about the deploy window" for i in range(5)]
    for prompt in prompts:
        run(bot.generate(prompt))
    refs = strategy.history.refs()
    assert refs[0].kind == "summary"
    assert refs[0].message["content"].startswith("[Conversation summary]")
    assert [m["content"] for m in strategy.history.restore() if m["role"] == "user"] == prompts
    assert len(memory.docs) >= 1
    assert all(d["metadata"]["kind"] == "conversation_summary" for d in memory.docs)


def test_seed_selective_strategy_in_an_agent_keeps_the_last_five() -> None:
    """Seed selectiveSummaryHistoryStrategy: selector = refs()[:-5]."""
    model = OfflineModel()
    strategy = selective_summary_history_strategy(
        model=model, summary_prompt="Condense the older conversation into key facts and decisions.",
        selector=lambda history: [e.id for e in history.refs()[:-5]],
    )
    bot = Agent(model, history=strategy)
    for i in range(5):
        run(bot.generate(f"turn {i}"))
    refs = strategy.history.refs()
    assert refs[0].kind == "summary" and all(e.kind == "turn" for e in refs[1:])
    assert len(strategy.history.restore()) == 10


# Behaviour ----------------------------------------------------------------------------------------


def test_summarizing_below_trigger_changes_nothing_and_calls_no_model() -> None:
    model = OfflineModel()
    history = history_of(user("a"), assistant("b"))
    strategy = summarizing_history_strategy(model=model, trigger_tokens=10_000, keep_recent=0,
                                            history=history)
    result = run(strategy.on_read(READ))
    assert strategy.history is history and result.messages == history.render() and model.requests == []


def test_summarizing_without_a_safe_cut_changes_nothing() -> None:
    """Only tool-calling assistant messages in the span: no safe boundary, no summary."""
    history = history_of(user("go " * 50), *tool_exchange(1), user("more"))
    model = OfflineModel()
    strategy = summarizing_history_strategy(model=model, trigger_tokens=1, keep_recent=1, history=history)
    run(strategy.on_read(READ))
    assert strategy.history is history and model.requests == []


def test_summarizing_cuts_after_the_last_plain_assistant_message_and_keeps_recent() -> None:
    messages = [user("q1 " * 20), assistant("a1"), *tool_exchange(1), assistant("a2"), *tool_exchange(2),
                user("q3"), assistant("a3")]
    history = history_of(*messages)
    ids = [e.id for e in history.refs()]
    strategy = summarizing_history_strategy(model=OfflineModel(), trigger_tokens=1, keep_recent=4,
                                            history=history)
    result = run(strategy.on_read(READ))
    refs = strategy.history.refs()
    # older = first 5 entries; the last plain assistant among them is a2 (index 4).
    assert refs[0].sources == ids[:5]
    assert [e.id for e in refs[1:]] == ids[5:]
    assert result.messages[0]["role"] == "user"
    assert strategy.history.restore() == messages


def test_summary_next_to_a_user_turn_is_merged_for_the_api_but_kept_apart_in_history() -> None:
    history = history_of(user("q1 " * 20), assistant("a1"), user("q2"), assistant("a2"))
    strategy = summarizing_history_strategy(model=OfflineModel(), trigger_tokens=1, keep_recent=2,
                                            history=history)
    result = run(strategy.on_read(READ))
    assert strategy.history.size == 3
    assert [m["role"] for m in result.messages] == ["user", "assistant"]
    texts = [b["text"] for b in result.messages[0]["content"]]
    assert texts[0].startswith("[Conversation summary]") and texts[1] == "q2"


def test_selective_widens_a_selection_to_whole_tool_exchanges() -> None:
    messages = [user("start"), *tool_exchange(1), assistant("done"), user("next")]
    history = history_of(*messages)
    ids = [e.id for e in history.refs()]
    for chosen in ([ids[1]], [ids[2]]):  # either half of the exchange selects both
        strategy = selective_summary_history_strategy(
            model=OfflineModel(), summary_prompt="Condense.", selector=lambda h, ctx, c=chosen: c,
            history=history)
        run(strategy.on_read(READ))
        refs = strategy.history.refs()
        assert refs[1].kind == "summary" and refs[1].sources == ids[1:3]
        assert [e.id for e in refs] == [ids[0], refs[1].id, ids[3], ids[4]]


def test_selective_ignores_unknown_ids_and_a_lone_summary() -> None:
    model = OfflineModel()
    history = history_of(user("a"), assistant("b"))
    strategy = selective_summary_history_strategy(model=model, summary_prompt="p",
                                                  selector=lambda h: ["nope"], history=history)
    run(strategy.on_read(READ))
    assert strategy.history is history and model.requests == []
    summarized = history.edit({"op": "summary", "sourceIds": [e.id for e in history.refs()],
                               "entry": user("[Selected history summary]\nx"), "replace": True})
    strategy = selective_summary_history_strategy(
        model=model, summary_prompt="p", selector=lambda h: [e.id for e in h.refs()], history=summarized)
    run(strategy.on_read(READ))
    assert strategy.history is summarized and model.requests == []


def test_async_selector_is_awaited() -> None:
    history = history_of(user("a"), assistant("b"), user("c"))

    async def selector(h: MessageHistory, ctx: HistoryReadContext) -> list[str]:
        return [h.refs()[0].id]

    strategy = selective_summary_history_strategy(model=OfflineModel(), summary_prompt="p", selector=selector,
                                                  history=history)
    run(strategy.on_read(READ))
    assert strategy.history.refs()[0].kind == "summary"


def test_signal_aborts_a_summarization_in_flight_and_leaves_history_unchanged() -> None:
    async def scenario() -> None:
        history = history_of(user("q " * 40), assistant("a"), user("q2"))
        memory = Memory()
        strategy = summarizing_history_strategy(model=OfflineModel(latency=30), trigger_tokens=1,
                                                keep_recent=1,
                                                memory_store=memory, history=history)
        signal = asyncio.Event()
        task = asyncio.create_task(strategy.on_read(HistoryReadContext(OfflineModel(), 1000, signal)))
        await asyncio.sleep(0.01)
        signal.set()
        with pytest.raises(ModelError, match="abort"):
            await task
        assert strategy.history is history and memory.docs == []

    run(scenario())


def test_cancelling_a_read_leaves_history_unchanged() -> None:
    async def scenario() -> None:
        history = history_of(user("q " * 40), assistant("a"), user("q2"))
        strategy = summarizing_history_strategy(model=OfflineModel(latency=30), trigger_tokens=1,
                                                keep_recent=1,
                                                history=history)
        task = asyncio.create_task(strategy.on_read(READ))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert strategy.history is history

    run(scenario())


def test_appends_during_a_summarization_are_kept() -> None:
    async def scenario() -> None:
        history = history_of(user("q " * 40), assistant("a"), user("q2"))
        strategy = summarizing_history_strategy(model=OfflineModel(latency=0.05), trigger_tokens=1,
                                                keep_recent=1, history=history)
        task = asyncio.create_task(strategy.on_read(READ))
        await asyncio.sleep(0)
        await strategy.on_append(assistant("late"), HistoryAppendContext(OfflineModel(), 1000))
        await task
        refs = strategy.history.refs()
        assert refs[0].kind == "summary"
        assert [e.message for e in refs[1:]] == [user("q2"), assistant("late")]

    run(scenario())


def test_abortable_polls_duck_typed_signals() -> None:
    async def scenario() -> None:
        signal = threading.Event()
        task = asyncio.create_task(abortable(asyncio.sleep(30), signal))
        await asyncio.sleep(0.01)
        signal.set()
        with pytest.raises(ModelError):
            await task
        assert await abortable(asyncio.sleep(0, result=7), threading.Event()) == 7

    run(scenario())


def test_signal_subscribe_unsubscribe_and_assignment_publishes() -> None:
    strategy, history = signal_history_strategy(append_only_history_strategy())
    seen: list[MessageHistory] = []
    unsubscribe = history.subscribe(seen.append)
    replacement = MessageHistory().append(user("x"))
    strategy.history = replacement
    assert seen[-1] is replacement and history.value is replacement and strategy.inner.history is replacement
    unsubscribe()
    strategy.history = MessageHistory()
    assert len(seen) == 1
    counter = Signal(1)
    counter.value = 1  # same object: no notification
    calls: list[int] = []
    counter.subscribe(calls.append)
    counter.value = 2
    assert calls == [2]


def test_signal_publishes_after_a_compacting_read() -> None:
    history = history_of(user("q " * 40), assistant("a"), user("q2"))
    inner = summarizing_history_strategy(model=OfflineModel(), trigger_tokens=1, keep_recent=1,
                                         history=history)
    strategy, signal = signal_history_strategy(inner)
    seen: list[MessageHistory] = []
    signal.subscribe(seen.append)
    run(strategy.on_read(READ))
    assert len(seen) == 1 and seen[-1] is inner.history and seen[-1].refs()[0].kind == "summary"


def test_api_messages_merges_same_role_neighbours_with_tool_results_first() -> None:
    result = {"type": "tool_result", "tool_use_id": "t", "content": "r"}
    merged = api_messages([user("a"), {"role": "user", "content": [result]}, assistant("b")])
    assert merged == [{"role": "user", "content": [result, {"type": "text", "text": "a"}]}, assistant("b")]
    assert api_messages([user("a"), assistant("b")]) == [user("a"), assistant("b")]


# Bad input -----------------------------------------------------------------------------------------


def test_strategies_refuse_bad_models_memory_stores_histories_and_prompts() -> None:
    model = OfflineModel()
    with pytest.raises(InvalidInput):
        summarizing_history_strategy(model=object(), trigger_tokens=0, keep_recent=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        summarizing_history_strategy(model=model, trigger_tokens=True, keep_recent=0)
    with pytest.raises(InvalidInput):
        summarizing_history_strategy(model=model, trigger_tokens=0, keep_recent=0,
                                     memory_store=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        append_only_history_strategy([user("a")])  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        selective_summary_history_strategy(model=model, selector=lambda h: [], summary_prompt="")
    with pytest.raises(InvalidInput):
        selective_summary_history_strategy(model=model, selector=lambda h: [],
                                           summary_prompt=3)  # type: ignore[arg-type]


def test_a_selector_that_returns_no_entry_ids_is_bad_input() -> None:
    history = history_of(user("a"), assistant("b"))
    first = history.refs()[0].id
    for chosen in (first, 42, [1, 2], {"id": first}):
        strategy = selective_summary_history_strategy(model=OfflineModel(), selector=lambda h, c=chosen: c,
                                                      summary_prompt="Summarize:", history=history)
        with pytest.raises(InvalidInput, match="selector"):
            run(strategy.on_read(READ))
        assert strategy.history is history


def test_summarizing_json_content_that_is_not_api_content_is_bad_input() -> None:
    """A stored message whose content is JSON but not text or blocks: InvalidInput, and no model call."""
    model = OfflineModel()
    odd = history_of(user("a"), {"role": "assistant", "content": ["loose", "strings"]}, assistant("b"), user("c"))
    strategy = summarizing_history_strategy(model=model, trigger_tokens=0, keep_recent=1, history=odd)
    with pytest.raises(InvalidInput):
        run(strategy.on_read(READ))
    assert model.requests == [] and strategy.history is odd


def test_summarizing_tool_results_with_any_json_content() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "count", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": 7}
    history = history_of(user("go"), {"role": "assistant", "content": [use]}, {"role": "user", "content": [result]},
                         assistant("seven"), user("next"))
    model = OfflineModel()
    strategy = summarizing_history_strategy(model=model, trigger_tokens=0, keep_recent=1, history=history)
    run(strategy.on_read(READ))
    assert "[tool result: 7]" in model.requests[0].messages[0]["content"]
    assert strategy.history.refs()[0].kind == "summary"


def test_api_messages_refuses_what_is_not_a_message_list() -> None:
    for messages in ([42], [{"role": "user", "content": 5}], [{"role": "user", "content": ["x"]}],
                     [{"role": "user", "content": object()}], "user: hi"):
        with pytest.raises(InvalidInput):
            api_messages(messages)  # type: ignore[arg-type]


def test_signal_history_strategy_refuses_what_is_not_a_strategy() -> None:
    with pytest.raises(InvalidInput):
        signal_history_strategy(object())


def test_signal_subscribe_does_not_call_back_at_once() -> None:
    """As in the reference: a subscriber hears of changes only, not of the value it subscribed to."""
    signal = Signal("a")
    calls: list[str] = []
    signal.subscribe(calls.append)
    assert calls == []
    signal.value = "b"
    assert calls == ["b"]


def test_signal_subscriber_may_take_the_previous_value() -> None:
    """A two-argument subscriber is called with (value, previous); a one-argument one with value."""
    signal = Signal(1)
    pairs: list[tuple[int, int]] = []
    singles: list[int] = []
    signal.subscribe(lambda value, previous: pairs.append((value, previous)))
    signal.subscribe(lambda value: singles.append(value))
    signal.value = 2
    signal.value = 3
    assert pairs == [(2, 1), (3, 2)] and singles == [2, 3]


def test_summarizing_with_keep_recent_larger_than_the_view_summarizes_nothing() -> None:
    """keep_recent above the view's length keeps everything (the kept part is max(0, len - keep) on)."""
    history = history_of(user("q " * 40), assistant("a"), user("q2"), assistant("a2"))
    strategy = summarizing_history_strategy(model=OfflineModel(), trigger_tokens=1, keep_recent=5,
                                            history=history)
    result = run(strategy.on_read(READ))
    assert strategy.history is history and result.messages == history.render()
    assert [e.kind for e in strategy.history.refs()] == ["turn"] * 4
