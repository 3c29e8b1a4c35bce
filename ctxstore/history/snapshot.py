"""Snapshots and deltas of a history's graph: the seed's JSON graph shape, out and in.

Works on a `Graph` and a head revision, the data a `MessageHistory` hands over, so this module never
needs the history class (which imports it).

Loading rebuilds each revision as a ctxstore revision object from its parent, time, operation and
entry ids, so the same snapshot always gives the same objects. A record id that is not the rebuilt
object's hex id (the TypeScript library's `"3-k2j4h5q"`) is kept as an alias of it in the loaded graph:
parents, heads and bases of later deltas, and `with_view`, may use it, and snapshots and deltas written
from the graph spell the revision by it. An edit's patch entries are the entries the edit made: ctxstore
writes them whole, with their ids; the TypeScript library writes the inputs as given (bare messages),
so each is matched to the snapshot entry with its content that the edit's revision introduced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..errors import DuplicateEntryId, EncodingError, InvalidInput, InvalidObject, UnknownRevision, shown
from ..format import seq
from ..format.objects import Revision
from ..ids import ObjectId, to_hex
from .entry import read_entry
from .graph import Graph
from .intake import Encoded, check_patch, intake_entry
from .patches import Item, edit_items, respliced
from .workspace import Workspace

__all__ = ["delta_of", "load_into", "snapshot_of"]


def _entry_dict(ws: Workspace, oid: ObjectId) -> dict[str, Any]:
    return read_entry(ws, oid).to_dict()


def _seed_operation(ws: Workspace, op: dict[str, Any] | None) -> dict[str, Any] | None:
    if op is None:
        return None
    if op["type"] in ("append", "view"):
        return {"type": op["type"], "entryIds": list(op["entryIds"])}
    if op["type"] == "fork":
        return {"type": "fork"}
    patches = []
    for patch in op["patches"]:
        out = dict(patch)
        if "entries" in patch:
            out["entries"] = [_entry_dict(ws, o) for o in patch["entries"]]
        if "entry" in patch:
            out["entry"] = _entry_dict(ws, patch["entry"])
        patches.append(out)
    return {"type": "edit", "patches": patches}


class _Views:
    """Entry-id lists of trees, memoised per node: revisions share most nodes with their parents."""

    def __init__(self, graph: Graph) -> None:
        self._graph = graph
        self._ws = graph.workspace
        self._ids: dict[ObjectId, list[str]] = {}

    def ids(self, spine: seq.Spine) -> list[str]:
        out: list[str] = []
        for oid, _ in seq.subtrees(spine):
            out.extend(self._node_ids(oid))
        out.extend(i for i, _ in spine[0])
        return out

    def _node_ids(self, root: ObjectId) -> list[str]:
        found = self._ids.get(root)
        if found is None:
            node = self._ws.node(root)
            if node.level == 0:
                found = [i for i, _ in node.items]
            else:
                found = []
                for child, _ in node.items:
                    found.extend(self._node_ids(ObjectId(child)))
            self._ids[root] = found
        return found

    def entries(self, spine: seq.Spine, out: dict[ObjectId, None], seen: set[ObjectId]) -> None:
        """Add every entry oid of a spine's list to `out`, visiting each stored node once."""
        for oid, _ in seq.subtrees(spine):
            self._node_entries(oid, out, seen)
        self._leaf_entries(spine[0], out)

    def _node_entries(self, root: ObjectId, out: dict[ObjectId, None], seen: set[ObjectId]) -> None:
        if root in seen:
            return
        seen.add(root)
        node = self._ws.node(root)
        if node.level == 0:
            self._leaf_entries(node.items, out)
        else:
            for child, _ in node.items:
                self._node_entries(ObjectId(child), out, seen)

    def _leaf_entries(self, items: list[list[Any]], out: dict[ObjectId, None]) -> None:
        for entry_id, oid in items:
            found = oid if oid is not None else self._graph.lookup(entry_id)
            if found is not None:
                out.setdefault(found)


def _revision_dicts(graph: Graph, oids: list[ObjectId],
                    entries: dict[ObjectId, None]) -> list[dict[str, Any]]:
    ws = graph.workspace
    views = _Views(graph)
    seen: set[ObjectId] = set()
    out = []
    for oid in oids:
        rev = ws.revision(oid)
        views.entries(rev.seq, entries, seen)
        for entry_oid in rev.operation_ids():
            entries.setdefault(entry_oid)
        record: dict[str, Any] = {"id": graph.name(oid), "entryIds": list(views.ids(rev.seq))}
        if rev.parent is not None:
            record["parent"] = graph.name(rev.parent)
        record["createdAt"] = rev.created_at
        if rev.operation is not None:
            record["operation"] = _seed_operation(ws, rev.operation)
        out.append(record)
    return out


