"""A conversation written back as a Claude Code transcript, so a session forked or edited here resumes there.

Each entry of the view becomes one record in the shape Claude Code writes: `uuid` and `parentUuid` chain
the records, every record carries the session id, and the fields an import kept in the entry's
`meta.claudeCode` (cwd, git branch, version, timestamps, model, message id, usage) are written back. A
summary that opens the view (a compaction) becomes a `compact_boundary` record followed by the
`isCompactSummary` user record that holds its text, as Claude Code writes a compaction. Importing the
transcript gives the same view back: the same messages, and the same entry ids for entries that came
from Claude Code (their ids are record uuids already; other ids map to name-based UUIDs).
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
from .browse import session_title

__all__ = ["claude_records", "session_id_for"]

_NAMESPACE: Final = uuidlib.UUID("6f1f5e2c-4f0a-4b3e-9d57-0c7a3e1f2b90")
"""Names ctxstore ids in UUID form (uuid5), so an export is the same every time."""
_UUID: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_VERSION: Final = "1.0.0"
"""The Claude Code version written on records that did not come from Claude Code."""


def session_id_for(revision_id: str) -> str:
    """The session id an export of `revision_id` gets by default: a UUID named by the revision."""
    return str(uuidlib.uuid5(_NAMESPACE, f"session:{revision_id}"))


def _record_uuid(entry_id: str) -> str:
    return entry_id if _UUID.match(entry_id) else str(uuidlib.uuid5(_NAMESPACE, f"entry:{entry_id}"))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _claude_meta(entry: MessageHistoryEntry) -> Mapping[str, Any]:
    info = (entry.meta or {}).get("claudeCode")
    return info if isinstance(info, Mapping) else {}


def claude_records(history: MessageHistory, *, session: str, created_at: int) -> Iterator[dict[str, Any]]:
    """The records of a transcript of `history`'s view, in file order (`created_at` dates records with no
    timestamp of their own)."""
    entries = history.refs()
    title = session_title(entries, history.refs)
    if title is not None and entries:
        yield {"type": "summary", "summary": title, "leafUuid": _record_uuid(entries[-1].id)}
    parent: str | None = None
    cwd, branch, version = ".", None, _VERSION
    for number, entry in enumerate(entries):
        info = _claude_meta(entry)
        cwd = str(info.get("cwd", cwd))
        branch = info.get("gitBranch", branch)
        version = str(info.get("version", version))
        stamp = info.get("timestamp") if isinstance(info.get("timestamp"), str) else _iso(created_at)
        uuid = _record_uuid(entry.id)
        common: dict[str, Any] = {"isSidechain": False, "userType": "external", "cwd": cwd, "sessionId": session,
                                  "version": version}
        if branch is not None:
            common["gitBranch"] = branch
        message = entry.message
        if entry.kind == "summary" and number == 0:
            boundary = str(info.get("boundaryUuid") or uuidlib.uuid5(_NAMESPACE, f"boundary:{entry.id}"))
            yield {"parentUuid": None, "logicalParentUuid": None, **common, "type": "system",
                   "subtype": "compact_boundary", "content": "Conversation compacted", "isMeta": False,
                   "timestamp": stamp, "uuid": boundary, "level": "info",
                   "compactMetadata": dict(info.get("compactMetadata") or {"trigger": "manual", "preTokens": 0})}
            parent = boundary
            yield {"parentUuid": parent, **common, "type": "user", "message": _user_message(message),
                   "isCompactSummary": True, "isVisibleInTranscriptOnly": True, "uuid": uuid, "timestamp": stamp}
        elif message.get("role") == "assistant":
            yield {"parentUuid": parent, **common, "type": "assistant", "message": _assistant_message(message, info),
                   "uuid": uuid, "timestamp": stamp}
        else:
            yield {"parentUuid": parent, **common, "type": "user", "message": _user_message(message),
                   "uuid": uuid, "timestamp": stamp}
        parent = uuid


def _user_message(message: Mapping[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": json.loads(json.dumps(message.get("content", "")))}


def _assistant_message(message: Mapping[str, Any], info: Mapping[str, Any]) -> dict[str, Any]:
    content = message.get("content", "")
    blocks = json.loads(json.dumps(content)) if isinstance(content, list) else [{"type": "text", "text": str(content)}]
    out: dict[str, Any] = {"id": info.get("messageId") or f"msg_{uuidlib.uuid5(_NAMESPACE, json.dumps(blocks)).hex}",
                           "type": "message", "role": "assistant", "model": info.get("model", "claude-sonnet-4-5"),
                           "content": blocks, "stop_reason": info.get("stop_reason"), "stop_sequence": None}
    if isinstance(info.get("usage"), Mapping):
        out["usage"] = dict(info["usage"])
    return out
