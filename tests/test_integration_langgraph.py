"""CtxStoreSaver, the LangGraph checkpointer: LangGraph's own conformance suite, and a real graph over it.

The long run is 1,000 steps with CTXSTORE_LONG_TESTS=1 (what the issue asks), 60 otherwise, so the default
suite stays quick.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import types
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from conftest import CountingStore
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages

from ctxstore import InvalidInput, Repository
from ctxstore.cli import cli
from ctxstore.integrations.langgraph import CtxStoreSaver, import_sqlite
from ctxstore.store.memory import MemoryStore

STEPS = 1000 if os.environ.get("CTXSTORE_LONG_TESTS") == "1" else 60


@checkpointer_test(name="CtxStoreSaver")
async def ctxstore_saver():  # type: ignore[no-untyped-def]
    yield CtxStoreSaver(Repository.memory())


def test_langgraph_conformance_suite_passes_every_capability():
    """LangGraph's validate() detects all eight capabilities (base and extended) and every one passes."""
    report = asyncio.run(validate(ctxstore_saver))
    assert report.passed_all_base()
    for capability in Capability:
        result = report.results[capability.value]
        assert result.detected and result.passed and not result.failures, (capability, result)


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    turns: int


def chat_graph(saver: CtxStoreSaver, replies: list[str]) -> Any:
    """A StateGraph with add_messages state whose one node asks a scripted chat model."""
    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))

    def respond(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])], "turns": state.get("turns", 0) + 1}

    builder = StateGraph(State)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    return builder.compile(checkpointer=saver)


def config(thread: str = "t1", **more: str) -> Any:
    return {"configurable": {"thread_id": thread, **more}}


def test_a_graph_runs_resumes_in_a_new_process_and_time_travels_into_a_fork(tmp_path: Path):
    """N invokes of a real graph; a new process resumes the thread; updating an old checkpoint forks it."""
    path = tmp_path / "repo"
    saver = CtxStoreSaver.from_path(str(path))
    graph = chat_graph(saver, [f"answer {i}" for i in range(STEPS)])
    for i in range(STEPS):
        graph.invoke({"messages": [HumanMessage(f"question {i}")]}, config())
    state = graph.get_state(config())
    assert len(state.values["messages"]) == 2 * STEPS and state.values["turns"] == STEPS
    early = next(s for s in graph.get_state_history(config())
                 if s.values and len(s.values["messages"]) == 4 and s.next == ())
    saver.repo.close()

    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from langchain_core.messages import HumanMessage
        from test_integration_langgraph import chat_graph, config
        from ctxstore.integrations.langgraph import CtxStoreSaver
        saver = CtxStoreSaver.from_path({str(path)!r})
        graph = chat_graph(saver, ["resumed"])
        out = graph.invoke({{"messages": [HumanMessage("and again")]}}, config())
        print(json.dumps([m.content for m in out["messages"][-3:]] + [out["turns"]]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout) == [f"answer {STEPS - 1}", "and again", "resumed", STEPS + 1]

    saver = CtxStoreSaver.from_path(str(path))
    graph = chat_graph(saver, ["a different second answer"])
    assert [m.content for m in graph.get_state(early.config).values["messages"]] == [
        "question 0", "answer 0", "question 1", "answer 1"]
    forked = graph.invoke({"messages": [HumanMessage("rewind")]}, early.config)
    assert [m.content for m in forked["messages"]] == [
        "question 0", "answer 0", "question 1", "answer 1", "rewind", "a different second answer"]
    # The branch follows the fork; the old line is still there, named by its checkpoints.
    assert len(graph.get_state(config()).values["messages"]) == 6
    later = [s for s in graph.get_state_history(config()) if len(s.values.get("messages", [])) > 2 * STEPS]
    assert later, "the checkpoints of the abandoned line are still listed"
    reflog = saver.repo.reflog("refs/heads/langgraph/t1/x-")
    assert "langgraph: fork" in [e.message for e in reflog[:3]]  # the invoke's first put forked
    saver.repo.close()

    from click.testing import CliRunner
    drawn = CliRunner().invoke(cli, ["--repo", str(path), "log", "--graph", "refs/heads/langgraph/t1/x-",
                                     f"refs/tags/langgraph/t1/x-/{later[0].config['configurable']['checkpoint_id']}"])
    assert drawn.exit_code == 0, drawn.output
    assert "|/" in drawn.output.splitlines()  # the two lines meet at the checkpoint that was rewound to


def test_each_step_adds_entries_for_its_new_messages_not_a_copy_of_the_list():
    """Each invoke grows the thread's view by a constant: its two new messages and one entry per checkpoint."""
    saver = CtxStoreSaver(Repository.memory())
    graph = chat_graph(saver, [f"a{i}" for i in range(5)])
    sizes = []
    for i in range(5):
        graph.invoke({"messages": [HumanMessage(f"q{i}")]}, config())
        sizes.append(saver.repo.history("refs/heads/langgraph/t1/x-").size)
    # Each invoke puts three checkpoints (the input, the input applied, the node's output) and adds two messages.
    assert [b - a for a, b in itertools.pairwise(sizes)] == [5, 5, 5, 5]


def replay_ops(saver: Any, ops: list[tuple[str, Any]]) -> list[list[tuple[Any, Any]]]:
    """Run the updates on a one-node graph over `saver`; every checkpoint's messages, newest first."""
    builder = StateGraph(State)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    graph = builder.compile(checkpointer=saver)
    graph.invoke({"messages": [HumanMessage("start", id="m-start")]}, config())
    for n, (op, arg) in enumerate(ops):
        current = graph.get_state(config()).values["messages"]
        if op == "add":
            graph.update_state(config(), {"messages": [HumanMessage(arg, id=f"m{n}")]})
        elif current:
            graph.update_state(config(), {"messages": [RemoveMessage(id=current[arg % len(current)].id)]})
    return [[(m.content, m.id) for m in s.values.get("messages", [])] for s in graph.get_state_history(config())]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30).map(lambda t: ("add", t)),
                          st.integers(0, 9).map(lambda n: ("remove", n))), min_size=1, max_size=12))