def snapshot_of(graph: Graph, head: ObjectId) -> dict[str, Any]:
    """`{entries, revisions, head}` of every revision in `graph` (parents first) and the entries they use."""
    ws = graph.workspace
    entries: dict[ObjectId, None] = {}
    records = _revision_dicts(graph, graph.revisions(), entries)
    return {"entries": [_entry_dict(ws, o) for o in entries], "revisions": records, "head": graph.name(head)}


def _known_revision(graph: Graph, text: Any, what: str) -> ObjectId:
    oid = graph.known_revision(text)
    if oid is None:
        raise UnknownRevision(f"{what} {shown(text)} is not a revision of this history")
    return oid


def _changed_items(ws: Workspace, rev: Revision) -> set[str]:
    """Ids in the leaves of `rev`'s tree that its parent's tree lacks (a superset of what it added)."""
    parent = [ws.revision(rev.parent, operation=False).seq] if rev.parent is not None else []
    changed = seq.diff([rev.seq], parent, ws.node)
    return {entry_id for leaf in changed.a_leaves for entry_id, _ in leaf.items}


def delta_of(graph: Graph, head: ObjectId, base: str | None) -> dict[str, Any]:
    """What `head` reaches that `base` does not, in the snapshot shape plus `base` (when given)."""
    ws = graph.workspace
    head_chain = list(graph.chain(head))
    base_chain: list[ObjectId] = []
    if base is None:
        delta = head_chain
    else:
        base_oid = _known_revision(graph, base, "base revision")
        base_chain = list(graph.chain(base_oid))
        if base_oid in head_chain:
            delta = head_chain[: head_chain.index(base_oid)]
        else:
            members = set(base_chain)
            cut = next((n for n, oid in enumerate(head_chain) if oid in members), len(head_chain))
            delta = head_chain[:cut]
    wanted: set[str] = set()
    for oid in delta:
        wanted |= _changed_items(ws, ws.revision(oid, operation=False))
    for oid in base_chain:
        wanted -= _changed_items(ws, ws.revision(oid, operation=False))
        if not wanted:
            break
    entries: dict[ObjectId, None] = {}
    records = _revision_dicts(graph, delta, entries)
    in_views = {entry_id for record in records for entry_id in record["entryIds"]}
    listed = [o for o in entries if ws.entry(o).id in wanted and ws.entry(o).id in in_views]
    out: dict[str, Any] = {"entries": [_entry_dict(ws, o) for o in listed], "revisions": records,
                           "head": graph.name(head)}
    if base is not None:
        out["base"] = base
    return out


