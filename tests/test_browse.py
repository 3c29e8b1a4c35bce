"""Reading as a person and finding conversations: render/show/log on a terminal, ls, grep, and the
Messages API checks on what comes in."""

from __future__ import annotations

import itertools
import json
import os
import pty
import re
import subprocess
import warnings
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import claude_session, drain
from hypothesis import given, settings
from hypothesis import strategies as st
from test_cli_subprocess import SCRIPT

from ctxstore import MessageHistory, Repository
from ctxstore.cli import cli
from ctxstore.errors import InvalidInput
from ctxstore.format.objects import Entry, encode_object
from ctxstore.history.entry import MessageHistoryEntry
from ctxstore.interop.browse import entry_fields, grep
from ctxstore.interop.formats import import_messages
from ctxstore.interop.messages import check_messages
from ctxstore.interop.prefilter import Prefilter, required_literal

TOOL_USE = {"role": "assistant", "content": [
    {"type": "text", "text": "Listing."}, {"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {"path": "."}}]}
TOOL_RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}]}
IMAGE = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                   "data": "A" * 4000}}]}


@pytest.fixture
def repo_dir(tmp_path: Path, runner: CliRunner) -> Path:
    assert runner.invoke(cli, ["-C", str(tmp_path), "init"]).exit_code == 0
    return tmp_path


