"""Helpers that several test files share."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SESSION = "0b7c2f4e-5a1d-4c3e-9f00-3d2a1b0c9e8f"


def _uuid(n: int) -> str:
    return f"{n:08x}-1111-4111-8111-111111111111"


def claude_code_records(session: str = SESSION) -> list[dict[str, Any]]:
    """A Claude Code session in its JSONL record shape: the summary title it opens with, a question, a
    first answer that was retried (so the question has two children), the answer that replaced it,
    written as two assistant records (text, then a tool call), the tool result, and a final answer."""

    def record(n: int, parent: int | None, role: str, content: Any, message_id: str | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            message = {"id": message_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-6",
                       "content": content, "stop_reason": None}
        return {"parentUuid": None if parent is None else _uuid(parent), "isSidechain": False,
                "userType": "external", "cwd": "/home/me/project", "sessionId": session, "version": "1.0.98",
                "gitBranch": "main", "type": role, "message": message, "uuid": _uuid(n),
                "timestamp": f"2026-01-01T00:00:{n:02d}.000Z"}

    return [
        {"type": "summary", "summary": "Listing the project's files", "leafUuid": _uuid(6)},
        record(1, None, "user", "List the files"),
        record(2, 1, "assistant", [{"type": "text", "text": "A first answer, then retried"}], "msg_01"),
        record(3, 1, "assistant", [{"type": "text", "text": "Looking."}], "msg_02"),
        record(4, 3, "assistant", [{"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {"path": "."}}],
               "msg_02"),
        record(5, 4, "user", [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]),
        record(6, 5, "assistant", [{"type": "text", "text": "One file: a.py"}], "msg_03"),
    ]


@dataclass(frozen=True)
class ClaudeTranscript:
    """A transcript file from `claude_code_records` and what importing it should give."""

    path: Path
    session: str
    main_line: list[dict[str, Any]]
    """The main line's messages, as `render` gives them after the import."""
    fork: str
    """The last part of the fork ref that the retried answer lands in (``<ref>/<fork>``)."""


@pytest.fixture
def claude_transcript(tmp_path: Path) -> ClaudeTranscript:
    """`claude_code_records` written as Claude Code writes a session: ``<session id>.jsonl``."""
    path = tmp_path / f"{SESSION}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in claude_code_records()), encoding="utf-8")
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "LS", "input": {"path": "."}}
    main_line = [
        {"role": "user", "content": "List the files"},
        {"role": "assistant", "content": [{"type": "text", "text": "Looking."}, tool_use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "One file: a.py"}]},
    ]
    return ClaudeTranscript(path, SESSION, main_line, f"fork-{_uuid(2)[:8]}")


# -- messages ------------------------------------------------------------------------------------------

def user(text: str) -> dict[str, Any]:
    """A user message with plain-text content."""
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    """An assistant message with plain-text content."""
    return {"role": "assistant", "content": text}


def assistant_blocks(text: str) -> dict[str, Any]:
    """An assistant message as the Messages API returns it: a list with one text block."""
    return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def msg(text: str, role: str = "user") -> dict[str, Any]:
    """A message of `role` with plain-text content."""
    return {"role": role, "content": text}


def texts(messages: list[dict[str, Any]]) -> list[Any]:
    """Each message's text: string content as it is, and for block content each block's text (or type)."""
    out: list[Any] = []
    for message in messages:
        content = message["content"]
        if isinstance(content, str):
            out.append(content)
        else:
            out.extend(b.get("text") or b.get("type") for b in content)
    return out


def run(coro: Any) -> Any:
    """Run a coroutine to completion (the tests' way into async APIs)."""
    return asyncio.run(coro)
