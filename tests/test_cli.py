"""Every `ctxstore` command through click's CliRunner: output, exit codes, and repository discovery."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from conftest import ClaudeTranscript, claude_code_records

from ctxstore import Repository, errors
from ctxstore.cli import EXIT_CODES, cli
from ctxstore.cli._common import exit_code_for, reporting
from ctxstore.history.message_history import MessageHistory
from ctxstore.ids import from_hex


@pytest.fixture
def repo_dir(tmp_path: Path, runner: CliRunner) -> Path:
    result = runner.invoke(cli, ["-C", str(tmp_path), "init"])
    assert result.exit_code == 0, result.output
    return tmp_path


def run(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(cli, ["-C", str(where), *args], input=input)


def ok(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> object:
    result = run(runner, where, *args, input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def say(runner: CliRunner, where: Path, ref: str, *texts: str) -> list[str]:
    ids = []
    for text in texts:
        ids += ok(runner, where, "append", ref, text)["entryIds"]  # type: ignore[index]
    return ids


def test_init_creates_dot_ctxstore_and_refuses_a_second_time(tmp_path: Path, runner: CliRunner) -> None:
    out = ok(runner, tmp_path, "init")
    assert out == {"repository": str((tmp_path / ".ctxstore").resolve())}
    Repository.open(tmp_path / ".ctxstore").close()
    again = run(runner, tmp_path, "init")
    assert again.exit_code == 5
    assert again.stdout == ""
    assert again.stderr.startswith("ctxstore: error:") and again.stderr.count("\n") == 1


def test_init_with_a_directory_argument(tmp_path: Path, runner: CliRunner) -> None:
    ok(runner, tmp_path, "init", "sub/dir")
    assert (tmp_path / "sub" / "dir" / ".ctxstore" / "format").exists()


def test_commands_find_the_repository_in_a_parent(repo_dir: Path, runner: CliRunner) -> None:
    nested = repo_dir / "a" / "b"
    nested.mkdir(parents=True)
    say(runner, nested, "main", "hello")
    assert ok(runner, repo_dir, "render", "main") == [{"role": "user", "content": "hello"}]


def test_no_repository_is_exit_3_with_a_hint(tmp_path: Path, runner: CliRunner) -> None:
    result = run(runner, tmp_path, "refs")
    assert result.exit_code == 3
    assert "ctxstore init" in result.stderr and result.stdout == ""


def test_repo_option_and_environment_variable(repo_dir: Path, tmp_path_factory: pytest.TempPathFactory,
                                              runner: CliRunner) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    repo = str(repo_dir / ".ctxstore")
    assert run(runner, elsewhere, "--repo", repo, "append", "main", "via option").exit_code == 0
    env = runner.invoke(cli, ["-C", str(elsewhere), "append", "main", "via env"], env={"CTXSTORE_DIR": repo})
    assert env.exit_code == 0, env.output
    assert [m["content"] for m in ok(runner, repo_dir, "render", "main")] == ["via option", "via env"]


def test_append_from_arguments_and_options(repo_dir: Path, runner: CliRunner) -> None:
    out = ok(runner, repo_dir, "append", "main", "--role", "assistant", "--id", "a1", "--meta",
             '{"source": "test"}', "two", "words")
    assert out["ref"] == "refs/heads/main" and out["entryIds"] == ["a1"] and out["size"] == 1
    entries = ok(runner, repo_dir, "render", "--entries", "main")
    assert entries == [{"id": "a1", "kind": "turn", "message": {"role": "assistant", "content": "two words"},
                        "meta": {"source": "test"}}]


def test_append_json_from_stdin_list_and_jsonl(repo_dir: Path, runner: CliRunner) -> None:
    batch = [{"role": "user", "content": "q"}, {"id": "x", "message": {"role": "assistant", "content": "a"}}]
    out = ok(runner, repo_dir, "append", "main", input=json.dumps(batch))
    assert out["size"] == 2 and out["entryIds"][1] == "x"
    lines = "\n".join(json.dumps({"role": "user", "content": str(n)}) for n in range(3))
    assert ok(runner, repo_dir, "append", "main", input=lines)["size"] == 5
    assert len(ok(runner, repo_dir, "log", "main")) == 3  # root + two appends: one revision per batch


@pytest.mark.parametrize("bad", ["not json", "[1, 2]", ""])
def test_append_bad_stdin_is_usage_error_and_changes_nothing(repo_dir: Path, runner: CliRunner,
                                                             bad: str) -> None:
    say(runner, repo_dir, "main", "keep")
    before = ok(runner, repo_dir, "refs")
    result = run(runner, repo_dir, "append", "main", input=bad)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert ok(runner, repo_dir, "refs") == before


def test_append_duplicate_id_with_other_content_is_refused(repo_dir: Path, runner: CliRunner) -> None:
    ok(runner, repo_dir, "append", "main", "--id", "dup", "one")
    result = run(runner, repo_dir, "append", "main", "--id", "dup", "two")
    assert result.exit_code == 2
    assert [m["content"] for m in ok(runner, repo_dir, "render", "main")] == ["one"]


def test_invalid_ref_name_is_usage_error(repo_dir: Path, runner: CliRunner) -> None:
    result = run(runner, repo_dir, "append", "bad..name", "x")
    assert result.exit_code == 2 and "bad..name" in result.stderr


def test_render_unknown_ref_is_not_found(repo_dir: Path, runner: CliRunner) -> None:
    result = run(runner, repo_dir, "render", "nope")
    assert result.exit_code == 3 and result.stdout == ""


def test_render_restore_expands_summaries(repo_dir: Path, runner: CliRunner) -> None:
    ids = say(runner, repo_dir, "main", "a", "b", "c")
    with Repository.open(repo_dir / ".ctxstore") as repo:
        h = repo.history("main").edit({"op": "summary", "sourceIds": ids[:2], "replace": True,
                                       "entry": {"role": "user", "content": "S"}})
        repo.commit("main", h)
    assert [m["content"] for m in ok(runner, repo_dir, "render", "main")] == ["S", "c"]
    assert [m["content"] for m in ok(runner, repo_dir, "render", "--restore", "main")] == ["a", "b", "c"]


def test_log_newest_first_with_refs_and_oneline(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a", "b")
    revs = ok(runner, repo_dir, "log", "main")
    assert [r["size"] for r in revs] == [2, 1, 0]
    assert revs[0]["refs"] == ["main"] and revs[0]["parent"] == revs[1]["id"]
    assert revs[-1]["operation"] == "root"
    assert len(ok(runner, repo_dir, "log", "-n", "2", "main")) == 2
    lines = run(runner, repo_dir, "log", "--oneline", "main").stdout.splitlines()
    assert len(lines) == 3 and lines[0].startswith(revs[0]["id"][:12])


def test_log_graph_draws_the_fork(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a", "b")
    ok(runner, repo_dir, "fork", "main~1", "alt")
    say(runner, repo_dir, "alt", "c")
    lines = run(runner, repo_dir, "log", "--graph").stdout.splitlines()
    assert any(line.startswith("|/") for line in lines)
    assert any("(main)" in line for line in lines) and any("(alt)" in line for line in lines)
    assert lines[-1].startswith("* ") and "root" in lines[-1]


def test_fork_shares_history_and_refuses_existing_name(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a")
    out = ok(runner, repo_dir, "fork", "main", "alt")
    assert out["ref"] == "refs/heads/alt"
    say(runner, repo_dir, "alt", "b")
    assert [m["content"] for m in ok(runner, repo_dir, "render", "main")] == ["a"]
    assert [m["content"] for m in ok(runner, repo_dir, "render", "alt")] == ["a", "b"]
    assert ok(runner, repo_dir, "show", "alt~1")["operation"] == {"type": "fork"}
    assert run(runner, repo_dir, "fork", "main", "alt").exit_code == 5


def test_branch_create_list_rename_delete(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a", "b")
    first = ok(runner, repo_dir, "log", "main")[1]["id"]
    assert ok(runner, repo_dir, "branch", "old", first[:10])["revision"] == first
    assert run(runner, repo_dir, "branch", "old", "main").exit_code == 5
    assert ok(runner, repo_dir, "branch", "--force", "old", "main")["revision"] != first
    assert set(ok(runner, repo_dir, "branch")) == {"refs/heads/main", "refs/heads/old"}
    assert ok(runner, repo_dir, "branch", "-m", "old", "new")["ref"] == "refs/heads/new"
    assert ok(runner, repo_dir, "branch", "-d", "new")["was"] is not None
    assert set(ok(runner, repo_dir, "refs")) == {"refs/heads/main"}
    assert run(runner, repo_dir, "branch", "-d", "new").exit_code == 3
    assert run(runner, repo_dir, "branch", "lonely").exit_code == 2


def test_refs_lists_with_prefix(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a")
    say(runner, repo_dir, "support/1", "b")
    assert list(ok(runner, repo_dir, "refs")) == ["refs/heads/main", "refs/heads/support/1"]
    assert list(ok(runner, repo_dir, "refs", "support/")) == ["refs/heads/support/1"]


def test_reflog_records_moves_newest_first(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a", "b")
    moves = ok(runner, repo_dir, "reflog", "main")
    assert len(moves) == 2 and moves[1]["old"] is None and moves[0]["old"] == moves[1]["new"]
    assert len(ok(runner, repo_dir, "reflog", "-n", "1", "main")) == 1


def test_diff_added_removed_moved(repo_dir: Path, runner: CliRunner) -> None:
    a, b, c = say(runner, repo_dir, "main", "a", "b", "c")
    ok(runner, repo_dir, "fork", "main", "alt")
    with Repository.open(repo_dir / ".ctxstore") as repo:
        h = repo.history("alt").edit([{"op": "remove", "id": b}, {"op": "move", "ids": [c], "before": a}])
        repo.commit("alt", h.append({"role": "user", "content": "d"}))
    out = ok(runner, repo_dir, "diff", "main", "alt")
    assert out["removed"] == [b] and out["moved"] == [c] and len(out["added"]) == 1
    assert run(runner, repo_dir, "diff", "main", "nope").exit_code == 3


def test_show_revision_entry_and_object(repo_dir: Path, runner: CliRunner) -> None:
    [entry_id] = say(runner, repo_dir, "main", "hello")
    rev = ok(runner, repo_dir, "show", "main")
    assert rev["type"] == "revision" and rev["entryIds"] == [entry_id] and rev["refs"] == ["refs/heads/main"]
    assert ok(runner, repo_dir, "show", rev["id"][:8])["id"] == rev["id"]
    entry = ok(runner, repo_dir, "show", entry_id)
    assert entry["message"] == {"role": "user", "content": "hello"} and entry["ref"] == "refs/heads/main"
    oid = rev["operation"]["entries"][0]
    obj = ok(runner, repo_dir, "show", oid)
    assert obj["type"] == "entry" and obj["id"] == entry_id and obj["oid"] == oid
    assert run(runner, repo_dir, "show", "no-such-thing").exit_code == 3


def test_export_and_import_round_trip_in_every_format(repo_dir: Path, runner: CliRunner,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    say(runner, repo_dir, "main", "a", "b")
    out = tmp_path_factory.mktemp("out")
    for fmt, name in [("json", "m.json"), ("jsonl", "m.jsonl"), ("snapshot", "s.json")]:
        assert run(runner, repo_dir, "export", "--format", fmt, "-o", str(out / name), "main").exit_code == 0
        imported = ok(runner, repo_dir, "import", "--ref", f"copy-{fmt}", str(out / name))
        assert imported["format"] == fmt and imported["size"] == 2
        assert ok(runner, repo_dir, "render", f"copy-{fmt}") == ok(runner, repo_dir, "render", "main")
    # A snapshot import keeps revision ids: the copy's head is main's head.
    assert ok(runner, repo_dir, "refs")["refs/heads/copy-snapshot"] == ok(runner, repo_dir, "refs")[
        "refs/heads/main"]


def test_export_to_stdout_and_import_from_stdin(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a")
    text = run(runner, repo_dir, "export", "--format", "jsonl", "main").stdout
    assert json.loads(text.splitlines()[0]) == {"role": "user", "content": "a"}
    ok(runner, repo_dir, "import", "--ref", "copy", "--format", "jsonl", "-", input=text)
    assert ok(runner, repo_dir, "render", "copy") == [{"role": "user", "content": "a"}]


def test_import_errors_leave_the_repository_alone(repo_dir: Path, runner: CliRunner, tmp_path: Path) -> None:
    say(runner, repo_dir, "main", "a")
    before = ok(runner, repo_dir, "refs")
    assert run(runner, repo_dir, "import", "--ref", "x", str(tmp_path / "missing.json")).exit_code == 3
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "ok"}\n{broken\n')
    assert run(runner, repo_dir, "import", "--ref", "x", "--format", "jsonl", str(bad)).exit_code == 2
    assert ok(runner, repo_dir, "refs") == before


def test_import_snapshot_that_is_not_a_fast_forward_needs_force(repo_dir: Path, runner: CliRunner,
                                                                tmp_path: Path) -> None:
    say(runner, repo_dir, "main", "a")
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps(MessageHistory().append({"role": "user", "content": "other"}).to_snapshot()))
    result = run(runner, repo_dir, "import", "--ref", "main", str(snap))
    assert result.exit_code == 4 and "force" in result.stderr
    ok(runner, repo_dir, "import", "--ref", "main", "--force", str(snap))
    assert ok(runner, repo_dir, "render", "main") == [{"role": "user", "content": "other"}]


def test_fsck_gc_stats(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a", "b")
    report = ok(runner, repo_dir, "fsck")
    assert report["ok"] is True and report["problems"] == [] and report["objects"] > 0
    stats = ok(runner, repo_dir, "stats")
    assert stats["objects"] == report["objects"] and stats["refs"] == 1 and stats["diskBytes"] > 0
    assert "savedBytes" in stats
    ok(runner, repo_dir, "branch", "-d", "main")
    assert ok(runner, repo_dir, "gc")["deleted"] == 0  # within the grace the reflog still reaches everything
    purged = ok(runner, repo_dir, "gc", "--now")  # a deleted ref's reflog counts only for the grace period
    assert purged["deleted"] == report["objects"] and purged["reflogEntriesExpired"] == 3  # 2 moves, 1 delete


def test_fsck_reports_damage_with_exit_6(repo_dir: Path, runner: CliRunner) -> None:
    say(runner, repo_dir, "main", "a")
    entry_oid = ok(runner, repo_dir, "show", "main")["operation"]["entries"][0]
    with Repository.open(repo_dir / ".ctxstore") as repo:
        repo.store.delete_many([from_hex(entry_oid)])
    result = run(runner, repo_dir, "fsck")
    assert result.exit_code == 6
    assert json.loads(result.stdout)["ok"] is False and "fsck found" in result.stderr


def test_help_lists_every_command_and_the_exit_codes(runner: CliRunner) -> None:
    result = runner.invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ["init", "append", "log", "show", "render", "branch", "fork", "refs", "diff", "import",
                 "export", "fsck", "gc", "stats", "reflog", "tour"]:
        assert f"  {name} " in result.stdout
    for code in EXIT_CODES:
        assert f"  {code}  " in result.stdout


def test_unknown_option_is_exit_2(runner: CliRunner) -> None:
    assert runner.invoke(cli, ["log", "--no-such-option"]).exit_code == 2


def test_tour_command_runs(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli, ["tour", "--keep", str(tmp_path / "t")])
    assert result.exit_code == 0, result.output
    assert "log --graph" in result.stdout
    assert (tmp_path / "t" / ".ctxstore" / "format").exists()


# -- Claude Code transcripts and import errors -------------------------------------------------------

def test_import_claude_code_transcript_is_detected_even_when_it_opens_with_a_summary(
        repo_dir: Path, runner: CliRunner, claude_transcript: ClaudeTranscript) -> None:
    """`ctxstore import session.jsonl --ref cc/s` imports the transcript, its retried turn as a fork."""
    assert json.loads(claude_transcript.path.read_text().splitlines()[0])["type"] == "summary"
    out = ok(runner, repo_dir, "import", str(claude_transcript.path), "--ref", "cc/s")
    fork = f"refs/heads/cc/s/{claude_transcript.fork}"
    assert out["format"] == "claude" and out["ref"] == "refs/heads/cc/s" and out["size"] == 4
    assert set(out["refs"]) == {"refs/heads/cc/s", fork} and out["revision"] == out["refs"]["refs/heads/cc/s"]
    assert ok(runner, repo_dir, "render", "cc/s") == claude_transcript.main_line
    assert [m["role"] for m in ok(runner, repo_dir, "render", fork)] == ["user", "assistant"]
    entries = ok(runner, repo_dir, "render", "--entries", "cc/s")
    assert entries[0]["meta"]["claudeCode"]["sessionId"] == claude_transcript.session


def test_import_with_format_claude_and_the_default_ref(repo_dir: Path, runner: CliRunner,
                                                       claude_transcript: ClaudeTranscript) -> None:
    """--format claude imports the transcript; without --ref it lands in claude/<session>."""
    path = str(claude_transcript.path)
    assert ok(runner, repo_dir, "import", "--format", "claude", "--ref", "cc/given", path)["format"] == "claude"
    out = ok(runner, repo_dir, "import", "--format", "claude", path)
    assert out["ref"] == f"refs/heads/claude/{claude_transcript.session}"
    assert ok(runner, repo_dir, "render", out["ref"]) == ok(runner, repo_dir, "render", "cc/given")


def test_reimporting_a_transcript_changes_nothing_and_another_lineage_is_exit_4_until_forced(
        repo_dir: Path, runner: CliRunner, claude_transcript: ClaudeTranscript) -> None:
    ok(runner, repo_dir, "import", str(claude_transcript.path), "--ref", "cc/s")
    before = ok(runner, repo_dir, "refs")
    again = run(runner, repo_dir, "import", str(claude_transcript.path), "--ref", "cc/s")
    assert again.exit_code == 0 and "nothing new" in again.stderr
    assert json.loads(again.stdout)["refs"] == {} and ok(runner, repo_dir, "refs") == before
    other = claude_transcript.path.with_name("other.jsonl")
    records = claude_code_records()
    records[1]["message"]["content"] = "A different question"
    other.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    refused = run(runner, repo_dir, "import", str(other), "--ref", "cc/s")
    assert refused.exit_code == 4 and "force" in refused.stderr and refused.stderr.count("\n") == 1
    assert ok(runner, repo_dir, "refs") == before
    ok(runner, repo_dir, "import", "--force", str(other), "--ref", "cc/s")
    assert ok(runner, repo_dir, "render", "cc/s")[0] == {"role": "user", "content": "A different question"}


def test_import_of_messages_needs_a_ref(repo_dir: Path, runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    result = run(runner, repo_dir, "import", str(path))
    assert result.exit_code == 2 and "ref" in result.stderr and result.stderr.count("\n") == 1


@pytest.mark.parametrize("content", [b"\xff\xfe not utf-8\n", b"", b"hello\n", b'[{"role": "user"'])
def test_an_unreadable_import_file_is_one_line_and_exit_2(repo_dir: Path, runner: CliRunner, tmp_path: Path,
                                                           content: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    result = run(runner, repo_dir, "import", "--ref", "x", str(path))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("ctxstore: error:") and result.stderr.count("\n") == 1
    assert ok(runner, repo_dir, "refs") == {}


def test_export_with_ids_imports_back_with_the_same_ids(repo_dir: Path, runner: CliRunner) -> None:
    ids = say(runner, repo_dir, "main", "a", "b")
    text = run(runner, repo_dir, "export", "--format", "jsonl", "--ids", "main").stdout
    assert [json.loads(line)["id"] for line in text.splitlines()] == ids
    assert ok(runner, repo_dir, "import", "--ref", "copy", "-", input=text)["format"] == "jsonl"
    assert [e["id"] for e in ok(runner, repo_dir, "render", "--entries", "copy")] == ids


def _error_classes() -> list[type[errors.CtxStoreError]]:
    return [value for value in vars(errors).values()
            if isinstance(value, type) and issubclass(value, errors.CtxStoreError)]


@pytest.mark.parametrize("kind", _error_classes(), ids=lambda kind: kind.__name__)
def test_every_ctxstore_error_is_one_line_with_a_documented_exit_code(kind: type[errors.CtxStoreError]) -> None:
    error = kind.__new__(kind)
    Exception.__init__(error, "what happened;\nwhat to do")
    runner = CliRunner()

    @click.command()
    def boom() -> None:
        with reporting():
            raise error

    result = runner.invoke(boom, [])
    assert result.exit_code == exit_code_for(error) and result.exit_code in EXIT_CODES
    assert result.exit_code != 0
    assert result.stderr == "ctxstore: error: what happened; what to do\n"


def test_errors_get_the_exit_code_their_meaning_documents() -> None:
    expected = {errors.NonFastForward: 4, errors.RefMoved: 4, errors.UnknownRef: 3, errors.UnknownRevision: 3,
                errors.UnknownSetting: 3, errors.MissingObject: 3, errors.NotARepository: 3,
                errors.RepositoryExists: 5, errors.InvalidInput: 2, errors.DuplicateEntryId: 2,
                errors.InvalidRefName: 2, errors.BadPack: 6, errors.DamagedData: 6, errors.StoreError: 1,
                errors.SyncError: 1, errors.AuthError: 1, errors.ModelError: 1}
    for kind, code in expected.items():
        error = kind.__new__(kind)
        Exception.__init__(error, "x")
        assert exit_code_for(error) == code, kind.__name__
