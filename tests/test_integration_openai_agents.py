"""CtxStoreSession, the OpenAI Agents SDK session: the SDK's protocol as its own SQLiteSession behaves, a real
Runner over a scripted model, new processes, forks, and the migration of an SQLiteSession database.

The long run is 1,000 turns with CTXSTORE_LONG_TESTS=1, 30 otherwise, so the default suite stays quick.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse, TResponseInputItem, TResponseStreamEvent
from agents.memory import Session, SessionSettings, SQLiteSession
from agents.models.interface import Model, ModelTracing
from agents.usage import Usage
from click.testing import CliRunner, Result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from ctxstore import Repository
from ctxstore.cli import cli
from ctxstore.errors import CtxStoreError, InvalidInput, NonFastForward
from ctxstore.integrations.openai_agents import (
    CtxStoreSession,
    import_sqlite,
    session_id_of,
    session_ref,
    sessions,
)

set_tracing_disabled(True)  # no trace exporter: nothing leaves the machine

TURNS = 1000 if os.environ.get("CTXSTORE_LONG_TESTS") == "1" else 30
ROOT = Path(__file__).resolve().parent.parent


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- a scripted model: the SDK's Model interface, no network ----------------------------------------

@function_tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class ScriptedModel(Model):
    """Answers each question; a question that says "add" gets a call of the `add` tool first.

    Ids are counted from zero, so two runs of one script give the same items. `seen` records how many
    input items each call was given (the history the session handed to the run)."""

    def __init__(self) -> None:
        self.calls = 0
        self.seen: list[int] = []

    async def get_response(self, system_instructions: str | None, input: str | list[TResponseInputItem],
                           model_settings: Any, tools: Any, output_schema: Any, handoffs: Any,
                           tracing: ModelTracing, *, previous_response_id: str | None,
                           conversation_id: str | None, prompt: Any, **_: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.seen.append(len(items))
        self.calls += 1
        n = self.calls
        last: Any = items[-1]
        output: list[Any]
        if last.get("type") == "function_call_output":
            output = [_text(f"msg_{n}", f"the sum is {last['output']}")]
        elif "add" in str(last.get("content", "")):
            output = [ResponseFunctionToolCall(id=f"fc_{n}", call_id=f"call_{n}", type="function_call", name="add",
                                               arguments=json.dumps({"a": n, "b": 2}), status="completed")]
        else:
            output = [_text(f"msg_{n}", f"answer to {last.get('content')!s} after {len(items)} items")]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the tests run the model without streaming")


def _text(item_id: str, text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(id=item_id, type="message", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


def agent(model: Model) -> Agent[Any]:
    return Agent(name="helper", instructions="Answer briefly.", model=model, tools=[add])


def question(i: int) -> str:
    return f"please add {i}" if i % 5 == 4 else f"question {i}"


async def converse(session: Session, turns: int, start: int = 0) -> list[str]:
    model = ScriptedModel()
    outputs = []
    for i in range(start, start + turns):
        result = await Runner.run(agent(model), question(i), session=session)
        outputs.append(str(result.final_output))
    return outputs


# -- the protocol -------------------------------------------------------------------------------------

def test_a_ctxstore_session_is_an_sdk_session():
    """The SDK's runtime check accepts it, and it carries session_id and session_settings."""
    session = CtxStoreSession("s1", Repository.memory(), session_settings={"limit": 3})
    assert isinstance(session, Session)
    assert session.session_id == "s1" and session.session_settings == SessionSettings(limit=3)
    assert session.ref == "refs/heads/openai-agents/s1"


def test_session_ids_that_are_not_plain_names_are_spelled_in_hex_and_read_back():
    for sid in ("plain-1", "user:42", "a/b", "x-looks-hex", "ünï", "9f1c2e4a-1111-2222-3333-444455556666"):
        ref = session_ref(sid)
        assert ref.count("/") == 3 and session_id_of(ref) == sid
    assert session_ref("user:42") == "refs/heads/openai-agents/x-" + b"user:42".hex()
    with pytest.raises(InvalidInput):
        session_ref("")


