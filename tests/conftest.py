"""Helpers that several test files share."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import settings

# No example may fail for taking long: CI has 2 cores, and a starved process would make hypothesis call a
# property test flaky for its timing alone. A test that needs a deadline sets its own.
settings.register_profile("ctxstore", deadline=None)
settings.load_profile("ctxstore")

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


# -- a Claude Code session as Claude Code writes it, at any length ------------------------------------

def _cc_uuid(n: int) -> str:
    return f"{n:08x}-2222-4222-8222-222222222222"


class ClaudeSession:
    """Builds the records of a realistic Claude Code session: every record type an import meets.

    A leading `summary` title, `file-history-snapshot` records, `system` records, user prompts (some
    with an image), assistant messages streamed as one record per content block sharing a message id
    (thinking, text, tool use), tool results, a subagent's `isSidechain` records (with `agentId`)
    between a `Task` tool use and its result, and `compact_boundary` records with `compactMetadata`
    followed by the compaction summary. `turn()` adds one round; `lines()` gives the JSONL lines, with
    malformed lines put in where asked.
    """

    def __init__(self, session: str = SESSION, *, cwd: str = "/home/me/project", branch: str = "main") -> None:
        self.session, self.cwd, self.branch = session, cwd, branch
        self.records: list[dict[str, Any]] = [{"type": "summary", "summary": "Refactoring the parser",
                                               "leafUuid": _cc_uuid(1)}]
        self.n = 0
        self.last: str | None = None
        self.turns = 0
        self.title = "Refactoring the parser"

    def _next(self) -> tuple[str, str]:
        self.n += 1
        seconds = self.n
        clock = f"{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        return _cc_uuid(self.n), f"2026-01-0{1 + seconds // 86400}T{clock}.000Z"

    def _base(self, kind: str, parent: str | None, *, sidechain: bool = False,
              agent: str | None = None) -> dict[str, Any]:
        uuid, stamp = self._next()
        rec: dict[str, Any] = {"parentUuid": parent, "isSidechain": sidechain, "userType": "external", "cwd": self.cwd,
                               "sessionId": self.session, "version": "1.0.98", "gitBranch": self.branch, "type": kind,
                               "uuid": uuid, "timestamp": stamp}
        if agent is not None:
            rec["agentId"] = agent
        return rec

    def user(self, content: Any, *, parent: str | None = None, sidechain: bool = False, agent: str | None = None,
             main: bool = True, **extra: Any) -> str:
        rec = self._base("user", self.last if parent is None and main else parent, sidechain=sidechain, agent=agent)
        rec["message"] = {"role": "user", "content": content}
        rec.update(extra)
        self.records.append(rec)
        if main:
            self.last = rec["uuid"]
        return str(rec["uuid"])

    def assistant(self, blocks: list[dict[str, Any]], *, parent: str | None = None, sidechain: bool = False,
                  agent: str | None = None, main: bool = True) -> str:
        """One assistant message, written as Claude Code streams it: a record per content block."""
        message_id = f"msg_{self.n:06d}"
        at = self.last if parent is None and main else parent
        for block in blocks:
            rec = self._base("assistant", at, sidechain=sidechain, agent=agent)
            rec["message"] = {"id": message_id, "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                              "content": [block], "stop_reason": None,
                              "usage": {"input_tokens": 10, "output_tokens": 5}}
            rec["requestId"] = f"req_{message_id}"
            self.records.append(rec)
            at = rec["uuid"]
        if main:
            self.last = at
        return str(at)

    def system(self, text: str) -> None:
        rec = self._base("system", self.last)
        rec.update({"subtype": "informational", "content": text, "level": "info", "isMeta": False})
        self.records.append(rec)
        self.last = rec["uuid"]

    def snapshot(self) -> None:
        self.records.append({"type": "file-history-snapshot", "messageId": f"snap-{self.n}",
                             "snapshot": {"trackedFileBackups": {}, "timestamp": "2026-01-01T00:00:00Z"},
                             "isSnapshotUpdate": False})

    def compact(self) -> None:
        rec = self._base("system", None)
        rec.update({"logicalParentUuid": self.last, "subtype": "compact_boundary", "content": "Conversation compacted",
                    "isMeta": False, "level": "info", "compactMetadata": {"trigger": "auto", "preTokens": 150000}})
        self.records.append(rec)
        self.last = rec["uuid"]
        self.user(f"This session is being continued from a previous conversation. Summary: {self.turns} turns.",
                  isCompactSummary=True, isVisibleInTranscriptOnly=True)

    def turn(self) -> None:
        """One round: a prompt, a streamed answer with a tool call, its result, and a closing answer; every
        few rounds an image, a system record, a file snapshot, a subagent or a compaction."""
        t = self.turns = self.turns + 1
        self.snapshot()
        if t % 5 == 0:
            self.user([{"type": "text", "text": f"Look at this screenshot ({t})"},
                       {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                    "data": "iVBORw0KGgo" + "A" * 400}}])
        else:
            self.user(f"Step {t}: please change parser{t}.py")
        if t % 4 == 0:
            tool = f"toolu_task_{t}"
            self.assistant([{"type": "text", "text": "I'll ask a subagent."},
                            {"type": "tool_use", "id": tool, "name": "Task",
                             "input": {"description": "search", "prompt": f"Find uses of parse{t}"}}])
            agent = f"agent{t:04d}"
            first = self.user(f"Find uses of parse{t}", parent=None, sidechain=True, agent=agent, main=False)
            grep = {"type": "tool_use", "id": f"toolu_s{t}", "name": "Grep", "input": {"pattern": "parse"}}
            sid = self.assistant([grep],
                                 parent=first, sidechain=True, agent=agent, main=False)
            sres = self.user([{"type": "tool_result", "tool_use_id": f"toolu_s{t}", "content": "a.py:3"}],
                             parent=sid, sidechain=True, agent=agent, main=False)
            self.assistant([{"type": "text", "text": f"parse{t} is used in a.py"}], parent=sres, sidechain=True,
                           agent=agent, main=False)
            self.user([{"type": "tool_result", "tool_use_id": tool, "content": [{"type": "text", "text": "a.py"}]}])
        else:
            tool = f"toolu_{t}"
            self.assistant([{"type": "thinking", "thinking": f"Think about step {t}", "signature": "sig"},
                            {"type": "text", "text": f"Editing parser{t}.py."},
                            {"type": "tool_use", "id": tool, "name": "Edit",
                             "input": {"file_path": f"parser{t}.py", "old_string": "a", "new_string": "b"}}])
            self.user([{"type": "tool_result", "tool_use_id": tool, "content": "ok"}])
        if t % 7 == 0:
            self.system(f"Hook ran after step {t}")
        self.assistant([{"type": "text", "text": f"Done with step {t}."}])
        if t % 25 == 0:
            self.compact()

    def lines(self, malformed: dict[int, str] | None = None) -> list[str]:
        """The JSONL lines; `malformed` puts bad text in before the record at each index."""
        out = []
        for index, rec in enumerate(self.records):
            if malformed and index in malformed:
                out.append(malformed[index])
            out.append(json.dumps(rec))
        return out


def claude_session(records: int = 2000) -> ClaudeSession:
    """A `ClaudeSession` of about `records` records."""
    session = ClaudeSession()
    while len(session.records) < records:
        session.turn()
    return session


@contextlib.contextmanager
def killed_after(proc: subprocess.Popen[Any], seconds: float) -> Iterator[None]:
    """Kill `proc` if the block has not finished within `seconds`: a read from a child that never writes
    what the test waits for then ends (at end of file) and the test fails, instead of blocking CI for ever."""
    timer = threading.Timer(seconds, proc.kill)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def drain(fd: int) -> bytes:
    """Everything a pseudo-terminal's master side yields until the other side closes, then close it."""
    import os

    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks)


