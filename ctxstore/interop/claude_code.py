"""Claude Code transcripts (``~/.claude/projects/*/<session>.jsonl``) imported as refs, forks and summaries.

A transcript is JSON Lines of records. The ones that carry the conversation have a `uuid` and link to
their parent through `parentUuid`, so the records form a tree: the main line, subagent sidechains,
retried turns. Others carry no step: the session's `summary` title and `system` records are kept in the
metadata of the next step, `file-history-snapshot` records are skipped. `parse_claude_code` turns the
records into that tree of steps; `import_claude_code` commits it.

An import is a pure function of the file: entry ids are record uuids (or, for a record ctxstore exported
from an entry whose id is not a UUID, that id: see `claude_export`) and every revision is dated by its
record's timestamp, so importing the same file again makes the same revisions (nothing moves), and a
session that grew since makes the old revisions plus new ones on top (its refs fast-forward).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, cast

from ..errors import CtxStoreError, InvalidInput
from ..history.message_history import MessageHistory
from ..repo.repository import Repository
from .claude_export import exported_entry_id, string_content
from .landing import ImportProgress, ImportResult, land
from .messages import check_message, tool_use_ids
from .source import Source, numbered_json_lines, read_text

__all__ = [
    "Transcript",
    "TranscriptStep",
    "import_claude_code",
    "is_transcript_record",
    "parse_claude_code",
    "read_transcript",
]

_MARKER_TYPES: Final = ("summary", "file-history-snapshot")
"""Record types only Claude Code writes, which may open a transcript before its first message."""
_MARKER_KEYS: Final = ("uuid", "sessionId", "parentUuid")
_KEPT_FIELDS: Final = ("parentUuid", "timestamp", "sessionId", "isSidechain", "agentId", "cwd", "gitBranch",
                       "version", "userType", "requestId", "branchedFrom")
_MESSAGE_FIELDS: Final = {"model": "model", "id": "messageId", "usage": "usage", "stop_reason": "stop_reason"}


@dataclass
class TranscriptStep:
    """One step of a transcript as it is imported.

    `kind` is "message" (a user or assistant record, the records Claude Code writes for the content
    blocks of one assistant message joined), "summary" (the `isCompactSummary` record after a
    compaction) or "boundary" (a `compact_boundary` record). `uuids` are the records it was made of;
    `parent` and `children` are the uuids of the neighbouring steps in the tree. `carried` are the
    records without a step (titles, `system` records) that came just before it; `line` is the line (or
    record number) it starts at.
    """

    uuid: str
    kind: str
    record: dict[str, Any]
    message: dict[str, Any]
    uuids: list[str]
    sidechain: bool
    parent: str | None = None
    children: list[str] = field(default_factory=list)
    carried: list[dict[str, Any]] = field(default_factory=list)
    line: int = 0
    entry_id: str = ""
    """The id of the entry the step becomes: its uuid, or the id a ctxstore export kept in the record."""

    @property
    def message_id(self) -> Any:
        """The API message id the step's first record carries (None for a user record or a boundary)."""
        message = self.record.get("message")
        return message.get("id") if isinstance(message, dict) else None


@dataclass
class Transcript:
    """A parsed transcript: its steps by uuid, their uuids in file order, the session id and title, and
    the lines (or record numbers) that were skipped as malformed."""

    steps: dict[str, TranscriptStep]
    order: list[str]
    session: str | None
    title: str | None = None
    skipped: list[int] = field(default_factory=list)


def is_transcript_record(value: Any) -> bool:
    """Whether a JSON value (a file's first record) is one that only a Claude Code transcript holds."""
    if not isinstance(value, Mapping):
        return False
    return any(key in value for key in _MARKER_KEYS) or value.get("type") in _MARKER_TYPES


def _json_copy(value: Any, uuid: str) -> Any:
    try:
        return json.loads(json.dumps(value, allow_nan=False))
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


