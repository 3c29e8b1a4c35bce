"""Snapshots and deltas of a history's graph: the seed's JSON graph shape, out and in.

Works on a `Graph` and a head revision, the data a `MessageHistory` hands over, so this module never
needs the history class (which imports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import EncodingError, InvalidInput, InvalidObject, UnknownRevision
from ..format import seq
from ..format.objects import Revision
from ..ids import ObjectId, to_hex
from .entry import read_entry
from .graph import Graph, known_revision
from .intake import check_patch, stored_patch
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

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
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
            found = oid if oid is not None else self._ws.index.get(entry_id)
            if found is not None:
                out.setdefault(found)


def _revision_dicts(ws: Workspace, oids: list[ObjectId],
                    entries: dict[ObjectId, None]) -> list[dict[str, Any]]:
    views = _Views(ws)
    seen: set[ObjectId] = set()
    out = []
    for oid in oids:
        rev = ws.revision(oid)
        views.entries(rev.seq, entries, seen)
        for entry_oid in rev.operation_ids():
            entries.setdefault(entry_oid)
        record: dict[str, Any] = {"id": to_hex(oid), "entryIds": list(views.ids(rev.seq))}
        if rev.parent is not None:
            record["parent"] = to_hex(rev.parent)
        record["createdAt"] = rev.created_at
        if rev.operation is not None:
            record["operation"] = _seed_operation(ws, rev.operation)
        out.append(record)
    return out


def snapshot_of(graph: Graph, head: ObjectId) -> dict[str, Any]:
    """`{entries, revisions, head}` of every revision in `graph` (parents first) and the entries they use."""
    ws = graph.workspace
    entries: dict[ObjectId, None] = {}
    records = _revision_dicts(ws, graph.revisions(), entries)
    return {"entries": [_entry_dict(ws, o) for o in entries], "revisions": records, "head": to_hex(head)}


def _known_revision(ws: Workspace, text: Any, what: str) -> ObjectId:
    oid = known_revision(ws, text)
    if oid is None:
        raise UnknownRevision(f"{what} {text!r} is not a revision of this history")
    return oid


def _changed_items(ws: Workspace, rev: Revision) -> set[str]:
    """Ids in the leaves of `rev`'s tree that its parent's tree lacks (a superset of what it added)."""
    parent = [ws.revision(rev.parent).seq] if rev.parent is not None else []
    changed = seq.diff([rev.seq], parent, ws.node)
    return {entry_id for leaf in changed.a_leaves for entry_id, _ in leaf.items}


def delta_of(graph: Graph, head: ObjectId, base: str | None) -> dict[str, Any]:
    """What `head` reaches that `base` does not, in the snapshot shape plus `base`."""
    ws = graph.workspace
    head_chain = list(graph.chain(head))
    base_chain: list[ObjectId] = []
    if base is None:
        delta = head_chain
    else:
        base_oid = _known_revision(ws, base, "base revision")
        base_chain = list(graph.chain(base_oid))
        if base_oid in head_chain:
            delta = head_chain[: head_chain.index(base_oid)]
        else:
            members = set(base_chain)
            cut = next((n for n, oid in enumerate(head_chain) if oid in members), len(head_chain))
            delta = head_chain[:cut]
    wanted: set[str] = set()
    for oid in delta:
        wanted |= _changed_items(ws, ws.revision(oid))
    for oid in base_chain:
        wanted -= _changed_items(ws, ws.revision(oid))
        if not wanted:
            break
    entries: dict[ObjectId, None] = {}
    records = _revision_dicts(ws, delta, entries)
    in_views = {entry_id for record in records for entry_id in record["entryIds"]}
    listed = [o for o in entries if ws.entry(o).id in wanted and ws.entry(o).id in in_views]
    return {"entries": [_entry_dict(ws, o) for o in listed], "revisions": records,
            "head": to_hex(head), "base": base}


def _revision_order(records: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    by_id = {}
    for record in records:
        if not isinstance(record, Mapping) or not isinstance(record.get("id"), str):
            raise InvalidInput("each revision must be a dict with a string 'id'")
        by_id[record["id"]] = record
    ordered: list[Mapping[str, Any]] = []
    done: set[str] = set()
    for record in records:
        stack = []
        current: Mapping[str, Any] | None = record
        while current is not None and current["id"] not in done:
            stack.append(current)
            parent = current.get("parent")
            current = by_id.get(parent) if isinstance(parent, str) else None
            if current is not None and current in stack:
                raise InvalidInput(f"revision {current['id']!r} is its own ancestor")
        for item in reversed(stack):
            done.add(item["id"])
            ordered.append(item)
    return ordered


def _stored_operation(graph: Graph, op: Any) -> dict[str, Any] | None:
    if op is None:
        return None
    if not isinstance(op, Mapping) or op.get("type") not in ("append", "edit", "fork", "view"):
        raise InvalidInput(f"unknown revision operation {op!r}")
    kind = op["type"]
    if kind == "fork":
        return {"type": "fork"}
    if kind in ("append", "view"):
        ids = op.get("entryIds")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidInput(f"{kind} operation needs 'entryIds', a list of entry ids")
        if kind == "view":
            return {"type": "view", "entryIds": list(ids)}
        oids = []
        for entry_id in ids:
            oid = graph.lookup(entry_id)
            if oid is None:
                raise InvalidInput(f"append operation names entry {entry_id!r}, which the snapshot lacks")
            oids.append(oid)
        return {"type": "append", "entryIds": list(ids), "entries": oids}
    patches = op.get("patches")
    if not isinstance(patches, list):
        raise InvalidInput("edit operation needs 'patches', a list")
    for patch in patches:
        check_patch(patch)
    return {"type": "edit", "patches": [stored_patch(p, graph.make_entries) for p in patches]}


def _tree_for(graph: Graph, parent: ObjectId | None, ids: list[str], views: _Views) -> seq.Spine:
    """The tree of `ids`: the parent's tree extended when `ids` only adds to it, else built whole."""
    ws = graph.workspace
    if parent is not None:
        base = ws.revision(parent).seq
        before = views.ids(base)
        if len(ids) >= len(before) and ids[: len(before)] == before:
            added = [[i, graph.lookup(i)] for i in ids[len(before):]]
            return seq.append(base, added, ws.put)
    return seq.build([[i, graph.lookup(i)] for i in ids], ws.put)


