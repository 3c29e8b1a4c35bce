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

Ids here are raw `ObjectId`s: the workspace is storage-side. Everything else (`put*`, `node`, `entry`,
`value`, and the facts about revisions that histories look entries up with: `introduce`,
`introductions`, `indexed`, `is_ancestor`) serves the history package's own modules.

Entry lookup is scoped to one history's graph, though the workspace is shared by a family of histories:
the workspace records, for each entry id, the revisions that introduced an entry under it
(`introduce`), and a graph asks which of those it contains (`is_ancestor` against its tips). An
ancestry query is O(log n) through skew-binary jump pointers (one per revision, set when the revision is
first placed), so no history keeps or copies an index of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from ..errors import InvalidObject, MissingObject
from ..format.objects import (
    UNREAD_OPERATION,
    Entry,
    Object,
    Revision,
    SeqNode,
    encode_object,
    parse_object,
    revision_header,
    revision_without_operation,
)
from ..format.seq import SpineBytes, encode_node, encode_revision, spine_bytes
from ..ids import ObjectId, object_id, to_hex
from ..store.base import (
    ObjectSource,
    read_cached_revision,
    read_leaves,
    read_revision_header,
    read_revision_without_operation,
)
from ..store.revisions import BULK_FROM, MADE

__all__ = ["Workspace"]

_CACHE_LIMIT = 200_000
_LIGHT_ABOVE = 64
"""A revision read from the source whose operation names more entries than this is kept without it:
a bulk import's lists every entry id and oid (15 MB for 100,000), which only a replay, a snapshot or an
index walk reads, and they read it again from the source."""
_LIGHT_BYTES = 16 * 1024
"""A revision read for its spine whose bytes are larger than this is read without decoding its operation
(`objects.revision_without_operation`); decoding a bulk import's cost more than the spine's."""
_BATCH = 4096
"""Objects `read_many` reads under one read transaction (a reader held longer pins old pages)."""


