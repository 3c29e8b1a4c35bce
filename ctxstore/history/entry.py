"""`MessageHistoryEntry`, an entry as a history's reader sees it, read back from its stored object."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..errors import DamagedData, InvalidObject
from ..format import seq
from ..format.objects import Entry, Object, SeqNode, entry_message, parse_object
from ..ids import ObjectId, to_hex
from .intake import expand_message, plain_copy
from .workspace import Workspace

__all__ = ["MessageHistoryEntry", "collector_paused", "has_blobs", "read_entries", "read_entry", "read_messages",
           "read_view_messages"]


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
    with collector_paused():
        return [_message(ws, oid, found, fresh)
                for oid, (found, fresh) in zip(oids, ws.read_raw(oids), strict=True)]


def read_view_messages(ws: Workspace, spine: seq.Spine,
                       lookup: Callable[[str], ObjectId | None]) -> list[dict[str, Any]]:
    """The messages of a revision's view (what `render` returns), read a leaf at a time.

    A leaf the store keeps packed with its entries gives their messages from its one record
    (`Workspace.leaves`); when they are all chat messages and the leaf names each entry once, they are
    the leaf's messages in order, taken as they are. Any other entry is read as `read_messages` reads
    it. An item without an oid is looked up by its id (`lookup`), and left out if it names no entry.
    """
    parts = seq.leaf_refs(spine, ws.nodes)
    out: list[dict[str, Any] | None] = []
    unread: list[tuple[int, ObjectId]] = []  # (place in out, entry) of what no pack gave
    with collector_paused():
        for start in range(0, len(parts), _LEAVES):
            chunk = parts[start:start + _LEAVES]
            leaves = iter(ws.leaves([part for part in chunk if type(part) is not tuple]))
            for part in chunk:
                packed: dict[ObjectId, Any] = {}
                if type(part) is tuple:
                    items: list[Any] = [part]
                else:
                    leaf, messages = next(leaves)
                    if messages and None not in messages and (
                            leaf is None or (type(leaf) is bytes and seq.leaf_length(leaf) == len(messages))):
                        out.extend(messages)  # every item a distinct chat entry, in the leaf's order
                        continue
                    if leaf is None:  # a source gives no bytes only with every message (`LeafSource`)
                        raise DamagedData(f"stored leaf {to_hex(part)} was read as its entries' messages, "
                                          "but not all of them came; run `ctxstore fsck`")
                    node = parse_object(leaf, trusted=True) if type(leaf) is bytes else leaf
                    if not isinstance(node, SeqNode) or node.level != 0:
                        raise InvalidObject(f"object {to_hex(part)} is not a leaf of the sequence tree")
                    items = node.items
                    if messages:
                        order = seq.packed_order(items)
                        if len(order) != len(messages):
                            raise DamagedData(f"stored leaf {to_hex(part)} has a pack that does not hold its "
                                              "entries; run `ctxstore fsck`")
                        packed = dict(zip(order, messages, strict=True))
                for entry_id, item_oid in items:
                    oid = item_oid if item_oid is not None else lookup(entry_id)
                    if oid is None:
                        continue
                    message = packed.pop(oid, None)  # an entry named twice is read again: a copy each
                    if message is None:
                        unread.append((len(out), oid))
                    out.append(message)
    for (at, _oid), message in zip(unread, read_messages(ws, [oid for _, oid in unread]), strict=True):
        out[at] = message
    return out  # type: ignore[return-value]  # every None was filled just above


_LEAVES = 128
"""Leaves a view's reader asks the store for at once (one read transaction, about 4,000 entries)."""


def _message(ws: Workspace, oid: ObjectId, found: bytes | Object, fresh: bool) -> dict[str, Any]:
    """The message of an entry read as canonical bytes (checked as an entry, its message taken without
    making an `Entry`) or decoded before (`fresh`: decoded for this read, so handed out uncopied), its
    blobs expanded; `InvalidObject` if the object is not an entry."""
    message = (entry_message(found) if type(found) is bytes
               else found.message if isinstance(found, Entry) else None)
    if message is None:
        kind = type(parse_object(found, trusted=True) if type(found) is bytes else found).__name__
        raise InvalidObject(f"object {to_hex(oid)} is a {kind.lower()}, not an entry")
    if not fresh or (type(message.get("content")) is not str and has_blobs(message)):
        message = expand_message(message, ws.value)
    return message


def has_blobs(message: Mapping[str, Any]) -> bool:
    """Whether a stored message holds blob references (bytes) that reading must expand."""
    content = message.get("content")
    return type(content) is bytes or (type(content) is list and any(type(b) is bytes for b in content))


_PAUSE_LOCK = threading.Lock()
_pauses = 0  # pauses in progress, over every thread
_was_enabled = False  # whether the collector ran when the first of them began


@contextmanager
def collector_paused() -> Iterator[None]:
    """Hold the cyclic garbage collector off while entries are decoded or a commit is made: what is made
    is kept or dropped whole (none of it is cyclic garbage), and the collector would otherwise scan it
    over and over as it accumulates.

    Pauses nest and overlap across threads: the collector is switched off when the first begins and back
    on (if it was on then) when the last ends, so two threads' pauses cannot leave it off for good."""
    global _pauses, _was_enabled
    with _PAUSE_LOCK:
        if _pauses == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            _pauses -= 1
            if _pauses == 0 and _was_enabled:
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
