"""`ctxstore edit`: patches from stdin or a file, checked as the Messages API would, committed as one
revision, and an edit that changes nothing said so instead of passing silently."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore import MessageHistory, Repository
from ctxstore.cli import cli
from ctxstore.cli._edit import absent_entries

TOOL_USE = {"role": "assistant", "content": [
    {"type": "text", "text": "Listing."}, {"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {}}]}
TOOL_RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]}
VIEW = [{"id": "u1", "message": {"role": "user", "content": "hi"}},
        {"id": "a1", "message": TOOL_USE},
        {"id": "r1", "message": TOOL_RESULT},
        {"id": "a2", "message": {"role": "assistant", "content": "Two files."}}]


@pytest.fixture
def repo_dir(tmp_path: Path, runner: CliRunner) -> Path:
    assert runner.invoke(cli, ["-C", str(tmp_path), "init"]).exit_code == 0
    assert runner.invoke(cli, ["-C", str(tmp_path), "append", "main"], input=json.dumps(VIEW)).exit_code == 0
    return tmp_path


def run(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(cli, ["-C", str(where), *args], input=input)


def edit(runner: CliRunner, where: Path, patches: Any, *args: str) -> Result:
    return run(runner, where, "edit", "main", *args, input=patches if isinstance(patches, str) else json.dumps(patches))


def view(runner: CliRunner, where: Path, ref: str = "main") -> list[dict[str, Any]]:
    result = run(runner, where, "render", "--entries", ref)
    assert result.exit_code == 0, result.output
    entries: list[dict[str, Any]] = json.loads(result.stdout)
    return entries


def head(runner: CliRunner, where: Path) -> str:
    refs: dict[str, str] = json.loads(run(runner, where, "refs").stdout)
    return refs["refs/heads/main"]


def test_a_replace_is_committed_as_one_revision(repo_dir: Path, runner: CliRunner) -> None:
    old = head(runner, repo_dir)
    result = edit(runner, repo_dir, {"op": "replace", "id": "u1",
                                     "entries": [{"id": "u1b", "message": {"role": "user", "content": "hello"}}]})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["old"] == old and out["revision"] == head(runner, repo_dir) != old
    assert out["removed"] == ["u1"] and [e["id"] for e in out["added"]] == ["u1b"] and out["skipped"] == []
    assert [e["id"] for e in view(runner, repo_dir)] == ["u1b", "a1", "r1", "a2"]
    log = json.loads(run(runner, repo_dir, "log", "-n", "1", "main").stdout)
    assert log[0]["parent"] == old and log[0]["operation"] == "edit: replace"


def test_several_patches_from_a_file_in_json_lines_are_one_revision(repo_dir: Path, runner: CliRunner,
                                                                    tmp_path: Path) -> None:
    path = tmp_path / "patches.jsonl"
    path.write_text(json.dumps({"op": "remove", "id": "a2"}) + "\n"
                    + json.dumps({"op": "insertBefore", "id": "u1",
                                  "entries": [{"id": "u0", "message": {"role": "user", "content": "first"}}]}) + "\n")
    old = head(runner, repo_dir)
    result = run(runner, repo_dir, "edit", "main", "--file", str(path))
    assert result.exit_code == 0, result.output
    assert [e["id"] for e in view(runner, repo_dir)] == ["u0", "u1", "a1", "r1"]
    assert json.loads(run(runner, repo_dir, "log", "-n", "2", "main").stdout)[1]["id"] == old


def test_an_edit_naming_only_absent_entries_changes_nothing_and_exits_3(repo_dir: Path, runner: CliRunner) -> None:
    old, before = head(runner, repo_dir), view(runner, repo_dir)
    result = edit(runner, repo_dir, [{"op": "remove", "id": "nope"},
                                     {"op": "replace", "id": "gone", "entries": [{"role": "user", "content": "x"}]}])
    assert result.exit_code == 3
    assert "nothing changed: entries nope, gone are not in main" in result.stderr
    assert result.stderr.count("\n") == 1
    assert head(runner, repo_dir) == old and view(runner, repo_dir) == before


def test_a_patch_naming_an_absent_entry_is_skipped_and_said_when_others_apply(repo_dir: Path,
                                                                             runner: CliRunner) -> None:
    result = edit(runner, repo_dir, [{"op": "remove", "id": "nope"}, {"op": "remove", "id": "a2"}])
    assert result.exit_code == 0, result.output
    assert "patch 1: entry nope is not in main; skipped" in result.stderr
    assert json.loads(result.stdout)["skipped"] == [{"patch": 1, "absent": ["nope"]}]
    assert [e["id"] for e in view(runner, repo_dir)] == ["u1", "a1", "r1"]


def test_an_edit_that_leaves_the_view_as_it_is_commits_nothing(repo_dir: Path, runner: CliRunner) -> None:
    old = head(runner, repo_dir)
    result = edit(runner, repo_dir, {"op": "move", "ids": ["a2"]})  # already last
    assert result.exit_code == 0 and "nothing changed" in result.stderr
    assert head(runner, repo_dir) == old


def test_dry_run_shows_the_change_and_commits_nothing(repo_dir: Path, runner: CliRunner) -> None:
    old = head(runner, repo_dir)
    result = edit(runner, repo_dir, [{"op": "remove", "id": "a1"}, {"op": "remove", "id": "r1"}], "--dry-run")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["dryRun"] is True and out["removed"] == ["a1", "r1"] and out["size"] == 2
    assert head(runner, repo_dir) == old and len(view(runner, repo_dir)) == 4


@pytest.mark.parametrize("patches, problem", [
    ({"op": "replace", "id": "u1", "entries": [{"role": "system", "content": "x"}]},
     "patch 1, entry 1 has role 'system'"),
    ([{"op": "remove", "id": "u1"}, {"op": "insertAfter", "id": "a2", "entries": [
        {"role": "user", "content": [{"type": "sparkles"}]}]}],
     "patch 2, entry 1, block 1 has unknown type 'sparkles'"),
    ({"op": "remove", "id": "a1"}, "would leave main invalid for the Messages API: message 2 has a tool_result"),
    ({"op": "explode", "id": "u1"}, "patch 1: unknown patch op 'explode'"),
    ({"op": "replace", "id": "u1"}, "replace patch needs a list of entry inputs"),
    ("[{\"op\": ", "not JSON"),
    ("", "no patches"),
    (json.dumps({"op": "insertAfter", "id": "a2", "entries": [{"id": "u1", "message": {"role": "user",
                                                                                     "content": "dup"}}]}), "u1"),
])
def test_bad_patches_are_refused_and_leave_the_ref_alone(repo_dir: Path, runner: CliRunner, patches: Any,
                                                         problem: str) -> None:
    old = head(runner, repo_dir)
    result = edit(runner, repo_dir, patches)
    assert result.exit_code == 2, result.output
    assert problem in result.stderr and result.stderr.count("\n") == 1
    assert head(runner, repo_dir) == old


def test_removing_a_tool_use_with_its_result_is_valid(repo_dir: Path, runner: CliRunner) -> None:
    result = edit(runner, repo_dir, [{"op": "remove", "id": "a1"}, {"op": "remove", "id": "r1"}])
    assert result.exit_code == 0, result.output
    assert [e["id"] for e in view(runner, repo_dir)] == ["u1", "a2"]


def test_edit_moves_branches_only(repo_dir: Path, runner: CliRunner) -> None:
    patch = json.dumps({"op": "remove", "id": "a2"})
    assert run(runner, repo_dir, "edit", "nosuch", input=patch).exit_code == 3
    revision = run(runner, repo_dir, "edit", "main~0", input=patch)
    assert revision.exit_code == 2 and "fork it first" in revision.stderr
    assert run(runner, repo_dir, "tag", "v1", "main").exit_code == 0
    tag = run(runner, repo_dir, "edit", "v1", input=patch)
    assert tag.exit_code == 2 and "tag" in tag.stderr


def test_a_view_that_was_already_invalid_checks_only_the_new_messages(tmp_path: Path, runner: CliRunner) -> None:
    with Repository.init(tmp_path / ".ctxstore") as repo:  # the library is lenient, as the seed is
        repo.append("main", [{"id": "o1", "message": TOOL_RESULT}, {"id": "o2", "message": {"role": "user",
                                                                                          "content": "b"}}])
    result = edit(runner, tmp_path, {"op": "remove", "id": "o2"})
    assert result.exit_code == 0, result.output
    assert "warning: main is not valid for the Messages API" in result.stderr


PATCH_IDS = ["u1", "a1", "r1", "a2", "n0", "n1", "n2", "zz"]


@st.composite
def patch_lists(draw: st.DrawFn) -> list[dict[str, Any]]:
    out = []
    for _ in range(draw(st.integers(min_value=1, max_value=5))):
        op = draw(st.sampled_from(["remove", "replace", "insertBefore", "insertAfter", "move", "summary"]))
        target = draw(st.sampled_from(PATCH_IDS))
        new = [{"id": f"n{len(out)}", "message": {"role": "user", "content": "x"}}]
        if op == "remove":
            out.append({"op": op, "id": target})
        elif op == "move":
            out.append({"op": op, "ids": [target], "before": draw(st.sampled_from(PATCH_IDS))})
        elif op == "summary":
            out.append({"op": op, "sourceIds": [target], "replace": True, "entry": new[0]})
        else:
            out.append({"op": op, "id": target, "entries": new})
    return out


@settings(max_examples=60, deadline=None)
@given(patches=patch_lists())
def test_the_absent_entries_reported_are_those_the_library_finds_absent(patches: list[dict[str, Any]]) -> None:
    """Patch n is reported with exactly the ids it names that the view lacks after patches 1..n-1."""
    history = MessageHistory().extend(VIEW)
    expected = []
    for number, patch in enumerate(patches, 1):
        present = {e.id for e in history.refs()}
        named = patch.get("ids", []) + [patch[k] for k in ("id", "before") if k in patch] + patch.get("sourceIds", [])
        order = {"move": [*patch.get("ids", []), patch.get("before")]}.get(patch["op"], named)
        missing = [i for i in order if i is not None and i not in present]
        if missing:
            expected.append((number, missing))
        history = history.edit(patch)
    assert absent_entries([e["id"] for e in VIEW], patches) == expected


def test_file_dash_reads_stdin_and_a_missing_file_exits_3(repo_dir: Path, runner: CliRunner) -> None:
    result = run(runner, repo_dir, "edit", "main", "--file", "-", input=json.dumps({"op": "remove", "id": "a2"}))
    assert result.exit_code == 0, result.output
    missing = run(runner, repo_dir, "edit", "main", "--file", str(repo_dir / "nope.json"))
    assert missing.exit_code == 3 and "no such file" in missing.stderr
