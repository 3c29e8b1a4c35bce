"""`ctxstore chat` with the offline model: / commands, end of input, Ctrl-C, and readline line editing,
through CliRunner and through real subprocesses (pipes and a pseudo-terminal)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from conftest import killed_after

from ctxstore import Repository
from ctxstore.agents.anthropic import DEFAULT_MODEL as ADAPTER_DEFAULT
from ctxstore.cli import cli
from ctxstore.cli._agent import CHAT_COMMANDS, DEFAULT_MODEL

CLI = [sys.executable, "-m", "ctxstore.cli"]


@pytest.fixture
def work(tmp_path: Path) -> Path:
    result = CliRunner().invoke(cli, ["-C", str(tmp_path), "init"])
    assert result.exit_code == 0, result.output
    return tmp_path


def _view(work: Path, ref: str) -> list[Any]:
    with Repository.open(work / ".ctxstore") as repo:
        return [m["content"] if isinstance(m["content"], str) else m["content"][0].get("text")
                for m in repo.history(ref).render()]


def _chat(work: Path, text: str, *args: str) -> Any:
    return CliRunner().invoke(cli, ["-C", str(work), "chat", "talk", "--offline", *args], input=text)


def test_commands_are_never_sent_to_the_model(work: Path) -> None:
    result = _chat(work, "first question\n/help\n/bogus thing\nsecond question\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == ["Offline answer to: first question", "Offline answer to: second question"]
    for usage in CHAT_COMMANDS:
        assert usage.split()[0] in result.stderr  # /help listed them all
    assert "unknown command /bogus" in result.stderr
    assert _view(work, "talk") == ["first question", "Offline answer to: first question",
                                   "second question", "Offline answer to: second question"]


def test_a_double_slash_sends_a_line_starting_with_slash(work: Path) -> None:
    result = _chat(work, "//help is a word here\n")
    assert result.exit_code == 0, result.output
    assert _view(work, "talk")[0] == "/help is a word here"


def test_undo_drops_the_last_exchange(work: Path) -> None:
    result = _chat(work, "one\ntwo\n/undo\nthree\n")
    assert result.exit_code == 0, result.output
    assert _view(work, "talk") == ["one", "Offline answer to: one", "three", "Offline answer to: three"]
    assert "undone" in result.stderr
    empty = _chat(work, "/undo\n/undo\n/undo\n")
    assert empty.exit_code == 0 and "nothing to undo" in empty.stderr
    assert _view(work, "talk") == []


def test_fork_continues_on_a_new_ref_and_leaves_the_old(work: Path) -> None:
    result = _chat(work, "shared\n/fork side\nonly on side\n/fork side\n")
    assert result.exit_code == 0, result.output
    assert _view(work, "talk") == ["shared", "Offline answer to: shared"]
    assert _view(work, "side") == ["shared", "Offline answer to: shared", "only on side",
                                   "Offline answer to: only on side"]
    assert "already exists" in result.stderr
    assert "refs/heads/side is at" in result.stderr.splitlines()[-1]


def test_compact_summarizes_the_older_part(work: Path) -> None:
    lines = "".join(f"question {n}\n" for n in range(6))
    result = _chat(work, lines + "/compact\nafter\n")
    assert result.exit_code == 0, result.output
    with Repository.open(work / ".ctxstore") as repo:
        entries = repo.history("talk").refs()
    assert any(e.kind == "summary" for e in entries)
    assert len(entries) < 14  # 12 messages before and 2 after, some of them now one summary
    assert "compacted refs/heads/talk" in result.stderr


def test_exit_ends_the_chat_before_later_lines(work: Path) -> None:
    result = _chat(work, "hello\n/exit\nnever sent\n", "--json")
    assert result.exit_code == 0, result.output
    turns = [json.loads(line) for line in result.stdout.splitlines()]
    assert [t["text"] for t in turns] == ["Offline answer to: hello"]
    assert _view(work, "talk") == ["hello", "Offline answer to: hello"]


def test_chat_refuses_a_tag(work: Path) -> None:
    CliRunner().invoke(cli, ["-C", str(work), "append", "main", "hi"])
    assert CliRunner().invoke(cli, ["-C", str(work), "tag", "v1", "main"]).exit_code == 0
    result = CliRunner().invoke(cli, ["-C", str(work), "chat", "v1", "--offline"], input="more\n")
    assert result.exit_code == 2 and "tags do not move" in result.stderr


def test_the_help_texts_default_model_is_the_adapters() -> None:
    assert DEFAULT_MODEL == ADAPTER_DEFAULT


# -- real processes ------------------------------------------------------------------------------------

def test_end_of_input_ends_a_piped_chat_with_exit_0(work: Path) -> None:
    done = subprocess.run([*CLI, "chat", "talk", "--offline"], cwd=work, input="hi there\n/help\n",
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Offline answer to: hi there\n"
    assert _view(work, "talk") == ["hi there", "Offline answer to: hi there"]


def _read_until(proc: subprocess.Popen[str], text: str, timeout: float = 30) -> str:
    """The process's stderr up to the line holding `text`. A process that has not printed it within `timeout`
    seconds is killed, so a missing line fails the test instead of blocking the read for ever."""
    assert proc.stderr is not None
    seen = ""
    with killed_after(proc, timeout):
        while text not in seen:
            line = proc.stderr.readline()
            if not line:
                break
            seen += line
    assert text in seen, seen
    return seen


def _interruptible() -> None:
    """In the child: Ctrl-C raises KeyboardInterrupt, as at a terminal, even where the test runner was
    started with SIGINT ignored (a background job), which the child would otherwise inherit."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_interrupts_a_reply_and_the_chat_goes_on(work: Path) -> None:
    proc = subprocess.Popen([*CLI, "chat", "talk", "--offline", "--latency", "30"], cwd=work,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_interruptible)
    assert proc.stdin is not None
    try:
        _read_until(proc, "chat on refs/heads/talk")
        proc.stdin.write("a slow question\n")
        proc.stdin.flush()
        # The question is committed before the model is asked: wait for it, then interrupt the answer.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "a slow question" not in _view(work, "talk"):
            time.sleep(0.05)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _read_until(proc, "interrupted")
        out, err = proc.communicate("/exit\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert out == ""
    assert _view(work, "talk") == []  # the interrupted exchange was dropped


def test_a_terminal_chat_has_line_editing_and_history(work: Path) -> None:
    """On a terminal, Ctrl-A moves to the line's start and Ctrl-P recalls the previous line (readline)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*CLI, "chat", "talk", "--offline"], cwd=work, stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    shown = b""
    seen = 0  # what earlier waits matched is not matched again

    def wait_for(text: bytes, timeout: float = 30) -> None:
        nonlocal shown, seen
        deadline = time.monotonic() + timeout
        while text not in shown[seen:] and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if ready:
                try:
                    shown += os.read(leader, 4096)
                except OSError:
                    break
        assert text in shown[seen:], shown
        seen = shown.index(text, seen) + len(text)

    try:
        wait_for(b"you> ")
        os.write(leader, b"world\x01hello \r")  # typed "world", went home, typed "hello "
        wait_for(b"Offline answer to: hello world")
        wait_for(b"you> ")
        os.write(leader, b"\x10\r")  # Ctrl-P: the line before, sent again
        wait_for(b"Offline answer to: hello world")
        wait_for(b"you> ")
        os.write(leader, b"\x04")  # Ctrl-D: end of input
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(leader)
    assert code == 0
    assert _view(work, "talk") == ["hello world", "Offline answer to: hello world"] * 2
