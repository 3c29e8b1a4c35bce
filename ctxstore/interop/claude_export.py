"""A conversation written back as a Claude Code transcript, so a session forked or edited here resumes there.

Each entry of the view becomes one record in the shape Claude Code writes: `uuid` and `parentUuid` chain
the records, every record carries the session id, and the fields an import kept in the entry's
`meta.claudeCode` (cwd, git branch, version, timestamps, model, message id, usage) are written back. A
summary that opens the view (a compaction) becomes a `compact_boundary` record followed by the
`isCompactSummary` user record that holds its text, as Claude Code writes a compaction.

**Stable ids.** Importing the transcript gives the same view back: the same messages and the same entry
ids, so import -> export -> import is the identity on a view and export -> import -> export a fixed
point. An entry id that is a (lowercase) UUID is the record's `uuid` as it is; any other id cannot be
one, so the record gets a name-based UUID (`entry_uuid`: uuid5 of the id) and keeps the id itself in a
field of its own, ``"ctxstore": {"entryId": ID}``, which Claude Code does not read. The importer takes
that id back only when the record's uuid is still the name-based UUID of it (`exported_entry_id`), so
a field copied onto another record, or a record Claude Code wrote anew, never brings a stale id. The
same field records what a transcript cannot say otherwise: an assistant message whose content was a
string is written as the one text block Claude Code expects, marked ``"content": "string"``, and read
back as the string. Assistant message ids are named by the entry id, so two equal consecutive answers
are never taken for the streamed blocks of one message.
"""

from __future__ import annotations

import json
import re
import uuid as uuidlib
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from ..history.entry import MessageHistoryEntry
from ..history.message_history import MessageHistory

__all__ = ["claude_records", "entry_uuid", "exported_entry_id", "session_id_for"]

_NAMESPACE: Final = uuidlib.UUID("6f1f5e2c-4f0a-4b3e-9d57-0c7a3e1f2b90")
"""Names ctxstore ids in UUID form (uuid5), so an export is the same every time."""
_UUID: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_VERSION: Final = "1.0.0"
"""The Claude Code version written on records that did not come from Claude Code."""


def session_id_for(revision_id: str) -> str:
    """The session id an export of `revision_id` gets by default: a UUID named by the revision."""
    return str(uuidlib.uuid5(_NAMESPACE, f"session:{revision_id}"))


def entry_uuid(entry_id: str) -> str:
    """The record uuid an entry gets in a transcript: its id when that is a UUID, else a UUID named by it."""
    return entry_id if _UUID.match(entry_id) else str(uuidlib.uuid5(_NAMESPACE, f"entry:{entry_id}"))


def exported_entry_id(record: Mapping[str, Any]) -> str | None:
    """The entry id an exported record keeps for an id that is not a UUID, when the record's uuid is still
    the one `entry_uuid` named by it; else None (the record's uuid is the entry id)."""
    kept = record.get("ctxstore")
    entry_id = kept.get("entryId") if isinstance(kept, Mapping) else None
    if isinstance(entry_id, str) and entry_id and record.get("uuid") == entry_uuid(entry_id) != entry_id:
        return entry_id
    return None


def string_content(record: Mapping[str, Any]) -> bool:
    """Whether an exported record's message content was a string, written as one text block."""
    kept = record.get("ctxstore")
    return isinstance(kept, Mapping) and kept.get("content") == "string"


def _kept(entry: MessageHistoryEntry) -> dict[str, Any]:
    """The record's ``ctxstore`` field: what the transcript itself cannot say about the entry."""
    out: dict[str, Any] = {}
    if entry_uuid(entry.id) != entry.id:
        out["entryId"] = entry.id
    if entry.message.get("role") == "assistant" and isinstance(entry.message.get("content"), str):
        out["content"] = "string"
    return {"ctxstore": out} if out else {}


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _claude_meta(entry: MessageHistoryEntry) -> Mapping[str, Any]:
    info = (entry.meta or {}).get("claudeCode")
    return info if isinstance(info, Mapping) else {}


def claude_records(history: MessageHistory, *, session: str, created_at: int) -> Iterator[dict[str, Any]]:
    """The records of a transcript of `history`'s view, in file order (`created_at` dates records with no
    timestamp of their own)."""
    from .browse import session_title  # the search machinery, loaded only when a transcript is written

    entries = history.refs()
    title = session_title(entries, history.refs)
    if title is not None and entries:
        yield {"type": "summary", "summary": title, "leafUuid": entry_uuid(entries[-1].id)}
    parent: str | None = None
    cwd, branch, version = ".", None, _VERSION
    for number, entry in enumerate(entries):
        info = _claude_meta(entry)
        cwd = str(info.get("cwd", cwd))
        branch = info.get("gitBranch", branch)
        version = str(info.get("version", version))
        stamp = info.get("timestamp") if isinstance(info.get("timestamp"), str) else _iso(created_at)
        uuid = entry_uuid(entry.id)
        common: dict[str, Any] = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session,
                                  "version": version}
        if branch is not None:
            common["gitBranch"] = branch
        message = entry.message
        if entry.kind == "summary" and number == 0 and message.get("role") == "user":
            boundary = str(info.get("boundaryUuid") or uuidlib.uuid5(_NAMESPACE, f"boundary:{entry.id}"))
            yield {"parentUuid": None, "logicalParentUuid": None, **common, "type": "system",
                   "subtype": "compact_boundary", "content": "Conversation compacted", "isMeta": False,
                   "timestamp": stamp, "uuid": boundary, "level": "info",
                   "compactMetadata": dict(info.get("compactMetadata") or {"trigger": "manual", "preTokens": 0})}
            parent = boundary
            yield {"parentUuid": parent, **common, "type": "user", "message": _user_message(message),
                   "isCompactSummary": True, "isVisibleInTranscriptOnly": True, "uuid": uuid, "timestamp": stamp,
                   **_kept(entry)}
        elif message.get("role") == "assistant":
            yield {"parentUuid": parent, **common, "type": "assistant",
                   "message": _assistant_message(message, info, entry.id), "uuid": uuid, "timestamp": stamp,
                   **_kept(entry)}
        else:
            yield {"parentUuid": parent, **common, "type": "user", "message": _user_message(message),
                   "uuid": uuid, "timestamp": stamp, **_kept(entry)}
        parent = uuid


def _user_message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": json.loads(json.dumps(message.get("content", "")))}


def _assistant_message(message: Mapping[str, Any], info: Mapping[str, Any], entry_id: str) -> dict[str, Any]:
    content = message.get("content", "")
    blocks = json.loads(json.dumps(content)) if isinstance(content, list) else [{"type": "text", "text": str(content)}]
    out: dict[str, Any] = {"id": info.get("messageId") or f"msg_{uuidlib.uuid5(_NAMESPACE, f'message:{entry_id}').hex}",
                           "type": "message", "role": "assistant", "model": info.get("model", "claude-sonnet-4-5"),
                           "content": blocks, "stop_reason": info.get("stop_reason"), "stop_sequence": None}
    if isinstance(info.get("usage"), Mapping):
        out["usage"] = dict(info["usage"])
    return out
