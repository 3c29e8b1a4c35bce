"""MessageHistory: the immutable, versioned message sequence of `fino:ai/context`, over hashed objects.

Every operation returns a new history pointing at a new revision; older histories keep seeing their own
revision. Entries and revisions are content-addressed objects (see `objects`), and a revision's view is a
sequence tree (see `seq`), so a history can be written to and loaded from any object store.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DuplicateEntryId, InvalidInput, InvalidObject, MissingObject, UnknownRevision
from ..format import seq
from ..format.codec import now_ms
from ..format.objects import Revision
from ..ids import ObjectId, from_hex, to_hex
from ..store.base import ObjectSource
from .budget import estimate_tokens
from .intake import check_patch, expand_message, intake_entry, plain_copy, stored_patch
from .workspace import Workspace

__all__ = ["MessageHistory", "MessageHistoryEntry"]

Item = tuple[str, ObjectId | None]


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


class MessageHistory:
    """An immutable, persistent sequence of model messages with full lineage.

    `MessageHistory()` starts an empty in-memory history. `MessageHistory(source=store, head=rev)`
    opens revision `rev` of an object store lazily: only the objects an operation needs are read.
    """

    __slots__ = ("_head", "_tips", "_ws")

    def __init__(self, *, source: ObjectSource | None = None, head: str | None = None) -> None:
        self._ws = Workspace(source)
        if head is None:
            root = self._ws.put(Revision(None, now_ms(), None, [[]], 0))
            self._head = root
        else:
            self._head = from_hex(head)
            try:
                self._ws.revision(self._head)
            except MissingObject:
                raise UnknownRevision(f"revision {head} is not in the store") from None
        self._tips: frozenset[ObjectId] = frozenset([self._head])

    @classmethod
    def _derive(cls, ws: Workspace, head: ObjectId, tips: frozenset[ObjectId]) -> MessageHistory:
        new = cls.__new__(cls)
        new._ws, new._head, new._tips = ws, head, tips
        return new

    def _advance(self, head: ObjectId) -> MessageHistory:
        return self._derive(self._ws, head, (self._tips - {self._revision().parent, self._head}) | {head})

    # -- reading -------------------------------------------------------------------------------
    @property
    def revision_id(self) -> str:
        """The id of the head revision (hex)."""
        return to_hex(self._head)

    @property
    def size(self) -> int:
        """Entries in the active view."""
        return self._revision().size

    @property
    def workspace(self) -> Workspace:
        """The objects this history shares with the histories derived from it (for repositories)."""
        return self._ws

    def __repr__(self) -> str:
        return f"<MessageHistory {self.revision_id[:12]} size={self.size}>"

    def _revision(self, oid: ObjectId | None = None) -> Revision:
        return self._ws.revision(self._head if oid is None else oid)

    def _items(self, revision: ObjectId | None = None) -> list[Item]:
        rev = self._revision(revision)
        return list(seq.iter_items(rev.seq, self._ws.node))

    def _lookup(self, entry_id: str) -> ObjectId | None:
        oid = self._ws.index.get(entry_id)
        if oid is None:
            self._index_graph()
            oid = self._ws.index.get(entry_id)
        return oid

    def _index_graph(self) -> None:
        """Read every tree and operation of the graph this history knows into the id index."""
        ws = self._ws
        # A revision is marked indexed only after its ancestors are, so each walk stops at the first
        # indexed one: a miss costs the revisions made since the last miss, not the whole lineage
        # (which made n appends with explicit ids cost O(n^2)).
        todo: list[ObjectId] = []
        for tip in sorted(self._tips):
            chain = []
            for oid in self._chain(tip):
                if oid in ws.indexed:
                    break
                chain.append(oid)
            todo.extend(reversed(chain))
        for rev_oid in todo:
            if rev_oid in ws.indexed:
                continue
            rev = ws.revision(rev_oid, keep=False)
            self._index_spine(rev.seq)
            op = rev.operation
            if op is not None and op["type"] == "append":
                # An append names its entries' ids next to their oids: no entry needs reading.
                for entry_id, oid in zip(op["entryIds"], op["entries"], strict=True):
                    ws.index.setdefault(entry_id, oid)
            else:
                for oid in rev.operation_ids():
                    ws.index.setdefault(ws.entry(oid).id, oid)
            ws.indexed.add(rev_oid)

    def _index_spine(self, spine: seq.Spine) -> None:
        for entry_id, entry_oid in spine[0]:
            if entry_oid is not None:
                self._ws.index.setdefault(entry_id, entry_oid)
        for oid, _ in seq.subtrees(spine):
            self._index_tree(oid)

    def _index_tree(self, root: ObjectId) -> None:
        if root in self._ws.indexed:
            return
        node = self._ws.node(root)
        if node.level > 0:
            for child, _ in node.items:
                self._index_tree(ObjectId(child))
            self._ws.indexed.add(root)

    def _resolve_view(self, view: str | Sequence[str] | None) -> list[ObjectId]:
        if view is None:
            items = self._items()
        elif isinstance(view, str):
            try:
                oid = from_hex(view)
                self._ws.revision(oid)
            except (InvalidInput, MissingObject, InvalidObject):
                return []
            items = self._items(oid)
        else:
            items = [(entry_id, None) for entry_id in _ids(view, "view")]
        out = []
        for entry_id, oid in items:
            found = oid if oid is not None else self._lookup(entry_id)
            if found is not None:
                out.append(found)
        return out

    def _entry(self, oid: ObjectId) -> MessageHistoryEntry:
        stored = self._ws.entry(oid)
        return MessageHistoryEntry(
            id=stored.id,
            message=expand_message(stored.message, self._ws.value),
            kind=stored.kind,
            meta=plain_copy(stored.meta) if stored.meta is not None else None,
            sources=list(stored.sources) if stored.sources is not None else None,
        )

    def refs(self, view: str | Sequence[str] | None = None) -> list[MessageHistoryEntry]:
        """The entries of the active view, of revision `view`, or of the listed entry ids (copies)."""
        return [self._entry(oid) for oid in self._resolve_view(view)]

    def render(self, view: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The messages of a view, ready to send to a model (copies)."""
        return [e.message for e in self.refs(view)]

    def restore(self, entry_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Messages with every summary expanded into its sources, recursively; unknown ids skipped."""
        if entry_ids is None:
            oids: list[ObjectId | None] = list(self._resolve_view(None))
        else:
            oids = [self._lookup(i) for i in _ids(entry_ids, "entry_ids")]
        out: list[dict[str, Any]] = []
        self._restore_into(oids, out, set())
        return out

    def _restore_into(self, oids: Iterable[ObjectId | None], out: list[dict[str, Any]],
                      open_: set[ObjectId]) -> None:
        for oid in oids:
            if oid is None or oid in open_:
                continue
            entry = self._ws.entry(oid)
            if entry.kind == "summary" and entry.sources:
                open_.add(oid)
                self._restore_into([self._lookup(s) for s in entry.sources], out, open_)
                open_.discard(oid)
            else:
                out.append(expand_message(entry.message, self._ws.value))

    def estimate_tokens(self) -> int:
        """`estimate_tokens` of the active view's messages."""
        return estimate_tokens(self.render())

    # -- writing -------------------------------------------------------------------------------
    def _make_entries(self, inputs: Iterable[Any], **force: Any) -> list[tuple[str, ObjectId]]:
        """Store entry inputs as objects, refusing an explicit id that names different content."""
        made: list[tuple[str, ObjectId]] = []
        seen: dict[str, ObjectId] = {}
        for value in inputs:
            entry, encoded, blobs, explicit = intake_entry(value, **force)
            oid = encoded[0]
            if explicit:
                known = seen.get(entry.id) or self._lookup(entry.id)
                if known is not None and known != oid:
                    raise DuplicateEntryId(
                        f"entry id {entry.id!r} already names a different entry in this history; "
                        "use a new id, or leave the id out to have one generated")
            seen[entry.id] = oid
            made.append((entry.id, oid))
            for blob in blobs:
                self._ws.put_encoded(*blob)
            self._ws.put_encoded(*encoded)
        for entry_id, oid in made:
            self._ws.index.setdefault(entry_id, oid)
        return made

    def _new_revision(self, operation: dict[str, Any] | None, root: seq.Spine, size: int,
                      created_at: int | None = None) -> MessageHistory:
        rev = Revision(self._head, now_ms() if created_at is None else created_at, operation, root, size)
        return self._advance(self._ws.put(rev))

    def append(self, entry: Any) -> MessageHistory:
        """Add one entry (a message, or the object form with `message`) at the end."""
        return self.extend([entry])

    def extend(self, entries: Iterable[Any]) -> MessageHistory:
        """Add several entries at the end as one revision."""
        return self._append_made(self._make_entries(_listed(entries, "entries")))

    def _append_made(self, made: list[tuple[str, ObjectId]], created_at: int | None = None) -> MessageHistory:
        rev = self._revision()
        root = seq.append(rev.seq, [[i, o] for i, o in made], self._ws.put)
        op = {"type": "append", "entryIds": [i for i, _ in made], "entries": [o for _, o in made]}
        return self._new_revision(op, root, rev.size + len(made), created_at)

    def edit(self, patches: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> MessageHistory:
        """Apply patches in order to the evolving sequence; a patch whose target is absent is skipped."""
        listed = [patches] if isinstance(patches, Mapping) else _listed(patches, "patches")
        for patch in listed:
            check_patch(patch)
        resolved = [stored_patch(p, self._make_entries) for p in listed]
        return self._apply_edit(resolved)

    def _apply_edit(self, patches: list[dict[str, Any]], created_at: int | None = None) -> MessageHistory:
        before = self._items()
        items = before
        for patch in patches:
            items = _apply_patch(items, patch, self._ws)
        root = _respliced(self._revision().seq, before, items, self._ws)
        return self._new_revision({"type": "edit", "patches": patches}, root, len(items), created_at)

    def fork(self) -> MessageHistory:
        """A new revision with the same view: a branch point. The original is untouched."""
        rev = self._revision()
        return self._new_revision({"type": "fork"}, rev.seq, rev.size)

    def with_view(self, view: str | Sequence[str]) -> MessageHistory:
        """Move the head to a known revision, or mint a `view` revision of exactly the listed ids."""
        if isinstance(view, str):
            try:
                oid = from_hex(view)
                self._ws.revision(oid)
            except (InvalidInput, MissingObject, InvalidObject):
                raise UnknownRevision(f"revision {view!r} is not in this history") from None
            return self._derive(self._ws, oid, self._tips | {oid})
        ids = _ids(view, "view")
        root = seq.build([[i, self._lookup(i)] for i in ids], self._ws.put)
        return self._new_revision({"type": "view", "entryIds": ids}, root, len(ids))

    # -- lineage -------------------------------------------------------------------------------
    def lineage(self) -> Iterator[str]:
        """The head revision and its ancestors, newest first (hex ids)."""
        oid: ObjectId | None = self._head
        while oid is not None:
            yield to_hex(oid)
            oid = self._ws.parent(oid)

    def _chain(self, start: ObjectId) -> Iterator[ObjectId]:
        oid: ObjectId | None = start
        while oid is not None:
            yield oid
            oid = self._ws.parent(oid)

    def _all_revisions(self) -> list[ObjectId]:
        """Every revision this history knows, parents before children."""
        seen: set[ObjectId] = set()
        out: list[ObjectId] = []
        for tip in sorted(self._tips):
            chain = []
            for oid in self._chain(tip):
                if oid in seen:
                    break
                seen.add(oid)
                chain.append(oid)
            out.extend(reversed(chain))
        return out

    def replay(self, other: MessageHistory, revision_id: str) -> MessageHistory:
        """Apply the operation recorded in `other`'s revision `revision_id` on top of this history.

        The entries the operation names are copied from `other`'s objects; this is what a rebase
        does for each revision it carries over.
        """
        rev = other._revision(from_hex(revision_id))
        op = rev.operation
        if op is None:
            return self
        for oid in rev.operation_ids():
            self._copy_entry(other._ws, oid)
        if op["type"] == "append":
            made = list(zip(op["entryIds"], op["entries"], strict=True))
            self._check_ids_free(made)
            return self._append_made(made, rev.created_at)
        if op["type"] == "edit":
            return self._apply_edit(op["patches"], rev.created_at)
        if op["type"] == "fork":
            return self._new_revision({"type": "fork"}, self._revision().seq, self.size, rev.created_at)
        ids = op["entryIds"]
        root = seq.build([[i, self._lookup(i)] for i in ids], self._ws.put)
        return self._new_revision({"type": "view", "entryIds": ids}, root, len(ids), rev.created_at)

    def _copy_entry(self, source: Workspace, oid: ObjectId) -> None:
        if source is self._ws or self._ws.has(oid):
            return
        entry = source.entry(oid)
        for blob in entry.blob_ids():
            self._ws.put_raw(blob, source.raw(blob))
        self._ws.put_raw(oid, source.raw(oid))
        self._ws.index.setdefault(entry.id, oid)

    def _check_ids_free(self, made: list[tuple[str, ObjectId]]) -> None:
        for entry_id, oid in made:
            known = self._lookup(entry_id)
            if known is not None and known != oid:
                raise DuplicateEntryId(f"entry id {entry_id!r} names different entries on the two lineages")

    def rebase_onto(self, onto: MessageHistory) -> MessageHistory:
        """Replay this history's revisions that `onto` lacks on top of `onto` (oldest first)."""
        theirs = set(onto._chain(onto._head))
        mine = []
        for oid in self._chain(self._head):
            if oid in theirs:
                break
            mine.append(oid)
        result = onto
        for oid in reversed(mine):
            result = result.replay(self, to_hex(oid))
        return result

    # -- snapshots and deltas ------------------------------------------------------------------
    def to_snapshot(self) -> dict[str, Any]:
        """The whole graph this history knows: `{entries, revisions, head}`, JSON-ready."""
        from .snapshot import snapshot_of

        return snapshot_of(self, self._all_revisions())

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any]) -> MessageHistory:
        """Rebuild a history from `to_snapshot` output (ours, or the TypeScript library's)."""
        history = cls()
        return history.apply_changes(snapshot, _fresh=True)

    def changes_since(self, base: str | None = None) -> dict[str, Any]:
        """The revisions and entries added after `base`: `{entries, revisions, head, base}`.

        With no base, the whole lineage. A base that is not an ancestor gives what the head reaches
        and the base does not. An unknown base raises `UnknownRevision`.
        """
        from .snapshot import delta_of

        return delta_of(self, base)

    def apply_changes(self, delta: Mapping[str, Any], *, _fresh: bool = False) -> MessageHistory:
        """Add a snapshot's or delta's entries and revisions to this history; returns its head."""
        from .snapshot import load_into

        return load_into(self, delta, fresh=_fresh)