class Workspace:
    """Objects that a family of histories reads and writes.

    Reads fall through from the objects made here (pending, not yet in `source`) to `source`. Objects
    are immutable and content-addressed, so every history derived from one another can share one
    workspace: adding an object never changes what another history sees.
    """

    def __init__(self, source: ObjectSource | None = None) -> None:
        self.source = source
        self._pending: dict[ObjectId, bytes] = {}
        self._copied: set[ObjectId] = set()
        self._decoded: dict[ObjectId, Object] = {}
        self._introduced: dict[str, list[tuple[ObjectId, ObjectId]]] = {}
        self.indexed: set[ObjectId] = set()
        """Revisions whose entries, and all of whose ancestors' entries, are recorded by `introduce`."""
        # Per placed revision: its parent, its depth (a root is 0) and its jump pointer.
        self._up: dict[ObjectId, ObjectId | None] = {}
        self._depth: dict[ObjectId, int] = {}
        self._jump: dict[ObjectId, ObjectId] = {}
        # The last revision's spine levels with their encoded items: an append keeps most of them.
        self._last_spine: SpineBytes | None = None
        # Revisions cached without their operation (`_LIGHT_ABOVE`); `revision` reads it again.
        self._light: set[ObjectId] = set()
        self._message_at: dict[ObjectId, int] = {}  # `put_made`

    # -- objects -------------------------------------------------------------------------------
    def get(self, oid: ObjectId) -> Object:
        obj = self._decoded.get(oid)
        if obj is not None and oid not in self._light:
            return obj
        data = self._pending.get(oid)
        if data is None:
            if self.source is None:
                raise MissingObject(f"object {to_hex(oid)} is not in this history")
            data = self.source.get(oid)
        return self._decode(oid, data)

    def _decode(self, oid: ObjectId, data: bytes) -> Object:
        """`get` of an object whose canonical bytes were just read: decoded and kept."""
        obj = parse_object(data, trusted=True)
        if type(obj) is Revision:
            if self._last_spine is None:
                # The head a history is loaded at: its next append re-encodes only the levels it changes.
                self._last_spine = spine_bytes(obj, data)
            if oid not in self._pending and _named(obj.operation) > _LIGHT_ABOVE:
                self._remember(oid, dataclasses.replace(obj, operation=UNREAD_OPERATION))
                self._light.add(oid)
                return obj
        self._remember(oid, obj)
        return obj

    def read_many(self, oids: list[ObjectId]) -> Iterator[tuple[Object, bool]]:
        """Objects by id, in order, each with whether it was decoded just now (so no one else holds it,
        and the caller may hand it out without copying). Those decoded here come from the cache; the rest
        are read in batches (`get_many`, one read transaction each where the source has it) and not
        kept, since a whole view's reader reads each once."""
        for found, fresh in self.read_raw(oids):
            yield (parse_object(found, trusted=True), True) if isinstance(found, bytes) else (found, fresh)

    def read_raw(self, oids: list[ObjectId]) -> Iterator[tuple[bytes | Object, bool]]:
        """`read_many`, but what is read just now comes as its canonical bytes (checked against its id),
        not yet decoded (a reader that needs one field of each, `objects.entry_message`, takes it from
        them); what was decoded here before comes as the object, with False."""
        decoded, pending, source = self._decoded, self._pending, self.source
        many = getattr(source, "get_many", None)
        for start in range(0, len(oids), _BATCH):
            chunk = oids[start:start + _BATCH]
            # Decided for the whole batch before anything is yielded: the caller may read (and so evict
            # from the cache) between two objects.
            held: list[Object | bytes | None] = [decoded.get(oid) or pending.get(oid) for oid in chunk]
            unread = [oid for oid, found in zip(chunk, held, strict=True) if found is None]
            if unread and source is None:
                raise MissingObject(f"object {to_hex(unread[0])} is not in this history")
            read = iter(many(unread) if many is not None else [source.get(oid) for oid in unread]
                        ) if unread and source is not None else iter(())
            for found in held:
                if found is None:
                    yield next(read), True
                else:
                    yield found, type(found) is bytes

    def nodes(self, oids: list[ObjectId]) -> list[SeqNode]:
        """Seq nodes by id, read in batches (`read_many`)."""
        found = [obj for obj, _fresh in self.read_many(oids)]
        for oid, obj in zip(oids, found, strict=True):
            if not isinstance(obj, SeqNode):
                raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a seq node")
        return found  # type: ignore[return-value]  # checked just above

    def leaves(self, oids: list[ObjectId]) -> list[tuple[bytes | Object | None, list[Any]]]:
        """Leaves by id, each as its canonical bytes (read just now: checked against its id, not decoded)
        or as the node decoded here before, with the messages its source gives with it
        (`store.base.read_leaves`: in `seq.packed_order`, None for an entry to read whole; none at all for
        a leaf made here or a source that packs none; None for the bytes of a leaf that names exactly
        those chat entries, once each, in order). Not kept: a whole view's reader reads each once."""
        held = [self._decoded.get(oid) or self._pending.get(oid) for oid in oids]
        unread = [oid for oid, found in zip(oids, held, strict=True) if found is None]
        if unread and self.source is None:
            raise MissingObject(f"object {to_hex(unread[0])} is not in this history")
        read = iter(read_leaves(self.source, unread) if unread and self.source is not None else ())
        return [next(read) if found is None else (found, []) for found in held]

    def cached(self, oid: ObjectId) -> Object | None:
        """The object if it is already decoded here (made or read), without reading anything."""
        return None if oid in self._light else self._decoded.get(oid)

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

    def put_append(self, rev: Revision, closed: Sequence[ObjectId]) -> ObjectId:
        """Add an append revision made by the rule (`seq.append` of its operation's entries onto its
        parent's spine; `closed`: the ids of the nodes that closed, added here). One that closed none is
        vouched for to the stores of this process (`revisions.MADE`), which then store its delta without
        rebuilding it; so is a bulk append (`revisions.BULK_FROM` entries or more) with the nodes it
        closed, which they then store without its lists, the last items of its own tree."""
        encoded = encode_revision(rev, self._last_spine)
        if encoded is None:
            return self.put(rev)
        data, self._last_spine = encoded
        oid = object_id(data)
        if oid not in self._decoded and (not closed or _named(rev.operation) >= BULK_FROM):
            MADE.vouch(oid, data, rev, self._last_spine, closed)
        return self.put_encoded(oid, data, rev)

    def put_encoded(self, oid: ObjectId, data: bytes, obj: Object) -> ObjectId:
        """Add an object whose id and canonical bytes the caller has already computed."""
        if oid not in self._decoded:
            self._pending.setdefault(oid, data)
            self._remember(oid, obj)
        return oid

    def put_made(self, oid: ObjectId, data: bytes, message_at: int | None) -> None:
        """Add an entry whose canonical bytes (and id, hashed from them) the caller has just laid out, with
        where its message starts in them if it knows (`objects.encode_turn`), without keeping it decoded:
        an import's entries, which are written and rarely read back here (a reader decodes one from its
        bytes; 100,000 kept `Entry` objects cost a sixth of a second and 40 MB)."""
        if oid not in self._decoded and oid not in self._pending:
            self._pending[oid] = data
            if message_at is not None:
                self._message_at[oid] = message_at

    def put_raw(self, oid: ObjectId, data: bytes) -> None:
        """Add canonical bytes already checked by the caller (copied from another workspace)."""
        if oid not in self._pending and not (self.source is not None and self.source.has(oid)):
            self._pending[oid] = data
            self._copied.add(oid)

    def _remember(self, oid: ObjectId, obj: Object) -> None:
        if len(self._decoded) >= _CACHE_LIMIT:
            for key in list(self._decoded)[: _CACHE_LIMIT // 2]:
                del self._decoded[key]
                self._light.discard(key)
        self._decoded[oid] = obj

    def pending(self) -> list[tuple[ObjectId, bytes]]:
        """Objects made here and not known to be in `source`: what a commit has to write."""
        return list(self._pending.items())

    def message_at(self) -> Mapping[ObjectId, int]:
        """Where the message starts in the bytes of the pending entries laid out here that say so
        (`put_made`): a commit passes it to the store with its vouch for their ids."""
        return self._message_at

    def copied(self) -> set[ObjectId]:
        """The pending objects whose bytes came from elsewhere (`put_raw`); this workspace hashed every
        other pending object's bytes to its id itself, which a commit vouches for to the store."""
        return set(self._copied)

    def forget(self, oids: Iterable[ObjectId]) -> None:
        """Drop pending objects that are now in `source` (after a commit wrote them)."""
        if isinstance(oids, AbstractSet) and self._pending.keys() <= oids:
            self._pending.clear()  # all of them (a bulk import's hundred thousand)
            self._copied.clear()
            self._message_at.clear()
            return
        for oid in oids:
            self._pending.pop(oid, None)
            self._copied.discard(oid)
            self._message_at.pop(oid, None)

    # -- typed reads ---------------------------------------------------------------------------
    def revision(self, oid: ObjectId, *, keep: bool = True, operation: bool = True) -> Revision:
        """A revision; `keep=False` for a walk that reads each of many once: it is not cached (a revision
        holds its spine, so keeping thousands costs memory and garbage-collector time).

        `operation=False` is for a caller that reads every field but the operation (the spine, size,
        parent, time): it may get the revision without a large operation (cached so, `_LIGHT_ABOVE`, or
        read so, `_LIGHT_BYTES`), whose `operation` is then a placeholder. Otherwise the operation is read
        again from the source.
        """
        obj = self._decoded.get(oid)
        if obj is None and not operation and keep and oid not in self._pending and self.source is not None:
            obj = self._light_revision(oid)
        if obj is None or (operation and oid in self._light):
            obj = self.get(oid) if keep else parse_object(self.raw(oid), trusted=True)
        if not isinstance(obj, Revision):
            raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a revision")
        return obj

    def _light_revision(self, oid: ObjectId) -> Object:
        """A revision read from the source for its spine: as the source keeps it without its lists where
        it does (`read_revision_without_operation`: they are not rebuilt), else without decoding its
        operation when its bytes are large enough for that to matter (`_LIGHT_BYTES`), kept as `get`
        keeps one whose operation is large; else as `get` reads it."""
        assert self.source is not None
        cached = read_cached_revision(self.source, oid)
        if cached is not None:  # a head this process wrote: decoded already, with its spine's levels
            found, levels = cached
            if self._last_spine is None:
                self._last_spine = levels
            self._remember(oid, found)
            return found
        light = read_revision_without_operation(self.source, oid, UNREAD_OPERATION)
        if light is not None:  # a bulk import's, kept without its lists: they are not rebuilt here
            found, light_levels = light
            if self._last_spine is None:
                self._last_spine = light_levels
            self._remember(oid, found)
            self._light.add(oid)
            return found
        data = self.source.get(oid)
        rev = revision_without_operation(data, UNREAD_OPERATION) if len(data) > _LIGHT_BYTES else None
        if rev is None:
            return self._decode(oid, data)
        if self._last_spine is None:
            self._last_spine = spine_bytes(rev, data)
        self._remember(oid, rev)
        self._light.add(oid)
        return rev

    def parent(self, oid: ObjectId) -> ObjectId | None:
        """A revision's parent, read without decoding (or keeping) its spine: what lineage walks need."""
        obj = self._decoded.get(oid)
        if type(obj) is Revision:
            return obj.parent
        data = self._pending.get(oid)
        if data is not None or self.source is None:
            return revision_header(self.raw(oid))[0]
        return read_revision_header(self.source, oid)[0]  # the store's cheap header read: no rebuild

    def entry(self, oid: ObjectId) -> Entry:
        obj = self.get(oid)
        if not isinstance(obj, Entry):
            raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not an entry")
        return obj

    def node(self, oid: ObjectId) -> SeqNode:
        obj = self.get(oid)
        if not isinstance(obj, SeqNode):
            raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a seq node")
        return obj

    def value(self, oid: ObjectId) -> Any:
        """A blob's data."""
        obj = self.get(oid)
        data = getattr(obj, "data", None)
        if data is None:
            raise InvalidObject(f"object {to_hex(oid)} is not a blob")
        return data

    # -- ancestry and entry introductions --------------------------------------------------------
    def _place(self, oid: ObjectId) -> None:
        """Give `oid` and its unplaced ancestors a depth and a jump pointer (Myers' skew-binary scheme:
        a jump spans 2^k - 1 revisions, so `ancestor_at` takes O(log depth) steps)."""
        if oid in self._depth:
            return
        chain: list[ObjectId] = []
        cur: ObjectId | None = oid
        while cur is not None and cur not in self._depth:
            chain.append(cur)
            parent = self.parent(cur)
            self._up[cur] = parent
            cur = parent
        for node in reversed(chain):
            parent = self._up[node]
            if parent is None:
                self._depth[node], self._jump[node] = 0, node
                continue
            depth = self._depth[parent]
            jump = self._jump[parent]
            if depth - self._depth[jump] == self._depth[jump] - self._depth[self._jump[jump]]:
                self._jump[node] = self._jump[jump]
            else:
                self._jump[node] = parent
            self._depth[node] = depth + 1

    def is_ancestor(self, ancestor: ObjectId, oid: ObjectId) -> bool:
        """Whether revision `ancestor` is `oid` or one of its ancestors."""
        if ancestor == oid:
            return True
        self._place(ancestor)
        self._place(oid)
        target = self._depth[ancestor]
        if target >= self._depth[oid]:
            return False
        node = oid
        while self._depth[node] > target:
            jump = self._jump[node]
            up = self._up[node]
            assert up is not None
            node = jump if self._depth[jump] >= target else up
        return node == ancestor

    def introduce(self, revision: ObjectId, entry_id: str, entry_oid: ObjectId) -> None:
        """Record that `revision` (and so every revision descending from it) knows `entry_oid` as
        `entry_id`, unless `revision` or an ancestor of it already does."""
        known = self._introduced.setdefault(entry_id, [])
        for rev, oid in known:
            if oid == entry_oid and self.is_ancestor(rev, revision):
                return
        known.append((revision, entry_oid))

    def introduce_all(self, revision: ObjectId, pairs: Iterable[tuple[str, ObjectId]]) -> None:
        """`introduce` of many (entry id, entry oid) pairs by one revision; an id nothing introduced
        before (every id of an import) is recorded without the ancestry walk."""
        introduced = self._introduced
        for entry_id, entry_oid in pairs:
            if entry_id in introduced:
                self.introduce(revision, entry_id, entry_oid)
            else:
                introduced[entry_id] = [(revision, entry_oid)]

    def introductions(self, entry_id: str) -> list[tuple[ObjectId, ObjectId]]:
        """(revision, entry oid) for each recorded introduction of `entry_id`, oldest first."""
        return self._introduced.get(entry_id, [])




def _named(operation: dict[str, Any] | None) -> int:
    """How many entries an operation lists (what keeping it costs, roughly)."""
    if operation is None:
        return 0
    ids = operation.get("entryIds")
    return len(ids) if type(ids) is list else 0
