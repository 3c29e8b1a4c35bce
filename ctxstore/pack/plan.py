"""What one repository must send another: the object walk behind packs.

`objects_to_send` finds every object reachable from the *want* revisions and not from the *have*
revisions while reading only what changed: revision chains are walked back until they meet the have
side, and each revision's sequence tree is diffed against its parent's, so equal subtrees are skipped
and an append costs its entry and its revision (which holds the tree's spine), plus a node when it
closes a chunk. `pack` streams those objects as a pack (`ctxstore.pack.stream`). Receiving a pack is
the repository's (`ctxstore.repo.receive`): this layer writes nothing into a store.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import DamagedData, InvalidInput, InvalidObject, MissingObject
from ..format import seq
from ..format.objects import UNREAD_OPERATION, Entry, Object, Revision, SeqNode, parse_object
from ..ids import ObjectId, to_hex
from ..store.base import ObjectSource, read_revision_header, read_revision_without_operation, read_stored_append
from .records import AppendForm, rebuild_tree
from .stream import write_pack as _write_pack

__all__ = [
    "PackPlan",
    "is_ancestor",
    "objects_to_send",
    "pack",
    "pack_objects",
    "plan_pack",
    "revisions_to_send",
]

_WANT = 1
_HAVE = 2
_READ_BATCH = 512
_NODE_CACHE = 4096
_REVISION_CACHE = 32
_ENTRY_CACHE = 256
_HELD_BYTES = 32 * 1024 * 1024
"""Canonical bytes of planned objects a plan keeps for its pack, at most: the stream then does not read
(decompress and hash) each of them a second time."""
_SPINES = 1024
_APPENDS = 1 << 16


class _Reader:
    """Typed, cached reads of parsed objects from a source (objects are immutable, so caching is safe)."""

    def __init__(self, source: ObjectSource) -> None:
        self.source = source
        self._revs: dict[ObjectId, Revision] = {}
        self._headers: dict[ObjectId, tuple[ObjectId | None, int]] = {}
        self._nodes: dict[ObjectId, SeqNode] = {}
        self._entries: dict[ObjectId, Entry] = {}
        self.held: dict[ObjectId, bytes] = {}
        """Canonical bytes of revisions read, while `keep` lasts (bytes still to keep)."""
        self.keep = 0

    def _parse(self, oid: ObjectId) -> Object:
        data = self.source.get(oid)
        if len(data) <= self.keep:
            self.keep -= len(data)
            self.held[oid] = data
        return parse_object(data, trusted=True)

    def revision(self, oid: ObjectId) -> Revision:
        rev = self._revs.get(oid)
        if rev is None:
            obj = self._parse(oid)
            if not isinstance(obj, Revision):
                raise InvalidInput(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a revision; "
                                   "wants and haves name revisions (what refs point at)")
            # A revision holds its spine, so a walk over many keeps only the recent ones whole.
            if len(self._revs) >= _REVISION_CACHE:
                self._revs.clear()
            rev = self._revs[oid] = obj
            self._headers[oid] = (rev.parent, rev.created_at)
        return rev

    def spine(self, oid: ObjectId) -> tuple[seq.Spine, int]:
        """A revision's spine and size: what a have or a parent's tree needs. A bulk import's revision the
        store keeps without its lists is read without them (`read_revision_without_operation`: they are
        not rebuilt from its whole view); any other is read as `revision` reads it."""
        rev = self._revs.get(oid)
        if rev is None:
            light = read_revision_without_operation(self.source, oid, UNREAD_OPERATION)
            if light is not None:
                self._headers[oid] = (light[0].parent, light[0].created_at)
                return light[0].seq, light[0].size
            rev = self.revision(oid)
        return rev.seq, rev.size

    def header(self, oid: ObjectId) -> tuple[ObjectId | None, int]:
        """A revision's parent and `createdAt`: what the walk needs, kept for every revision it reads."""
        found = self._headers.get(oid)
        if found is None:
            rev = self._revs.get(oid)
            if rev is not None:
                found = (rev.parent, rev.created_at)
            else:
                try:  # the store's cheap header read: a revision stored as a delta is not rebuilt
                    found = read_revision_header(self.source, oid)
                except DamagedData:
                    raise  # damaged stored bytes are damage (exit 6), not a request naming a non-revision
                except InvalidObject:
                    raise InvalidInput(f"object {to_hex(oid)} is not a revision; wants and haves name "
                                       "revisions (what refs point at)") from None
            self._headers[oid] = found
        return found

    def node(self, oid: ObjectId) -> SeqNode:
        node: SeqNode = self._cached(oid, SeqNode, self._nodes, _NODE_CACHE)
        return node

    def entry(self, oid: ObjectId) -> Entry:
        entry: Entry = self._cached(oid, Entry, self._entries, _ENTRY_CACHE)
        return entry

    def _cached(self, oid: ObjectId, kind: type, cache: dict[ObjectId, Any], limit: int) -> Any:
        obj = cache.get(oid)
        if obj is None:
            obj = self._parse(oid)
            if not isinstance(obj, kind):
                raise InvalidObject(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a "
                                    f"{'sequence node' if kind is SeqNode else 'entry'}; run `ctxstore fsck`")
            if len(cache) >= limit:
                cache.clear()
            cache[oid] = obj
        return obj


