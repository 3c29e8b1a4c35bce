"""Import and export: JSON and JSONL messages, snapshots (ours and the TypeScript shape), Claude Code."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import msg

from ctxstore import Repository
from ctxstore.errors import InvalidInput, NonFastForward
from ctxstore.interop import (
    detect_format,
    export_ref,
    import_claude_code,
    import_file,
    import_messages,
    import_snapshot,
    parse_claude_code,
    write_export,
)


@pytest.fixture
def repo() -> Repository:
    return Repository.memory()


# -- messages ----------------------------------------------------------------------------------------

def test_json_list_import_appends_in_order(repo: Repository, tmp_path: Path) -> None:
    messages = [msg(f"m{i}", "user" if i % 2 == 0 else "assistant") for i in range(2500)]
    path = tmp_path / "conv.json"
    path.write_text(json.dumps(messages))
    result = import_file(repo, path, "main")
    assert result.entries == 2500 and list(result.refs) == ["refs/heads/main"]
    assert repo.history("main").render() == messages


def test_jsonl_import_and_export_round_trip(repo: Repository, tmp_path: Path) -> None:
    messages = [msg("hello"), msg([{"type": "text", "text": "hi"}], "assistant")]  # type: ignore[arg-type]
    path = tmp_path / "conv.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in messages) + "\n")
    assert detect_format(path.read_text()) == "jsonl"
    import_file(repo, path, "main")
    out = export_ref(repo, "main", format="jsonl")
    assert [json.loads(line) for line in out.splitlines()] == messages
    assert json.loads(export_ref(repo, "main", format="json")) == messages


def test_entries_with_ids_round_trip(repo: Repository) -> None:
    import_messages(repo, "main", [{"id": "a", "message": msg("x")}, {"id": "b", "message": msg("y"),
                                                                     "meta": {"k": 1}}])
    text = export_ref(repo, "main", format="jsonl", with_ids=True)
    other = Repository.memory()
    import_file(other, io.StringIO(text), "copy")
    assert [e.id for e in other.history("copy").refs()] == ["a", "b"]
    assert other.history("copy").refs()[1].meta == {"k": 1}


def test_a_bad_message_leaves_the_repository_unchanged(repo: Repository) -> None:
    import_messages(repo, "main", [msg("keep")])
    before = (repo.refs(), len(repo.store))
    with pytest.raises(InvalidInput, match="message"):
        import_messages(repo, "main", [msg("fine"), {"content": "no role"}])
    with pytest.raises(InvalidInput):
        import_file(repo, io.StringIO('{"role": "user"}\nnot json\n{"role": "user"}\n'), "main")
    assert (repo.refs(), len(repo.store)) == before


def test_import_into_an_existing_ref_appends(repo: Repository) -> None:
    import_messages(repo, "main", [msg("1")])
    import_messages(repo, "main", [msg("2")])
    assert [m["content"] for m in repo.history("main").render()] == ["1", "2"]


# -- snapshots ---------------------------------------------------------------------------------------

def test_snapshot_export_and_import_keep_the_lineage(repo: Repository) -> None:
    h = repo.history("main").extend([msg("a"), msg("b")]).edit({"op": "remove", "id": "nope"})
    h = h.append(msg("c"))
    repo.commit("main", h)
    snapshot = json.loads(export_ref(repo, "main", format="snapshot"))
    assert detect_format(json.dumps(snapshot)) == "snapshot"
    other = Repository.memory()
    result = import_snapshot(other, "restored", snapshot)
    assert other.history("restored").render() == repo.history("main").render()
    assert len(list(other.iter_revisions("restored"))) == len(list(repo.iter_revisions("main")))
    assert result.refs["refs/heads/restored"] == other.head("restored")


def test_typescript_snapshot_loads(repo: Repository) -> None:
    snapshot = {
        "entries": [
            {"id": "u1", "kind": "turn", "message": msg("question")},
            {"id": "a1", "kind": "turn", "message": msg("answer", "assistant")},
        ],
        "revisions": [
            {"id": "r0", "entryIds": [], "createdAt": 1},
            {"id": "r1", "entryIds": ["u1"], "parent": "r0", "createdAt": 2,
             "operation": {"type": "append", "entryIds": ["u1"]}},
            {"id": "r2", "entryIds": ["u1", "a1"], "parent": "r1", "createdAt": 3,
             "operation": {"type": "append", "entryIds": ["a1"]}},
        ],
        "head": "r2",
    }
    import_file(repo, io.StringIO(json.dumps(snapshot)), "ts")
    assert repo.history("ts").render() == [msg("question"), msg("answer", "assistant")]


def test_snapshot_import_over_an_unrelated_ref_needs_force(repo: Repository) -> None:
    import_messages(repo, "main", [msg("mine")])
    snapshot = Repository.memory().history("x").append(msg("theirs")).to_snapshot()
    with pytest.raises(NonFastForward):
        import_snapshot(repo, "main", snapshot)
    import_snapshot(repo, "main", snapshot, force=True)
    assert repo.history("main").render() == [msg("theirs")]


# -- Claude Code transcripts -------------------------------------------------------------------------

def _rec(uuid: str, parent: str | None, kind: str, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message = {"id": extra.pop("mid", f"msg_{uuid}"), "role": "assistant", "model": "claude-sonnet-4-6",
                   "content": content}
    return {"uuid": uuid, "parentUuid": parent, "type": kind, "message": message, "sessionId": "sess-1",
            "isSidechain": extra.pop("sidechain", False), "timestamp": "2026-01-01T00:00:00Z", **extra}


TRANSCRIPT: list[dict[str, Any]] = [
    {"type": "summary", "summary": "A session title", "leafUuid": "u9"},
    _rec("u1", None, "user", "List the files"),
    _rec("a1", "u1", "assistant", [{"type": "text", "text": "Looking."}], mid="m1"),
    _rec("a2", "a1", "assistant", [{"type": "tool_use", "id": "t1", "name": "ls", "input": {}}], mid="m1"),
    _rec("u2", "a2", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": "a.py"}]),
    {"type": "file-history-snapshot", "messageId": "x", "snapshot": {}},
    _rec("a3", "u2", "assistant", [{"type": "text", "text": "One file: a.py"}]),
    # A subagent's sidechain: its first record has no parent.
    _rec("s1", None, "user", "Subagent task", sidechain=True),
    _rec("s2", "s1", "assistant", [{"type": "text", "text": "Subagent done"}], sidechain=True),
    # A retried turn: a second child of u1.
    _rec("r1", "u1", "assistant", [{"type": "text", "text": "A different first answer"}]),
    # Compaction: a boundary (no parent, a logical parent), then the summary, then more conversation.
    {"uuid": "b1", "parentUuid": None, "logicalParentUuid": "a3", "type": "system",
     "subtype": "compact_boundary", "content": "Conversation compacted", "sessionId": "sess-1",
     "compactMetadata": {"trigger": "manual", "preTokens": 1234}},
    _rec("c1", "b1", "user", "This session is being continued. Summary: listed files.",
         isCompactSummary=True),
    _rec("u9", "c1", "user", "Thanks"),
    _rec("a9", "u9", "assistant", [{"type": "text", "text": "You're welcome"}]),
]


def test_claude_code_transcript_becomes_refs_forks_and_summaries(repo: Repository, tmp_path: Path) -> None:
    path = tmp_path / "sess-1.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in TRANSCRIPT) + "\n")
    assert detect_format(path.read_text()) == "claude"
    result = import_file(repo, path)
    assert set(result.refs) == {"refs/heads/claude/sess-1", "refs/heads/claude/sess-1/sidechain-s1",
                                "refs/heads/claude/sess-1/fork-r1"}
    main = repo.history("claude/sess-1")
    entries = main.refs()
    # After the compaction the view is the summary and what followed; the summary's id is its record's.
    assert [e.id for e in entries] == ["c1", "u9", "a9"]
    assert entries[0].kind == "summary" and entries[0].sources == ["u1", "a1", "u2", "a3"]
    assert entries[0].meta is not None and entries[0].meta["claudeCode"]["uuid"] == "c1"
    # Nothing was dropped: restoring the summary gives the conversation before it.
    restored = main.restore()
    assert [m["role"] for m in restored] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    # The two records of one assistant message are one entry again.
    assert [b["type"] for b in restored[1]["content"]] == ["text", "tool_use"]
    # A subagent's sidechain is a conversation of its own, valid for the Messages API.
    side = repo.history("claude/sess-1/sidechain-s1").render()
    assert side == [msg("Subagent task"), {"role": "assistant", "content": [
        {"type": "text", "text": "Subagent done"}]}]
    fork = repo.history("claude/sess-1/fork-r1").render()
    assert fork == [msg("List the files"), {"role": "assistant", "content": [
        {"type": "text", "text": "A different first answer"}]}]
    assert repo.fsck().ok


def test_reimporting_a_transcript_changes_nothing(repo: Repository) -> None:
    first = import_claude_code(repo, TRANSCRIPT, "cc")
    before, reflog = repo.refs(), repo.reflog("cc")
    again = import_claude_code(repo, TRANSCRIPT, "cc")
    assert again.refs == {} and sorted(again.unchanged) == sorted(first.refs)
    assert again.revision == first.revision and repo.refs() == before and repo.reflog("cc") == reflog


def test_a_transcript_that_does_not_continue_the_ref_needs_force(repo: Repository) -> None:
    import_claude_code(repo, TRANSCRIPT, "cc")
    before = repo.refs()
    other = [_rec("x1", None, "user", "Something else"),
             _rec("x2", "x1", "assistant", [{"type": "text", "text": "ok"}])]
    with pytest.raises(NonFastForward):
        import_claude_code(repo, other, "cc")
    assert repo.refs() == before
    import_claude_code(repo, other, "cc", force=True)
    assert [e.id for e in repo.history("cc").refs()] == ["x1", "x2"]


def test_a_compaction_without_summary_record_becomes_a_summary_entry(repo: Repository) -> None:
    records = [_rec("u1", None, "user", "hi"), _rec("a1", "u1", "assistant", "hello"),
               {"uuid": "b1", "parentUuid": None, "logicalParentUuid": "a1", "type": "system",
                "subtype": "compact_boundary", "content": "Conversation compacted"},
               _rec("u2", "b1", "user", "next")]
    import_claude_code(repo, records, "cc")
    entries = repo.history("cc").refs()
    assert [(e.id, e.kind) for e in entries] == [("b1", "summary"), ("u2", "turn")]
    assert entries[0].sources == ["u1", "a1"]


def test_a_transcript_without_messages_is_refused(repo: Repository) -> None:
    with pytest.raises(InvalidInput):
        import_claude_code(repo, [{"type": "summary", "summary": "t"}])
    assert repo.refs() == {}


def test_export_of_an_unknown_ref_is_an_error(repo: Repository) -> None:
    with pytest.raises(KeyError):
        write_export(repo, "nothing", io.StringIO())
    with pytest.raises(InvalidInput):
        export_ref(repo, "main", format="xml")


# -- detection, and what bad input raises ----------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ('[{"role": "user", "content": "hi"}]', "json"),
    ('{"messages": [{"role": "user", "content": "hi"}]}', "json"),
    ('{\n  "messages": []\n}\n', "json"),
    ('{"entries": [], "revisions": [], "head": "r"}', "snapshot"),
    ('{\n  "entries": [],\n  "revisions": [],\n  "head": "r"\n}\n', "snapshot"),
    ('{"role": "user", "content": "a"}\n{"role": "assistant", "content": "b"}\n', "jsonl"),
    ('{"id": "a", "kind": "turn", "message": {"role": "user", "content": "a"}}\n', "jsonl"),
    ('{"type": "summary", "summary": "A title", "leafUuid": "u1"}\n{"uuid": "u1", "type": "user"}\n', "claude"),
    ('{"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}\n', "claude"),
    ('{"uuid": "u1", "parentUuid": null, "sessionId": "s", "type": "user"}\n', "claude"),
])
def test_detect_format_tells_every_format_from_its_content(text: str, expected: str) -> None:
    assert detect_format(text) == expected


def test_a_transcript_opening_with_summary_records_imports_through_import_file(repo: Repository) -> None:
    records = [{"type": "summary", "summary": "first title", "leafUuid": "a1"},
               {"type": "summary", "summary": "second title", "leafUuid": "a1"},
               _rec("u1", None, "user", "hi"), _rec("a1", "u1", "assistant", "hello")]
    result = import_file(repo, io.StringIO("".join(json.dumps(r) + "\n" for r in records)), "cc")
    assert result.format == "claude" and result.ref == "refs/heads/cc" and result.size == 2
    assert [e.id for e in repo.history("cc").refs()] == ["u1", "a1"]


def test_a_transcript_file_may_end_in_half_a_record_but_jsonl_may_not(repo: Repository, tmp_path: Path) -> None:
    """Claude Code may be writing the session still; a message file with a broken last line is refused."""
    path = tmp_path / "live.jsonl"
    path.write_text(json.dumps(_rec("u1", None, "user", "hi")) + "\n" + '{"uuid": "u2", "par')
    assert import_file(repo, path, "cc").size == 1
    with pytest.raises(InvalidInput, match="line 2"):
        import_file(repo, io.StringIO('{"role": "user", "content": "a"}\n{"role": "us'), "main", format="jsonl")


def test_import_result_says_what_the_import_did(repo: Repository) -> None:
    result = import_file(repo, io.StringIO('[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]'),
                         "main")
    assert result.to_dict() == {"format": "json", "ref": "refs/heads/main", "revision": repo.head("main"),
                                "unchanged": [], "skipped": [],
                                "size": 2, "entries": 2, "refs": {"refs/heads/main": repo.head("main")}}


def _bad_utf8(tmp_path: Path) -> Path:
    path = tmp_path / "latin1.json"
    path.write_bytes('[{"role": "user", "content": "café"}]'.encode("latin-1"))
    return path


@pytest.mark.parametrize(("source", "fmt", "problem"), [
    (lambda p: p / "missing.json", None, "no file"),
    (lambda p: p, None, "cannot read"),  # a directory
    (_bad_utf8, None, "not UTF-8"),
    (lambda p: io.StringIO(""), None, "empty"),
    (lambda p: io.StringIO("plain text"), None, "not JSON"),
    (lambda p: io.StringIO("[1, 2"), None, "not JSON"),
    (lambda p: io.StringIO("[" * 100_000), "json", "not JSON|too deeply"),
    (lambda p: io.StringIO("[1, 2]"), None, "message 1 is not a JSON object"),
    (lambda p: io.StringIO('{"messages": 5}'), "json", "list of messages"),
    (lambda p: io.StringIO('"text"'), "json", "list of messages"),
    (lambda p: io.StringIO("[]"), None, "no messages"),
    (lambda p: io.StringIO('[{"role": 5, "content": "x"}]'), None, "message 1"),
    (lambda p: io.StringIO('{"role": "user", "content": "a"}\n[1]\n'), "jsonl", "message 2"),
    (lambda p: io.StringIO("[]"), "xml", "unknown import format"),
    (lambda p: io.StringIO('{"entries": 1, "revisions": [], "head": "r"}'), None, "lists"),
    (lambda p: io.StringIO('{"entries": [], "revisions": [{"id": "r"}], "head": "r"}'), None, "snapshot"),
    (lambda p: io.StringIO('{"entries": [5], "revisions": [], "head": "r"}'), None, "snapshot"),
    (lambda p: io.StringIO('{"entries": [], "revisions": [], "head": "nowhere"}'), None, "snapshot"),
    (lambda p: io.StringIO('[1]'), "snapshot", "snapshot"),
    (lambda p: io.StringIO('{"uuid": "u1", "type": "user", "message": "hi"}\n'), None, "no user or assistant"),
    (lambda p: io.StringIO('{"uuid": "u1"}\n[1]\n{"uuid": "u2"}\n'), "claude", "no user or assistant"),
    (lambda p: io.StringIO('{"uuid": "u1", "type": "user", "message": {"role": "user", "content": NaN}}\n'),
     "claude", "no user or assistant"),
])
def test_bad_input_is_invalid_input_naming_the_problem(repo: Repository, tmp_path: Path, source: Any,
                                                       fmt: str | None, problem: str) -> None:
    """No other exception escapes an import; the repository is left as it was."""
    with pytest.raises(InvalidInput, match=problem):
        import_file(repo, source(tmp_path), "main", format=fmt)
    assert repo.refs() == {}


def test_records_that_are_not_json_data_are_invalid_input(repo: Repository) -> None:
    record = _rec("u1", None, "user", [{"type": "text", "text": "hi", "extra": {1, 2}}])
    with pytest.raises(InvalidInput, match="u1"):
        import_claude_code(repo, [record], "cc")
    with pytest.raises(InvalidInput, match="1 malformed line"):
        import_claude_code(repo, ["not a record", *TRANSCRIPT], "cc", strict=True)
    assert repo.refs() == {}


def test_parse_claude_code_gives_the_step_tree() -> None:
    transcript = parse_claude_code(TRANSCRIPT)
    assert transcript.session == "sess-1"
    assert transcript.order[:4] == ["u1", "a1", "u2", "a3"]
    joined = transcript.steps["a1"]
    assert joined.uuids == ["a1", "a2"] and joined.parent == "u1" and joined.children == ["u2"]
    assert transcript.steps["u1"].children == ["a1", "r1"]
    assert (transcript.steps["b1"].kind, transcript.steps["c1"].kind) == ("boundary", "summary")


def test_messages_with_a_value_that_cannot_be_stored_are_invalid_input(repo: Repository) -> None:
    with pytest.raises(InvalidInput, match="message 1"):
        import_messages(repo, "main", [{"role": "user", "content": float("nan")}])
    assert repo.refs() == {}
