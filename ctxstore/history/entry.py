"""`MessageHistoryEntry`, an entry as a history's reader sees it, read back from its stored object."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidObject
from ..format.objects import Entry, entry_message, parse_object
from ..ids import ObjectId, to_hex
from .intake import expand_message, plain_copy
from .workspace import Workspace

__all__ = ["MessageHistoryEntry", "collector_paused", "has_blobs", "read_entries", "read_entry", "read_messages"]


@dataclass(frozen=True, slots=True)
class MessageHistoryEntry:
    """An immutable message entry: the message, its id, kind, metadata and summary sources."""

    id: str
    message: dict[str, Any]
    kind: str = "turn"
    meta: dict[str, Any] | None = None
    sources: list[str] | None = None
    meta_null: bool = False
    """The entry was made with ``meta: null``, which its snapshot form keeps (as the seed does)."""

    def to_dict(self) -> dict[str, Any]:
        """The entry in the seed's snapshot shape."""
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "message": plain_copy(self.message)}
        if self.meta is not None:
            out["meta"] = plain_copy(self.meta)
        elif self.meta_null:
            out["meta"] = None
        if self.sources is not None:
            out["sources"] = list(self.sources)
        return out


def read_entries(ws: Workspace, oids: list[ObjectId]) -> list[MessageHistoryEntry]:
    """`read_entry` of many entries, read in batches; what was decoded for this read is handed out as it
    is (no one else holds it), the rest copied, and blobs read only for the messages that have them."""
    out: list[MessageHistoryEntry] = []
    with collector_paused():
        for oid, (stored, fresh) in zip(oids, ws.read_many(oids), strict=True):
            if not isinstance(stored, Entry):
                raise InvalidObject(f"object {to_hex(oid)} is a {type(stored).__name__.lower()}, not an entry")
            if not fresh:
                out.append(read_entry(ws, oid))
                continue
            message = stored.message
            if has_blobs(message):
                message = expand_message(message, ws.value)
            out.append(MessageHistoryEntry(stored.id, message, stored.kind, stored.meta,
                                           list(stored.sources) if stored.sources is not None else None,
                                           stored.meta_null))
    return out


def read_messages(ws: Workspace, oids: list[ObjectId]) -> list[dict[str, Any]]:
    """The messages of many entries (what `render` returns), read as `read_entries` reads them."""
    out: list[dict[str, Any]] = []
    with collector_paused():
        for oid, (found, fresh) in zip(oids, ws.read_raw(oids), strict=True):
            # What is read just now is checked as an entry and its message taken, no Entry made.
            message = (entry_message(found) if type(found) is bytes
                       else found.message if isinstance(found, Entry) else None)
            if message is None:
                kind = type(parse_object(found, trusted=True) if type(found) is bytes else found).__name__
                raise InvalidObject(f"object {to_hex(oid)} is a {kind.lower()}, not an entry")
            if not fresh or (type(message.get("content")) is not str and has_blobs(message)):
                message = expand_message(message, ws.value)
            out.append(message)
    return out


def has_blobs(message: Mapping[str, Any]) -> bool:
    """Whether a stored message holds blob references (bytes) that reading must expand."""
    content = message.get("content")
    return type(content) is bytes or (type(content) is list and any(type(b) is bytes for b in content))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off while entries are decoded: what is made is kept or dropped
    whole (none of it is cyclic garbage), and the collector would otherwise scan it over and over as it
    accumulates."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def read_entry(ws: Workspace, oid: ObjectId) -> MessageHistoryEntry:
    """The entry object `oid` of `ws`, its message's blobs expanded (a copy the caller may change)."""
    stored = ws.entry(oid)
    return MessageHistoryEntry(
        id=stored.id,
        message=expand_message(stored.message, ws.value),
        kind=stored.kind,
        meta=plain_copy(stored.meta) if stored.meta is not None else None,
        sources=list(stored.sources) if stored.sources is not None else None,
        meta_null=stored.meta_null,
    )
