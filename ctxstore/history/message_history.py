"""MessageHistory: the immutable, versioned message sequence of `fino:ai/context`, over hashed objects.

Every operation returns a new history pointing at a new revision; older histories keep seeing their own
revision. Entries and revisions are content-addressed objects (see `format.objects`), and a revision's
view is a sequence tree (see `format.seq`), so a history can be written to and loaded from any object
store. A history is a `Graph` (the shared workspace and its lineages' tips) and a head revision.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..errors import DuplicateEntryId, InvalidInput, UnknownRevision, shown
from ..format import seq
from ..format.codec import now_ms
from ..format.objects import Revision, SeqNode
from ..ids import ObjectId, to_hex
from ..store.base import ObjectSource
from .entry import MessageHistoryEntry, collector_paused, read_entries, read_messages, read_view_messages
from .graph import Graph, readable_revision, split_at_common
from .intake import check_patch, expand_message
from .patches import TARGETED, Item, apply_patch, edit_items, respliced
from .snapshot import delta_of, load_into, snapshot_of
from .workspace import Workspace

__all__ = ["MessageHistory", "MessageHistoryEntry"]


class MessageHistory:
    """An immutable, persistent sequence of model messages with full lineage.

    `MessageHistory()` starts an empty in-memory history. `MessageHistory(source=store, head=rev)`
    opens revision `rev` of an object store lazily: only the objects an operation needs are read.
    `created_at` (ms) dates a new empty history's root revision (default: now).
    """

    __slots__ = ("_graph", "_head")

    def __init__(self, *, source: ObjectSource | None = None, head: str | None = None,
                 created_at: int | None = None) -> None:
        ws = Workspace(source)
        if head is None:
            root = Revision(None, now_ms() if created_at is None else created_at, None, [[]], 0)
            self._head = ws.put(root)
        else:
            found = readable_revision(ws, head)
            if found is None:
                raise UnknownRevision(f"revision {shown(head)} is not in the store") from None
            self._head = found
        self._graph = Graph(ws, frozenset([self._head]))
        if head is None:
            self._graph.record(self._head, root)

    @classmethod
    def _derive(cls, graph: Graph, head: ObjectId) -> MessageHistory:
        new = cls.__new__(cls)
        new._graph, new._head = graph, head
        return new

    def _advance(self, head: ObjectId) -> MessageHistory:
        tips = (self._graph.tips - {self._revision().parent, self._head}) | {head}
        return self._derive(self._graph.with_tips(tips), head)

    @property
    def _ws(self) -> Workspace:
        return self._graph.workspace

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
        return self._graph.workspace

    def __repr__(self) -> str:
        return f"<MessageHistory {self.revision_id[:12]} size={self.size}>"

    def _revision(self, oid: ObjectId | None = None) -> Revision:
        """A revision's spine, size, parent and time (its operation may be left unread: `_operation`)."""
        return self._ws.revision(self._head if oid is None else oid, operation=False)

    def _operation(self, oid: ObjectId) -> Revision:
        """A revision with its operation."""
        return self._ws.revision(oid)

    def _items(self, revision: ObjectId | None = None) -> list[Item]:
        rev = self._revision(revision)
        return seq.items_batched(rev.seq, self._ws.nodes)

    def _resolve_view(self, view: str | Sequence[str] | None) -> list[ObjectId]:
        if view is None:
            items = self._items()
        elif isinstance(view, str):
            oid = self._graph.known_revision(view)
            if oid is None:
                return []
            items = self._items(oid)
        else:
            items = [(entry_id, None) for entry_id in _ids(view, "view")]
        out = []
        for entry_id, item_oid in items:
            found = item_oid if item_oid is not None else self._graph.lookup(entry_id)
            if found is not None:
                out.append(found)
        return out

    def refs(self, view: str | Sequence[str] | None = None) -> list[MessageHistoryEntry]:
        """The entries of the active view, of revision `view`, or of the listed entry ids (copies)."""
        return read_entries(self._ws, self._resolve_view(view))

    def render(self, view: str | Sequence[str] | None = None) -> list[dict[str, Any]]:
        """The messages of a view, ready to send to a model (copies)."""
        if view is None or isinstance(view, str):
            oid = None if view is None else self._graph.known_revision(view)
            if view is not None and oid is None:
                return []
            return read_view_messages(self._ws, self._revision(oid).seq, self._graph.lookup)
        return read_messages(self._ws, self._resolve_view(view))

    def restore(self, entry_ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Messages with every summary expanded into its sources, recursively; unknown ids skipped."""
        if entry_ids is None:
            oids: list[ObjectId | None] = list(self._resolve_view(None))
        else:
            oids = [self._graph.lookup(i) for i in _ids(entry_ids, "entry_ids")]
        out: list[dict[str, Any]] = []
        self._restore_into(oids, out)
        return out

    def _restore_into(self, oids: Iterable[ObjectId | None], out: list[dict[str, Any]]) -> None:
        # Depth-first with an explicit stack: a long chain of summaries must not exhaust the call stack.
        # `open_` holds the summaries being expanded, so a summary cycle is cut where it closes.
        open_: set[ObjectId] = set()
        stack: list[tuple[ObjectId | None, Iterator[ObjectId | None]]] = [(None, iter(oids))]
        while stack:
            owner, pending = stack[-1]
            oid = next(pending, _DONE)
            if oid is _DONE:
                stack.pop()
                if owner is not None:
                    open_.discard(owner)
                continue
            if oid is None or oid in open_:
                continue
            entry = self._ws.entry(oid)
            if entry.kind == "summary" and entry.sources:
                open_.add(oid)
                stack.append((oid, iter([self._graph.lookup(s) for s in entry.sources])))
            else:
                out.append(expand_message(entry.message, self._ws.value))

    def estimate_tokens(self) -> int:
        """`estimate_tokens` of the active view's messages."""
        from . import budget  # here, not at the top: the pricing tables (and `decimal`) load when used

        return budget.estimate_tokens(self.render())

    # -- writing -------------------------------------------------------------------------------
    def _new_revision(self, operation: dict[str, Any] | None, root: seq.Spine, size: int,
                      created_at: int | None = None,
                      pinned: Iterable[tuple[str, ObjectId]] = (), closed: list[ObjectId] | None = None
                      ) -> MessageHistory:
        """A revision onto the head; `closed` only for an append by the rule (the nodes it closed)."""
        rev = Revision(self._head, now_ms() if created_at is None else created_at, operation, root, size)
        oid = self._ws.put(rev) if closed is None else self._ws.put_append(rev, closed)
        self._graph.record(oid, rev, pinned)
        return self._advance(oid)

    def append(self, entry: Any, *, created_at: int | None = None) -> MessageHistory:
        """Add one entry (a message, or the object form with `message`) at the end."""
        return self.extend([entry], created_at=created_at)

    def extend(self, entries: Iterable[Any], *, created_at: int | None = None) -> MessageHistory:
        """Add several entries at the end as one revision (`created_at`: its time in ms, default now)."""
        listed = _listed(entries, "entries")
        # An import makes a few long-lived objects per entry and no cyclic garbage: the collector would
        # scan them all again each time they grow by a quarter (7 full collections in 100,000 entries).
        with collector_paused():
            return self._append_made(self._graph.make_entries(listed), created_at)

    def _append_made(self, made: list[tuple[str, ObjectId]], created_at: int | None = None) -> MessageHistory:
        rev = self._revision()
        ws, puts = self._ws, []

        def put(node: SeqNode) -> ObjectId:
            oid = ws.put(node)
            puts.append(oid)
            return oid

        root = seq.append(rev.seq, made, put)
        op = {"type": "append", "entryIds": [i for i, _ in made], "entries": [o for _, o in made]}
        return self._new_revision(op, root, rev.size + len(made), created_at, closed=puts)

    def edit(self, patches: Mapping[str, Any] | Sequence[Mapping[str, Any]], *,
             created_at: int | None = None) -> MessageHistory:
        """Apply patches in order to the evolving sequence; a patch whose target is absent is skipped."""
        listed = [patches] if isinstance(patches, Mapping) else _listed(patches, "patches")
        for patch in listed:
            check_patch(patch)
        made: dict[str, ObjectId] = {}

        def make(inputs: Any, **how: Any) -> list[tuple[str, ObjectId]]:
            return self._graph.make_entries(inputs, made=made, **how)

        before = self._items()
        stored, items = edit_items(before, listed, make, self._entry_id)
        return self._edited(before, stored, items, created_at)

    def _entry_id(self, oid: ObjectId) -> str:
        return self._ws.entry(oid).id

    def _edited(self, before: list[Item], patches: list[dict[str, Any]], items: list[Item],
                created_at: int | None = None) -> MessageHistory:
        root = respliced(self._revision().seq, before, items, self._ws)
        return self._new_revision({"type": "edit", "patches": patches}, root, len(items), created_at)

    def _apply_edit(self, patches: list[dict[str, Any]], created_at: int | None = None) -> MessageHistory:
        """Replay stored patches (a rebase): one that is skipped here is not recorded again."""
        before = self._items()
        items = before
        kept = []
        for patch in patches:
            after = apply_patch(items, patch, self._entry_id)
            if patch["op"] in TARGETED and after is items:
                continue
            items = after
            kept.append(patch)
        return self._edited(before, kept, items, created_at)

    def fork(self, *, created_at: int | None = None) -> MessageHistory:
        """A new revision with the same view: a branch point. The original is untouched."""
        rev = self._revision()
        return self._new_revision({"type": "fork"}, rev.seq, rev.size, created_at)

    def with_view(self, view: str | Sequence[str]) -> MessageHistory:
        """Move the head to a known revision, or mint a `view` revision of exactly the listed ids."""
        if isinstance(view, str):
            oid = self._graph.known_revision(view)
            if oid is None:
                raise UnknownRevision(f"revision {shown(view)} is not in this history")
            return self._derive(self._graph, oid)
        return self._view_of(_ids(view, "view"))

    def _view_of(self, ids: list[str], created_at: int | None = None) -> MessageHistory:
        items = [(i, self._graph.lookup(i)) for i in ids]
        root = seq.build([[i, o] for i, o in items], self._ws.put)
        pinned = [(i, o) for i, o in items if o is not None]
        return self._new_revision({"type": "view", "entryIds": ids}, root, len(ids), created_at, pinned)

    # -- lineage -------------------------------------------------------------------------------
    def lineage(self) -> Iterator[str]:
        """The head revision and its ancestors, newest first (hex ids)."""
        return (to_hex(oid) for oid in self._graph.chain(self._head))

    def replay(self, other: MessageHistory, revision_id: str) -> MessageHistory:
        """Apply the operation recorded in `other`'s revision `revision_id` on top of this history.

        The entries the operation names are copied from `other`'s objects; this is what a rebase
        does for each revision it carries over.
        """
        if not isinstance(other, MessageHistory):
            raise InvalidInput(f"replay needs a MessageHistory to copy from, not {type(other).__name__}")
        found = other._graph.known_revision(revision_id)
        if found is None:
            raise UnknownRevision(f"revision {shown(revision_id)} is not in the history to replay from")
        return self._replay(other, found, None)

    def _replay(self, other: MessageHistory, found: ObjectId,
                conflicts: Mapping[str, set[ObjectId]] | None) -> MessageHistory:
        """`replay` of revision `found`; with `conflicts` (id -> entries), an appended id is checked against
        those alone instead of this whole graph (what a rebase knows suffices, see `rebase_onto`)."""
        rev = other._operation(found)
        op = rev.operation
        if op is None:
            return self
        for oid in rev.operation_ids():
            self._copy_entry(other._ws, oid)
        if op["type"] == "append":
            made = list(zip(op["entryIds"], op["entries"], strict=True))
            if conflicts is None:
                self._check_ids_free(made)
            else:
                for entry_id, oid in made:
                    if conflicts.get(entry_id, {oid}) != {oid}:
                        raise DuplicateEntryId(
                            f"entry id {shown(entry_id)} names different entries on the two lineages")
            return self._append_made(made, rev.created_at)
        if op["type"] == "edit":
            return self._apply_edit(op["patches"], rev.created_at)
        if op["type"] == "fork":
            return self._new_revision({"type": "fork"}, self._revision().seq, self.size, rev.created_at)
        return self._view_of(list(op["entryIds"]), rev.created_at)

    def _copy_entry(self, source: Workspace, oid: ObjectId) -> None:
        ws = self._ws
        if source is ws or ws.has(oid):
            return
        entry = source.entry(oid)
        for blob in entry.blob_ids():
            ws.put_raw(blob, source.raw(blob))
        ws.put_raw(oid, source.raw(oid))

    def _check_ids_free(self, made: list[tuple[str, ObjectId]]) -> None:
        for entry_id, oid in made:
            known = self._graph.lookup(entry_id)
            if known is not None and known != oid:
                raise DuplicateEntryId(f"entry id {shown(entry_id)} names different entries on the two lineages")

    def rebase_onto(self, onto: MessageHistory) -> MessageHistory:
        """Replay this history's revisions that `onto` lacks on top of `onto` (oldest first).

        Only the two lineages' ends back to their newest common revision are read. A compaction that
        lost a race is dropped rather than replayed: an edit with a ``summary`` patch that replaces its
        sources, when some of those sources are no longer in the view it would apply to (another writer
        summarised them first), is skipped, so a rebase never appends a stray summary at the end.
        """
        if not isinstance(onto, MessageHistory):
            raise InvalidInput(f"rebase_onto needs a MessageHistory, not {type(onto).__name__}")
        mine, theirs, _common = split_at_common(self._graph.chain(self._head), onto._graph.chain(onto._head))
        if not mine:
            return onto
        # The ids this history appended were checked against its own graph when they were made, and
        # that graph holds the common lineage; only what the other side added since can clash. So a
        # rebase reads the two ends, never the whole lineage, even on a freshly loaded history.
        conflicts = onto._graph.introduced(theirs)
        result = onto
        for oid in reversed(mine):
            if _replaces_absent_sources(self._operation(oid).operation, result):
                continue
            result = result._replay(self, oid, conflicts)
        return result

    # -- snapshots and deltas ------------------------------------------------------------------
    def to_snapshot(self) -> dict[str, Any]:
        """The whole graph this history knows: `{entries, revisions, head}`, JSON-ready."""
        return snapshot_of(self._graph, self._head)

    @classmethod
    def from_snapshot(cls, snapshot: Mapping[str, Any]) -> MessageHistory:
        """Rebuild a history from `to_snapshot` output (ours, or the TypeScript library's)."""
        return cls()._loaded(snapshot, fresh=True)

    def changes_since(self, base: str | None = None) -> dict[str, Any]:
        """The revisions and entries added after `base`: `{entries, revisions, head, base}`.

        With no base, the whole lineage. A base that is not an ancestor gives what the head reaches
        and the base does not. An unknown base raises `UnknownRevision`.
        """
        return delta_of(self._graph, self._head, base)

    def apply_changes(self, delta: Mapping[str, Any]) -> MessageHistory:
        """Add a snapshot's or delta's entries and revisions to this history; returns its head."""
        return self._loaded(delta, fresh=False)

    def _loaded(self, data: Mapping[str, Any], *, fresh: bool) -> MessageHistory:
        graph, head = load_into(self._graph, data, fresh=fresh)
        return self._derive(graph, head)


_DONE: Any = object()
"""The end of an iterator in `_restore_into`'s walk (None is a real item there: an unknown id)."""


def _listed(value: Any, what: str) -> list[Any]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise InvalidInput(f"{what} must be a list")
    return list(value)


def _ids(value: Any, what: str) -> list[str]:
    ids = _listed(value, what)
    for i in ids:
        if not isinstance(i, str):
            raise InvalidInput(f"{what} must be a list of entry ids (strings), not {shown(i)}")
    return ids


def _replaces_absent_sources(operation: Mapping[str, Any] | None, onto: MessageHistory) -> bool:
    """Whether an edit replaces sources with a summary while some of them are gone from `onto`'s view."""
    if operation is None or operation.get("type") != "edit":
        return False
    present: set[str] | None = None
    for patch in operation.get("patches") or ():
        if patch.get("op") != "summary" or not patch.get("replace"):
            continue
        if present is None:
            present = {entry.id for entry in onto.refs()}
        if not set(patch.get("sourceIds") or ()) <= present:
            return True
    return False