def revisions_to_send(source: ObjectSource, wants: Iterable[ObjectId],
                      haves: Iterable[ObjectId]) -> list[ObjectId]:
    """Revisions reachable from `wants` and not from `haves`, parents before children (`git log H..W`).

    Haves the source does not hold are ignored (the other side may have revisions we lack). Both sides
    are walked back together, newest `createdAt` first, and the walk stops as soon as every open chain on
    the want side has met the have side, so a fetch of a few new revisions reads a few revisions. A skewed
    clock can make the walk send a revision the other side has: never less than needed.
    """
    return _revisions_to_send(_Reader(source), wants, haves)


def _revisions_to_send(reader: _Reader, wants: Iterable[ObjectId],
                       haves: Iterable[ObjectId]) -> list[ObjectId]:
    flags: dict[ObjectId, int] = {}
    heap: list[tuple[int, bytes]] = []
    queued: set[ObjectId] = set()

    def mark(oid: ObjectId, flag: int) -> None:
        old = flags.get(oid, 0)
        if old | flag == old:
            return
        flags[oid] = old | flag
        if oid not in queued:
            queued.add(oid)
            heapq.heappush(heap, (-reader.header(oid)[1], oid))

    for oid in haves:
        if reader.source.has(oid):
            mark(oid, _HAVE)
    for oid in wants:
        if not reader.source.has(oid):
            raise MissingObject(f"revision {to_hex(oid)} is not in this repository; nothing can send it")
        mark(oid, _WANT)
    # Revisions made in the same millisecond tie, so a want chain can reach its root before the have
    # walk gets there: keep walking haves down to the oldest time a want-only revision was seen.
    oldest_want: float = float("inf")
    while heap and (any(flags[o] == _WANT for o in queued) or -heap[0][0] >= oldest_want):
        negated, raw = heapq.heappop(heap)
        oid = ObjectId(raw)
        queued.discard(oid)
        if flags[oid] == _WANT:
            oldest_want = min(oldest_want, -negated)
        parent = reader.header(oid)[0]
        if parent is not None:
            mark(parent, flags[oid])
    chosen = {oid for oid, f in flags.items() if f == _WANT}
    # Parents before children: walk each chain up to where it leaves the chosen set, then emit it reversed.
    order: list[ObjectId] = []
    done: set[ObjectId] = set()
    for start in sorted(chosen):
        chain: list[ObjectId] = []
        cur: ObjectId | None = start
        while cur is not None and cur in chosen and cur not in done:
            done.add(cur)
            chain.append(cur)
            cur = reader.header(cur)[0]
        order.extend(reversed(chain))
    # A chain that stops at an earlier chain's member comes after all of it, so this order is topological.
    return order


@dataclass(frozen=True)
class PackPlan:
    """What a pack will carry: its objects in pack order, and which revisions go rebuildable.

    A rebuildable revision (an append whose tree the receiver can rebuild from its parent's) is sent
    without its sequence nodes; `rebuilt` counts the nodes the receiver will rebuild. `len(plan)` is
    the number of objects the pack holds.
    """

    objects: list[ObjectId]
    rebuildable: frozenset[ObjectId] = frozenset()
    rebuilt: int = 0
    held: Mapping[ObjectId, bytes | AppendForm] = field(default_factory=dict, repr=False, compare=False)
    """What the walk read of some of its objects, which `pack_objects` sends instead of reading them
    again: canonical bytes (read from the store and checked there), or for a rebuildable revision the
    store keeps as a delta, that append (checked by the store, `read_stored_append`), never rebuilt."""

    def __len__(self) -> int:
        return len(self.objects)

    def __iter__(self) -> Iterator[ObjectId]:
        return iter(self.objects)


def objects_to_send(source: ObjectSource, wants: Iterable[ObjectId],
                    haves: Iterable[ObjectId]) -> list[ObjectId]:
    """Every object reachable from `wants` and not from `haves`, in pack order, reading only what changed.

    For each revision to send (oldest first): the blobs and entries that its tree and operation add, then
    the sequence nodes of its tree that its parent's tree lacks (leaves first), then the revision itself.
    A revision without a parent is diffed against the haves' trees. Objects come after what they point at,
    which is what makes the pack's back-references (and so small packs) work.
    """
    return plan_pack(source, wants, haves, rebuild=False).objects


