"""The revision graph a history knows: a shared workspace, the tips of its lineages, entry lookup.

Package-internal: the interface between `MessageHistory` (a `Graph` and a head revision) and the
history package's other modules (`snapshot` reads and extends a `Graph` without knowing the history
class). Ids here are raw `ObjectId`s; the history converts them to hex for its users.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import DuplicateEntryId, InvalidInput, InvalidObject, MissingObject
from ..format import seq
from ..ids import ObjectId, from_hex
from .intake import intake_entry
from .workspace import Workspace

__all__ = ["Graph", "known_revision"]


def known_revision(ws: Workspace, text: Any) -> ObjectId | None:
    """The id spelled by hex `text` if it names a revision `ws` can read, else None."""
    try:
        oid = from_hex(text)
        ws.revision(oid)
    except (InvalidInput, MissingObject, InvalidObject):
        return None
    return oid


class Graph:
    """The revisions reachable from `tips` through `workspace`, with entry-id lookup over them.

    Immutable: histories derived from one another share the workspace, and each has its own tips.
    """

    __slots__ = ("tips", "workspace")

    def __init__(self, workspace: Workspace, tips: frozenset[ObjectId]) -> None:
        self.workspace = workspace
        self.tips = tips

    def with_tips(self, tips: frozenset[ObjectId]) -> Graph:
        """The same workspace with other tips."""
        return Graph(self.workspace, tips)

    # -- lineage -------------------------------------------------------------------------------
    def chain(self, start: ObjectId) -> Iterator[ObjectId]:
        """`start` and its ancestors, newest first."""
        oid: ObjectId | None = start
        while oid is not None:
            yield oid
            oid = self.workspace.parent(oid)

    def since_common(self, head: ObjectId, other: Graph, other_head: ObjectId) -> list[ObjectId]:
        """`head` and its ancestors down to (not including) the newest revision `other_head`'s lineage
        shares with it, newest first: both chains are walked in turn, so only their ends are read."""
        mine_chain, theirs_chain = self.chain(head), other.chain(other_head)
        mine: list[ObjectId] = []
        mine_seen: set[ObjectId] = set()
        theirs_seen: set[ObjectId] = set()
        mine_done = theirs_done = False
        while not (mine_done and theirs_done):
            if not mine_done:
                oid = next(mine_chain, None)
                if oid is None:
                    mine_done = True
                elif oid in theirs_seen:
                    return mine
                else:
                    mine.append(oid)
                    mine_seen.add(oid)
            if not theirs_done:
                oid = next(theirs_chain, None)
                if oid is None:
                    theirs_done = True
                elif oid in mine_seen:
                    return mine[:mine.index(oid)]
                else:
                    theirs_seen.add(oid)
        return mine

    def revisions(self) -> list[ObjectId]:
        """Every revision reachable from the tips, parents before children."""
        seen: set[ObjectId] = set()
        out: list[ObjectId] = []
        for tip in sorted(self.tips):
            chain = []
            for oid in self.chain(tip):
                if oid in seen:
                    break
                seen.add(oid)
                chain.append(oid)
            out.extend(reversed(chain))
        return out

    # -- entries -------------------------------------------------------------------------------
    def lookup(self, entry_id: str) -> ObjectId | None:
        """The oid of the entry with id `entry_id` in this graph, or None."""
        index = self.workspace.index
        oid = index.get(entry_id)
        if oid is None:
            self._index_graph()
            oid = index.get(entry_id)
        return oid

    def make_entries(self, inputs: Iterable[Any], *, kind: str | None = None,
                     sources: list[str] | None = None) -> list[tuple[str, ObjectId]]:
        """Store entry inputs as objects, refusing an explicit id that names different content."""
        ws = self.workspace
        made: list[tuple[str, ObjectId]] = []
        seen: dict[str, ObjectId] = {}
        for value in inputs:
            entry, encoded, blobs, explicit = intake_entry(value, kind=kind, sources=sources)
            oid = encoded[0]
            if explicit:
                known = seen.get(entry.id) or self.lookup(entry.id)
                if known is not None and known != oid:
                    raise DuplicateEntryId(
                        f"entry id {entry.id!r} already names a different entry in this history; "
                        "use a new id, or leave the id out to have one generated")
            seen[entry.id] = oid
            made.append((entry.id, oid))
            for blob in blobs:
                ws.put_encoded(*blob)
            ws.put_encoded(*encoded)
        for entry_id, oid in made:
            ws.index.setdefault(entry_id, oid)
        return made

    def _index_graph(self) -> None:
        """Read every tree and operation of the graph into the workspace's id index."""
        ws = self.workspace
        # A revision is marked indexed only after its ancestors are, so each walk stops at the first
        # indexed one: a miss costs the revisions made since the last miss, not the whole lineage
        # (which made n appends with explicit ids cost O(n^2)).
        todo: list[ObjectId] = []
        for tip in sorted(self.tips):
            chain = []
            for oid in self.chain(tip):
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
                self.workspace.index.setdefault(entry_id, entry_oid)
        for oid, _ in seq.subtrees(spine):
            self._index_tree(oid)

    def _index_tree(self, root: ObjectId) -> None:
        ws = self.workspace
        if root in ws.indexed:
            return
        node = ws.node(root)
        if node.level > 0:
            for child, _ in node.items:
                self._index_tree(ObjectId(child))
            ws.indexed.add(root)
