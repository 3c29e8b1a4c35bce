"""The objects a family of histories shares: a backing source, new objects not yet stored, caches.

`MessageHistory.workspace` is the contract between a history and whatever stores it (the repository's
commit, sync's push of a rebased history, the agent recorder). They use only these members, which stay
stable:

- `source`: the object store reads fall through to (None for an in-memory history); a committer writes
  straight into it only when it is its own store.
- `pending()`: the objects made here and not yet in `source`, as (raw id, canonical bytes): what a
  commit must write.
- `forget(oids)`: drop pending objects once they are written to `source`.
- `cached(oid)`: an object already decoded here, or None; reads nothing.
- `revision(oid)` and `parent(oid)`: a revision, and a revision's parent read without decoding its
  spine.

Ids here are raw `ObjectId`s: the workspace is storage-side. Everything else (`index`, `indexed`,
`put*`, `node`, `entry`, `value`) serves the history package's own modules.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..errors import InvalidObject, MissingObject
from ..format.objects import Entry, Object, Revision, SeqNode, encode_object, parse_object, revision_header
from ..format.seq import SpineBytes, encode_node, encode_revision
from ..ids import ObjectId, object_id, to_hex
from ..store.base import ObjectSource

__all__ = ["Workspace"]

_CACHE_LIMIT = 200_000


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
