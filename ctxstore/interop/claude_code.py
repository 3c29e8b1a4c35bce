"""Claude Code transcripts (``~/.claude/projects/*/<session>.jsonl``) imported as refs, forks and summaries.

A transcript is JSON Lines of records. The ones that carry the conversation have a `uuid` and link to
their parent through `parentUuid`, so the records form a tree: the main line, subagent sidechains,
retried turns. Others (the session's `summary` title, `file-history-snapshot`) carry no step and are
skipped. `parse_claude_code` turns the records into that tree of steps; `import_claude_code` commits it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, Final, cast

from ..errors import CtxStoreError, InvalidInput
from ..history.message_history import MessageHistory
from ..repo.repository import Repository
from .landing import ImportResult, land
from .source import Source, json_lines, read_text

__all__ = ["Transcript", "TranscriptStep", "import_claude_code", "is_transcript_record", "parse_claude_code"]

_MARKER_TYPES: Final = ("summary", "file-history-snapshot")
"""Record types only Claude Code writes, which may open a transcript before its first message."""
_MARKER_KEYS: Final = ("uuid", "sessionId", "parentUuid")
_KEPT_FIELDS: Final = ("parentUuid", "timestamp", "sessionId", "isSidechain", "cwd", "gitBranch", "version")
_MESSAGE_FIELDS: Final = {"model": "model", "id": "messageId", "usage": "usage", "stop_reason": "stop_reason"}


@dataclass
class TranscriptStep:
    """One step of a transcript as it is imported.

    `kind` is "message" (a user or assistant record, the records Claude Code writes for the content
    blocks of one assistant message joined), "summary" (the `isCompactSummary` record after a
    compaction) or "boundary" (a `compact_boundary` record). `uuids` are the records it was made of;
    `parent` and `children` are the uuids of the neighbouring steps in the tree.
    """

    uuid: str
    kind: str
    record: dict[str, Any]
    message: dict[str, Any]
    uuids: list[str]
    sidechain: bool
    parent: str | None = None
    children: list[str] = field(default_factory=list)

    @property
    def message_id(self) -> Any:
        """The API message id the step's first record carries (None for a user record or a boundary)."""
        message = self.record.get("message")
        return message.get("id") if isinstance(message, dict) else None


@dataclass
class Transcript:
    """A parsed transcript: its steps by uuid, their uuids in file order, and the session id."""

    steps: dict[str, TranscriptStep]
    order: list[str]
    session: str | None


def is_transcript_record(value: Any) -> bool:
    """Whether a JSON value (a file's first record) is one that only a Claude Code transcript holds."""
    if not isinstance(value, Mapping):
        return False
    return any(key in value for key in _MARKER_KEYS) or value.get("type") in _MARKER_TYPES


