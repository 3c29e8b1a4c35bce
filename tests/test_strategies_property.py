"""Property: whatever the conversation and settings, strategies keep tool pairs, originals and summaries."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore.agents.offline import OfflineModel
from ctxstore.agents.strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    selective_summary_history_strategy,
    summarizing_history_strategy,
)

WORDS = st.text(alphabet="abcdefgh ", min_size=1, max_size=60)


@st.composite
def turns(draw: st.DrawFn) -> list[list[dict[str, Any]]]:
    """Conversation turns: a user message, some tool exchanges, a final assistant message."""
    result = []
    counter = 0
    for _ in range(draw(st.integers(1, 7))):
        turn: list[dict[str, Any]] = [{"role": "user", "content": draw(WORDS)}]
        for _ in range(draw(st.integers(0, 3))):
            uses, results = [], []
            for _ in range(draw(st.integers(1, 2))):
                counter += 1
                use_id = f"toolu_{counter}"
                uses.append({"type": "tool_use", "id": use_id, "name": "t", "input": {"k": counter}})
                results.append({"type": "tool_result", "tool_use_id": f"toolu_{counter}",
                                "content": draw(WORDS)})
                if draw(st.booleans()):
                    results[-1]["is_error"] = True
            text = draw(st.one_of(st.none(), WORDS))
            turn.append({"role": "assistant",
                         "content": ([{"type": "text", "text": text}] if text else []) + uses})
            turn.append({"role": "user", "content": results})
        turn.append({"role": "assistant", "content": [{"type": "text", "text": draw(WORDS)}]})
        result.append(turn)
    return result


class Memory:
    def __init__(self) -> None:
        self.docs: list[dict[str, Any]] = []

    async def ingest(self, docs: list[dict[str, Any]]) -> None:
        self.docs.extend(docs)


def assert_tool_pairs_adjacent(messages: list[dict[str, Any]]) -> None:
    for i, message in enumerate(messages):
        content = message["content"]
        uses = [b["id"] for b in content if b.get("type") == "tool_use"] if isinstance(content, list) else []
        if uses:
            assert i + 1 < len(messages), "tool_use at the end of the view"
            following = messages[i + 1]["content"]
            assert isinstance(following, list)
            results = {b["tool_use_id"] for b in following if b.get("type") == "tool_result"}
            assert set(uses) <= results, f"tool_use {uses} not answered in the next message"


def assert_api_valid(messages: list[dict[str, Any]]) -> None:
    if not messages:
        return
    assert messages[0]["role"] == "user"
    for a, b in itertools.pairwise(messages):
        assert a["role"] != b["role"], "roles do not alternate"
    assert_tool_pairs_adjacent(messages)


def canonical(messages: list[dict[str, Any]]) -> list[str]:
    return sorted(repr(m) for m in messages)


async def drive(strategy: Any, conversation: list[list[dict[str, Any]]], reads: list[bool],
                memory: Memory, *, in_order: bool = True) -> None:
    """Append the conversation through the strategy, reading now and then, checking the invariants.

    `in_order=False`: a summary of a scattered selection stands at its first source, so `restore()`
    gives back every original message, but the scattered ones next to each other.
    """
    appended: list[dict[str, Any]] = []
    summaries: set[str] = set()
    ctx = HistoryReadContext(OfflineModel(), 100_000)
    for index, turn in enumerate(conversation):
        for step, message in enumerate(turn):
            append_ctx = HistoryAppendContext(OfflineModel(), 100_000, None, "run", step)
            await strategy.on_append(message, append_ctx)
            appended.append(message)
            # Read before every model request, as the agent does: after each user-role message.
            if message["role"] == "user" and reads[(index + step) % len(reads)]:
                result = await strategy.on_read(ctx)
                assert result.history is strategy.history
                assert_tool_pairs_adjacent(strategy.history.render())
                assert_api_valid(result.messages)
                restored = strategy.history.restore()
                assert restored == appended if in_order else canonical(restored) == canonical(appended)
                summaries |= {e.id for e in strategy.history.refs() if e.kind == "summary"}
                # Every summary reached the memory store exactly once.
                assert len(memory.docs) == len(summaries)
    restored = strategy.history.restore()
    assert restored == appended if in_order else canonical(restored) == canonical(appended)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=turns(), trigger=st.integers(0, 120), keep=st.integers(0, 6),
       reads=st.lists(st.booleans(), min_size=1, max_size=5))
def test_summarizing_keeps_pairs_originals_and_summaries(conversation: list[list[dict[str, Any]]],
                                                          trigger: int, keep: int, reads: list[bool]) -> None:
    memory = Memory()
    strategy = summarizing_history_strategy(model=OfflineModel(), trigger_tokens=trigger, keep_recent=keep,
                                            memory_store=memory)
    asyncio.run(drive(strategy, conversation, reads, memory))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversation=turns(), seed=st.integers(0, 2**32), share=st.floats(0, 1), contiguous=st.booleans(),
       reads=st.lists(st.booleans(), min_size=1, max_size=5))
def test_selective_keeps_pairs_originals_and_summaries(
    conversation: list[list[dict[str, Any]]], seed: int, share: float, contiguous: bool, reads: list[bool]
) -> None:
    memory = Memory()
    rng = random.Random(seed)

    def selector(history: Any, ctx: Any) -> list[str]:
        ids = [e.id for e in history.refs()]
        if contiguous:
            start = rng.randrange(len(ids) + 1)
            return ids[start : start + int(share * len(ids))]
        return [i for i in ids if rng.random() < share]

    strategy = selective_summary_history_strategy(model=OfflineModel(), selector=selector,
                                                  summary_prompt="Condense these.", memory_store=memory)
    asyncio.run(drive(strategy, conversation, reads, memory, in_order=contiguous))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, allow_infinity=False) | WORDS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "text", "id", "name", "input", "tool_use_id", "content", "is_error"]), inner,
        max_size=4),
    max_leaves=12,
)
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "image", 3])},
    optional={"text": JSON, "id": JSON, "name": JSON, "input": JSON, "tool_use_id": JSON, "content": JSON},
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"])},
    optional={"content": st.one_of(WORDS, st.lists(BLOCK, max_size=3), JSON)},
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=st.lists(MESSAGE, min_size=1, max_size=6), trigger=st.integers(0, 40),
       keep=st.integers(0, 3), selective=st.booleans())
def test_any_json_shaped_history_reads_or_fails_with_a_ctxstore_error(
    messages: list[dict[str, Any]], trigger: int, keep: int, selective: bool
) -> None:
    """Whatever JSON a stored conversation holds, a read and a model request succeed or raise CtxStoreError."""
    from ctxstore.agents.loop import Agent
    from ctxstore.errors import CtxStoreError
    from ctxstore.history.message_history import MessageHistory

    history = MessageHistory().extend(messages)
    model = OfflineModel()
    strategy: Any
    if selective:
        strategy = selective_summary_history_strategy(
            model=model, selector=lambda h: [e.id for e in h.refs()][:2], summary_prompt="Condense these.",
            history=history)
    else:
        strategy = summarizing_history_strategy(model=model, trigger_tokens=trigger, keep_recent=keep,
                                                history=history)
    with contextlib.suppress(CtxStoreError):
        asyncio.run(Agent(model, history=strategy, max_steps=2).generate("go on"))
    assert strategy.history.restore()[: len(messages)] == history.restore()