_SCALAR = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
_JSON = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
_PART = st.fixed_dictionaries({"type": st.sampled_from(["input_text", "output_text"]), "text": st.text(max_size=30)},
                              optional={"annotations": st.just([]), "extra": _JSON})
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system", "developer"]),
     "content": st.text(max_size=40) | st.lists(_PART, max_size=3)},
    optional={"type": st.just("message"), "id": st.text(max_size=8), "status": st.just("completed")})
_OTHER = st.fixed_dictionaries(
    {"type": st.sampled_from(["function_call", "function_call_output", "reasoning", "web_search_call"]),
     "call_id": st.text(max_size=8)},
    optional={"name": st.text(max_size=8), "arguments": st.text(max_size=20), "output": _JSON,
              "summary": st.lists(_PART, max_size=2)})
_BIG = st.sampled_from([{"role": "user", "content": "long " * 1200},
                        {"type": "function_call_output", "call_id": "c", "output": "row\n" * 2000},
                        {"role": "assistant", "content": [{"type": "output_text", "text": "z" * 9000}]}])
ITEM = _MESSAGE | _OTHER | _BIG | _JSON
OP = (st.tuples(st.just("add"), st.lists(ITEM, max_size=4)) | st.tuples(st.just("pop"))
      | st.tuples(st.just("clear")) | st.tuples(st.just("get"), st.sampled_from([None, -1, 0, 1, 2, 5])))


async def _apply(session: Any, ops: list[tuple[Any, ...]]) -> list[Any]:
    said = []
    for op in ops:
        if op[0] == "add":
            said.append(await session.add_items(json.loads(json.dumps(op[1]))))
        elif op[0] == "pop":
            said.append(await session.pop_item())
        elif op[0] == "clear":
            said.append(await session.clear_session())
        else:
            said.append(await session.get_items(op[1]))
    said.append(await session.get_items())
    return said


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(OP, max_size=14), limit=st.sampled_from([None, 2]))
def test_any_sequence_of_operations_answers_as_the_sdks_sqlite_session(ops: list[tuple[Any, ...]],
                                                                        limit: int | None):
    """add_items, pop_item, clear_session and get_items(limit) answer as SQLiteSession does, item for item."""
    ours = CtxStoreSession("s", Repository.memory(), session_settings=SessionSettings(limit=limit))
    theirs = SQLiteSession("s", session_settings=SessionSettings(limit=limit))
    try:
        assert run(_apply(ours, ops)) == run(_apply(theirs, ops))
    finally:
        theirs.close()


async def _apply_through(handles: list[Any], ops: list[tuple[int, tuple[Any, ...]]]) -> list[Any]:
    said = []
    for which, op in ops:
        said.extend((await _apply(handles[which], [op]))[:1])
    said.append(await handles[0].get_items())
    return said


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(st.tuples(st.sampled_from([0, 1]), OP), max_size=14))
def test_two_session_objects_over_one_store_see_each_others_changes_as_sqlite_sessions_do(
        ops: list[tuple[int, tuple[Any, ...]]]):
    """Two CtxStoreSession objects on one repository answer as two SQLiteSessions on one file do: what one
    remembers of the view never hides what the other wrote."""
    import tempfile

    repo = Repository.memory()
    ours = [CtxStoreSession("s", repo), CtxStoreSession("s", repo)]
    with tempfile.TemporaryDirectory() as where:
        theirs = [SQLiteSession("s", Path(where) / "db"), SQLiteSession("s", Path(where) / "db")]
        try:
            assert run(_apply_through(ours, ops)) == run(_apply_through(theirs, ops))
        finally:
            for session in theirs:
                session.close()


