"""git's habits in the CLI: one revision syntax everywhere, branch/tag management, pull --all, push
--delete, remote-tracking refs, local remotes by relative path, exit codes, and progress on a terminal."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import killed_after

from ctxstore import Repository
from ctxstore.cli import cli
from ctxstore.cli._common import ProgressLine

CLI = [sys.executable, "-m", "ctxstore.cli"]


def run(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> Result:
    return runner.invoke(cli, ["-C", str(where), *args], input=input)


def ok(runner: CliRunner, where: Path, *args: str, input: str | None = None) -> Any:
    result = run(runner, where, *args, input=input)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refused(runner: CliRunner, where: Path, code: int, *args: str) -> str:
    """Run a command that must fail with `code` and one error line on stderr; the line."""
    result = run(runner, where, *args)
    assert result.exit_code == code, (result.exit_code, result.output)
    assert result.stderr.startswith("ctxstore: error:") and result.stderr.count("\n") == 1, result.stderr
    return result.stderr


@pytest.fixture
def repo_dir(tmp_path: Path, runner: CliRunner) -> Path:
    """A working directory whose .ctxstore has main with four messages (four append revisions)."""
    work = tmp_path / "work"
    work.mkdir()
    ok(runner, work, "init")
    for n in range(4):
        ok(runner, work, "append", "main", f"message {n}")
    return work


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["content"] for m in messages]


# -- one revision syntax -------------------------------------------------------------------------------

def test_render_export_show_log_and_diff_take_the_revision_syntax(runner: CliRunner, repo_dir: Path) -> None:
    assert _texts(ok(runner, repo_dir, "render", "main~1")) == ["message 0", "message 1", "message 2"]
    assert _texts(ok(runner, repo_dir, "render", "main^^")) == ["message 0", "message 1"]
    assert _texts(ok(runner, repo_dir, "render", "main@{3}")) == ["message 0"]
    exported = run(runner, repo_dir, "export", "main~2", "--format", "jsonl")
    assert exported.exit_code == 0, exported.output
    assert [json.loads(line)["content"] for line in exported.stdout.splitlines()] == ["message 0", "message 1"]
    head = ok(runner, repo_dir, "log", "-n", "2")[1]["id"]
    assert ok(runner, repo_dir, "show", "main~1")["id"] == head
    assert ok(runner, repo_dir, "log", "main~1", "-n", "1")[0]["id"] == head
    assert _texts(ok(runner, repo_dir, "render", head[:10] + "~1")) == ["message 0", "message 1"]
    assert len(ok(runner, repo_dir, "diff", "main~2", "main")["added"]) == 2


def test_branch_and_fork_start_from_any_revision_spec(runner: CliRunner, repo_dir: Path) -> None:
    ok(runner, repo_dir, "branch", "old", "main~3")
    assert _texts(ok(runner, repo_dir, "render", "old")) == ["message 0"]
    ok(runner, repo_dir, "fork", "main@{1}", "side")
    assert _texts(ok(runner, repo_dir, "render", "side")) == ["message 0", "message 1", "message 2"]


@pytest.mark.parametrize("spec, code", [("main~9", 3), ("nosuch~1", 3), ("main^2", 2), ("main@{x}", 2),
                                        ("main@{40}", 3)])
def test_a_bad_revision_spec_is_one_line_with_its_exit_code(runner: CliRunner, repo_dir: Path, spec: str,
                                                            code: int) -> None:
    for command in ("render", "export"):
        message = refused(runner, repo_dir, code, command, spec)
        assert spec in message


# -- branch and tag --------------------------------------------------------------------------------------

def test_branch_rename_moves_the_head_and_its_reflog(runner: CliRunner, repo_dir: Path) -> None:
    before = ok(runner, repo_dir, "refs")["refs/heads/main"]
    moves = len(ok(runner, repo_dir, "reflog", "main"))
    out = ok(runner, repo_dir, "branch", "-m", "main", "renamed")
    assert out == {"ref": "refs/heads/renamed", "revision": before}
    assert "refs/heads/main" not in ok(runner, repo_dir, "refs")
    assert len(ok(runner, repo_dir, "reflog", "renamed")) == moves + 1
    refused(runner, repo_dir, 3, "branch", "-m", "main", "other")
    ok(runner, repo_dir, "branch", "taken", "renamed")
    refused(runner, repo_dir, 5, "branch", "-m", "renamed", "taken")


def test_branch_delete_removes_only_heads(runner: CliRunner, repo_dir: Path) -> None:
    ok(runner, repo_dir, "tag", "v1", "main")
    refused(runner, repo_dir, 3, "branch", "-d", "v1")  # a tag is not a head
    assert "refs/tags/v1" in ok(runner, repo_dir, "refs")
    ok(runner, repo_dir, "branch", "gone", "main")
    out = ok(runner, repo_dir, "branch", "-d", "gone")
    assert out["ref"] == "refs/heads/gone" and out["revision"] is None
    assert "refs/heads/gone" not in ok(runner, repo_dir, "branch")
    refused(runner, repo_dir, 3, "branch", "-d", "gone")


def test_head_is_refused_as_a_branch_or_tag_name(runner: CliRunner, repo_dir: Path) -> None:
    for args in (("branch", "HEAD", "main"), ("tag", "HEAD"), ("append", "HEAD", "hi"),
                 ("fork", "main", "HEAD")):
        assert "HEAD" in refused(runner, repo_dir, 2, *args)
    assert set(ok(runner, repo_dir, "refs")) == {"refs/heads/main"}


def test_the_ref_rules_refuse_head_for_heads_and_tags_only() -> None:
    from ctxstore import InvalidRefName
    from ctxstore.refs import check_ref_name, is_valid_ref_name

    for name in ("refs/heads/HEAD", "refs/tags/HEAD"):
        with pytest.raises(InvalidRefName, match="HEAD"):
            check_ref_name(name)
    for name in ("refs/heads/HEADS", "refs/heads/HEAD/x", "refs/heads/x/HEAD", "refs/remotes/origin/HEAD"):
        assert is_valid_ref_name(name)


def test_a_tag_names_one_revision_that_append_never_moves(runner: CliRunner, repo_dir: Path) -> None:
    target = ok(runner, repo_dir, "refs")["refs/heads/main"]
    assert ok(runner, repo_dir, "tag", "v1") == {"ref": "refs/tags/v1", "revision": target}
    message = refused(runner, repo_dir, 2, "append", "v1", "more")
    assert "tag" in message and "ctxstore fork v1" in message
    refused(runner, repo_dir, 2, "append", "refs/tags/v1", "more")
    assert ok(runner, repo_dir, "tag") == {"refs/tags/v1": target}
    # Appending to main leaves the tag where it was.
    ok(runner, repo_dir, "append", "main", "after the tag")
    assert ok(runner, repo_dir, "tag") == {"refs/tags/v1": target}
    refused(runner, repo_dir, 5, "tag", "v1", "main")
    moved = ok(runner, repo_dir, "tag", "-f", "v1", "main")
    assert moved["revision"] == ok(runner, repo_dir, "refs")["refs/heads/main"] != target
    ok(runner, repo_dir, "tag", "old", "main~2")
    assert _texts(ok(runner, repo_dir, "render", "old")) == ["message 0", "message 1", "message 2"]
    assert ok(runner, repo_dir, "tag", "-d", "old")["was"] is not None
    refused(runner, repo_dir, 3, "tag", "-d", "old")


def test_a_tag_refuses_commits_through_the_library_too(tmp_path: Path) -> None:
    from ctxstore import InvalidInput

    repo = Repository.memory()
    head = repo.append("main", [{"role": "user", "content": "hi"}]).new
    repo.set_ref("refs/tags/v1", head)
    with pytest.raises(InvalidInput, match="tags do not move"):
        repo.append("v1", [{"role": "user", "content": "more"}])
    with pytest.raises(InvalidInput, match="tags do not move"):
        repo.commit("refs/tags/v1", repo.history("main").append({"role": "user", "content": "x"}))
    with pytest.raises(InvalidInput, match="refs/tags/v1 is a tag"):  # a short name resolves to the tag too
        repo.commit("v1", repo.history("main").append({"role": "user", "content": "x"}), force=True)
    more = repo.history("main").append({"role": "user", "content": "y"})
    with pytest.raises(InvalidInput, match="tags do not move"):  # and no ref of the batch moves
        repo.commit_many({"main": more, "v1": more})
    assert repo.head("refs/tags/v1") == head and repo.head("main") == head
    # `set_refs` re-points a tag on purpose, in the same transaction as the commit.
    repo.commit_many({"main": more}, set_refs={"refs/tags/v1": more.revision_id})
    assert repo.head("refs/tags/v1") == repo.head("main") == more.revision_id


def test_reflog_of_an_unknown_ref_is_not_found(runner: CliRunner, repo_dir: Path) -> None:
    refused(runner, repo_dir, 3, "reflog", "nosuch")
    ok(runner, repo_dir, "branch", "-d", "main")
    assert len(ok(runner, repo_dir, "reflog", "refs/heads/main")) == 5  # a deleted ref keeps its reflog


# -- remotes ------------------------------------------------------------------------------------------------

@pytest.fixture
def pair(runner: CliRunner, repo_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    """`repo_dir` (the origin, with heads main and side) and a clone of it made by relative path."""
    ok(runner, repo_dir, "branch", "side", "main~1")
    ok(runner, tmp_path, "clone", "work/.ctxstore", "copy")
    return repo_dir, tmp_path / "copy"


def test_clone_by_relative_path_records_it_absolute(runner: CliRunner, pair: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    origin, copy = pair
    url = ok(runner, copy, "remote")["origin"]
    assert os.path.isabs(url) and Path(url) == (origin / ".ctxstore").resolve()
    # From inside the clone (another directory than the clone ran in), push and fetch still reach it.
    ok(runner, copy, "append", "main", "from the copy")
    ok(runner, copy, "push", "origin", "main")
    assert _texts(ok(runner, origin, "render", "main"))[-1] == "from the copy"
    (copy / "sub").mkdir()
    ok(runner, origin, "append", "main", "from the origin")
    assert ok(runner, copy / "sub", "fetch")["updated"] == {"refs/remotes/origin/main": ok(runner, origin, "refs")[
        "refs/heads/main"]}


def test_clone_and_remote_add_take_a_working_directory(runner: CliRunner, repo_dir: Path,
                                                      tmp_path: Path) -> None:
    ok(runner, tmp_path, "clone", "work", "copy2")
    copy = tmp_path / "copy2"
    assert ok(runner, copy, "remote")["origin"] == str((repo_dir / ".ctxstore").resolve())
    assert _texts(ok(runner, copy, "render", "main"))[-1] == "message 3"
    out = ok(runner, copy, "remote", "add", "again", "../work")
    assert out["url"] == str((repo_dir / ".ctxstore").resolve())


def test_remote_add_of_a_taken_name_is_exists(runner: CliRunner, pair: tuple[Path, Path]) -> None:
    _, copy = pair
    message = refused(runner, copy, 5, "remote", "add", "origin", "/elsewhere")
    assert "ctxstore remote remove origin" in message


def test_pull_without_a_ref_pulls_every_tracked_head(runner: CliRunner, pair: tuple[Path, Path]) -> None:
    origin, copy = pair
    ok(runner, origin, "append", "main", "new on main")
    ok(runner, origin, "append", "side", "new on side")
    ok(runner, copy, "branch", "mine", "main")  # no tracking ref: left alone
    results = ok(runner, copy, "pull")
    assert {r["ref"]: r["how"] for r in results} == {"refs/heads/main": "fast-forward",
                                                     "refs/heads/side": "fast-forward"}
    assert _texts(ok(runner, copy, "render", "side"))[-1] == "new on side"
    assert _texts(ok(runner, copy, "render", "mine"))[-1] == "message 3"
    assert {r["how"] for r in ok(runner, copy, "pull", "--all")} == {"up-to-date"}
    refused(runner, copy, 2, "pull", "origin", "main", "--all")


def test_pull_all_pulls_the_rest_and_exits_4_for_a_diverged_head(runner: CliRunner,
                                                                 pair: tuple[Path, Path]) -> None:
    origin, copy = pair
    ok(runner, origin, "append", "main", "theirs")
    ok(runner, origin, "append", "side", "theirs on side")
    ok(runner, copy, "append", "main", "ours")
    result = run(runner, copy, "pull", "--all")
    assert result.exit_code == 4, result.output
    hows = {r["ref"]: r["how"] for r in json.loads(result.stdout)}
    assert hows == {"refs/heads/main": "diverged", "refs/heads/side": "fast-forward"}
    assert "--rebase" in result.stderr.splitlines()[-1]
    assert _texts(ok(runner, copy, "render", "main"))[-1] == "ours"
    rebased = {r["ref"]: r["how"] for r in ok(runner, copy, "pull", "--all", "--rebase")}
    assert rebased["refs/heads/main"] == "rebase"
    assert _texts(ok(runner, copy, "render", "main"))[-2:] == ["theirs", "ours"]


def test_push_delete_removes_the_remote_head_and_our_tracking_ref(runner: CliRunner,
                                                                 pair: tuple[Path, Path]) -> None:
    origin, copy = pair
    out = ok(runner, copy, "push", "--delete", "origin", "side")
    assert out["updated"] == {"refs/heads/side": None}
    assert "refs/heads/side" not in ok(runner, origin, "refs")
    assert "refs/remotes/origin/side" not in ok(runner, copy, "refs")
    assert "refs/heads/side" in ok(runner, copy, "refs")  # the local head stays
    refused(runner, copy, 3, "push", "--delete", "origin", "side")
    refused(runner, copy, 2, "push", "--delete", "origin")


def test_remote_tracking_refs_list_and_delete_with_r(runner: CliRunner, pair: tuple[Path, Path]) -> None:
    _, copy = pair
    assert set(ok(runner, copy, "branch", "-r")) == {"refs/remotes/origin/main", "refs/remotes/origin/side"}
    out = ok(runner, copy, "branch", "-d", "-r", "origin/side")
    assert out["ref"] == "refs/remotes/origin/side"
    assert set(ok(runner, copy, "branch", "-r")) == {"refs/remotes/origin/main"}
    refused(runner, copy, 3, "branch", "-d", "-r", "origin/side")
    assert "refs/heads/side" in ok(runner, copy, "branch")


# -- hub 404 ---------------------------------------------------------------------------------------------

def test_a_hub_404_exits_not_found(tmp_path: Path) -> None:
    root = tmp_path / "hub"
    Repository.init(root / "team" / "conv").close()
    proc = subprocess.Popen([*CLI, "serve", "--http", "127.0.0.1:0", str(root), "--allow-anonymous-read"],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = ""
        with killed_after(proc, 60):
            while "serving" not in line:
                line = proc.stderr.readline()
                assert line, "the hub did not start"
        url = line.rsplit(" on ", 1)[1].strip()
        for target in (f"{url}/team/nosuch", f"{url}/nothing/here/at/all"):
            done = subprocess.run([*CLI, "clone", target, str(tmp_path / "c")], capture_output=True, text=True,
                                  timeout=60)
            assert done.returncode == 3, done.stderr
            assert done.stderr.startswith("ctxstore: error:") and done.stderr.count("\n") == 1
            assert not (tmp_path / "c").exists()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# -- progress ---------------------------------------------------------------------------------------------

def _on_a_terminal(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    """Run `argv` with stderr on a pseudo-terminal; exit code, stdout, and what the terminal showed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    shown = b""
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the follower side closed: the process is done
            break
        if not data:
            break
        shown += data
    out, _ = proc.communicate(timeout=60)
    os.close(leader)
    return proc.returncode, out, shown.decode("utf-8", "replace")