def plan_pack(source: ObjectSource, wants: Iterable[ObjectId], haves: Iterable[ObjectId], *,
              rebuild: bool = True) -> PackPlan:
    """Plan the pack of everything reachable from `wants` and not from `haves` (see `objects_to_send`).

    With `rebuild`, an append revision whose tree is its parent's with the appended entries added
    (checked here by rebuilding it the way the receiver will) is sent rebuildable: its entries and the
    revision without its spine, and none of the sequence nodes the append closed.
    """
    txn_of: Callable[..., Any] | None = getattr(source, "transaction", None)
    if txn_of is not None:
        with txn_of() as txn:  # one read transaction for the whole walk, not one per object read
            return _plan(txn, wants, haves, rebuild)
    return _plan(source, wants, haves, rebuild)


def _plan(source: ObjectSource, wants: Iterable[ObjectId], haves: Iterable[ObjectId], rebuild: bool) -> PackPlan:
    reader = _Reader(source)
    haves = list(haves)
    revisions = _revisions_to_send(reader, wants, haves)
    have_spines = [reader.spine(h)[0] for h in haves if reader.source.has(h)]
    spines = _Spines(reader)
    out: list[ObjectId] = []
    sent: set[ObjectId] = set()  # objects in the pack or rebuilt by the receiver
    rebuildable: set[ObjectId] = set()
    forms: dict[ObjectId, AppendForm] = {}
    rebuilt = 0

    def add(oid: ObjectId) -> None:
        if oid not in sent:
            sent.add(oid)
            out.append(oid)

    def add_entries(entries: Iterable[ObjectId], present: set[ObjectId] | frozenset[ObjectId],
                    blobs: Mapping[ObjectId, tuple[ObjectId, ...]]) -> None:
        for entry_oid in entries:
            if entry_oid in sent or entry_oid in present:
                continue
            found = blobs.get(entry_oid)
            for blob in reader.entry(entry_oid).blob_ids() if found is None else found:
                add(blob)
            add(entry_oid)

    reader.keep = _HELD_BYTES  # what is sent is read once more by the stream: keep its bytes
    for oid in revisions:
        if rebuild:
            # A revision the store keeps as a delta is an append it checked rebuilds to its bytes, and that
            # append closed no node: it goes rebuildable as stored, neither rebuilt nor hashed here.
            stored = read_stored_append(source, oid)
            blobs = None if stored is None else _entry_blobs(reader, stored[2], stored[3])
            if stored is not None and blobs is not None:
                parent, created_at, ids, entries = stored
                add_entries(entries, frozenset(), blobs)
                spines.appended(oid, parent, [[i, o] for i, o in zip(ids, entries, strict=True)])
                forms[oid] = AppendForm(parent, created_at, tuple(entries))
                rebuildable.add(oid)
                add(oid)
                continue
        rev = reader.revision(oid)
        spines.known(oid, rev.seq, rev.size)
        if rebuild:
            rebuilds = _rebuild(reader, rev, spines)
            if rebuilds is not None:
                nodes, blobs = rebuilds
                add_entries(rev.operation_ids(), frozenset(), blobs)
                rebuilt += sum(1 for n in nodes if n not in sent)
                sent.update(nodes)
                rebuildable.add(oid)
                add(oid)
                continue
        base = [spines.of(rev.parent)[0]] if rev.parent is not None else have_spines
        d = seq.diff([rev.seq], base, reader.node)
        present = {ObjectId(e) for leaf in d.b_leaves for _, e in leaf.items if e is not None}
        entries = [ObjectId(e) for leaf in d.a_leaves for _, e in leaf.items if e is not None]
        entries.extend(rev.operation_ids())
        add_entries(entries, present, {})
        # diff lists inner nodes top-down, then the leaves: reversed, every node follows its children.
        for node in reversed(d.a_nodes):
            add(node)
        add(oid)
    held: dict[ObjectId, bytes | AppendForm] = {oid: data for oid, data in reader.held.items() if oid in sent}
    held.update(forms)
    return PackPlan(out, frozenset(rebuildable), rebuilt, held)