def run(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(cli, ["-C", str(where), *args], input=input)


def ok(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> Any:
    result = run(runner, where, *args, input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout) if not any(a in args for a in ("--pretty",)) else result.stdout


def _conversation(runner: CliRunner, where: Path, ref: str = "main") -> None:
    messages = [{"role": "user", "content": "What is in the project? " + "word " * 60}, TOOL_USE, TOOL_RESULT,
                IMAGE, {"role": "assistant", "content": "Two files: a.py and b.py."}]
    ok(runner, where, "append", ref, input=json.dumps(messages))


def test_render_pretty_is_a_transcript_and_json_stays_the_default_in_a_pipe(repo_dir: Path,
                                                                            runner: CliRunner) -> None:
    _conversation(runner, repo_dir)
    assert ok(runner, repo_dir, "render", "main")[1] == TOOL_USE  # not a terminal: today's JSON
    text = ok(runner, repo_dir, "render", "--pretty", "main")
    assert "── user" in text and "── assistant" in text
    assert "⚙ LS {\"path\":\".\"}" in text  # the tool call on one line, with its name
    result_line = next(line for line in text.splitlines() if line.startswith("↳"))
    assert result_line.startswith("↳ LS: a.py b.py")  # the result folded, named by its tool
    assert "[image image/png, 2.9 KiB]" in text
    assert max(len(line) for line in text.splitlines()) <= 100  # wrapped
    assert json.loads(run(runner, repo_dir, "render", "--json", "main").stdout)[1] == TOOL_USE


def test_a_summary_is_marked_with_how_many_sources_it_stands_for(repo_dir: Path, runner: CliRunner) -> None:
    with Repository.open(repo_dir / ".ctxstore") as repo:
        h = repo.history("main").extend([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                         {"role": "user", "content": "c"}])
        ids = [e.id for e in h.refs()][:2]
        h = h.edit({"op": "summary", "sourceIds": ids, "replace": True,
                    "entry": {"message": {"role": "user", "content": "[Summary] a and b"}}})
        repo.commit("main", h)
    text = ok(runner, repo_dir, "render", "--pretty", "main")
    assert "summary of 2 entries" in text and "[Summary] a and b" in text


def _in_a_terminal(cwd: Path, *args: str) -> str:
    """Run ctxstore with stdout on a pseudo-terminal, as a person would; returns what it showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([SCRIPT, *args], cwd=cwd, stdout=slave, stderr=subprocess.PIPE,
                            env={**os.environ, "COLUMNS": "100", "TERM": "dumb"})
    os.close(slave)
    shown = drain(master)
    assert proc.wait(timeout=60) == 0
    return shown.decode()


def test_on_a_terminal_render_show_and_ls_are_for_people(tmp_path: Path) -> None:
    subprocess.run([SCRIPT, "init"], cwd=tmp_path, check=True, capture_output=True)
    subprocess.run([SCRIPT, "append", "main"], cwd=tmp_path, check=True, capture_output=True, text=True,
                   input=json.dumps([{"role": "user", "content": "Hello there"}, TOOL_USE, TOOL_RESULT]))
    render = _in_a_terminal(tmp_path, "render", "main")
    assert "── user" in render and "⚙ LS" in render and not render.lstrip().startswith("[")
    show = _in_a_terminal(tmp_path, "show", "main")
    assert "revision " in show and "Date:" in show and "⚙ LS" in show
    listing = _in_a_terminal(tmp_path, "ls")
    assert "title" in listing and "Hello there" in listing


def test_show_of_a_revision_shows_the_messages_it_added(repo_dir: Path, runner: CliRunner) -> None:
    ok(runner, repo_dir, "append", "main", "first")
    ok(runner, repo_dir, "append", "main", "second")
    shown = ok(runner, repo_dir, "show", "main")
    assert [e["message"]["content"] for e in shown["added"]] == ["second"]
    assert len(shown["entryIds"]) == 2
    text = ok(runner, repo_dir, "show", "--pretty", "main~1")
    assert "revision " in text and "Date:" in text and "first" in text and "second" not in text


def test_log_shows_dates_and_log_p_the_messages_each_revision_added(repo_dir: Path, runner: CliRunner) -> None:
    ok(runner, repo_dir, "append", "main", "first")
    ok(runner, repo_dir, "append", "main", "second")
    revs = ok(runner, repo_dir, "log", "main")
    assert all(r["date"].endswith("Z") and r["date"][:4].isdigit() for r in revs)
    patched = ok(runner, repo_dir, "log", "-p", "main")
    assert [[e["message"]["content"] for e in r["added"]] for r in patched] == [["second"], ["first"], []]
    text = run(runner, repo_dir, "log", "-p", "--oneline", "main").stdout
    lines = text.splitlines()
    assert lines[0].startswith(revs[0]["id"][:12]) and revs[0]["date"][:10] in lines[0]
    assert text.index("second") < text.index(revs[1]["id"][:12]) < text.index("first")


def test_ls_lists_title_messages_update_and_size_and_sorts(repo_dir: Path, runner: CliRunner) -> None:
    ok(runner, repo_dir, "append", "short", "Just one")
    _conversation(runner, repo_dir, "long")
    listing = ok(runner, repo_dir, "ls")
    assert [c["ref"] for c in listing] == ["refs/heads/long", "refs/heads/short"]
    long, short = listing
    assert set(long) == {"ref", "revision", "title", "messages", "updated", "bytes"}
    assert long["title"].startswith("What is in the project?") and short["title"] == "Just one"
    assert (long["messages"], short["messages"]) == (5, 1) and long["bytes"] > short["bytes"] > 0
    by_size = ok(runner, repo_dir, "ls", "--sort", "messages")
    assert [c["messages"] for c in by_size] == [1, 5]
    assert [c["messages"] for c in ok(runner, repo_dir, "ls", "--sort", "messages", "-r")] == [5, 1]
    table = ok(runner, repo_dir, "ls", "--pretty")
    assert "messages" in table and "Just one" in table


def test_grep_finds_text_tool_names_and_meta_with_snippets(repo_dir: Path, runner: CliRunner) -> None:
    _conversation(runner, repo_dir)
    ok(runner, repo_dir, "append", "other", "--meta", '{"source": "support-ticket-42"}', "unrelated")
    text_hits = ok(runner, repo_dir, "grep", "b\\.py")
    assert {(h["ref"], h["field"]) for h in text_hits} == {("refs/heads/main", "text")}
    assert any("a.py and b.py" in h["snippet"] for h in text_hits)
    [tool] = ok(runner, repo_dir, "grep", "--in", "tool", "^LS$")
    assert tool["field"] == "tool" and tool["entryId"]
    [meta] = ok(runner, repo_dir, "grep", "ticket-42")
    assert meta["ref"] == "refs/heads/other" and meta["field"] == "meta"
    assert ok(runner, repo_dir, "grep", "-i", "UNRELATED", "other")[0]["snippet"] == "unrelated"
    assert ok(runner, repo_dir, "grep", "-F", "a.py", "main")
    none = run(runner, repo_dir, "grep", "nothing-like-this")
    assert none.exit_code == 3 and none.stderr.count("\n") == 1
    bad = run(runner, repo_dir, "grep", "(unclosed")
    assert bad.exit_code == 2 and "-F" in bad.stderr
    assert "main" in ok(runner, repo_dir, "grep", "--pretty", "b\\.py")


def test_grep_snippets_show_context_around_the_match(repo: Repository | None = None) -> None:
    repo = Repository.memory()
    repo.append("main", [{"role": "user", "content": "x" * 200 + " needle " + "y" * 200}])
    [hit] = grep(repo, "needle")
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…") and "needle" in hit.snippet
    assert len(hit.snippet) < 100


@pytest.mark.parametrize("messages, problem", [
    ([{"role": "system", "content": "be nice"}], "role 'system'"),
    ([{"role": "user", "content": [{"type": "sparkles"}]}], "unknown type 'sparkles'"),
    ([{"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]}], "only an assistant"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t9"}]}], "no tool_use"),
    ([{"role": "user", "content": [{"type": "text"}]}], "needs a string 'text'"),
    ([{"role": "user"}], "no content"),
])
def test_messages_the_api_would_refuse_are_invalid_input(messages: list[Any], problem: str) -> None:
    with pytest.raises(InvalidInput, match=problem):
        check_messages(messages)


_USE = {"type": "tool_use", "id": "u1", "name": "ls", "input": {}}
_RESULT = {"type": "tool_result", "tool_use_id": "u1"}
_KINDS_OF_ITEM: list[Any] = [
    {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, {"role": "system", "content": "s"},
    {"role": "assistant", "content": [_USE]}, {"role": "user", "content": [_RESULT]},
    {"role": "user", "content": [_USE]}, {"role": "assistant", "content": [{"type": "text"}]},
    {"role": "user"}, {"message": {"role": "user", "content": "q"}}, {"content": "no role"}, "not a message",
]


def test_text_messages_checked_fast_are_checked_as_any_other_mapping() -> None:
    """`check_messages` takes plain dicts with text content on a fast path: for every sequence of up to three
    kinds of item, what it accepts, refuses and says is what the general path (any other Mapping) gives."""
    def outcome(messages: list[Any]) -> str | None:
        try:
            check_messages(messages)
        except InvalidInput as e:
            return str(e)
        return None
    refused = 0
    for length in range(1, 4):
        for items in itertools.product(_KINDS_OF_ITEM, repeat=length):
            general = [MappingProxyType(i) if isinstance(i, dict) else i for i in items]
            assert outcome(list(items)) == outcome(general), items
            refused += outcome(list(items)) is not None
    assert 0 < refused < sum(len(_KINDS_OF_ITEM) ** n for n in range(1, 4))


def test_append_checks_messages_as_the_api_would(repo_dir: Path, runner: CliRunner) -> None:
    refused = run(runner, repo_dir, "append", "main", input=json.dumps({"role": "system", "content": "x"}))
    assert refused.exit_code == 2 and "role 'system'" in refused.stderr and refused.stderr.count("\n") == 1
    orphan = run(runner, repo_dir, "append", "main", input=json.dumps(TOOL_RESULT))
    assert orphan.exit_code == 2 and "toolu_1" in orphan.stderr
    ok(runner, repo_dir, "append", "main", input=json.dumps(TOOL_USE))
    ok(runner, repo_dir, "append", "main", input=json.dumps(TOOL_RESULT))  # answers the view's last tool_use
    assert len(ok(runner, repo_dir, "render", "main")) == 2


def test_importing_a_message_list_twice_does_not_duplicate_entries(repo_dir: Path, runner: CliRunner,
                                                                  tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    messages = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}]
    path.write_text(json.dumps(messages))
    ok(runner, repo_dir, "import", str(path), "--ref", "main")
    again = ok(runner, repo_dir, "import", str(path), "--ref", "main")
    assert again["refs"] == {} and ok(runner, repo_dir, "render", "main") == messages
    path.write_text(json.dumps([*messages, {"role": "user", "content": "three"}]))
    ok(runner, repo_dir, "import", str(path), "--ref", "main")
    assert [m["content"] for m in ok(runner, repo_dir, "render", "main")] == ["one", "two", "three"]


@settings(max_examples=40, deadline=None)
@given(view=st.lists(st.sampled_from(["a", "b", "c"]), max_size=6),
       incoming=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=6))
def test_an_import_appends_only_what_the_view_does_not_already_end_with(view: list[str], incoming: list[str]) -> None:
    """The view after the import ends with the incoming list, and importing it again changes nothing."""
    repo = Repository.memory()
    as_messages = [{"role": "user", "content": t} for t in incoming]
    if view:
        repo.append("main", [{"role": "user", "content": t} for t in view])
    import_messages(repo, "main", as_messages)
    after = repo.history("main").render()
    assert after[-len(incoming):] == as_messages and after[:len(view)] == [{"role": "user", "content": t}
                                                                           for t in view]
    assert len(after) <= len(view) + len(incoming)
    assert import_messages(repo, "main", as_messages).refs == {}


def test_ls_and_grep_read_an_imported_session(repo_dir: Path, runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(claude_session(150).lines()) + "\n")
    ok(runner, repo_dir, "import", str(path), "--ref", "cc")
    [main] = [c for c in ok(runner, repo_dir, "ls") if c["ref"] == "refs/heads/cc"]
    assert main["title"] == "Refactoring the parser"
    hits = ok(runner, repo_dir, "grep", "--in", "tool", "Task")
    assert hits and all(h["ref"] == "refs/heads/cc" for h in hits)


# -- the search's byte prefilter: never skips an entry that matches ------------------------------------

_PATTERN_CHARS = st.sampled_from(list("ab1 .*+?|()[]{}\\^$-:\"ntu0"))
_TEXT = st.text(st.sampled_from(list("ab1 -:\"\\\nntu0\x01KkSsIi\u212a\u017f\u0130\u0131{}[],")), max_size=12)
_META = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-50, 50), st.floats(allow_nan=False,
                                                                                       allow_infinity=False),
                               _TEXT),
                     lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)),
                     max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(pattern=st.text(_PATTERN_CHARS, max_size=8), text=st.text(st.sampled_from(list("ab1 -.")), max_size=12))
def test_every_match_of_a_pattern_holds_its_required_literal(pattern: str, text: str) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # "possible nested set": a pattern like [[
            regex = re.compile(pattern)
    except re.error:
        return
    literal = required_literal(pattern, fixed=False)
    hit = regex.search(text)
    if literal is not None and hit is not None:
        assert literal in hit.group(0)


def _entry_bytes(message: dict[str, Any], meta: dict[str, Any] | None) -> tuple[bytes, MessageHistoryEntry]:
    entry = Entry("e1", "turn", message, meta)
    return encode_object(entry)[1], MessageHistoryEntry("e1", message, "turn", meta)


@settings(max_examples=400, deadline=None)
@given(texts=st.lists(_TEXT, min_size=1, max_size=3), tool=_TEXT, meta=st.one_of(st.none(), st.dictionaries(
    _TEXT, _META, min_size=1, max_size=3)), start=st.integers(0, 200), length=st.integers(1, 8),
    ignore_case=st.booleans(), swap=st.booleans())
def test_the_prefilter_never_skips_an_entry_that_matches(texts: list[str], tool: str, meta: dict[str, Any] | None,
                                                         start: int, length: int, ignore_case: bool,
                                                         swap: bool) -> None:
    """A literal cut from what a search reads (texts, a tool name, the meta as JSON), its case maybe
    changed: when the entry matches it, the bytes test lets the entry through."""
    message = {"role": "assistant", "content": [*({"type": "text", "text": t} for t in texts),
                                                {"type": "tool_use", "id": "t", "name": tool, "input": {}}]}
    data, entry = _entry_bytes(message, meta)
    searched = "\x00".join(text for _, text in entry_fields(entry))
    literal = searched[start % len(searched):][:length].split("\x00")[0] or "a"
    if swap:
        literal = literal.swapcase()
    regex = re.compile(re.escape(literal), re.IGNORECASE if ignore_case else 0)
    prefilter = Prefilter.of(literal, fixed=True, ignore_case=ignore_case)
    if prefilter is not None and any(regex.search(text) for _, text in entry_fields(entry)):
        assert prefilter.may_match(data)


def test_the_prefilter_skips_entries_without_the_literal() -> None:
    prefilter = Prefilter.of("needle-[0-9]+", fixed=False, ignore_case=False)
    assert prefilter is not None
    data, _ = _entry_bytes({"role": "user", "content": "hay and straw"}, None)
    assert not prefilter.may_match(data)
    with_meta, _ = _entry_bytes({"role": "user", "content": "hay"}, {"cwd": "/home"})
    assert not prefilter.may_match(with_meta)
    found, _ = _entry_bytes({"role": "user", "content": "a needle-7"}, None)
    assert prefilter.may_match(found)
    assert Prefilter.of("a|b", fixed=False, ignore_case=False) is None  # an alternation has no required literal
    assert required_literal("(?i)abc", fixed=False) is None and required_literal("ab{0,2}c", fixed=False) == "a"


def test_grep_finds_text_in_blobs_and_meta_written_as_json(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r") as repo:
        big = "word " * 2000 + "needle in a blob"
        repo.append("main", [{"role": "user", "content": big},
                             {"id": "m", "message": {"role": "user", "content": "x"},
                              "meta": {"note": "line\nnext", "count": 12345, "flag": True}}])
        assert [h.field for h in grep(repo, "needle in a blob")] == ["text"]
        assert [(h.entry_id, h.field) for h in grep(repo, "nnext")] == [("m", "meta")]  # the JSON escape \n
        assert [(h.entry_id, h.field) for h in grep(repo, "12345")] == [("m", "meta")]  # a number
        assert [h.entry_id for h in grep(repo, '"flag": true')] == ["m"]
        assert [h.entry_id for h in grep(repo, "NEXT", ignore_case=True)] == ["m"]


def test_grep_reads_forks_and_tags_once_and_reports_each_ref(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r") as repo:
        repo.append("main", [{"role": "user", "content": f"message {n}"} for n in range(50)])
        repo.append("main", [{"role": "user", "content": "needle at the end"}])
        repo.commit("fork", repo.history("main").fork())
        repo.append("fork", [{"role": "assistant", "content": "another needle"}])
        repo.set_ref("refs/tags/v1", repo.resolve("main"))
        hits = [(h.ref, h.snippet) for h in grep(repo, "needle")]
        assert hits == [("refs/heads/fork", "needle at the end"), ("refs/heads/fork", "another needle"),
                        ("refs/heads/main", "needle at the end"), ("refs/tags/v1", "needle at the end")]


def test_grep_reads_a_view_revision_that_names_entries_by_id(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r") as repo:
        history = repo.history("main").extend([{"id": "a", "message": {"role": "user", "content": "needle one"}},
                                               {"id": "b", "message": {"role": "user", "content": "hay"}}])
        repo.commit("main", history.with_view(["b", "a"]))
        assert [h.entry_id for h in grep(repo, "needle", ["main"])] == ["a"]


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.tuples(_TEXT, st.one_of(st.none(), st.dictionaries(_TEXT, _META, min_size=1, max_size=2)),
                                st.booleans()), max_size=6),
       literal=st.sampled_from(["a", "ab", "na", "u0", "K", "s-", "1 a", "true", "b\"", "X "]),
       ignore_case=st.booleans())
def test_deciding_many_entries_at_once_agrees_with_one_at_a_time(parts: list[tuple[str, Any, bool]], literal: str,
                                                                 ignore_case: bool) -> None:
    datas = []
    for text, meta, blob in parts:
        content: Any = [{"type": "text", "text": text}, b"\x01" * 32] if blob else text
        datas.append(encode_object(Entry("e", "turn", {"role": "user", "content": content}, meta))[1])
    prefilter = Prefilter.of(literal, fixed=True, ignore_case=ignore_case)
    if prefilter is not None:
        assert prefilter.may_match_many(datas) == [prefilter.may_match(d) for d in datas]


def _plain_grep(repo: Repository, regex: re.Pattern[str]) -> list[tuple[str, str, str, str]]:
    """The search as a reader would do it by hand: every view read through its history."""
    out = []
    for name, revision in sorted(repo.refs().items()):
        for entry in MessageHistory(source=repo.store, head=revision).refs():
            done: set[str] = set()
            for field, text in entry_fields(entry):
                hit = regex.search(text)
                if hit is not None and field not in done:
                    done.add(field)
                    start, end = max(0, hit.start() - 40), min(len(text), hit.end() + 40)
                    snippet = ("…" if start else "") + " ".join(text[start:end].split()) + ("…" if end < len(text)
                                                                                           else "")
                    out.append((name, entry.id, field, snippet))
    return out


@settings(max_examples=40, deadline=None)
@given(conversations=st.lists(st.lists(st.tuples(_TEXT, st.one_of(st.none(), st.dictionaries(_TEXT, _META,
                                                                                           min_size=1, max_size=2)),
                                                  st.booleans()), min_size=1, max_size=4), min_size=1, max_size=3),
       pattern=st.sampled_from(["a", "ab", "n", "u0", "k", "1", "true", "b\"", "a|b", "[ab]1", "a+b", "0 "]),
       ignore_case=st.booleans(), fork=st.booleans())
def test_grep_finds_what_reading_every_view_finds(conversations: list[list[tuple[str, Any, bool]]], pattern: str,
                                                  ignore_case: bool, fork: bool) -> None:
    """The batched, prefiltered search gives exactly the matches of reading each view through its history."""
    repo = Repository.memory()
    for number, turns in enumerate(conversations):
        entries = []
        for text, meta, big in turns:
            content = text + " filler" * 900 if big else text  # a big one is stored as a blob
            entries.append({"message": {"role": "user", "content": content}, **({"meta": meta} if meta else {})})
        repo.append(f"c{number}", entries)
        if fork:
            repo.commit(f"c{number}/fork", repo.history(f"c{number}").fork())
            repo.append(f"c{number}/fork", [{"role": "assistant", "content": text + "!"}])
    regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
    found = [(m.ref, m.entry_id, m.field, m.snippet) for m in grep(repo, pattern, ignore_case=ignore_case)]
    assert found == _plain_grep(repo, regex)
