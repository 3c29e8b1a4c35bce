"""The guided tour: it runs start to end, prints only through its callback, and its steps are hooks."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxstore import Repository
from ctxstore.cli import cli
from ctxstore.cli._invoke import invoker
from ctxstore.cli.tour import STEPS, Skip, Step, TourContext, run_tour
from ctxstore.errors import CtxStoreError


def test_tour_runs_every_step_and_keeps_the_repository(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    skipped = run_tour(lines.append, command=invoker(cli), directory=tmp_path / "t")
    text = "\n".join(lines)
    assert capsys.readouterr().out == ""  # the tour never prints by itself
    for number, step in enumerate(STEPS, 1):
        assert f"== {number}. {step.title} ==" in text
    assert set(skipped) <= {s.title for s in STEPS if "Sync" in s.title}
    assert "$ ctxstore log --graph" in text and "|/" in text
    assert "$ ctxstore ls --pretty" in text and "experiment" in text.split("$ ctxstore ls --pretty")[1]
    grep_out = text.split("$ ctxstore grep")[1].split("$ ctxstore")[0]
    assert "[text]" in grep_out and "memory" in grep_out.lower()
    assert "── user" in text and "── assistant" in text  # the readable render's role headers
    assert "tool_use" in text and "[Conversation summary]" in text
    with Repository.open(tmp_path / "t" / ".ctxstore") as repo:
        assert {"refs/heads/main", "refs/heads/experiment", "refs/heads/agent"} <= set(repo.refs())
        assert repo.fsck().ok
        main = repo.history("main")
        assert any(e.kind == "summary" for e in main.refs()) and len(main.restore()) > main.size


def test_tour_in_a_temporary_directory_leaves_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    run_tour(lines.append, command=invoker(cli), steps=STEPS[2:4])
    where = next(line for line in lines if "Working in" in line).split("Working in ")[1].rstrip(".")
    assert not Path(where).exists()


def test_tour_refuses_a_directory_that_already_has_a_repository(tmp_path: Path) -> None:
    Repository.init(tmp_path / ".ctxstore").close()
    with pytest.raises(FileExistsError):
        run_tour(lambda _line: None, command=invoker(cli), directory=tmp_path)


def test_a_step_that_skips_does_not_stop_the_tour(tmp_path: Path) -> None:
    def missing(_t: TourContext) -> None:
        raise Skip("not here")

    ran: list[str] = []
    steps = [Step("Missing part", missing), Step("Next", lambda t: ran.append(str(t.directory)))]
    lines: list[str] = []
    assert run_tour(lines.append, command=invoker(cli), steps=steps) == ["Missing part"]
    assert ran and "    (skipped: not here)" in lines


def test_a_failing_command_raises_a_ctxstore_error(tmp_path: Path) -> None:
    steps = [Step("Bad", lambda t: t.run("render", "no-such-ref"))]
    with pytest.raises(CtxStoreError, match="exited 3"):
        run_tour(lambda _line: None, command=invoker(cli), steps=steps, directory=tmp_path)