def load_into(graph: Graph, data: Mapping[str, Any], *, fresh: bool) -> tuple[Graph, ObjectId]:
    """Add a snapshot's or delta's graph to `graph`'s workspace: the graph that knows it, and its head.

    `fresh` (a snapshot loaded into an empty history) keeps only the loaded graph's tips.
    """
    if not isinstance(data, Mapping):
        raise InvalidInput("a snapshot is a dict with 'entries', 'revisions' and 'head'")
    entries, records, head = data.get("entries"), data.get("revisions"), data.get("head")
    if not isinstance(entries, list) or not isinstance(records, list) or not isinstance(head, str):
        raise InvalidInput("a snapshot needs 'entries' (list), 'revisions' (list) and 'head' (string)")
    ws = graph.workspace
    graph.make_entries(entries)
    mapped: dict[str, ObjectId] = {}
    parents: set[ObjectId] = set()
    views = _Views(ws)
    for record in _revision_order(records):
        ids = record.get("entryIds")
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidInput(f"revision {record['id']!r} needs 'entryIds', a list of entry ids")
        created = record.get("createdAt")
        if isinstance(created, float) and created.is_integer():
            created = int(created)
        if not isinstance(created, int) or isinstance(created, bool) or created < 0:
            raise InvalidInput(f"revision {record['id']!r} needs 'createdAt' in milliseconds since the epoch")
        parent_text = record.get("parent")
        parent: ObjectId | None = None
        if parent_text is not None:
            parent = mapped.get(parent_text) if isinstance(parent_text, str) else None
            if parent is None:
                parent = _known_revision(ws, parent_text, f"parent of revision {record['id']!r}")
            parents.add(parent)
        root = _tree_for(graph, parent, ids, views)
        operation = _stored_operation(graph, record.get("operation"))
        try:
            mapped[record["id"]] = ws.put(Revision(parent, created, operation, root, len(ids)))
        except (EncodingError, InvalidObject) as exc:
            raise InvalidInput(f"revision {record['id']!r} cannot be stored: {exc}") from None
    head_oid = mapped.get(head) or _known_revision(ws, head, "head")
    new_tips = {oid for oid in mapped.values() if oid not in parents}
    tips = frozenset(new_tips) if fresh else (graph.tips - parents) | new_tips
    if head_oid not in tips and not fresh:
        tips = tips | {head_oid}
    return graph.with_tips(frozenset(tips or {head_oid})), head_oid