# -- real servers: PostgreSQL and an S3-compatible store (tools/services.py) ---------------------------

def _services() -> ModuleType:
    """tools/services.py, loaded by path (tools/ is not a package)."""
    name = "ctxstore_tools_services"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent.parent / "tools" / "services.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _unavailable(why: str) -> None:
    """Skip the tests that need a server that cannot run here; under CI (``CI`` set) fail instead."""
    if os.environ.get("CI"):
        pytest.fail(f"{why} (CI is set, so this fails instead of skipping)")
    pytest.skip(why)


@contextlib.contextmanager
def _service(kind: str, what: str) -> Iterator[Any]:
    """A `tools/services.py` server of `kind` ("postgres" or "s3") in a fresh directory under /tmp, stopped
    and removed afterwards; skipped (failed under $CI) where it cannot run or does not start."""
    services = _services()
    why = services.have_postgres() if kind == "postgres" else services.have_s3()
    if why is not None:
        _unavailable(why)
    # Under /tmp, not pytest's tmp_path: the postgres user must be able to reach the directory.
    root = Path(tempfile.mkdtemp(prefix=f"ctxstore-{kind}-"))
    if kind == "postgres":
        root.chmod(0o755)
    try:
        service = (services.start_postgres if kind == "postgres" else services.start_s3)(root / kind)
    except services.ServiceError as exc:
        shutil.rmtree(root, ignore_errors=True)
        _unavailable(f"{what} did not start: {exc}")
    try:
        yield service
    finally:
        service.stop()
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class S3Endpoint:
    """An S3-compatible server for the tests: its URL and the key and secret it accepts."""

    url: str
    key: str
    secret: str


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL database URL: $CTXSTORE_TEST_POSTGRES if set, else a server started for this session
    (skipped where PostgreSQL cannot run, failed instead when $CI is set)."""
    url = os.environ.get("CTXSTORE_TEST_POSTGRES")
    if url:
        yield url
        return
    with _service("postgres", "PostgreSQL") as service:
        yield service.url


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[S3Endpoint]:
    """An S3-compatible server: $CTXSTORE_TEST_S3 (with $CTXSTORE_TEST_S3_KEY and _SECRET) if set, else
    SeaweedFS started for this session (skipped where it cannot run, failed instead when $CI is set)."""
    url = os.environ.get("CTXSTORE_TEST_S3")
    if url:
        yield S3Endpoint(url, os.environ.get("CTXSTORE_TEST_S3_KEY", ""), os.environ.get("CTXSTORE_TEST_S3_SECRET", ""))
        return
    with _service("s3", "SeaweedFS") as service:
        yield S3Endpoint(service.url, service.env["CTXSTORE_TEST_S3_KEY"], service.env["CTXSTORE_TEST_S3_SECRET"])


class CountingStore:
    """A store wrapper that counts object reads (`get`); everything else, transactions too, passes through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.gets = 0

    def get(self, oid: bytes) -> bytes:
        self.gets += 1
        return self._inner.get(oid)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.fixture
def runner() -> Any:
    """A click `CliRunner` for the `ctxstore` command in this process."""
    from click.testing import CliRunner

    return CliRunner()
