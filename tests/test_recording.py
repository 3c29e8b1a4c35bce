"""Recording an agent's conversation into a repository ref: commits, resume, compaction, races."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import assistant_blocks as assistant
from conftest import run, texts, user
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxstore.repo.commit as commit_module
from ctxstore import Repository
from ctxstore.agents.loop import Agent
from ctxstore.agents.offline import OfflineModel, tool_call
from ctxstore.agents.recording import RepositoryHistoryStrategy, repository_history_strategy
from ctxstore.agents.strategies import (
    HistoryAppendContext,
    HistoryReadContext,
    append_only_history_strategy,
    summarizing_history_strategy,
)
from ctxstore.errors import CtxStoreError, InvalidInput, ModelError, NonFastForward, RefMoved, StoreError
from ctxstore.history.message_history import MessageHistory

MODEL = OfflineModel()
APPEND = HistoryAppendContext(MODEL, 10_000)
READ = HistoryReadContext(MODEL, 10_000)


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@pytest.fixture
def repo(tmp_path: Path) -> Any:
    with Repository.init(tmp_path / "repo", durable=False) as r:
        yield r


def test_every_append_of_an_agent_run_is_a_revision_on_the_ref(repo: Repository) -> None:
    strategy = repository_history_strategy(repo, "support")
    model = OfflineModel([tool_call("weather", {"city": "Oslo"}), "Sunny in Oslo."])
    result = run(Agent(model, history=strategy, tools=[weather]).generate("Weather in Oslo?"))
    assert result.text == "Sunny in Oslo."
    assert repo.head("support") == strategy.head == strategy.history.revision_id
    stored = repo.history("support").render()
    assert stored == strategy.history.render()
    assert [m["role"] for m in stored] == ["user", "assistant", "user", "assistant"]
    assert stored[2]["content"][0]["content"] == "sunny in Oslo"
    revisions = list(repo.iter_revisions("support"))
    assert [rev.operation["type"] for rev in revisions[:-1]] == ["append"] * 4
    assert revisions[-1].operation is None  # the root
    messages = [e.message for e in reversed(repo.reflog("support"))]
    assert messages[0].startswith(f"append ({result.run_id} step 0)")
    assert len(messages) == 4


def test_a_new_strategy_on_an_existing_ref_resumes_the_conversation(repo: Repository) -> None:
    first = repository_history_strategy(repo, "main")
    run(Agent(OfflineModel(), history=first).generate("remember 42"))
    model = OfflineModel()
    second = repository_history_strategy(repo, "main")
    assert second.history.render() == first.history.render()
    run(Agent(model, history=second).generate("what did I say?"))
    seen = texts(model.requests[0].messages)
    assert seen == ["remember 42", "Offline answer to: remember 42", "what did I say?"]
    assert repo.history("main").size == 4


def test_a_fresh_inner_strategy_starts_from_the_ref(repo: Repository) -> None:
    repo.append("main", [user("hi"), assistant("hello")])
    inner = summarizing_history_strategy(model=MODEL, trigger_tokens=10_000, keep_recent=2)
    strategy = repository_history_strategy(repo, "main", inner)
    assert inner.history.revision_id == repo.head("main")
    assert strategy.history is inner.history


def test_an_inner_history_that_continues_the_ref_is_kept(repo: Repository) -> None:
    repo.append("main", [user("hi")])
    held = repo.history("main").append(assistant("hello"))
    strategy = repository_history_strategy(repo, "main", append_only_history_strategy(held))
    assert strategy.history is held
    run(strategy.on_append(user("more"), APPEND))
    assert texts(repo.history("main").render()) == ["hi", "hello", "more"]


def test_an_inner_history_unrelated_to_the_ref_is_refused(repo: Repository) -> None:
    repo.append("main", [user("hi")])
    before = repo.head("main")
    other = MessageHistory().append(user("elsewhere"))
    with pytest.raises(InvalidInput, match="does not continue ref refs/heads/main"):
        repository_history_strategy(repo, "main", append_only_history_strategy(other))
    assert repo.head("main") == before


def test_an_inner_history_seeds_a_new_ref_at_the_first_commit(repo: Repository) -> None:
    held = MessageHistory().append(user("seed"))
    strategy = repository_history_strategy(repo, "fresh", append_only_history_strategy(held))
    assert repo.head("fresh") is None
    run(strategy.on_append(assistant("grown"), APPEND))
    assert texts(repo.history("fresh").render()) == ["seed", "grown"]


def test_a_read_that_changes_nothing_commits_nothing(repo: Repository) -> None:
    repo.append("main", [user("hi")])
    head = repo.head("main")
    strategy = repository_history_strategy(repo, "main")
    read = run(strategy.on_read(READ))
    assert texts(read.messages) == ["hi"]
    assert repo.head("main") == head
    assert len(repo.reflog("main")) == 1


def test_a_read_on_a_new_ref_does_not_create_it(repo: Repository) -> None:
    strategy = repository_history_strategy(repo, "unborn")
    assert run(strategy.on_read(READ)).messages == []
    assert repo.head("unborn") is None and strategy.head is None


def test_compaction_commits_a_summary_revision_and_restore_gives_every_original(repo: Repository) -> None:
    model = OfflineModel(name="offline")
    inner = summarizing_history_strategy(model=model, trigger_tokens=30, keep_recent=2)
    strategy = repository_history_strategy(repo, "main", inner)
    bot = Agent(model, history=strategy, tools=[weather])
    prompts = ["the deploy window is Friday", "Use weather for 'Bergen'", "who approves rollbacks?"]
    originals: list[dict[str, Any]] = []
    for prompt in prompts:
        originals.extend(run(bot.generate(prompt)).messages)
    stored = repo.history("main")
    kinds = [e.kind for e in stored.refs()]
    assert "summary" in kinds
    summary_revisions = [rev for rev in repo.iter_revisions("main")
                         if rev.operation and rev.operation["type"] == "edit"]
    assert summary_revisions
    assert stored.size < len(originals)
    assert stored.restore() == originals
    assert strategy.restore() == originals
    # The view the model gets is the compacted one.
    assert texts(stored.render())[0].startswith("[Conversation summary]")


def test_a_compaction_in_one_strategy_is_seen_by_another_at_its_next_read(repo: Repository) -> None:
    repo.append("main", [user("a" * 80), assistant("b" * 80), user("c"), assistant("d")])
    watcher = repository_history_strategy(repo, "main")
    compactor = repository_history_strategy(
        repo, "main", summarizing_history_strategy(model=MODEL, trigger_tokens=0, keep_recent=2))
    run(compactor.on_read(READ))
    read = run(watcher.on_read(READ))
    assert texts(read.messages)[0].startswith("[Conversation summary]")
    assert watcher.history.revision_id == repo.head("main")


def test_a_commit_that_lost_the_race_rebases_and_keeps_both_writers(repo: Repository) -> None:
    a = repository_history_strategy(repo, "main")
    b = repository_history_strategy(repo, "main")
    run(a.on_append(user("from a"), APPEND))
    run(b.on_append(user("from b"), APPEND))  # b's base is stale: NonFastForward, rebase, commit
    run(a.on_append(user("a again"), APPEND))
    assert texts(repo.history("main").render()) == ["from a", "from b", "a again"]
    assert b.history.revision_id != a.history.revision_id
    assert repo.head("main") == a.head
    assert any("(rebased)" in e.message for e in repo.reflog("main"))


def test_reads_take_in_what_another_writer_committed(repo: Repository) -> None:
    a = repository_history_strategy(repo, "main")
    b = repository_history_strategy(repo, "main")
    run(a.on_append(user("from a"), APPEND))
    assert texts(run(b.on_read(READ)).messages) == ["from a"]


def test_a_summary_whose_sources_another_writer_summarized_is_dropped_on_rebase(repo: Repository) -> None:
    repo.append("main", [user("a" * 80), assistant("b" * 80), user("c"), assistant("d")])
    one = repository_history_strategy(
        repo, "main", summarizing_history_strategy(model=MODEL, trigger_tokens=0, keep_recent=2))
    two = repository_history_strategy(
        repo, "main", summarizing_history_strategy(model=MODEL, trigger_tokens=0, keep_recent=2))
    run(one.on_read(READ))
    # two summarised the same span from the old head; its commit must rebase onto one's summary.
    two.inner.history = run(_summarised(two))
    two.commit()
    stored = repo.history("main")
    assert [e.kind for e in stored.refs()].count("summary") == 1
    assert stored.refs()[0].kind == "summary"
    assert texts(stored.restore()) == ["a" * 80, "b" * 80, "c", "d"]


async def _summarised(strategy: RepositoryHistoryStrategy) -> MessageHistory:
    """What the inner strategy's read makes of its history, without the wrapper's commit."""
    return (await strategy.inner.on_read(READ)).history


def test_a_failing_summarization_leaves_the_ref_unchanged(repo: Repository) -> None:
    repo.append("main", [user("a" * 80), assistant("b" * 80), user("c"), assistant("d")])
    head = repo.head("main")
    silent = OfflineModel([{"role": "assistant", "content": []}])
    strategy = repository_history_strategy(
        repo, "main", summarizing_history_strategy(model=silent, trigger_tokens=0, keep_recent=2))
    with pytest.raises(ModelError):
        run(strategy.on_read(HistoryReadContext(silent, 10_000)))
    assert repo.head("main") == head


def test_a_ref_that_keeps_moving_gives_up_after_the_retries_with_nothing_lost(
        repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    strategy = repository_history_strategy(repo, "main", retries=2)
    original = commit_module.commit_many

    def racing_commit_many(store: Any, lineage: Any, updates: Any, **kwargs: Any) -> Any:
        # Another writer wins every race: it commits just before each of the recorder's tries.
        original(store, lineage, {"main": repo.history("main").append(user("someone else"))})
        return original(store, lineage, updates, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(commit_module, "commit_many", racing_commit_many)
        with pytest.raises(RefMoved, match="kept moving") as caught:
            run(strategy.on_append(user("mine"), APPEND))
    assert isinstance(caught.value, CtxStoreError)
    assert isinstance(caught.value, NonFastForward)  # what rebasing handlers already catch
    assert not isinstance(caught.value, StoreError)  # a lost race, not a storage failure
    assert caught.value.ref == strategy.ref and caught.value.current == repo.head("main")
    assert "mine" in texts(strategy.history.render())
    assert strategy.commit() == repo.head("main") == strategy.head  # the new head, in hex
    assert "mine" in texts(repo.history("main").render())


def test_bad_arguments_are_refused(repo: Repository) -> None:
    with pytest.raises(InvalidInput):
        repository_history_strategy(repo, "main", retries=0)
    with pytest.raises(InvalidInput):
        repository_history_strategy(repo, "main", object())  # type: ignore[arg-type]
    with pytest.raises(CtxStoreError):
        repository_history_strategy(repo, "bad..name")
    with pytest.raises(InvalidInput):
        repository_history_strategy(repo, "main", retries=True)
    with pytest.raises(InvalidInput):
        repository_history_strategy(object(), "main")  # type: ignore[arg-type]
    with pytest.raises(CtxStoreError):
        repository_history_strategy(repo, 42)  # type: ignore[arg-type]
    loose = append_only_history_strategy()
    loose.history = [user("a")]  # type: ignore[assignment]
    with pytest.raises(InvalidInput, match="MessageHistory"):
        repository_history_strategy(repo, "main", loose)
    assert repo.refs() == {}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.booleans()), min_size=1, max_size=24))
def test_interleaved_writers_lose_nothing_and_keep_their_order(schedule: list[tuple[int, bool]]) -> None:
    """Any interleaving of appends and reads by three recorders on one ref keeps every message once."""
    repo = Repository.memory()
    writers = [repository_history_strategy(repo, "main") for _ in range(3)]
    sent: list[list[str]] = [[], [], []]
    for n, (who, is_read) in enumerate(schedule):
        if is_read:
            run(writers[who].on_read(READ))
        else:
            text = f"w{who}-{n}"
            run(writers[who].on_append(user(text), APPEND))
            sent[who].append(text)
    final = texts(repo.history("main").render())
    assert sorted(final) == sorted(t for texts_ in sent for t in texts_)
    for mine in sent:
        assert [t for t in final if t in mine] == mine


def test_the_recorder_is_a_strategy_that_signal_strategies_can_wrap(repo: Repository) -> None:
    from ctxstore.agents.signals import signal_history_strategy
    from ctxstore.agents.strategies import HistoryStrategy

    recorder = repository_history_strategy(repo, "main")
    assert isinstance(recorder, HistoryStrategy)
    wrapped, history = signal_history_strategy(recorder)
    sizes: list[int] = []
    history.subscribe(lambda h: sizes.append(h.size))
    run(wrapped.on_append(user("x"), APPEND))
    assert sizes == [1]
    assert repo.history("main").size == 1


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.sampled_from(["user", "assistant", "read"])),
                min_size=1, max_size=24))
def test_interleaved_summarizers_and_writers_keep_every_original(schedule: list[tuple[int, str]]) -> None:
    """Two summarizing recorders racing a plain one: restore() gives every message once, in order."""
    repo = Repository.memory()
    writers = [
        repository_history_strategy(
            repo, "main", summarizing_history_strategy(model=MODEL, trigger_tokens=0, keep_recent=1)),
        repository_history_strategy(
            repo, "main", summarizing_history_strategy(model=MODEL, trigger_tokens=0, keep_recent=2)),
        repository_history_strategy(repo, "main"),
    ]
    sent: list[list[str]] = [[], [], []]
    for n, (who, action) in enumerate(schedule):
        if action == "read":
            run(writers[who].on_read(READ))
            continue
        text = f"w{who}-{n}"
        message = user(text) if action == "user" else assistant(text)
        run(writers[who].on_append(message, APPEND))
        sent[who].append(text)
    stored = repo.history("main")
    restored = texts(stored.restore())
    assert sorted(restored) == sorted(t for mine in sent for t in mine)
    for mine in sent:
        assert [t for t in restored if t in mine] == mine
    view = stored.refs()
    summarized = {source for e in view if e.kind == "summary" for source in e.sources or ()}
    assert summarized.isdisjoint(e.id for e in view)  # nothing is both summarized and shown