def _json_copy(value: Any, uuid: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidInput(f"transcript record {uuid} holds a value that is not JSON data ({exc})") from None


def _content_list(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    if content is None or content == "":
        return []
    return [{"type": "text", "text": str(content)}]


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _meta(step: TranscriptStep) -> dict[str, Any]:
    rec = step.record
    info: dict[str, Any] = {"uuid": step.uuid}
    if len(step.uuids) > 1:
        info["uuids"] = list(step.uuids)
    for key in _KEPT_FIELDS:
        if rec.get(key) is not None:
            info[key] = rec[key]
    msg = rec.get("message")
    if isinstance(msg, dict):
        for key, name in _MESSAGE_FIELDS.items():
            if msg.get(key) is not None:
                info[name] = msg[key]
    if step.kind == "boundary" and isinstance(rec.get("compactMetadata"), dict):
        info["compactMetadata"] = rec["compactMetadata"]
    return {"claudeCode": _json_copy(info, step.uuid)}


def _kind(rec: Mapping[str, Any]) -> str | None:
    rtype = rec.get("type")
    if rtype == "system" and rec.get("subtype") == "compact_boundary":
        return "boundary"
    if rtype in ("user", "assistant") and isinstance(rec.get("message"), dict):
        return "summary" if rec.get("isCompactSummary") else "message"
    return None  # a step with no message (tool progress, hooks, ...): the tree passes through it


def _joins(prev: TranscriptStep, rec: Mapping[str, Any]) -> bool:
    """Whether `rec` is another content block of the assistant message `prev` holds."""
    msg = rec["message"]
    return (prev.kind == "message" and rec.get("type") == "assistant" and not prev.children
            and prev.message.get("role") == "assistant" and msg.get("id") is not None
            and prev.message_id == msg.get("id"))


def parse_claude_code(records: Iterable[Any]) -> Transcript:
    """The steps of a transcript's records (JSON values, in file order)."""
    steps: dict[str, TranscriptStep] = {}
    order: list[str] = []
    alias: dict[str, str] = {}  # every record uuid -> the kept step it belongs to or stands behind ("": none)
    seen: set[str] = set()
    session: str | None = None
    last_main: str | None = None
    for number, rec in enumerate(records, 1):
        if not isinstance(rec, Mapping):
            raise InvalidInput(f"transcript record {number} is not a JSON object")
        uuid = rec.get("uuid")
        if not isinstance(uuid, str) or not uuid or uuid in seen:
            continue  # titles, file snapshots and repeated records carry no conversation step
        seen.add(uuid)
        session = session or _str_or_none(rec.get("sessionId"))
        kind = _kind(rec)
        parent = _str_or_none(rec.get("parentUuid"))
        if kind == "boundary":
            parent = parent or _str_or_none(rec.get("logicalParentUuid"))
        sidechain = bool(rec.get("isSidechain"))
        if parent is None and sidechain and last_main is not None:
            parent = last_main  # a subagent's first step: branch where the main line stood
        target = alias.get(parent, "") if parent is not None else ""
        if kind is None:
            alias[uuid] = target
            continue
        if kind == "message" and target and _joins(steps[target], rec):
            # Claude Code writes one record per content block of an assistant message: rejoin them.
            prev = steps[target]
            prev.message["content"] = _content_list(prev.message.get("content")) + _content_list(
                _json_copy(rec["message"].get("content"), uuid))
            prev.uuids.append(uuid)
            alias[uuid] = target
            continue
        if kind == "boundary":
            message = {"role": "user", "content": str(rec.get("content") or "Conversation compacted")}
        else:
            msg = rec["message"]
            role = msg.get("role")
            message = {"role": role if isinstance(role, str) else str(rec.get("type")),
                       "content": _json_copy(msg.get("content", ""), uuid)}
        step = TranscriptStep(uuid, kind, dict(rec), message, [uuid], sidechain, parent=target or None)
        steps[uuid] = step
        order.append(uuid)
        alias[uuid] = uuid
        if step.parent is not None:
            steps[step.parent].children.append(uuid)
        if not sidechain:
            last_main = uuid
    return Transcript(steps, order, session)


def _apply(history: MessageHistory, step: TranscriptStep, steps: Mapping[str, TranscriptStep]) -> MessageHistory:
    entry = {"id": step.uuid, "message": step.message, "meta": _meta(step)}
    if step.kind == "message":
        return history.append(entry)
    if step.kind == "boundary" and any(steps[c].kind == "summary" for c in step.children):
        return history  # the summary record that follows carries the text; the boundary adds nothing
    sources = [e.id for e in history.refs()]
    return history.edit({"op": "summary", "sourceIds": sources, "replace": True, "entry": entry})


def _records(records: Iterable[Any] | Source) -> Iterable[Any]:
    """The records themselves, or those of a transcript file (it may end in half a record: still being written)."""
    if isinstance(records, str | os.PathLike):
        return json_lines(read_text(records), partial_tail=True)
    if hasattr(records, "read"):
        return json_lines(read_text(cast(IO[str], records)), partial_tail=True)
    return records


def import_claude_code(repo: Repository, records: Iterable[Any] | Source, ref: str | None = None, *,
                       force: bool = False, message: str = "") -> ImportResult:
    """Import a Claude Code transcript (a path, a text stream, or its records) as refs.

    The main line (ending at the last non-sidechain step) goes to `ref` (default ``claude/<session>``);
    every other line of the record tree (subagent sidechains, retried or edited turns) becomes a fork
    named ``<ref>/sidechain-<uuid8>`` or ``<ref>/fork-<uuid8>`` after its last step. Record uuids are the
    entry ids; records of one assistant message are joined; a compaction becomes a summary entry whose
    sources are the entries it replaced, so `restore` still reaches them. All refs land in one commit;
    a ref that already exists is replaced only with `force` (re-importing a session needs it).
    """
    transcript = parse_claude_code(_records(records))
    steps = transcript.steps
    if not steps:
        raise InvalidInput("the transcript has no user or assistant messages to import")
    base = ref or f"claude/{transcript.session or 'session'}"
    repo.ref_name(base)  # a bad name fails before any work
    tips = [u for u in transcript.order if not steps[u].children]
    main_tips = [u for u in tips if not steps[u].sidechain]
    main = main_tips[-1] if main_tips else tips[-1]
    states: dict[str, MessageHistory] = {}
    root = MessageHistory(source=repo.store)
    updates: dict[str, MessageHistory] = {}
    for tip in [main, *[t for t in tips if t != main]]:
        chain = []
        at: str | None = tip
        while at is not None and at not in states:
            chain.append(at)
            at = steps[at].parent
        history = root if at is None else states[at]
        if tip != main and at is not None:
            history = history.fork()
        for uuid in reversed(chain):
            try:
                history = _apply(history, steps[uuid], steps)
            except CtxStoreError as exc:
                raise InvalidInput(f"transcript record {uuid}: {exc}") from None
            states[uuid] = history
        kind = "sidechain" if steps[tip].sidechain else "fork"
        updates[base if tip == main else f"{base}/{kind}-{tip[:8]}"] = history
    return land(repo, updates, format="claude", entries=len(steps), force=force,
                message=message or "import claude code transcript")
