"""The objects a family of histories shares: a backing source, new objects not yet stored, caches."""

from __future__ import annotations

import base64
import itertools
import os
from collections.abc import Iterable
from typing import Any

from ..errors import InvalidObject, MissingObject
from ..format.codec import now_ms
from ..format.objects import Entry, Object, Revision, SeqNode, encode_object, parse_object, revision_header
from ..format.seq import SpineBytes, encode_node, encode_revision
from ..ids import ObjectId, object_id, to_hex
from ..store.base import ObjectSource

__all__ = ["Workspace", "new_entry_id"]

_CACHE_LIMIT = 200_000
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())
_MASK_130 = (1 << 130) - 1


class _IdSource:
    """The per-process part of generated entry ids: a random node and a counter, redrawn after fork."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.node = int.from_bytes(os.urandom(6), "big")
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))


_IDS = _IdSource()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_IDS.reset)


def new_entry_id() -> str:
    """A fresh entry id: 48 bits of milliseconds, a 48-bit random process node, a 32-bit counter.

    Unique across processes and machines without coordination: each process (and each forked child)
    draws its own random node, and the counter keeps a process's ids apart within one millisecond.
    Ids sort by creation time, and a process's ids share their middle characters, so a run of them
    compresses to a few bytes each (the random part is drawn once per process, not once per id).
    """
    value = (now_ms() << 80) | (_IDS.node << 32) | (next(_IDS.counter) & 0xFFFFFFFF)
    # 26 base-32 digits are 130 bits; shifted to 160 they are the first 26 of b32encode's 32 digits.
    return base64.b32encode(((value & _MASK_130) << 30).to_bytes(20, "big"))[:26].translate(_TO_CROCKFORD).decode()


class Workspace:
    """Objects that a family of histories reads and writes.

    Reads fall through from the objects made here (pending, not yet in `source`) to `source`. Objects
    are immutable and content-addressed, so every history derived from one another can share one
    workspace: adding an object never changes what another history sees.
    """

    def __init__(self, source: ObjectSource | None = None) -> None:
        self.source = source
        self._pending: dict[ObjectId, bytes] = {}
        self._decoded: dict[ObjectId, Object] = {}
        self.index: dict[str, ObjectId] = {}
        """Entry id to entry oid for every entry this workspace has made or read."""
        self.indexed: set[ObjectId] = set()
        """Revisions and tree nodes whose entries are all in `index`."""
        # The last revision's spine levels with their encoded items: an append keeps most of them.
        self._last_spine: SpineBytes | None = None

    # -- objects -------------------------------------------------------------------------------
    def get(self, oid: ObjectId) -> Object:
        obj = self._decoded.get(oid)
        if obj is not None:
            return obj
        data = self._pending.get(oid)
        if data is None:
            if self.source is None:
                raise MissingObject(f"object {to_hex(oid)} is not in this history")
            data = self.source.get(oid)
        obj = parse_object(data, trusted=True)
        self._remember(oid, obj)
        return obj

    def cached(self, oid: ObjectId) -> Object | None:
        """The object if it is already decoded here (made or read), without reading anything."""
        return self._decoded.get(oid)

    def raw(self, oid: ObjectId) -> bytes:
        data = self._pending.get(oid)
        if data is not None:
            return data
        if self.source is None:
            raise MissingObject(f"object {to_hex(oid)} is not in this history")
        return self.source.get(oid)

    def has(self, oid: ObjectId) -> bool:
        return oid in self._pending or (self.source is not None and self.source.has(oid))

    def put(self, obj: Object) -> ObjectId:
        if type(obj) is SeqNode:
            fast = encode_node(obj)
            if fast is not None:
                return self.put_encoded(object_id(fast), fast, obj)
        if type(obj) is Revision:
            # Its spine is most of it: encoded directly, reusing the last revision's encoded levels.
            encoded = encode_revision(obj, self._last_spine)
            if encoded is not None:
                data, self._last_spine = encoded
                return self.put_encoded(object_id(data), data, obj)
        oid, data = encode_object(obj)
        return self.put_encoded(oid, data, obj)

    def put_encoded(self, oid: ObjectId, data: bytes, obj: Object) -> ObjectId:
        """Add an object whose id and canonical bytes the caller has already computed."""
        if oid not in self._decoded:
            self._pending.setdefault(oid, data)
            self._remember(oid, obj)
        return oid

    def put_raw(self, oid: ObjectId, data: bytes) -> None:
        """Add canonical bytes already checked by the caller (copied from another workspace)."""
        if oid not in self._pending and not (self.source is not None and self.source.has(oid)):
            self._pending[oid] = data

    def _remember(self, oid: ObjectId, obj: Object) -> None:
        if len(self._decoded) >= _CACHE_LIMIT:
            for key in list(self._decoded)[: _CACHE_LIMIT // 2]:
                del self._decoded[key]
        self._decoded[oid] = obj

    def pending(self) -> list[tuple[ObjectId, bytes]]:
        """Objects made here and not known to be in `source`: what a commit has to write."""
        return list(self._pending.items())

    def forget(self, oids: Iterable[ObjectId]) -> None:
        """Drop pending objects that are now in `source` (after a commit wrote them)."""
        for oid in oids:
            self._pending.pop(oid, None)

    # -- typed reads ---------------------------------------------------------------------------
    def revision(self, oid: ObjectId, *, keep: bool = True) -> Revision:
        """A revision; `keep=False` for a walk that reads each of many once: it is not cached (a revision
        holds its spine, so keeping thousands costs memory and garbage-collector time)."""
        obj = self._decoded.get(oid)
        if obj is None:
            obj = self.get(oid) if keep else parse_object(self.raw(oid), trusted=True)
        if not isinstance(obj, Revision):
            raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a revision")
        return obj

    def parent(self, oid: ObjectId) -> ObjectId | None:
        """A revision's parent, read without decoding (or keeping) its spine: what lineage walks need."""
        obj = self._decoded.get(oid)
        if type(obj) is Revision:
            return obj.parent
        return revision_header(self.raw(oid))[0]

    def entry(self, oid: ObjectId) -> Entry:
        obj = self.get(oid)
        if not isinstance(obj, Entry):
            raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not an entry")
        return obj

    def node(self, oid: ObjectId) -> SeqNode:
        obj = self.get(oid)
        if not isinstance(obj, SeqNode):
            raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a seq node")
        if obj.level == 0 and oid not in self.indexed:
            for entry_id, entry_oid in obj.items:
                if entry_oid is not None:
                    self.index.setdefault(entry_id, entry_oid)
            self.indexed.add(oid)
        return obj

    def value(self, oid: ObjectId) -> Any:
        """A blob's data."""
        obj = self.get(oid)
        data = getattr(obj, "data", None)
        if data is None:
            raise InvalidObject(f"object {to_hex(oid)} is not a blob")
        return data
