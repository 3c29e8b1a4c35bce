"""`ctxstore chat` and `ctxstore compact` through click's CliRunner (offline, and Anthropic over a mock)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anthropic
import click
import httpx2
import pytest
from click.testing import CliRunner, Result

import ctxstore.agents.anthropic as anthropic_adapter
from ctxstore import Repository
from ctxstore.agents.anthropic import anthropic_model
from ctxstore.cli import cli
from ctxstore.cli._agent import chat, compact


def full_cli() -> click.Group:
    """The main group, which registers the agent commands."""
    return cli


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    path = tmp_path / ".ctxstore"
    Repository.init(path, durable=False).close()
    return path


def invoke(repo_path: Path, *args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(full_cli(), ["--repo", str(repo_path), *args], input=input,
                              catch_exceptions=False)


def stored(repo_path: Path, ref: str = "main") -> list[dict[str, Any]]:
    with Repository.open(repo_path) as repo:
        return repo.history(ref).render()


def text_of(message: dict[str, Any]) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content)


def test_chat_offline_answers_each_line_until_exit_and_records_every_message(repo_path: Path) -> None:
    lines = "hello\n\nsecond question\n/exit\nnot sent\n"
    result = invoke(repo_path, "chat", "main", "--offline", input=lines)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == ["Offline answer to: hello", "Offline answer to: second question"]
    assert "2 turns recorded; refs/heads/main" in result.stderr
    assert [text_of(m) for m in stored(repo_path)] == [
        "hello", "Offline answer to: hello", "second question", "Offline answer to: second question"]


def test_chat_resumes_an_existing_ref_and_ends_at_end_of_input(repo_path: Path) -> None:
    invoke(repo_path, "chat", "main", "--offline", input="first\n")
    result = invoke(repo_path, "chat", "main", "--offline", input="again")
    assert result.exit_code == 0, result.stderr
    assert "(2 messages so far)" in result.stderr
    assert [m["role"] for m in stored(repo_path)] == ["user", "assistant"] * 2


def test_chat_json_prints_one_object_per_answer_with_the_recorded_revision(repo_path: Path) -> None:
    result = invoke(repo_path, "chat", "main", "--offline", "--model", "claude-haiku-4-5", "--json",
                    input="one\ntwo\n")
    assert result.exit_code == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["text"] for a in answers] == ["Offline answer to: one", "Offline answer to: two"]
    with Repository.open(repo_path) as repo:
        assert answers[-1]["revision"] == repo.head("main")
    assert answers[0]["cost"] > 0 and answers[0]["usage"]["inputTokens"] > 0


def test_chat_without_a_key_or_offline_is_a_usage_error_and_writes_nothing(
        repo_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    result = invoke(repo_path, "chat", "main", input="hi\n")
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.stderr and "--offline" in result.stderr
    with Repository.open(repo_path) as repo:
        assert repo.refs() == {}


def answer(text: str) -> httpx2.Response:
    return httpx2.Response(200, json={
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 3}})


class MockAnthropic:
    """Stands in for `anthropic_model`: the real adapter over an SDK client on httpx2.MockTransport."""

    def __init__(self, *responses: httpx2.Response) -> None:
        self.responses = list(responses)
        self.bodies: list[dict[str, Any]] = []

    def handle(self, request: httpx2.Request) -> httpx2.Response:
        self.bodies.append(json.loads(request.content))
        return self.responses.pop(0)

    def __call__(self, model: str, **options: Any) -> Any:
        client = anthropic.AsyncAnthropic(api_key="test", max_retries=0, http_client=httpx2.AsyncClient(
            transport=httpx2.MockTransport(self.handle)))
        return anthropic_model(model, client=client, **options)


def test_chat_with_anthropic_sends_the_whole_recorded_conversation(
        repo_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    invoke(repo_path, "chat", "main", "--offline", input="remember 42\n")
    mock = MockAnthropic(answer("You said 42."))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setattr(anthropic_adapter, "anthropic_model", mock)
    result = invoke(repo_path, "chat", "main", "--model", "claude-haiku-4-5", "--system", "be brief",
                    "--max-tokens", "50", input="what did I say?\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "You said 42.\n"
    body = mock.bodies[0]
    assert body["model"] == "claude-haiku-4-5" and body["system"] == "be brief" and body["max_tokens"] == 50
    assert [text_of(m) for m in body["messages"]] == [
        "remember 42", "Offline answer to: remember 42", "what did I say?"]
    assert text_of(stored(repo_path)[-1]) == "You said 42."


def test_chat_reports_an_api_error_in_one_line_and_keeps_what_was_recorded(
        repo_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    failing = httpx2.Response(529, json={"type": "error", "error": {"type": "overloaded_error",
                                                                      "message": "Overloaded"}})
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test")
    monkeypatch.setattr(anthropic_adapter, "anthropic_model", MockAnthropic(failing))
    result = invoke(repo_path, "chat", "main", input="hello\n")
    assert result.exit_code == 1
    error_lines = [line for line in result.stderr.splitlines() if line.startswith("ctxstore: error:")]
    assert len(error_lines) == 1 and "529" in error_lines[0]
    assert [text_of(m) for m in stored(repo_path)] == ["hello"]


def chat_turns(repo_path: Path, count: int) -> None:
    lines = "".join(f"turn number {n} with some words to make it longer\n" for n in range(count))
    assert invoke(repo_path, "chat", "main", "--offline", input=lines).exit_code == 0


def test_compact_commits_a_summary_revision_and_keeps_the_originals(repo_path: Path) -> None:
    chat_turns(repo_path, 4)
    originals = stored(repo_path)
    result = invoke(repo_path, "compact", "main", "--trigger-tokens", "10", "--keep-recent", "2", "--offline")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["compacted"] is True and out["ref"] == "refs/heads/main"
    assert out["summarized"] == 6 and out["size"] == 3
    with Repository.open(repo_path) as repo:
        assert out["revision"] == repo.head("main")
        revision = next(iter(repo.iter_revisions("main")))
        assert revision.id == out["revision"]
        history = repo.history("main")
        assert revision.operation["type"] == "edit"
        assert history.refs()[0].kind == "summary"
        assert history.restore() == originals
    assert text_of(stored(repo_path)[0]).startswith("[Conversation summary]")
    log = json.loads(invoke(repo_path, "log", "main").stdout)
    assert log[0]["id"] == out["revision"] and log[1]["id"] == out["previous"]


def test_compact_below_the_trigger_changes_nothing(repo_path: Path) -> None:
    chat_turns(repo_path, 2)
    with Repository.open(repo_path) as repo:
        head = repo.head("main")
    result = invoke(repo_path, "compact", "main", "--trigger-tokens", "100000", "--keep-recent", "0",
                    "--offline")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["compacted"] is False and out["revision"] == out["previous"] == head
    with Repository.open(repo_path) as repo:
        assert repo.head("main") == head


def test_compact_of_an_unknown_ref_exits_3(repo_path: Path) -> None:
    result = invoke(repo_path, "compact", "nothing-here", "--offline")
    assert result.exit_code == 3
    assert "nothing-here" in result.stderr
    with Repository.open(repo_path) as repo:
        assert repo.refs() == {}


def test_compact_without_a_key_or_offline_is_a_usage_error(repo_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    chat_turns(repo_path, 1)
    assert invoke(repo_path, "compact", "main").exit_code == 2


def test_the_commands_run_on_their_own_with_ctxstore_dir_or_the_repo_option(repo_path: Path) -> None:
    runner = CliRunner(env={"CTXSTORE_DIR": str(repo_path)})
    assert runner.invoke(chat, ["main", "--offline"], input="solo\n", catch_exceptions=False).exit_code == 0
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "compact", "main", "--offline",
                                                 "--keep-recent", "0"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["compacted"] is True
    main = click.Context(cli)
    assert cli.get_command(main, "compact") is compact and cli.get_command(main, "chat") is chat