def timestamp_ms(value: Any) -> int | None:
    """Milliseconds since the epoch of an ISO 8601 timestamp such as Claude Code writes, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _meta(step: TranscriptStep, steps: Mapping[str, TranscriptStep]) -> dict[str, Any]:
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
    boundary = step.record if step.kind == "boundary" else None
    if step.kind == "summary" and step.parent is not None and steps[step.parent].kind == "boundary":
        boundary = steps[step.parent].record
        info["boundaryUuid"] = step.parent
    if boundary is not None and isinstance(boundary.get("compactMetadata"), dict):
        info["compactMetadata"] = boundary["compactMetadata"]
    carried = step.carried
    if "boundaryUuid" in info:  # the boundary adds no entry of its own: what it carried comes here
        carried = [*steps[info["boundaryUuid"]].carried, *carried]
    titles = [r["summary"] for r in carried if r.get("type") == "summary" and isinstance(r.get("summary"), str)]
    if titles:
        info["title"] = titles[-1]
    system = [r for r in carried if r.get("type") == "system"]
    if system:
        info["system"] = system
    return {"claudeCode": _json_copy(info, step.uuid)}


def _kind(rec: Mapping[str, Any]) -> str | None:
    rtype = rec.get("type")
    if rtype == "system" and rec.get("subtype") == "compact_boundary":
        return "boundary"
    if rtype in ("user", "assistant") and isinstance(rec.get("message"), dict):
        return "summary" if rec.get("isCompactSummary") else "message"
    return None  # a step with no message (system notes, tool progress, hooks, ...): the tree passes through it


def _joins(prev: TranscriptStep, rec: Mapping[str, Any]) -> bool:
    """Whether `rec` is another content block of the assistant message `prev` holds."""
    msg = rec["message"]
    return (prev.kind == "message" and rec.get("type") == "assistant" and not prev.children
            and prev.message.get("role") == "assistant" and msg.get("id") is not None
            and prev.message_id == msg.get("id"))


def _valid(message: Mapping[str, Any], parent: str | None, steps: Mapping[str, TranscriptStep]) -> bool:
    """Whether a message is one the Messages API takes after the line that ends at `parent`."""
    try:
        check_message(message)
    except InvalidInput:
        return False
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return True
    results = [b.get("tool_use_id") for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return True
    at = parent
    while at is not None and steps[at].message.get("role") != "assistant":
        at = steps[at].parent
    uses = tool_use_ids(steps[at].message) if at is not None else set()
    return all(r in uses for r in results)


def parse_claude_code(records: Iterable[Any], *, skipped: Iterable[int] = ()) -> Transcript:
    """The steps of a transcript's records: JSON values in file order, or (line number, value) pairs.

    A record that is not an object, or whose message the Messages API would refuse (an unknown role or
    content block, a tool result answering no tool use), is skipped and its line listed in `skipped`
    (after the lines given); the tree passes through it.
    """
    steps: dict[str, TranscriptStep] = {}
    order: list[str] = []
    alias: dict[str, str] = {}  # every record uuid -> the kept step it belongs to or stands behind ("": none)
    carried: dict[str, list[dict[str, Any]]] = {}  # records waiting for the next step below a uuid
    loose: list[dict[str, Any]] = []  # titles and records with no uuid, waiting for the next step
    seen: set[str] = set()
    bad = list(skipped)
    session: str | None = None
    title: str | None = None
    last_main: str | None = None
    for number, item in enumerate(records, 1):
        line, rec = item if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int) else (number, item)
        if not isinstance(rec, Mapping):
            bad.append(line)
            continue
        uuid = rec.get("uuid")
        if rec.get("type") == "summary" and isinstance(rec.get("summary"), str):
            title = rec["summary"]
            loose.append(_json_copy(dict(rec), "summary"))
            continue
        if not isinstance(uuid, str) or not uuid or uuid in seen:
            continue  # file snapshots and repeated records carry no conversation step
        seen.add(uuid)
        session = session or _str_or_none(rec.get("sessionId"))
        kind = _kind(rec)
        parent = _str_or_none(rec.get("parentUuid"))
        if kind == "boundary":
            parent = parent or _str_or_none(rec.get("logicalParentUuid"))
        sidechain = bool(rec.get("isSidechain"))
        target = alias.get(parent, "") if parent is not None else ""
        waiting = carried.pop(parent, []) if parent is not None else []
        if kind is not None and kind != "boundary":
            message = rec["message"]
            if not _valid(message, target or None, steps):
                bad.append(line)
                kind = None
        if kind is None:
            alias[uuid] = target
            if rec.get("type") == "system":
                waiting = [*waiting, _json_copy(dict(rec), uuid)]
            if waiting:
                carried[uuid] = waiting
            continue
        if kind == "message" and target and _joins(steps[target], rec):
            # Claude Code writes one record per content block of an assistant message: rejoin them.
            prev = steps[target]
            prev.message["content"] = _content_list(prev.message.get("content")) + _content_list(
                _json_copy(rec["message"].get("content"), uuid))
            prev.uuids.append(uuid)
            alias[uuid] = target
            if waiting:
                carried[uuid] = waiting
            continue
        if kind == "boundary":
            message = {"role": "user", "content": str(rec.get("content") or "Conversation compacted")}
        else:
            msg = rec["message"]
            message = {"role": msg["role"], "content": _json_copy(msg.get("content", ""), uuid)}
            blocks = message["content"]
            if (string_content(rec) and isinstance(blocks, list) and len(blocks) == 1 and isinstance(blocks[0], dict)
                    and blocks[0].get("type") == "text" and isinstance(blocks[0].get("text"), str)):
                message["content"] = blocks[0]["text"]  # an export wrote a string as the one block Claude Code expects
        record = dict(rec)
        if sidechain and parent is None and last_main is not None:
            record["branchedFrom"] = last_main  # where the main line stood when the subagent started
        step = TranscriptStep(uuid, kind, record, message, [uuid], sidechain, parent=target or None,
                              carried=[*loose, *waiting], line=line, entry_id=exported_entry_id(rec) or uuid)
        loose = []
        steps[uuid] = step
        order.append(uuid)
        alias[uuid] = uuid
        if step.parent is not None:
            steps[step.parent].children.append(uuid)
        if not sidechain:
            last_main = uuid
    return Transcript(steps, order, session, title, sorted(bad))


def read_transcript(source: Source) -> Transcript:
    """Parse a transcript file or text stream (it may end in half a record: still being written)."""
    numbered, bad = numbered_json_lines(read_text(source))
    return parse_claude_code(numbered, skipped=bad)


def _records(records: Iterable[Any] | Source) -> Transcript:
    if isinstance(records, str | os.PathLike) or hasattr(records, "read"):
        return read_transcript(cast(Source, records))
    return parse_claude_code(records)


def _apply(history: MessageHistory, step: TranscriptStep, steps: Mapping[str, TranscriptStep],
           at: int) -> MessageHistory:
    entry = {"id": step.entry_id or step.uuid, "message": step.message, "meta": _meta(step, steps)}
    if step.kind == "message":
        return history.append(entry, created_at=at)
    if step.kind == "boundary" and any(steps[c].kind == "summary" for c in step.children):
        return history  # the summary record that follows carries the text; the boundary adds nothing
    sources = [e.id for e in history.refs()]
    return history.edit({"op": "summary", "sourceIds": sources, "replace": True, "entry": entry},
                        created_at=at)


def skipped_lines_text(lines: list[int]) -> str:
    """Line numbers as a report names them: the first ten, then how many more."""
    shown = ", ".join(str(n) for n in lines[:10])
    return shown + (f" and {len(lines) - 10} more" if len(lines) > 10 else "")


def import_claude_code(repo: Repository, records: Transcript | Iterable[Any] | Source, ref: str | None = None, *,
                       force: bool = False, strict: bool = False, message: str = "",
                       progress: ImportProgress | None = None) -> ImportResult:
    """Import a Claude Code transcript (a path, a text stream, its records or a parsed `Transcript`) as refs.

    The main line (ending at the last non-sidechain step) goes to `ref` (default ``claude/<session>``);
    every other line of the record tree becomes a fork named after the first step it does not share with
    the lines before it: ``<ref>/sidechain-<uuid8>`` for a subagent's sidechain (its own conversation,
    valid for the Messages API on its own), ``<ref>/fork-<uuid8>`` for a retried or edited turn. Record
    uuids are the entry ids and record timestamps date the revisions; records of one assistant message
    are joined; a compaction becomes a summary entry whose sources are the entries it replaced, so
    `restore` still reaches them. Malformed records are skipped and their lines listed in the result's
    `skipped`; with `strict` they make the import fail instead. All refs land in one commit: importing
    the file again moves nothing, a session that grew fast-forwards its refs, and a ref that the
    transcript does not continue is replaced only with `force`. `progress(done, total)` follows the
    steps as they are built.
    """
    transcript = records if isinstance(records, Transcript) else _records(records)
    if strict and transcript.skipped:
        raise InvalidInput(f"the transcript has {len(transcript.skipped)} malformed line(s) "
                           f"({skipped_lines_text(transcript.skipped)}); fix them, or import without --strict "
                           "to skip them")
    steps = transcript.steps
    if not steps:
        raise InvalidInput("the transcript has no user or assistant messages to import")
    base = ref or f"claude/{transcript.session or 'session'}"
    repo.ref_name(base)  # a bad name fails before any work
    times: dict[str, int] = {}
    first_time = next((t for t in (timestamp_ms(steps[u].record.get("timestamp")) for u in transcript.order)
                       if t is not None), 0)
    for uuid in transcript.order:  # parents come before children in file order
        step = steps[uuid]
        own = timestamp_ms(step.record.get("timestamp"))
        times[uuid] = own if own is not None else times.get(step.parent or "", first_time)
    tips = [u for u in transcript.order if not steps[u].children]
    main_tips = [u for u in tips if not steps[u].sidechain]
    main = main_tips[-1] if main_tips else tips[-1]
    states: dict[str, MessageHistory] = {}
    root = MessageHistory(source=repo.store, created_at=first_time)
    updates: dict[str, MessageHistory] = {}
    for tip in [main, *[t for t in tips if t != main]]:
        chain = []
        at: str | None = tip
        while at is not None and at not in states:
            chain.append(at)
            at = steps[at].parent
        history = root if at is None else states[at]
        first = chain[-1]
        if tip != main and at is not None:
            history = history.fork(created_at=times[first])
        for uuid in reversed(chain):
            try:
                history = _apply(history, steps[uuid], steps, times[uuid])
            except CtxStoreError as exc:
                raise InvalidInput(f"transcript record {uuid} (line {steps[uuid].line}): {exc}") from None
            states[uuid] = history
            if progress is not None:
                progress(len(states), len(steps))
        kind = "sidechain" if steps[first].sidechain else "fork"
        updates[base if tip == main else f"{base}/{kind}-{first[:8]}"] = history
    return land(repo, updates, format="claude", entries=len(steps), force=force, skipped=transcript.skipped,
                message=message or "import claude code transcript")
