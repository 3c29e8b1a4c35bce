"""`MessageHistoryEntry`, an entry as a history's reader sees it, read back from its stored object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..ids import ObjectId
from .intake import expand_message, plain_copy
from .workspace import Workspace

__all__ = ["MessageHistoryEntry", "read_entry"]


@dataclass(frozen=True, slots=True)
class MessageHistoryEntry:
    """An immutable message entry: the message, its id, kind, metadata and summary sources."""

    id: str
    message: dict[str, Any]
    kind: str = "turn"
    meta: dict[str, Any] | None = None
    sources: list[str] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The entry in the seed's snapshot shape."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "message": plain_copy(self.message)}
        if self.meta is not None:
            out["meta"] = plain_copy(self.meta)
        if self.sources is not None:
            out["sources"] = list(self.sources)
        return out


def read_entry(ws: Workspace, oid: ObjectId) -> MessageHistoryEntry:
    """The entry object `oid` of `ws`, its message's blobs expanded (a copy the caller may change)."""
    stored = ws.entry(oid)
    return MessageHistoryEntry(
        id=stored.id,
        message=expand_message(stored.message, ws.value),
        kind=stored.kind,
        meta=plain_copy(stored.meta) if stored.meta is not None else None,
        sources=list(stored.sources) if stored.sources is not None else None,
    )
