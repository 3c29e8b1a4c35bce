"""Claude Code sessions in and out: real-format transcripts imported, re-imported, continued and exported."""

from __future__ import annotations

import itertools
import json
import os
import pty
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import SESSION, ClaudeSession, claude_session, drain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli_subprocess import SCRIPT, ctxstore

from ctxstore import MessageHistory, Repository
from ctxstore.errors import InvalidInput
from ctxstore.interop.claude_code import import_claude_code, parse_claude_code
from ctxstore.interop.formats import export_ref, import_file
from ctxstore.interop.messages import check_messages
from ctxstore.interop.projects import import_projects

MALFORMED = {10: '{"type": "user", "uuid": ', 700: "not json at all", 1500: "[1, 2]"}
"""Bad lines put in before the records at these indexes: half a record, text, a JSON value that is no record."""


@pytest.fixture
def repo() -> Repository:
    return Repository.memory()


def _write(path: Path, session: ClaudeSession, upto: int | None = None) -> list[int]:
    """Write the session (its first `upto` records) with the malformed lines; returns their line numbers."""
    lines = session.lines({i: t for i, t in MALFORMED.items() if upto is None or i < upto})
    if upto is not None:
        lines = lines[: upto + sum(1 for i in MALFORMED if i < upto)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return [n for n, line in enumerate(lines, 1) if line in MALFORMED.values()]


def _meta(entry: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = entry["meta"]["claudeCode"]
    return info


@pytest.fixture(scope="module")
def grown() -> tuple[ClaudeSession, int]:
    """A session of about 2,000 records, and how many records it had when first imported."""
    session = ClaudeSession()
    while len(session.records) < 1200:
        session.turn()
    first = len(session.records)
    while len(session.records) < 2000:
        session.turn()
    return session, first


def test_a_real_format_session_imports_reimports_continues_and_exports_through_the_cli(
        tmp_path: Path, grown: tuple[ClaudeSession, int]) -> None:
    """Done means: 2,000 records of every kind with malformed lines, through real processes."""
    session, first = grown
    path = tmp_path / f"{SESSION}.jsonl"
    bad = _write(path, session, first)
    ctxstore(tmp_path, "init")
    out = ctxstore(tmp_path, "import", str(path))
    result = json.loads(out.stdout)
    ref = f"refs/heads/claude/{SESSION}"
    assert result["format"] == "claude" and result["ref"] == ref and result["skipped"] == bad
    assert f"skipped {len(bad)} malformed line(s): {', '.join(map(str, bad))}" in out.stderr
    strict = ctxstore(tmp_path, "import", "--strict", str(path), check=False)
    assert strict.returncode == 2 and str(bad[0]) in strict.stderr and strict.stderr.count("\n") == 1
    old_head = result["revision"]

    refs = ctxstore(tmp_path, "refs").stdout
    again = json.loads(ctxstore(tmp_path, "import", str(path)).stdout)
    assert again["refs"] == {} and ctxstore(tmp_path, "refs").stdout == refs

    all_bad = _write(path, session)  # the session grew: the same file, longer
    grew = json.loads(ctxstore(tmp_path, "import", str(path)).stdout)  # no --force: a fast-forward
    assert grew["skipped"] == all_bad and ref in grew["refs"] and grew["revision"] != old_head
    lineage = [r["id"] for r in json.loads(ctxstore(tmp_path, "log", f"claude/{SESSION}").stdout)]
    assert old_head in lineage

    # log shows when the conversation happened: the transcript's timestamps, not the import's.
    log = json.loads(ctxstore(tmp_path, "log", "-n", "3", f"claude/{SESSION}").stdout)
    assert all(r["date"].startswith("2026-01-01") for r in log)

    entries = json.loads(ctxstore(tmp_path, "render", "--entries", f"claude/{SESSION}").stdout)
    view = [e["message"] for e in entries]
    check_messages(view)  # valid for the Messages API as it is
    summary = entries[0]
    assert summary["kind"] == "summary" and _meta(summary)["compactMetadata"] == {"trigger": "auto",
                                                                                  "preTokens": 150000}
    restored = json.loads(ctxstore(tmp_path, "render", "--restore", f"claude/{SESSION}").stdout)
    assert restored[0] == {"role": "user", "content": "Step 1: please change parser1.py"}
    assert any(isinstance(m["content"], list) and m["content"][0]["type"] == "thinking" for m in restored)
    assert any(isinstance(m["content"], list) and any(b["type"] == "image" for b in m["content"]) for m in restored)
    assert all(_meta(e)["cwd"] == "/home/me/project" and _meta(e)["gitBranch"] == "main" for e in entries)
    assert all(_meta(e)["timestamp"].startswith("2026-01-01T") for e in entries)

    listing = json.loads(ctxstore(tmp_path, "ls", "--json").stdout)
    main = next(c for c in listing if c["ref"] == ref)
    assert main["title"] == "Refactoring the parser" and main["messages"] == len(entries)
    sidechains = [c["ref"] for c in listing if "/sidechain-" in c["ref"]]
    assert len(sidechains) == session.turns // 4
    with Repository.open(tmp_path / ".ctxstore", readonly=True) as repo:
        for side in sidechains:
            side_entries = [e.to_dict() for e in repo.history(side).refs()]
            check_messages([e["message"] for e in side_entries])
            assert side_entries[0]["message"]["content"].startswith("Find uses of parse")
            assert _meta(side_entries[0])["agentId"].startswith("agent") and _meta(side_entries[0])["branchedFrom"]

    exported = tmp_path / "exported.jsonl"
    ctxstore(tmp_path, "export", f"claude/{SESSION}", "--format", "claude", "--session", SESSION, "-o", str(exported))
    records = [json.loads(line) for line in exported.read_text().splitlines()]
    assert records[0] == {"type": "summary", "summary": "Refactoring the parser", "leafUuid": records[-1]["uuid"]}
    chain = [r for r in records if "uuid" in r]
    assert chain[0]["parentUuid"] is None and all(r["sessionId"] == SESSION for r in chain)
    assert all(b["parentUuid"] == a["uuid"] for a, b in itertools.pairwise(chain))
    ctxstore(tmp_path, "import", str(exported), "--ref", "back")
    assert (json.loads(ctxstore(tmp_path, "render", "--entries", "back").stdout) and
            [(e["id"], e["message"]) for e in json.loads(ctxstore(tmp_path, "render", "--entries", "back").stdout)]
            == [(e["id"], e["message"]) for e in entries])


def test_system_records_titles_and_subagents_are_kept_in_meta(repo: Repository) -> None:
    session = claude_session(300)
    import_claude_code(repo, session.records, "cc")
    everything = [e for name in repo.refs() for e in repo.history(name).refs()]
    notes = [s for e in everything for s in (e.meta or {})["claudeCode"].get("system", [])]
    assert notes and all(n["subtype"] == "informational" and n["content"].startswith("Hook ran") for n in notes)
    first = repo.history("cc").restore()[0]
    assert first["content"] == "Step 1: please change parser1.py"
    first_uuid = next(r["uuid"] for r in session.records if r.get("type") == "user")
    [opening] = repo.history("cc").refs([first_uuid])
    assert opening.meta is not None and opening.meta["claudeCode"]["title"] == "Refactoring the parser"
    agents = {e.meta["claudeCode"].get("agentId") for e in everything if e.meta} - {None}  # type: ignore[union-attr]
    assert agents == {f"agent{t:04d}" for t in range(4, session.turns + 1, 4)}


def test_streamed_records_of_one_message_are_one_entry(repo: Repository) -> None:
    session = claude_session(40)
    transcript = parse_claude_code(session.records)
    streamed = [r for r in session.records if r.get("type") == "assistant"]
    ids = {r["message"]["id"] for r in streamed}
    assistant_steps = [s for s in transcript.steps.values() if s.message["role"] == "assistant"]
    assert len(assistant_steps) == len(ids) < len(streamed)
    three = next(s for s in assistant_steps if len(s.uuids) == 3)
    assert [b["type"] for b in three.message["content"]] == ["thinking", "text", "tool_use"]


def test_malformed_records_are_skipped_with_their_line_numbers_or_refused_when_strict(
        repo: Repository, tmp_path: Path) -> None:
    session = claude_session(60)
    path = tmp_path / "s.jsonl"
    lines = session.lines()
    bad_message = dict(session.records[3], uuid="bad-1", message={"role": "system", "content": "x"})
    lines[5:5] = ["{oops", json.dumps(bad_message), json.dumps(["a list"])]
    path.write_text("\n".join(lines) + "\n")
    result = import_claude_code(repo, path, "cc")
    assert result.skipped == [6, 7, 8]
    assert "bad-1" not in {e.id for e in repo.history("cc").refs()}
    with pytest.raises(InvalidInput, match=r"3 malformed line.*6, 7, 8"):
        import_claude_code(repo, path, "strict", strict=True)
    assert "refs/heads/strict" not in repo.refs()


def test_a_tool_result_that_answers_no_tool_use_is_skipped(repo: Repository) -> None:
    session = ClaudeSession()
    session.user("hi")
    session.user([{"type": "tool_result", "tool_use_id": "toolu_nowhere", "content": "?"}])
    session.assistant([{"type": "text", "text": "hello"}])
    result = import_claude_code(repo, session.records, "cc")
    assert result.skipped == [3]
    check_messages(repo.history("cc").render())


def test_a_file_still_being_written_drops_its_half_record_without_counting_it(repo: Repository,
                                                                               tmp_path: Path) -> None:
    session = claude_session(30)
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(session.lines()) + "\n" + json.dumps(session.records[-1])[:40])
    assert import_claude_code(repo, path, "cc").skipped == []


def test_a_projects_directory_imports_one_ref_per_session(repo: Repository, tmp_path: Path) -> None:
    for project, names in (("-home-me-alpha", ["s1", "s2"]), ("-home-me-beta", ["s3"])):
        (tmp_path / project).mkdir()
        for name in names:
            (tmp_path / project / f"{name}.jsonl").write_text("\n".join(claude_session(30).lines()) + "\n")
    (tmp_path / "-home-me-beta" / "empty.jsonl").write_text('{"type": "summary", "summary": "nothing"}\n')
    seen: list[tuple[int, int]] = []
    result = import_projects(repo, tmp_path, progress=lambda done, total, b, tb: seen.append((done, total)))
    heads = {n for n in repo.refs() if "/sidechain-" not in n}
    assert heads == {"refs/heads/cc/-home-me-alpha/s1", "refs/heads/cc/-home-me-alpha/s2",
                     "refs/heads/cc/-home-me-beta/s3"}
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert list(result.failed) == [str(tmp_path / "-home-me-beta" / "empty.jsonl")]
    again = import_projects(repo, tmp_path)
    assert again.moved == 0


def test_the_cli_imports_a_projects_directory_with_progress_on_a_terminal(tmp_path: Path) -> None:
    projects = tmp_path / "projects"
    (projects / "-home-me-app").mkdir(parents=True)
    for name in ("a", "b"):
        (projects / "-home-me-app" / f"{name}.jsonl").write_text("\n".join(claude_session(40).lines()) + "\n")
    ctxstore(tmp_path, "init")
    master, slave = pty.openpty()
    proc = subprocess.run([SCRIPT, "import", str(projects)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=slave,
                          text=True, timeout=60)
    os.close(slave)
    shown = drain(master)
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["moved"] >= 2
    text = shown.decode()
    assert "importing sessions: 2/2 sessions (100%)" in text and "sessions/s" in text
    refs = json.loads(ctxstore(tmp_path, "refs").stdout)
    assert {"refs/heads/cc/-home-me-app/a", "refs/heads/cc/-home-me-app/b"} <= set(refs)


def _stderr_on_a_terminal(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    master, slave = pty.openpty()
    proc = subprocess.run([SCRIPT, *args], cwd=tmp_path, stdout=subprocess.PIPE, stderr=slave, text=True,
                          timeout=60)
    os.close(slave)
    shown = drain(master)
    return proc, shown.decode()


def test_importing_one_file_shows_progress_the_whole_way_on_a_terminal(tmp_path: Path) -> None:
    """A single transcript and a single message file both show done/total and a rate while they are built
    into histories, ending at 100%; without a terminal nothing is drawn."""
    (tmp_path / "session.jsonl").write_text("\n".join(claude_session(300).lines()) + "\n")
    (tmp_path / "messages.jsonl").write_text("".join(
        json.dumps({"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"}) + "\n"
        for i in range(2500)))
    ctxstore(tmp_path, "init")
    proc, shown = _stderr_on_a_terminal(tmp_path, "import", "session.jsonl", "--ref", "cc/s")
    assert proc.returncode == 0, shown
    assert re.search(r"importing: [\d,]+/([\d,]+) messages \(100%\)", shown) and "messages/s" in shown
    proc, shown = _stderr_on_a_terminal(tmp_path, "import", "messages.jsonl", "--ref", "chat")
    assert proc.returncode == 0, shown
    assert "importing: 2,500/2,500 messages (100%)" in shown
    piped = ctxstore(tmp_path, "import", "messages.jsonl", "--ref", "other")
    assert "importing:" not in piped.stderr


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.integers(min_value=1, max_value=60), cut=st.integers(min_value=1, max_value=60))
def test_import_export_import_gives_the_same_view_and_growth_is_a_fast_forward(turns: int, cut: int) -> None:
    """For any session: importing its export gives the same view (ids and messages), and importing a
    prefix and then the whole session gives exactly the revisions of importing the whole at once."""
    session = ClaudeSession()
    for _ in range(min(cut, turns)):
        session.turn()
    prefix = list(session.records)
    for _ in range(turns - min(cut, turns)):
        session.turn()
    whole = Repository.memory()
    head = import_claude_code(whole, session.records, "cc").revision
    stepwise = Repository.memory()
    import_claude_code(stepwise, prefix, "cc")
    assert import_claude_code(stepwise, session.records, "cc").revision == head
    assert stepwise.refs() == whole.refs()
    for name in whole.refs():
        text = export_ref(whole, name, format="claude")
        import_claude_code(whole, [json.loads(line) for line in text.splitlines()], "round/trip", force=True)
        assert ([(e.id, e.message) for e in whole.history("round/trip").refs()]
                == [(e.id, e.message) for e in whole.history(name).refs()])


def _split_subagents(session: ClaudeSession, project: Path, name: str) -> dict[str, list[dict[str, Any]]]:
    """Write the session as recent Claude Code does: sidechain records in
    ``<name>/subagents/agent-<id>.jsonl`` beside ``<name>.jsonl``; returns the agent files' records."""
    agents: dict[str, list[dict[str, Any]]] = {}
    main = []
    for rec in session.records:
        if rec.get("isSidechain"):
            agents.setdefault(rec["agentId"], []).append(rec)
        else:
            main.append(rec)
    project.mkdir(parents=True, exist_ok=True)
    (project / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in main))
    folder = project / name / "subagents"
    folder.mkdir(parents=True)
    for agent, records in agents.items():
        (folder / f"agent-{agent}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return agents


def test_subagent_files_beside_a_session_become_its_sidechain_refs(tmp_path: Path) -> None:
    """A session whose subagents live in <session>/subagents/agent-<id>.jsonl imports to the same refs,
    revisions and meta as the same session written with its sidechains inline."""
    session = claude_session(200)
    agents = _split_subagents(session, tmp_path / "-home-me-app", "s1")
    assert len(agents) >= 2
    split = Repository.memory()
    result = import_projects(split, tmp_path)
    inline = Repository.memory()
    import_claude_code(inline, session.records, "cc/-home-me-app/s1")
    assert split.refs() == inline.refs()
    sidechains = [n for n in split.refs() if "/sidechain-" in n]
    assert len(sidechains) == len(agents)
    for name in sidechains:
        entries = split.history(name).refs()
        check_messages([e.message for e in entries])
        info = (entries[0].meta or {})["claudeCode"]
        assert info["agentId"] in agents and info["branchedFrom"]
    assert result.subagent_skipped == {} and not result.failed
    assert import_projects(split, tmp_path).moved == 0  # again: nothing moves


def test_importing_one_session_file_brings_its_subagent_files(tmp_path: Path) -> None:
    """`ctxstore import <session>.jsonl` merges <session>/subagents/agent-*.jsonl in, as a directory import
    does; under --strict a malformed subagent line refuses the file and nothing lands."""
    session = claude_session(200)
    project = tmp_path / "-home-me-app"
    agents = _split_subagents(session, project, "s1")
    single = Repository.memory()
    import_file(single, project / "s1.jsonl", "cc/s1")
    inline = Repository.memory()
    import_claude_code(inline, session.records, "cc/s1")
    assert single.refs() == inline.refs()
    assert sum("/sidechain-" in n for n in single.refs()) == len(agents)
    path = project / "s1" / "subagents" / f"agent-{next(iter(agents))}.jsonl"
    path.write_text("{broken\n" + path.read_text())
    strict = Repository.memory()
    with pytest.raises(InvalidInput, match="malformed"):
        import_file(strict, project / "s1.jsonl", "cc/s1", strict=True)
    assert strict.refs() == {}


def test_a_subagent_file_that_grew_fast_forwards_its_ref(tmp_path: Path) -> None:
    session = claude_session(120)
    project = tmp_path / "-home-me-app"
    agents = _split_subagents(session, project, "s1")
    agent, records = next(iter(agents.items()))
    path = project / "s1" / "subagents" / f"agent-{agent}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records[:-1]))
    repo = Repository.memory()
    import_projects(repo, tmp_path)
    before = repo.refs()
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    grown = import_projects(repo, tmp_path)  # no force: the sidechain continues
    [(moved_ref, _)] = [(n, r) for n, r in repo.refs().items() if before.get(n) != r]
    assert "/sidechain-" in moved_ref and grown.moved == 1 and not grown.failed


def test_malformed_lines_of_a_subagent_file_are_listed_by_file_or_refused_when_strict(tmp_path: Path) -> None:
    session = claude_session(120)
    project = tmp_path / "-home-me-app"
    agents = _split_subagents(session, project, "s1")
    agent = next(iter(agents))
    path = project / "s1" / "subagents" / f"agent-{agent}.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], "{broken", *lines[1:]]) + "\n")
    repo = Repository.memory()
    result = import_projects(repo, tmp_path)
    assert result.subagent_skipped == {str(path): [2]}
    assert all(r.skipped == [] for r in result.sessions.values())
    strict = Repository.memory()
    refused = import_projects(strict, tmp_path, strict=True)
    session_file = str(project / "s1.jsonl")
    assert list(refused.failed) == [session_file] and "malformed" in refused.failed[session_file]
    assert strict.refs() == {}


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_IDS = st.one_of(st.uuids().map(str), st.text(st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1,
                                              max_size=10))


@st.composite
def _views(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Entry inputs of a view valid for the Messages API: texts, text blocks, tool calls with their results,
    string and list content from both roles, maybe a summary first and a title in meta; ids UUIDs or not."""
    kinds = draw(st.lists(st.sampled_from(["user", "user_blocks", "assistant", "assistant_blocks", "tool"]),
                          min_size=1, max_size=8))
    ids = draw(st.lists(_IDS, min_size=2 * len(kinds) + 1, max_size=2 * len(kinds) + 1, unique=True))
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"message": {"role": "user", "content": draw(_TEXT)}, "kind": "summary", "sources": []})
    for n, kind in enumerate(kinds):
        text = draw(_TEXT)
        if kind == "user":
            out.append({"message": {"role": "user", "content": text}})
        elif kind == "user_blocks":
            out.append({"message": {"role": "user", "content": [{"type": "text", "text": text}]}})
        elif kind == "assistant":
            out.append({"message": {"role": "assistant", "content": text}})
        elif kind == "assistant_blocks":
            out.append({"message": {"role": "assistant", "content": [{"type": "text", "text": text}]}})
        else:
            use = {"type": "tool_use", "id": f"toolu_{n}", "name": "Bash", "input": {"command": text}}
            out.append({"message": {"role": "assistant", "content": [use]}})
            out.append({"message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": text}]}})
    for entry, entry_id in zip(out, ids, strict=False):
        entry["id"] = entry_id
    if draw(st.booleans()):
        out[0]["meta"] = {"title": draw(_TEXT) or "t"}
    return out


@settings(max_examples=60, deadline=None)
@given(view=_views())
def test_export_import_export_is_a_fixed_point_and_the_view_round_trips(view: list[dict[str, Any]]) -> None:
    """For any view, ids UUIDs or not: importing its transcript gives the same entry ids and messages, and
    exporting that again writes the same transcript."""
    repo = Repository.memory()
    repo.commit("v", MessageHistory().extend(view))
    first = export_ref(repo, "v", format="claude", session=SESSION)
    import_claude_code(repo, [json.loads(line) for line in first.split("\n") if line], "back")
    assert ([(e.id, e.message) for e in repo.history("back").refs()]
            == [(e.id, e.message) for e in repo.history("v").refs()])
    assert export_ref(repo, "back", format="claude", session=SESSION) == first


def test_an_entry_id_kept_in_a_record_is_taken_back_only_while_the_uuid_names_it() -> None:
    repo = Repository.memory()
    repo.append("v", [{"id": "hello", "message": {"role": "user", "content": "hi"}}])
    [record] = [json.loads(line) for line in export_ref(repo, "v", format="claude", session=SESSION).splitlines()]
    assert record["ctxstore"] == {"entryId": "hello"} and record["uuid"] != "hello"
    import_claude_code(repo, [record], "same")
    assert [e.id for e in repo.history("same").refs()] == ["hello"]
    copied = {**record, "uuid": "0b7e3a52-4c1e-4f0e-9a1b-2c3d4e5f6a7b"}  # the field copied onto another record
    import_claude_code(repo, [copied], "other")
    assert [e.id for e in repo.history("other").refs()] == [copied["uuid"]]


def test_subagent_records_that_do_not_say_they_are_sidechains_are_taken_as_one(tmp_path: Path) -> None:
    session = claude_session(60)
    project = tmp_path / "-home-me-app"
    agents = _split_subagents(session, project, "s1")
    for agent, records in agents.items():
        stripped = [{k: v for k, v in r.items() if k not in ("isSidechain", "agentId")} for r in records]
        (project / "s1" / "subagents" / f"agent-{agent}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in stripped))
    split, inline = Repository.memory(), Repository.memory()
    import_projects(split, tmp_path)
    import_claude_code(inline, session.records, "cc/-home-me-app/s1")
    assert split.refs() == inline.refs()


@settings(max_examples=12, deadline=None)
@given(turns=st.integers(min_value=1, max_value=40), cut=st.integers(min_value=0, max_value=400))
def test_a_session_with_its_subagents_in_files_imports_as_it_does_inline(turns: int, cut: int) -> None:
    """For any session, and any point it was written up to: the layout with subagent files gives the same
    refs and revisions as the same records inline."""
    session = ClaudeSession()
    for _ in range(turns):
        session.turn()
    session.records = session.records[: max(3, len(session.records) - cut)]  # the first prompt stays
    with tempfile.TemporaryDirectory() as tmp:
        _split_subagents(session, Path(tmp) / "-home-me-app", "s1")
        split, inline = Repository.memory(), Repository.memory()
        import_projects(split, tmp)
        import_claude_code(inline, session.records, "cc/-home-me-app/s1")
        assert split.refs() == inline.refs()