def _revision_order(records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    by_id: dict[str, Mapping[str, Any]] = {}
    for record in records:
        if not isinstance(record, Mapping) or not isinstance(record.get("id"), str):
            raise InvalidInput("each revision must be a dict with a string 'id'")
        if record["id"] in by_id:
            raise InvalidInput(f"revision id {shown(record['id'])} appears twice")
        by_id[record["id"]] = record
    ordered: list[Mapping[str, Any]] = []
    done: set[str] = set()
    for record in records:
        stack: list[Mapping[str, Any]] = []
        on_stack: set[str] = set()
        current: Mapping[str, Any] | None = record
        while current is not None and current["id"] not in done:
            stack.append(current)
            on_stack.add(current["id"])
            parent = current.get("parent")
            current = by_id.get(parent) if isinstance(parent, str) else None
            if current is not None and current["id"] in on_stack:
                raise InvalidInput(f"revision {shown(current['id'])} is its own ancestor")
        for item in reversed(stack):
            done.add(item["id"])
            ordered.append(item)
    return ordered


def _content_key(kind: Any, message: Any) -> str:
    return json.dumps([kind, message], sort_keys=True, separators=(",", ":"), default=repr)


class _Loading:
    """The entries of a snapshot or delta being loaded into `graph`, and which revisions used them."""

    def __init__(self, graph: Graph, entries: list[Any]) -> None:
        self.graph = graph
        self.made: dict[str, ObjectId] = {}
        self._entries: dict[str, tuple[Encoded, list[Encoded]]] = {}
        self._by_content: dict[str, list[str]] = {}
        self.used: set[str] = set()
        """Loaded entry ids a revision loaded so far refers to (or that the graph knew already)."""
        for n, value in enumerate(entries):
            if not isinstance(value, Mapping) or "message" not in value or not isinstance(value.get("id"), str):
                raise InvalidInput(f"snapshot entry {n} must be a dict with 'id' and 'message'")
            entry, encoded, blobs, _ = intake_entry(value)
            known = self._entries.get(entry.id)
            if known is not None and known[0][0] != encoded[0]:
                raise DuplicateEntryId(f"snapshot entry id {shown(entry.id)} names two different entries")
            before = graph.lookup(entry.id)
            if before is not None and before != encoded[0]:
                raise DuplicateEntryId(
                    f"snapshot entry {shown(entry.id)} differs from the entry with that id in this history")
            if before is not None:
                self.used.add(entry.id)
            self._entries[entry.id] = (encoded, blobs)
            self._by_content.setdefault(_content_key(entry.kind, value["message"]), []).append(entry.id)

    def resolve(self, entry_id: str) -> ObjectId | None:
        """The oid of a loaded entry (put into the workspace), or of one the graph knows, or None."""
        found = self._entries.get(entry_id)
        if found is None:
            return self.made.get(entry_id) or self.graph.lookup(entry_id)
        encoded, blobs = found
        ws = self.graph.workspace
        for blob in blobs:
            ws.put_encoded(*blob)
        return ws.put_encoded(*encoded)

    def claim(self, value: Any, kind: str | None, sources: list[str] | None, introduced: set[str],
              where: str) -> tuple[str, ObjectId]:
        """The entry an edit made from patch input `value`: by its id when it has one, else the unused
        snapshot entry with its content, preferring one that the edit's revision `introduced`."""
        obj = isinstance(value, Mapping) and "message" in value
        if obj and value.get("id") is not None:
            entry_id = value["id"]
            oid = self.resolve(entry_id) if isinstance(entry_id, str) else None
            if oid is None:
                [(entry_id, oid)] = self.graph.make_entries([value], kind=kind, sources=sources, made=self.made)
            self.used.add(entry_id)
            return entry_id, oid
        message = value["message"] if obj else value
        want = kind or (value.get("kind") if obj else None) or "turn"
        candidates = [i for i in self._by_content.get(_content_key(want, message), ()) if i not in self.used]
        if not candidates:
            raise InvalidInput(f"{where}: an edit patch's entry input has no entry with its content in the "
                               "snapshot's entries (each entry an edit made must be listed)")
        entry_id = next((i for i in candidates if i in introduced), candidates[0])
        self.used.add(entry_id)
        oid = self.resolve(entry_id)
        assert oid is not None
        return entry_id, oid


def _stored_operation(loading: _Loading, op: Any, parent_items: list[Item], record: Mapping[str, Any],
                      ids: list[str]) -> tuple[dict[str, Any] | None, list[Item] | None]:
    """A record's operation in stored form, and the view it makes from the parent's (None: unknown)."""
    where = f"revision {shown(record['id'])}"
    if op is None:
        return None, None
    if not isinstance(op, Mapping) or op.get("type") not in ("append", "edit", "fork", "view"):
        raise InvalidInput(f"{where}: unknown operation {shown(op)}")
    kind = op["type"]
    if kind == "fork":
        return {"type": "fork"}, list(parent_items)
    if kind in ("append", "view"):
        op_ids = op.get("entryIds")
        if not isinstance(op_ids, list) or not all(isinstance(i, str) for i in op_ids):
            raise InvalidInput(f"{where}: {kind} operation needs 'entryIds', a list of entry ids")
        if kind == "view":
            return {"type": "view", "entryIds": list(op_ids)}, [(i, loading.resolve(i)) for i in op_ids]
        oids = []
        for entry_id in op_ids:
            oid = loading.resolve(entry_id)
            if oid is None:
                raise InvalidInput(f"{where}: append operation names entry {shown(entry_id)}, which the snapshot lacks")
            oids.append(oid)
        made: list[Item] = list(zip(op_ids, oids, strict=True))
        return {"type": "append", "entryIds": list(op_ids), "entries": oids}, [*parent_items, *made]
    patches = op.get("patches")
    if not isinstance(patches, list):
        raise InvalidInput(f"{where}: edit operation needs 'patches', a list")
    for patch in patches:
        check_patch(patch)
    before = {i for i, _ in parent_items}
    introduced = {i for i in ids if i not in before}

    def make(inputs: Any, kind: str | None = None, sources: list[str] | None = None) -> list[tuple[str, ObjectId]]:
        return [loading.claim(v, kind, sources, introduced, where) for v in inputs]

    ws = loading.graph.workspace
    stored, items = edit_items(list(parent_items), patches, make, lambda oid: ws.entry(oid).id)
    return {"type": "edit", "patches": stored}, items


def _created_at(record: Mapping[str, Any]) -> int:
    created = record.get("createdAt")
    if isinstance(created, float) and created.is_integer():
        created = int(created)
    if not isinstance(created, int) or isinstance(created, bool) or created < 0:
        raise InvalidInput(f"revision {shown(record['id'])} needs 'createdAt' in milliseconds since the epoch")
    return created


def load_into(graph: Graph, data: Mapping[str, Any], *, fresh: bool) -> tuple[Graph, ObjectId]:
    """Add a snapshot's or delta's graph to `graph`'s workspace: the graph that knows it, and its head.

    `fresh` (a snapshot loaded into an empty history) keeps only the loaded graph's tips.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("a snapshot is a dict with 'entries', 'revisions' and 'head'")
    entries, records, head = data.get("entries"), data.get("revisions"), data.get("head")
    if not isinstance(entries, list) or not isinstance(records, list) or not isinstance(head, str):
        raise InvalidInput("a snapshot needs 'entries' (list), 'revisions' (list) and 'head' (string)")
    ordered = _revision_order(records)
    ws = graph.workspace
    loading = _Loading(graph, entries)
    mapped: dict[str, ObjectId] = {}
    aliases: dict[str, ObjectId] = {}
    parents: set[ObjectId] = set()
    for record in ordered:
        ids = record.get("entryIds")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidInput(f"revision {shown(record['id'])} needs 'entryIds', a list of entry ids")
        created = _created_at(record)
        parent_text = record.get("parent")
        parent: ObjectId | None = None
        parent_items: list[Item] = []
        if parent_text is not None:
            parent = mapped.get(parent_text) if isinstance(parent_text, str) else None
            if parent is None:
                parent = _known_revision(graph, parent_text, f"parent of revision {shown(record['id'])}")
            parents.add(parent)
            parent_items = list(seq.iter_items(ws.revision(parent, operation=False).seq, ws.node))
        operation, items = _stored_operation(loading, record.get("operation"), parent_items, record, ids)
        if items is None or [i for i, _ in items] != ids:
            # No operation, or one whose result is not the recorded view: the view as recorded.
            items = [(i, loading.resolve(i)) for i in ids]
        loading.used.update(i for i in ids)
        if parent is None:
            root = seq.build([[i, o] for i, o in items], ws.put)
        else:
            root = respliced(ws.revision(parent, operation=False).seq, parent_items, items, ws)
        rev = Revision(parent, created, operation, root, len(ids))
        try:
            oid = ws.put(rev)
        except (EncodingError, InvalidObject) as exc:
            raise InvalidInput(f"revision {shown(record['id'])} cannot be stored: {exc}") from None
        _introduce(graph, oid, rev, parent_items, items)
        mapped[record["id"]] = oid
        if record["id"] != to_hex(oid):
            known = graph.aliases.get(record["id"], oid)
            if known != oid:
                raise InvalidInput(f"revision id {shown(record['id'])} already names another revision here")
            aliases[record["id"]] = oid
    head_oid = mapped.get(head) or _known_revision(graph, head, "head")
    new_tips = {oid for oid in mapped.values() if oid not in parents}
    tips = frozenset(new_tips) if fresh else (graph.tips - parents) | new_tips
    if head_oid not in tips and not fresh:
        tips = tips | {head_oid}
    return graph.with_tips(frozenset(tips or {head_oid})).with_aliases(aliases), head_oid


def _introduce(graph: Graph, oid: ObjectId, rev: Revision, parent_items: list[Item], items: list[Item]) -> None:
    """Note what a loaded revision introduces: its operation's entries and the items its parent lacks."""
    had = set(parent_items)
    # When its parent's lineage is not indexed yet (a store's), this notes nothing: the revision is
    # indexed with that lineage on the first lookup miss.
    graph.record(oid, rev, [(i, o) for i, o in items if o is not None and (i, o) not in had])