def _respliced(root: seq.Spine, before: list[Item], after: list[Item], ws: Workspace) -> seq.Spine:
    """The tree of `after`, made from `before`'s tree by rewriting only the span where they differ.

    An edit usually touches a few entries, so this writes the nodes around that span (O(log n)) where a
    rebuild would hash every node of the view again.
    """
    def same(a: Item, b: Item) -> bool:
        return a[0] == b[0] and a[1] == b[1]

    limit = min(len(before), len(after))
    start = 0
    while start < limit and same(before[start], after[start]):
        start += 1
    end = 0
    while end < limit - start and same(before[-1 - end], after[-1 - end]):
        end += 1
    changed = [[i, o] for i, o in after[start: len(after) - end]]
    return seq.splice(root, start, len(before) - end, changed, ws.node, ws.put)


def _listed(value: Any, what: str) -> list[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidInput(f"{what} must be a list")
    return list(value)


def _ids(value: Any, what: str) -> list[str]:
    ids = _listed(value, what)
    for i in ids:
        if not isinstance(i, str):
            raise InvalidInput(f"{what} must be a list of entry ids (strings), not {i!r}")
    return ids


def _apply_patch(items: list[Item], patch: dict[str, Any], ws: Workspace) -> list[Item]:
    """One stored patch applied to a list of (id, oid) items; absent targets leave it unchanged."""
    op = patch["op"]
    ids = [i for i, _ in items]
    if op == "remove":
        return [it for it in items if it[0] != patch["id"]]
    if op in ("replace", "split", "insertBefore", "insertAfter"):
        if patch["id"] not in ids:
            return items
        at = ids.index(patch["id"])
        new: list[Item] = [(ws.entry(o).id, o) for o in patch["entries"]]
        if op == "insertBefore":
            return items[:at] + new + items[at:]
        if op == "insertAfter":
            return items[: at + 1] + new + items[at + 1:]
        return items[:at] + new + items[at + 1:]
    if op == "move":
        moving = set(patch["ids"])
        moved = [it for it in items if it[0] in moving]
        if not moved:
            return items
        rest = [it for it in items if it[0] not in moving]
        rest_ids = [i for i, _ in rest]
        if "before" in patch:
            at = rest_ids.index(patch["before"]) if patch["before"] in rest_ids else len(rest)
        elif "after" in patch:
            at = rest_ids.index(patch["after"]) + 1 if patch["after"] in rest_ids else len(rest)
        else:
            at = len(rest)
        return rest[:at] + moved + rest[at:]
    # summary
    summary: Item = (ws.entry(patch["entry"]).id, patch["entry"])
    sources = set(patch["sourceIds"])
    if patch.get("replace"):
        positions = [n for n, i in enumerate(ids) if i in sources]
        if positions:
            first = positions[0]
            return [it for it in items[:first] if it[0] not in sources] + [summary] + [
                it for it in items[first:] if it[0] not in sources]
    return [*items, summary]