def test_items_are_kept_exactly_and_one_revision_per_change():
    """get_items gives back what was added; each add, pop and clear is one revision; history stays in the log."""
    repo = Repository.memory()
    session = CtxStoreSession("s", repo)
    first = [{"role": "user", "content": "hi"},
             {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}', "id": "fc"}]
    second = [{"type": "function_call_output", "call_id": "c1", "output": "3"},
              {"type": "message", "role": "assistant", "status": "completed", "id": "m1",
               "content": [{"type": "output_text", "text": "3", "annotations": [], "logprobs": None}]}]
    run(session.add_items(first))
    run(session.add_items(second))
    assert run(session.get_items()) == first + second
    assert run(session.pop_item()) == second[-1]
    run(session.clear_session())
    assert run(session.get_items()) == [] and run(session.pop_item()) is None
    revisions = list(repo.iter_revisions(session.ref))
    assert [r.operation["type"] if r.operation else None for r in revisions] == [
        "view", "edit", "append", "append", None]
    assert len(repo.history(revisions[2].id).refs()) == 4  # before the pop: all four items are still there
    assert repo.history(session.ref).render() == []


def test_messages_render_as_messages_and_other_items_are_wrapped_under_their_type():
    """`ctxstore render` sees a message item as it is; a tool call is {role: its type, content: [item]}."""
    repo = Repository.memory()
    session = CtxStoreSession("s", repo)
    call = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"}
    run(session.add_items([{"role": "user", "content": "hi"}, call, 7]))
    assert repo.history(session.ref).render() == [
        {"role": "user", "content": "hi"}, {"role": "function_call", "content": [call]},
        {"role": "item", "content": [7]}]
    assert run(session.get_items()) == [{"role": "user", "content": "hi"}, call, 7]


def test_a_long_tool_output_is_one_blob_however_many_sessions_hold_it():
    """A wrapped item of 4 KiB or more is a content-addressed blob: a second session holding it adds no copy."""
    repo = Repository.memory()
    output = {"type": "function_call_output", "call_id": "c1", "output": "a long listing\n" * 800}

    def grows(session_id: str) -> int:
        before = repo.stats().object_bytes
        run(CtxStoreSession(session_id, repo).add_items([output]))
        return repo.stats().object_bytes - before

    assert grows("first") > 10_000
    assert grows("second") < 2_000
    assert run(CtxStoreSession("second", repo).get_items()) == [output]


def test_an_item_json_cannot_carry_is_refused_with_a_ctxstore_error_and_nothing_lands():
    session = CtxStoreSession("s", Repository.memory())
    run(session.add_items([{"role": "user", "content": "ok"}]))
    for bad in ({"role": "user", "content": float("nan")}, {"role": "user", "n": 2**70}, {"role": "user", 1: "x"}):
        with pytest.raises(CtxStoreError):
            run(session.add_items([{"role": "user", "content": "fine"}, bad]))
    assert run(session.get_items()) == [{"role": "user", "content": "ok"}]


def test_a_readable_show_draws_agents_items_as_text_and_tool_lines():
    """The terminal renderer shows output_text as text, a function call and its output as tool lines."""
    from rich.console import Console

    from ctxstore.cli._pretty import print_entries

    repo = Repository.memory()
    session = CtxStoreSession("s", repo)
    run(session.add_items([
        {"role": "user", "content": [{"type": "input_text", "text": "what is 1 + 2?"}]},
        {"type": "function_call", "call_id": "c1", "name": "add", "arguments": '{"a": 1, "b": 2}'},
        {"type": "function_call_output", "call_id": "c1", "output": "3"},
        {"type": "reasoning", "id": "r", "summary": [{"type": "summary_text", "text": "it adds up"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It is 3."}]}]))
    out = io.StringIO()
    print_entries(repo.history(session.ref).refs(), out=Console(file=out, width=100), show_ids=False)
    text = out.getvalue()
    for line in ("── user", "what is 1 + 2?", '⚙ add {"a":1,"b":2}', "↳ add: 3", "(thinking) it adds up",
                 "── assistant", "It is 3."):
        assert line in text, text


# -- a real Runner ------------------------------------------------------------------------------------

def test_a_runner_over_many_turns_keeps_what_sqlite_session_keeps_and_a_new_process_resumes(tmp_path: Path):
    """TURNS runs of a real Runner (tool calls every fifth turn); the items equal SQLiteSession's on the same
    script, the model sees the whole history each turn, and a new process resumes the session."""
    path = tmp_path / "repo"
    ours = CtxStoreSession.from_path("chat-1", path)
    theirs = SQLiteSession("chat-1", tmp_path / "sdk.db")
    adds: list[int] = []
    add_items = ours.add_items

    async def counted(items: list[Any]) -> None:
        adds.append(len(items))
        await add_items(items)

    ours.add_items = counted  # type: ignore[method-assign]
    try:
        said = run(converse(ours, TURNS))
        assert said == run(converse(theirs, TURNS))
        items = run(ours.get_items())
        assert items == run(theirs.get_items())
    finally:
        theirs.close()
    tool_turns = len([i for i in range(TURNS) if i % 5 == 4])
    assert len(items) == 2 * TURNS + 2 * tool_turns  # question and answer, plus call and output
    assert said[-1].startswith(f"answer to question {TURNS - 1} after ") or said[-1].startswith("the sum is")
    # the root, then one revision per add_items the Runner made (input, then each step's new items)
    assert len(list(ours.repo.iter_revisions(ours.ref))) == 1 + len([n for n in adds if n])
    assert len(adds) >= 2 * TURNS
    ours.close()

    code = textwrap.dedent(f"""
        import asyncio, json, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_integration_openai_agents import converse
        from ctxstore.integrations.openai_agents import CtxStoreSession
        session = CtxStoreSession.from_path("chat-1", {str(path)!r})
        said = asyncio.run(converse(session, 1, start=1000001))
        items = asyncio.run(session.get_items())
        print(json.dumps({{"said": said, "count": len(items), "tail": items[-2:]}}))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    resumed = json.loads(done.stdout)
    assert resumed["count"] == len(items) + 2
    assert resumed["said"] == [f"answer to question 1000001 after {len(items) + 1} items"]
    assert resumed["tail"][0] == {"role": "user", "content": "question 1000001"}

    again = CtxStoreSession.from_path("chat-1", path)
    assert run(again.get_items()) == [*items, *resumed["tail"]]
    again.close()


BARRIER = textwrap.dedent("""
    import os, sys, time
    def meet(where, me):
        # Both processes start their calls together (each waits until the other is ready), so they race.
        open(os.path.join(where, me + ".ready"), "w").close()
        while len([f for f in os.listdir(where) if f.endswith(".ready")]) < 2:
            time.sleep(0.01)
""")


def test_two_processes_adding_to_one_session_both_land(tmp_path: Path):
    """Each of two processes adds 40 items one call at a time; all 80 are there, each writer's in its order."""
    path = tmp_path / "repo"
    CtxStoreSession.from_path("shared", path).close()
    code = BARRIER + textwrap.dedent(f"""
        import asyncio
        from ctxstore.integrations.openai_agents import CtxStoreSession
        session = CtxStoreSession.from_path("shared", {str(path)!r})
        async def main():
            for i in range(40):
                await session.add_items([{{"role": "user", "content": f"{{sys.argv[1]}} {{i}}"}}])
        meet({str(tmp_path)!r}, sys.argv[1])
        asyncio.run(main())
    """)
    writers = [subprocess.Popen([sys.executable, "-c", code, name]) for name in ("a", "b")]
    assert [w.wait(timeout=300) for w in writers] == [0, 0]
    session = CtxStoreSession.from_path("shared", path)
    said = [item["content"] for item in run(session.get_items())]
    assert len(said) == 80
    for name in ("a", "b"):
        assert [s for s in said if s.startswith(name + " ")] == [f"{name} {i}" for i in range(40)]
    session.close()


def test_two_processes_popping_one_session_never_pop_the_same_item(tmp_path: Path):
    """pop_item is a compare-and-swap: two processes popping 30 each from 60 items pop all 60, once each."""
    path = tmp_path / "repo"
    session = CtxStoreSession.from_path("shared", path)
    run(session.add_items([{"role": "user", "content": f"m{i}"} for i in range(60)]))
    session.close()
    code = BARRIER + textwrap.dedent(f"""
        import asyncio, json
        from ctxstore.integrations.openai_agents import CtxStoreSession
        session = CtxStoreSession.from_path("shared", {str(path)!r})
        async def main():
            return [(await session.pop_item())["content"] for _ in range(30)]
        meet({str(tmp_path)!r}, sys.argv[1])
        print(json.dumps(asyncio.run(main())))
    """)
    poppers = [subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE, text=True)
               for name in ("a", "b")]
    popped = [json.loads(p.communicate(timeout=300)[0]) for p in poppers]
    assert [p.returncode for p in poppers] == [0, 0]
    assert sorted(popped[0] + popped[1]) == sorted(f"m{i}" for i in range(60))
    for each in popped:  # each process pops newest first
        assert [int(m[1:]) for m in each] == sorted((int(m[1:]) for m in each), reverse=True)
    session = CtxStoreSession.from_path("shared", path)
    assert run(session.get_items()) == [] and run(session.pop_item()) is None
    session.close()


def test_importing_ctxstore_and_its_cli_does_not_load_the_sdk():
    """The integration loads only when asked for: `ctxstore` and its CLI start without the Agents SDK."""
    code = ("import sys, ctxstore, ctxstore.cli; "
            "print(sorted(m for m in sys.modules if m == 'agents' or m.endswith('openai_agents')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


def test_a_fork_shares_the_history_and_then_goes_its_own_way():
    repo = Repository.memory()
    main = CtxStoreSession("main", repo)
    run(converse(main, 3))
    before = run(main.get_items())
    other = main.fork("what-if")
    assert other.session_id == "what-if" and run(other.get_items()) == before
    run(converse(other, 1, start=100))
    run(main.pop_item())
    assert run(other.get_items())[: len(before)] == before and len(run(other.get_items())) == len(before) + 2
    assert run(main.get_items()) == before[:-1]
    forked = list(repo.iter_revisions(other.ref))
    assert forked[2].operation == {"type": "fork"}  # under the new session's two appends
    assert repo.diff(main.ref, other.ref).added  # a diff between the two is an entry diff, not a copy
    assert sorted(sessions(repo)) == ["main", "what-if"]
    with pytest.raises(InvalidInput, match="already exists"):
        main.fork("what-if")


# -- migrating an SQLiteSession database ----------------------------------------------------------------

def _sdk_database(path: Path) -> dict[str, list[Any]]:
    """An SDK-written database: three sessions, one of them written by a real Runner."""
    async def write() -> dict[str, list[Any]]:
        out = {}
        for sid, batches in (("alice", [[{"role": "user", "content": "hi"}],
                                        [{"role": "assistant", "content": "hello"}, {"role": "user", "content": "?"}]]),
                             ("bob/2", [[{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]])):
            session = SQLiteSession(sid, path)
            for batch in batches:
                await session.add_items(batch)
            out[sid] = await session.get_items()
            session.close()
        session = SQLiteSession("runner", path)
        await converse(session, 5)
        out["runner"] = await session.get_items()
        session.close()
        return out

    made: dict[str, list[Any]] = run(write())
    with sqlite3.connect(path) as conn:  # spread the rows over distinct seconds, one batch each (as written)
        conn.execute("UPDATE agent_messages SET created_at = datetime('2026-01-01', '+' || id || ' seconds')")
        conn.execute("UPDATE agent_messages SET created_at = '2026-01-01 00:00:02' WHERE id = 3")
    return made


def test_import_brings_every_session_in_and_again_changes_nothing(tmp_path: Path):
    db = tmp_path / "agents.db"
    made = _sdk_database(db)
    repo = Repository.memory()
    seen: list[tuple[int, int]] = []
    moves = import_sqlite(repo, db, progress=lambda done, total: seen.append((done, total)))
    assert sorted(m.ref for m in moves) == sorted(session_ref(s) for s in made)
    assert seen[-1] == (3, 3)
    for sid, items in made.items():
        assert run(CtxStoreSession(sid, repo).get_items()) == items
    # alice's rows 2 and 3 share a second (one add_items): root, then two revisions
    assert len(list(repo.iter_revisions(session_ref("alice")))) == 3
    entry = repo.history(session_ref("alice")).refs()[0]
    assert entry.meta == {"openaiAgents": {"row": 1}, "timestamp": "2026-01-01T00:00:01Z"}
    heads = repo.refs()
    assert import_sqlite(repo, db) == [] and repo.refs() == heads


def test_a_grown_session_fast_forwards_and_a_pop_in_sqlite_leaves_the_view(tmp_path: Path):
    db = tmp_path / "agents.db"
    _sdk_database(db)
    repo = Repository.memory()
    import_sqlite(repo, db)
    old = repo.head(session_ref("alice"))

    async def grow() -> list[Any]:
        session = SQLiteSession("alice", db)
        await session.pop_item()
        await session.add_items([{"role": "user", "content": "late"}])
        items = await session.get_items()
        session.close()
        return items

    items = run(grow())
    [move] = import_sqlite(repo, db)
    assert move.ref == session_ref("alice") and move.old == old
    assert old in [r.id for r in repo.iter_revisions(move.new)]  # a fast-forward: the old head is an ancestor
    assert run(CtxStoreSession("alice", repo).get_items()) == items
    assert import_sqlite(repo, db) == []


def test_a_session_emptied_in_sqlite_is_an_empty_session_and_stays_one_ref(tmp_path: Path):
    """A session whose rows were all popped still has its agent_sessions row: it imports as an empty ref."""
    db = tmp_path / "agents.db"
    _sdk_database(db)

    async def empty() -> None:
        session = SQLiteSession("bob/2", db)
        while await session.pop_item() is not None:
            pass
        session.close()

    run(empty())
    repo = Repository.memory()
    import_sqlite(repo, db)
    assert repo.head(session_ref("bob/2")) is not None
    assert run(CtxStoreSession("bob/2", repo).get_items()) == []
    assert import_sqlite(repo, db) == []


def test_a_session_that_went_on_in_ctxstore_is_not_undone_by_a_reimport_unless_forced(tmp_path: Path):
    db = tmp_path / "agents.db"
    made = _sdk_database(db)
    repo = Repository.memory()
    import_sqlite(repo, db)
    session = CtxStoreSession("alice", repo)
    run(session.add_items([{"role": "user", "content": "now in ctxstore"}]))
    with pytest.raises(NonFastForward, match="went on in ctxstore"):
        import_sqlite(repo, db)
    assert len(run(session.get_items())) == len(made["alice"]) + 1
    [move] = import_sqlite(repo, db, force=True)
    assert run(session.get_items()) == made["alice"] and move.ref == session.ref


def test_rows_that_are_not_json_are_skipped_as_the_sdk_skips_them(tmp_path: Path):
    db = tmp_path / "agents.db"
    made = _sdk_database(db)
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES ('alice', '{not json')")
    repo = Repository.memory()
    import_sqlite(repo, db)
    assert run(CtxStoreSession("alice", repo).get_items()) == made["alice"]


def test_import_refuses_a_missing_file_and_one_that_is_not_such_a_database(tmp_path: Path):
    repo = Repository.memory()
    with pytest.raises(InvalidInput, match="no such file"):
        import_sqlite(repo, tmp_path / "absent.db")
    text = tmp_path / "notes.db"
    text.write_text("hello, not a database\n" * 100)
    with pytest.raises(InvalidInput, match=r"notes\.db is not an SQLite database.*agent_sessions"):
        import_sqlite(repo, text)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE things (id INTEGER)")
    with pytest.raises(InvalidInput, match=r"other\.db is an SQLite database without a agent_messages table"):
        import_sqlite(repo, other)
    assert repo.refs() == {}


# -- the CLI ------------------------------------------------------------------------------------------

def _init(path: Path) -> None:
    assert CliRunner().invoke(cli, ["init", str(path)]).exit_code == 0


def _import(repo_dir: str, kind: str, path: Path, *options: str) -> Result:
    """`ctxstore --repo <repo_dir> import [options] --from <kind> <path>`."""
    return CliRunner().invoke(cli, ["--repo", repo_dir, "import", *options, "--from", kind, str(path)])


def test_cli_import_from_openai_agents_sqlite(tmp_path: Path):
    db = tmp_path / "agents.db"
    made = _sdk_database(db)
    _init(tmp_path)
    repo_dir = str(tmp_path / ".ctxstore")
    runner = CliRunner()
    done = _import(repo_dir, "openai-agents-sqlite", db)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["from"] == "openai-agents-sqlite" and report["moved"] == 3
    assert {r["ref"] for r in report["refs"]} == {session_ref(s) for s in made}
    assert f"{session_ref('alice')}: new at " in done.stderr
    again = _import(repo_dir, "openai-agents-sqlite", db)
    assert again.exit_code == 0 and json.loads(again.stdout)["moved"] == 0
    assert "nothing new" in again.stderr
    shown = runner.invoke(cli, ["--repo", repo_dir, "render", "openai-agents/alice"])
    assert shown.exit_code == 0 and json.loads(shown.stdout) == made["alice"]

    session = CtxStoreSession.from_path("alice", repo_dir)
    run(session.add_items([{"role": "user", "content": "went on in ctxstore"}]))
    session.close()
    refused = _import(repo_dir, "openai-agents-sqlite", db)
    assert refused.exit_code == 4 and "went on in ctxstore" in refused.stderr
    forced = _import(repo_dir, "openai-agents-sqlite", db, "--force")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["moved"] == 1
    assert json.loads(runner.invoke(cli, ["--repo", repo_dir, "render", "openai-agents/alice"]).stdout) == made["alice"]


def test_cli_import_from_errors_and_exit_codes(tmp_path: Path):
    _init(tmp_path)
    repo_dir = str(tmp_path / ".ctxstore")
    text = tmp_path / "notes.txt"
    text.write_text("not sqlite")
    runner = CliRunner()
    cases = [(["--from", "openai-agents-sqlite", str(tmp_path / "absent.db")], 3, "no such file"),
             (["--from", "openai-agents-sqlite", str(text)], 2, "notes.txt is not an SQLite database"),
             (["--from", "openai-agents-sqlite", str(tmp_path)], 2, "is not a file"),
             (["--from", "openai-agents-sqlite", "--ref", "x", str(text)], 2, "drop --ref"),
             (["--from", "sqlite-of-nobody", str(text)], 2, "Invalid value")]
    for args, code, words in cases:
        done = runner.invoke(cli, ["--repo", repo_dir, "import", *args])
        assert done.exit_code == code, (args, done.output)
        assert words in done.output, done.output


def test_cli_import_from_openai_agents_sqlite_in_a_real_process(tmp_path: Path):
    db = tmp_path / "agents.db"
    made = _sdk_database(db)
    _init(tmp_path)
    command = [sys.executable, "-m", "ctxstore.cli", "--repo", str(tmp_path / ".ctxstore"), "import", "--from",
               "openai-agents-sqlite", str(db)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["moved"] == len(made)
    assert len([line for line in done.stderr.splitlines() if line.startswith("refs/heads/openai-agents/")]) == 3
    missing = subprocess.run([*command[:-1], str(tmp_path / "gone.db")], capture_output=True, text=True,
                             timeout=120, cwd=tmp_path)
    assert missing.returncode == 3 and "no such file" in missing.stderr


def test_cli_import_from_langgraph_sqlite(tmp_path: Path):
    """The langgraph option calls ctxstore.integrations.langgraph.import_sqlite on a SqliteSaver database."""
    from ctxstore.integrations import langgraph as integration

    if not hasattr(integration, "import_sqlite"):
        pytest.skip("ctxstore.integrations.langgraph.import_sqlite is not written yet")
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import START, MessagesState, StateGraph

    db = tmp_path / "graph.db"
    with SqliteSaver.from_conn_string(str(db)) as saver:
        def reply(state: MessagesState) -> dict[str, Any]:
            return {"messages": [AIMessage(f"you said {state['messages'][-1].content}")]}

        graph = StateGraph(MessagesState).add_node("reply", reply).add_edge(START, "reply").compile(checkpointer=saver)
        for thread in ("t1", "t2"):
            graph.invoke({"messages": [("user", "hi")]}, {"configurable": {"thread_id": thread}})
    _init(tmp_path)
    repo_dir = str(tmp_path / ".ctxstore")
    done = _import(repo_dir, "langgraph-sqlite", db)
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["from"] == "langgraph-sqlite" and report["moved"] >= 2
    assert any("langgraph/t1" in r["ref"] for r in report["refs"])
    again = _import(repo_dir, "langgraph-sqlite", db)
    assert again.exit_code == 0 and json.loads(again.stdout)["moved"] == 0, again.output
    wrong = _import(repo_dir, "langgraph-sqlite", tmp_path / "no.db")
    assert wrong.exit_code == 3
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database")
    wrong = _import(repo_dir, "langgraph-sqlite", notes)
    assert wrong.exit_code == 2 and "notes.txt" in wrong.stderr, wrong.output
    forced = _import(repo_dir, "langgraph-sqlite", db, "--force")
    assert forced.exit_code == 2 and "--force is not used" in forced.stderr


# -- the docs -----------------------------------------------------------------------------------------

def test_the_integrations_page_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """docs/integrations.md's OpenAI Agents SDK example runs as written."""
    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = text.split("## OpenAI Agents SDK: `CtxStoreSession`", 1)[1]
    block = section.split("```python\n", 1)[1].split("```\n", 1)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/integrations.md", "exec"), {"__name__": "docs_integrations_agents"})