class _Spines:
    """The spines and sizes of the revisions a plan walks, for the rebuild checks and diffs that need a
    parent's: read whole, or made from the nearest one known by appending the stored appends since,
    all in one `seq.append` (the chunking rule gives one tree whatever the batching)."""

    def __init__(self, reader: _Reader) -> None:
        self._reader = reader
        self._known: dict[ObjectId, tuple[seq.Spine, int]] = {}
        self._appends: dict[ObjectId, tuple[ObjectId, list[list[Any]]]] = {}

    def known(self, oid: ObjectId, spine: seq.Spine, size: int) -> None:
        if len(self._known) >= _SPINES:
            self._known.clear()
        self._known[oid] = (spine, size)

    def appended(self, oid: ObjectId, parent: ObjectId, pairs: list[list[Any]]) -> None:
        """Revision `oid` is `parent`'s tree with `pairs` appended (a stored append, checked by the store)."""
        if len(self._appends) >= _APPENDS:
            self._appends.clear()  # bounded: a spine it no longer reaches is read from the store
        self._appends[oid] = (parent, pairs)

    def of(self, oid: ObjectId) -> tuple[seq.Spine, int]:
        chain: list[list[list[Any]]] = []
        at = oid
        found = self._known.get(at)
        while found is None:
            step = self._appends.get(at)
            if step is None or len(chain) > _SPINES:
                found = self._reader.spine(at)
                break
            chain.append(step[1])
            at = step[0]
            found = self._known.get(at)
        if chain:
            pairs = [pair for step_pairs in reversed(chain) for pair in step_pairs]
            found = (seq.append(found[0], pairs, seq.node_id), found[1] + len(pairs))
            self.known(oid, *found)
        return found


def _entry_blobs(reader: _Reader, ids: list[str], entries: list[ObjectId]
                 ) -> dict[ObjectId, tuple[ObjectId, ...]] | None:
    """The blobs of appended entries by entry, or None if an entry's own id is not the one the append
    names (the receiver rebuilds with the entries' own ids, so such a revision goes in full)."""
    blobs: dict[ObjectId, tuple[ObjectId, ...]] = {}
    for entry_id, entry_oid in zip(ids, entries, strict=True):
        entry = reader.entry(ObjectId(entry_oid))
        if entry.id != entry_id:
            return None
        blobs[ObjectId(entry_oid)] = tuple(entry.blob_ids())
    return blobs


def _rebuild(reader: _Reader, rev: Revision, spines: _Spines
             ) -> tuple[list[ObjectId], dict[ObjectId, tuple[ObjectId, ...]]] | None:
    """The ids of the nodes a receiver makes rebuilding `rev` from its parent, and the blobs of the
    appended entries (read on the way); None if `rev` does not rebuild.

    A receiver rebuilds an append revision as `seq.append` of its parent's tree (an empty tree without a
    parent) with the appended (entry id, entry oid) pairs, and its size as the parent's plus their
    number. Revisions for which that gives anything but their own spine and size are sent in full.
    """
    op = rev.operation
    if op is None or op["type"] != "append":
        return None
    blobs = _entry_blobs(reader, op["entryIds"], op["entries"])
    if blobs is None:
        return None
    pairs = [[i, o] for i, o in zip(op["entryIds"], op["entries"], strict=True)]
    parent = None if rev.parent is None else spines.of(rev.parent)
    spine, size, made = rebuild_tree(parent, pairs)
    if spine != rev.seq or size != rev.size:
        return None
    return [nid for nid, _, _ in made], blobs


def pack(store: ObjectSource, wants: Iterable[ObjectId], haves: Iterable[ObjectId] = (), *,
         level: int = 9) -> Iterator[bytes]:
    """The pack of everything reachable from `wants` and not from `haves`, as an iterator of bytes chunks.

    The walk runs when iteration starts; objects are then read in small batches, each in its own read
    transaction, so the iterator can be consumed slowly and from any thread (as a web server does).
    """
    return pack_objects(store, plan_pack(store, wants, haves), level=level)


def pack_objects(store: ObjectSource, plan: PackPlan | list[ObjectId], *, level: int = 9) -> Iterator[bytes]:
    """The pack of a plan (or of listed objects, in that order, as `objects_to_send` gives them)."""
    if not isinstance(plan, PackPlan):
        plan = PackPlan(list(plan))
    return _write_pack(_read_objects(store, plan.objects, plan.held), len(plan), level=level,
                       rebuildable=plan.rebuildable)


def _read_objects(store: ObjectSource, oids: list[ObjectId], held: Mapping[ObjectId, bytes | AppendForm]
                  ) -> Iterator[tuple[ObjectId, bytes | AppendForm]]:
    txn_of: Callable[..., Any] | None = getattr(store, "transaction", None)
    for start in range(0, len(oids), _READ_BATCH):
        batch = oids[start:start + _READ_BATCH]
        if txn_of is not None:
            with txn_of() as txn:
                found = [(oid, held.get(oid) or txn.get(oid)) for oid in batch]
        else:
            found = [(oid, held.get(oid) or store.get(oid)) for oid in batch]
        yield from found


def is_ancestor(source: ObjectSource, ancestor: ObjectId, descendant: ObjectId) -> bool:
    """Whether revision `ancestor` is `descendant` or on its parent chain (what fast-forward means)."""
    reader = _Reader(source)
    cur: ObjectId | None = descendant
    while cur is not None:
        if cur == ancestor:
            return True
        cur = reader.header(cur)[0]
    return False