def test_any_sequence_of_adds_and_removals_reads_back_as_in_langgraphs_own_saver(ops: list[tuple[str, Any]]):
    """Adds and removals by id (add_messages' edits) give, checkpoint by checkpoint, InMemorySaver's messages,
    also when read back by a saver with nothing cached."""
    repo = Repository.memory()
    ours = replay_ops(CtxStoreSaver(repo), ops)
    assert ours == replay_ops(InMemorySaver(), ops)
    fresh = CtxStoreSaver(repo)
    assert [[(m.content, m.id) for m in t.checkpoint["channel_values"].get("messages", [])]
            for t in fresh.list(config())] == ours


def test_the_integrations_page_example_runs():
    """docs/integrations.md's LangGraph example runs as written."""
    text = (Path(__file__).parent.parent / "docs" / "integrations.md").read_text(encoding="utf-8")
    block = text.split("```python\n", 1)[1].split("```\n", 1)[0]
    module = types.ModuleType("docs_integrations_example")  # LangGraph reads State's hints from its module
    sys.modules[module.__name__] = module
    try:
        exec(compile(block, "docs/integrations.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]


# -- a step's cost does not grow with the thread ------------------------------------------------------

def _one_more_step(steps: int) -> tuple[int, int]:
    """Object reads and ref listings of one invoke, after `steps` invokes, by the saver that made them."""
    store = CountingStore(MemoryStore())
    saver = CtxStoreSaver(Repository(store))  # type: ignore[arg-type]
    graph = chat_graph(saver, [f"a{i}" for i in range(steps + 1)])
    for i in range(steps):
        graph.invoke({"messages": [HumanMessage(f"q{i}")]}, config())
    listings = 0
    listed = saver.repo.refs

    def counting_refs(prefix: str | None = None) -> dict[str, str]:
        nonlocal listings
        listings += 1
        return listed(prefix)

    saver.repo.refs = counting_refs  # type: ignore[method-assign]
    before = store.gets
    graph.invoke({"messages": [HumanMessage("one more")]}, config())
    assert len(graph.get_state(config()).values["messages"]) == 2 * steps + 2
    return store.gets - before, listings


def test_a_step_reads_as_much_on_a_long_thread_as_on_a_short_one():
    """The latest checkpoint comes from the branch head, not a listing of tags: one invoke makes no ref
    listing and reads the same objects after 3 steps as after 40."""
    short, long = _one_more_step(3), _one_more_step(40)
    assert short[1] == long[1] == 0
    assert short[0] == long[0]


def test_a_put_moves_the_branch_and_names_the_checkpoint_in_one_transaction():
    """Each put is one reflog move of the branch, and the tag it writes points at the branch's new head."""
    saver = CtxStoreSaver(Repository.memory())
    graph = chat_graph(saver, ["a0"])
    graph.invoke({"messages": [HumanMessage("q0")]}, config())
    head = saver.repo.head("refs/heads/langgraph/t1/x-")
    latest = graph.get_state(config()).config["configurable"]["checkpoint_id"]
    assert saver.repo.head(f"refs/tags/langgraph/t1/x-/{latest}") == head
    assert len(saver.repo.reflog("refs/heads/langgraph/t1/x-")) == len(list(saver.list(config())))


def test_deleting_the_latest_checkpoint_moves_the_branch_back_to_the_newest_left():
    """After delete_for_runs removes the newest checkpoints, the latest is the newest one left, for this
    saver and for a fresh one, and the branch points at it."""
    repo = Repository.memory()
    saver = CtxStoreSaver(repo)
    graph = chat_graph(saver, ["a0", "a1"])
    graph.invoke({"messages": [HumanMessage("q0")]}, {**config(), "metadata": {"run_id": "run-1"}})
    kept = graph.get_state(config()).config["configurable"]["checkpoint_id"]
    graph.invoke({"messages": [HumanMessage("q1")]}, {**config(), "metadata": {"run_id": "run-2"}})
    saver.delete_for_runs(["run-2"])
    for reader in (saver, CtxStoreSaver(repo)):
        latest = reader.get_tuple(config())
        assert latest is not None and latest.config["configurable"]["checkpoint_id"] == kept
        assert [m.content for m in latest.checkpoint["channel_values"]["messages"]] == ["q0", "a0"]
    assert repo.head("refs/heads/langgraph/t1/x-") == repo.head(f"refs/tags/langgraph/t1/x-/{kept}")


def test_putting_an_older_checkpoint_id_again_leaves_the_latest_where_it_is():
    """The latest checkpoint is the one with the greatest id, as in LangGraph's own savers."""
    saver = CtxStoreSaver(Repository.memory())
    first = {"v": 1, "id": "1f0a0000-0000-6000-8000-000000000001", "ts": "", "channel_values": {"n": 1},
             "channel_versions": {"n": 1}, "versions_seen": {}, "updated_channels": None}
    second = {**first, "id": "1f0a0000-0000-6000-8000-000000000002", "channel_values": {"n": 2}}
    root = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    saver.put(root, second, {"step": 2}, {"n": 1})  # type: ignore[arg-type]
    saver.put(root, first, {"step": 1}, {"n": 1})  # type: ignore[arg-type]
    for reader in (saver, CtxStoreSaver(saver.repo)):
        latest = reader.get_tuple(root)
        assert latest is not None and latest.checkpoint["channel_values"] == {"n": 2}
    older = saver.get_tuple({"configurable": {**root["configurable"], "checkpoint_id": first["id"]}})
    assert older is not None and older.checkpoint["channel_values"] == {"n": 1}


def test_appended_reads_a_revisions_own_new_entries():
    """Repository.appended: the entries an append added, in order; nothing for a revision of another kind."""
    repo = Repository.memory()
    repo.append("main", [{"role": "user", "content": "one"}])
    repo.append("main", [{"role": "user", "content": "two"}, {"role": "assistant", "content": "three"}])
    assert [e.message["content"] for e in repo.appended("main")] == ["two", "three"]
    assert [e.message["content"] for e in repo.appended("main~1")] == ["one"]
    forked = repo.history("main").fork()
    repo.commit("other", forked)
    assert repo.appended("other") == []


def test_commit_many_sets_other_refs_in_the_same_transaction():
    """Repository.commit_many(set_refs=...) points tags at the new revisions with the move; a short name is refused."""
    repo = Repository.memory()
    history = repo.history("main").append({"role": "user", "content": "hi"})
    moved = repo.commit_many({"main": history}, message="m", set_refs={"refs/tags/first": history.revision_id})
    assert repo.head("refs/tags/first") == moved[0].new == repo.head("main")
    assert repo.reflog("refs/tags/first")[0].message == "m"
    with pytest.raises(InvalidInput):
        repo.commit_many({"main": history.append({"role": "user", "content": "again"})},
                         set_refs={"first": history.revision_id})
    with pytest.raises(InvalidInput):
        repo.commit_many({"main": history.append({"role": "user", "content": "twice"})},
                         set_refs={"refs/heads/main": history.revision_id})
    assert repo.head("main") == moved[0].new


# -- DeltaChannel ----------------------------------------------------------------------------------

class DeltaState(TypedDict):
    messages: Annotated[list[BaseMessage], DeltaChannel(_messages_delta_reducer, snapshot_frequency=4)]


def delta_graph(saver: Any, replies: list[str]) -> Any:
    """The chat graph with its messages in a DeltaChannel (a snapshot every 4 updates)."""
    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))

    def respond(state: DeltaState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(DeltaState)
    builder.add_node("respond", respond)
    builder.add_edge(START, "respond")
    return builder.compile(checkpointer=saver)


def _delta_run(saver: Any) -> list[list[str]]:
    graph = delta_graph(saver, [f"answer {i}" for i in range(12)] + ["forked answer"])
    for i in range(12):
        graph.invoke({"messages": [HumanMessage(f"question {i}", id=f"q{i}")]}, config())
    graph.update_state(config(), {"messages": [RemoveMessage(id="q3")]})
    early = [s for s in graph.get_state_history(config()) if s.next == ()][-3]
    graph.invoke({"messages": [HumanMessage("rewind", id="r")]}, early.config)
    return [[m.content for m in s.values.get("messages", [])] for s in graph.get_state_history(config())]


def test_a_deltachannel_graph_reads_back_as_in_langgraphs_own_saver():
    """Runs, a removal and a time-travel fork give, checkpoint by checkpoint, InMemorySaver's messages."""
    saver = CtxStoreSaver(Repository.memory())
    ours = _delta_run(saver)
    assert ours == _delta_run(InMemorySaver())
    assert ours[0][-2:] == ["rewind", "forked answer"]


def test_delta_channel_history_is_the_default_walk_at_every_checkpoint():
    """get_delta_channel_history (sync and async) gives what LangGraph's own walk over get_tuple gives,
    for every checkpoint of both lines, also for a saver with nothing cached."""
    repo = Repository.memory()
    _delta_run(CtxStoreSaver(repo))
    fresh = CtxStoreSaver(repo)
    tuples = list(fresh.list(config()))
    assert len(tuples) > 30
    for t in tuples:
        ours = fresh.get_delta_channel_history(config=t.config, channels=["messages"])
        assert ours == BaseCheckpointSaver.get_delta_channel_history(fresh, config=t.config, channels=["messages"])
        assert asyncio.run(fresh.aget_delta_channel_history(config=t.config, channels=["messages"])) == ours
    # A write added to an ancestor afterwards is in what its descendants replay, also for a saver that
    # answered for them before.
    t = tuples[len(tuples) // 2]
    fresh.put_writes(t.config, [("messages", [HumanMessage("late", id="late")])], "late-task")
    for t in tuples[:len(tuples) // 2]:
        ours = fresh.get_delta_channel_history(config=t.config, channels=["messages"])
        assert ours == BaseCheckpointSaver.get_delta_channel_history(fresh, config=t.config, channels=["messages"])
    assert fresh.get_delta_channel_history(config=config(), channels=[]) == {}
    assert fresh.get_delta_channel_history(config=config("nobody"), channels=["messages"]) == {
        "messages": {"writes": []}}


def test_a_deltachannel_snapshot_adds_only_the_messages_since_the_last_one():
    """A snapshot's messages are entries: the thread's view holds each message once, however many
    snapshots repeated it, and no checkpoint entry carries the list."""
    saver = CtxStoreSaver(Repository.memory())
    graph = delta_graph(saver, [f"a{i}" for i in range(20)])
    for i in range(20):
        graph.invoke({"messages": [HumanMessage(f"q{i}")]}, config())
    entries = saver.repo.history("refs/heads/langgraph/t1/x-").refs()
    contents = [e.message["content"] for e in entries if (e.meta or {}).get("channel") == "messages"]
    assert len(contents) == len(set(contents)) > 20  # several snapshots, no message twice
    for entry in entries:
        if entry.message["role"] == "checkpoint":
            assert all(block.get("channel") != "messages" for block in entry.message["content"][1:])


def test_a_deltachannel_thread_resumes_in_a_new_process_and_time_travels(tmp_path: Path):
    """A DeltaChannel thread on disk: a new process continues it with every message, then forks it."""
    path = tmp_path / "repo"
    saver = CtxStoreSaver.from_path(str(path))
    graph = delta_graph(saver, [f"answer {i}" for i in range(9)])
    for i in range(9):
        graph.invoke({"messages": [HumanMessage(f"question {i}")]}, config())
    early = [s for s in graph.get_state_history(config()) if s.next == ()][-2]
    saver.repo.close()
    code = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from langchain_core.messages import HumanMessage
        from test_integration_langgraph import delta_graph, config
        from ctxstore.integrations.langgraph import CtxStoreSaver
        saver = CtxStoreSaver.from_path({str(path)!r})
        graph = delta_graph(saver, ["resumed", "forked"])
        out = graph.invoke({{"messages": [HumanMessage("and again")]}}, config())
        forked = graph.invoke({{"messages": [HumanMessage("rewind")]}}, {json.dumps(early.config)})
        print(json.dumps([[m.content for m in out["messages"]], [m.content for m in forked["messages"]]]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    resumed, forked = json.loads(done.stdout)
    assert resumed == [c for i in range(9) for c in (f"question {i}", f"answer {i}")] + ["and again", "resumed"]
    assert forked == ["question 0", "answer 0", "question 1", "answer 1", "rewind", "forked"]


# -- import from SqliteSaver -----------------------------------------------------------------------

def _sqlite_thread(db: Path, thread: str, steps: int, start: int = 0) -> None:
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:
        graph = chat_graph(sqlite_saver, [f"{thread} answer {i}" for i in range(start, start + steps)])  # type: ignore[arg-type]
        for i in range(start, start + steps):
            graph.invoke({"messages": [HumanMessage(f"{thread} question {i}")]}, config(thread))


def _seen(t: Any) -> str:
    """A checkpoint tuple as a saver's reader sees it, spelled comparably."""
    values = t.checkpoint["channel_values"]
    return json.dumps([t.config, t.parent_config, t.metadata, t.checkpoint["channel_versions"],
                       [m.content for m in values.get("messages", [])], values.get("turns"),
                       [(task, channel, repr(value)) for task, channel, value in t.pending_writes or []]])


def test_import_sqlite_brings_every_thread_and_a_graph_continues_it(tmp_path: Path):
    """Every thread and namespace of a SqliteSaver database becomes a branch whose checkpoints read back
    as SqliteSaver's (ids, parents, metadata, values, pending writes); a graph then continues a thread."""
    db = tmp_path / "chats.sqlite"
    _sqlite_thread(db, "t1", 3)
    _sqlite_thread(db, "t2", 2)
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:
        inner = {"configurable": {"thread_id": "t1", "checkpoint_ns": "inner:1"}}
        sqlite_saver.put(inner, {"v": 1, "id": "1f0a0000-0000-6000-8000-000000000001", "ts": "",  # type: ignore[typeddict-item]
                                 "channel_values": {"turns": 7}, "channel_versions": {"turns": 1},
                                 "versions_seen": {}, "updated_channels": None}, {"step": 0}, {"turns": 1})
        theirs = list(sqlite_saver.list(None))
    calls: list[tuple[int, int]] = []
    repo = Repository.memory()
    results = import_sqlite(repo, db, progress=lambda done, total: calls.append((done, total)))
    assert sorted(r.ref for r in results) == [  # "inner:1" is not a plain name: x- and its UTF-8 in hex
        "refs/heads/langgraph/t1/x-", "refs/heads/langgraph/t1/x-696e6e65723a31", "refs/heads/langgraph/t2/x-"]
    assert all(r.old is None for r in results)
    assert calls[-1] == (len(theirs), len(theirs)) and len(calls) == len(theirs)
    saver = CtxStoreSaver(repo)
    ours = list(saver.list(None))
    assert len(ours) == len(theirs) > 10
    assert sorted(_seen(t) for t in ours) == sorted(_seen(t) for t in theirs)

    graph = chat_graph(saver, ["a new answer"])
    out = graph.invoke({"messages": [HumanMessage("after the move")]}, config("t1"))
    assert [m.content for m in out["messages"]][-4:] == ["t1 question 2", "t1 answer 2", "after the move",
                                                         "a new answer"]
    assert out["turns"] == 4


def test_import_sqlite_again_brings_only_what_is_new(tmp_path: Path):
    """Re-importing moves nothing; after the thread grows in SqliteSaver, a re-import adds only the new steps."""
    db = tmp_path / "chats.sqlite"
    _sqlite_thread(db, "t1", 2)
    repo = Repository.memory()
    first = import_sqlite(repo, db)
    heads = repo.refs()
    assert import_sqlite(repo, db) == [] and repo.refs() == heads
    with SqliteSaver.from_conn_string(str(db)) as sqlite_saver:  # a write to an imported checkpoint
        latest = sqlite_saver.get_tuple(config("t1"))
        assert latest is not None
        sqlite_saver.put_writes(latest.config, [("turns", 41)], "a-late-task")
    import_sqlite(repo, db)
    ours = CtxStoreSaver(repo).get_tuple(config("t1"))
    assert ours is not None and ("a-late-task", "turns", 41) in (ours.pending_writes or [])
    revisions = len(list(repo.iter_revisions("refs/heads/langgraph/t1/x-")))
    _sqlite_thread(db, "t1", 1, start=2)
    grown = import_sqlite(repo, db)
    assert [(r.ref, r.old) for r in grown] == [(first[0].ref, first[0].new)] and grown[0].new != first[0].new
    assert len(list(repo.iter_revisions("refs/heads/langgraph/t1/x-"))) == revisions + 3  # one invoke's puts
    state = chat_graph(CtxStoreSaver(repo), []).get_state(config("t1"))
    assert [m.content for m in state.values["messages"]][-2:] == ["t1 question 2", "t1 answer 2"]


def test_import_sqlite_refuses_a_missing_file_and_one_that_is_not_a_saver_database(tmp_path: Path):
    """A missing path, a file that is not SQLite and a SQLite file without SqliteSaver's tables are InvalidInput."""
    repo = Repository.memory()
    with pytest.raises(InvalidInput, match="no file"):
        import_sqlite(repo, tmp_path / "absent.sqlite")
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just some words that fill more than a header" * 20)
    with pytest.raises(InvalidInput, match="not a LangGraph SqliteSaver database"):
        import_sqlite(repo, text)
    other = tmp_path / "other.sqlite"
    with closing(sqlite3.connect(other)) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.commit()
    with pytest.raises(InvalidInput, match="no checkpoints and writes tables"):
        import_sqlite(repo, other)
    assert repo.refs() == {}