def test_fsck_stats_and_clone_show_progress_on_a_terminal_only(repo_dir: Path, tmp_path: Path) -> None:
    code, out, shown = _on_a_terminal([*CLI, "fsck"], repo_dir)
    objects = json.loads(out)["objects"]
    assert code == 0
    assert f"fsck: {objects:,}/{objects:,} objects (100%)" in shown and "objects/s" in shown
    code, out, shown = _on_a_terminal([*CLI, "stats"], repo_dir)
    assert code == 0 and "stats: 1/1 refs (100%)" in shown
    code, out, shown = _on_a_terminal([*CLI, "clone", str(repo_dir), "copy"], tmp_path)
    assert code == 0
    assert "received:" in shown and "objects" in shown and "/s" in shown
    code, out, shown = _on_a_terminal([*CLI, "export", "main", "--format", "jsonl"], repo_dir)
    assert code == 0 and len(out.splitlines()) == 4
    assert "export: 4 entries, " in shown and "/s" in shown
    piped = subprocess.run([*CLI, "fsck"], cwd=repo_dir, capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stderr == ""
    quiet = _on_a_terminal([*CLI, "-q", "fsck"], repo_dir)
    assert quiet[0] == 0 and "objects/s" not in quiet[2]


def test_progress_line_shows_totals_and_rate(capsys: pytest.CaptureFixture[str]) -> None:
    line = ProgressLine("export", "entries", enabled=True)
    line.update(50, 200)
    line.update(200, 200)
    line.close()
    err = capsys.readouterr().err
    assert "export: 200/200 entries (100%)" in err and "entries/s" in err and err.endswith("\n")
    pack = ProgressLine("receiving", "objects", enabled=True)
    pack.bytes_update(12, 3 << 20, final=True)
    pack.close()
    err = capsys.readouterr().err
    assert "receiving: 12 objects, 3.0 MiB, " in err and err.rstrip().endswith("/s")
    silent = ProgressLine("x", "y", enabled=False)
    silent.update(1, 2)
    silent.close()
    assert capsys.readouterr().err == ""
