"""The revision graph a history knows: a shared workspace, the tips of its lineages, entry lookup.

Package-internal: the interface between `MessageHistory` (a `Graph` and a head revision) and the
history package's other modules (`snapshot` reads and extends a `Graph` without knowing the history
class). Ids here are raw `ObjectId`s; the history converts them to hex for its users.

A history knows only its own graph: the revisions its tips reach, and the entries those revisions
introduce. An entry or revision made by a sibling branch or a descendant, though it sits in the same
shared workspace, is unknown here (as in the reference, where each history holds its own maps). The
workspace records which revision introduced each entry id (`Workspace.introduce`); a lookup keeps the
introductions whose revision this graph contains, an O(log n) ancestry check per tip.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..errors import DamagedData, DuplicateEntryId, InvalidInput, InvalidObject, MissingObject, shown
from ..format import seq
from ..format.objects import Revision
from ..ids import ObjectId, from_hex, to_hex
from .intake import intake_entry, intake_turn
from .workspace import Workspace

__all__ = ["Graph", "readable_revision"]

_NO_ALIASES: Mapping[str, ObjectId] = {}
_NO_NAMES: Mapping[ObjectId, str] = {}


def readable_revision(ws: Workspace, text: Any) -> ObjectId | None:
    """The id spelled by hex `text` if it names a revision `ws` can read, else None."""
    try:
        oid = from_hex(text)
        ws.revision(oid, operation=False)
    except DamagedData:
        raise  # the object is there but its stored bytes are damaged: say so, do not call it unknown
    except (InvalidInput, MissingObject, InvalidObject):
        return None
    return oid


def split_at_common(mine: Iterator[ObjectId],
                    theirs: Iterator[ObjectId]) -> tuple[list[ObjectId], list[ObjectId], ObjectId | None]:
    """Two revision chains (each newest first) cut where they meet: what only the first holds, what only
    the second holds, and the newest revision they share (None if they never meet). The chains are read
    in turn, so only their ends back to that revision are read, however long the shared lineage is."""
    a: list[ObjectId] = []
    b: list[ObjectId] = []
    a_seen: set[ObjectId] = set()
    b_seen: set[ObjectId] = set()
    a_done = b_done = False
    while not (a_done and b_done):
        if not a_done:
            oid = next(mine, None)
            if oid is None:
                a_done = True
            elif oid in b_seen:
                return a, b[:b.index(oid)], oid
            else:
                a.append(oid)
                a_seen.add(oid)
        if not b_done:
            oid = next(theirs, None)
            if oid is None:
                b_done = True
            elif oid in a_seen:
                return a[:a.index(oid)], b, oid
            else:
                b.append(oid)
                b_seen.add(oid)
    return a, b, None


class Graph:
    """The revisions reachable from `tips` through `workspace`, with entry-id lookup over them.

    Immutable: histories derived from one another share the workspace, and each has its own tips.
    `aliases` maps the foreign revision ids a loaded snapshot or delta used (the TypeScript library's
    `"3-k2j4h5q"`) to the revisions rebuilt from them; `names` is the reverse, used when writing ids out.
    """

    __slots__ = ("aliases", "names", "tips", "workspace")

    def __init__(self, workspace: Workspace, tips: frozenset[ObjectId],
                 aliases: Mapping[str, ObjectId] = _NO_ALIASES, names: Mapping[ObjectId, str] = _NO_NAMES) -> None:
        self.workspace = workspace
        self.tips = tips
        self.aliases = aliases
        self.names = names

    def with_tips(self, tips: frozenset[ObjectId]) -> Graph:
        """The same workspace and aliases with other tips."""
        return Graph(self.workspace, tips, self.aliases, self.names)

    def with_aliases(self, aliases: Mapping[str, ObjectId]) -> Graph:
        """This graph with more foreign revision ids (copied: graphs never share a mutable map)."""
        if not aliases:
            return self
        merged = {**self.aliases, **aliases}
        names = {**self.names, **{oid: name for name, oid in aliases.items()}}
        return Graph(self.workspace, self.tips, merged, names)

    def name(self, oid: ObjectId) -> str:
        """How revision `oid` is spelled in snapshots and deltas: its foreign id if it was loaded with
        one, else its hex id."""
        return self.names.get(oid) or to_hex(oid)

    def contains(self, revision: ObjectId) -> bool:
        """Whether `revision` is one of this graph's revisions (a tip or an ancestor of one)."""
        if revision in self.tips:
            return True
        ws = self.workspace
        return any(ws.is_ancestor(revision, tip) for tip in self.tips)

    def known_revision(self, text: Any) -> ObjectId | None:
        """The revision of this graph spelled `text` (a hex id, or a foreign id it was loaded with)."""
        if not isinstance(text, str):
            return None
        oid = self.aliases.get(text)
        if oid is not None:
            return oid
        found = readable_revision(self.workspace, text)
        return found if found is not None and self.contains(found) else None

    # -- lineage -------------------------------------------------------------------------------
    def chain(self, start: ObjectId) -> Iterator[ObjectId]:
        """`start` and its ancestors, newest first."""
        oid: ObjectId | None = start
        while oid is not None:
            yield oid
            oid = self.workspace.parent(oid)

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
        found = self._find(entry_id)
        if found is None and self._index_graph():
            found = self._find(entry_id)
        return found

    def _find(self, entry_id: str) -> ObjectId | None:
        for revision, oid in self.workspace.introductions(entry_id):
            if self.contains(revision):
                return oid
        return None

    def make_entries(self, inputs: Iterable[Any], *, kind: str | None = None, sources: list[str] | None = None,
                     made: dict[str, ObjectId] | None = None) -> list[tuple[str, ObjectId]]:
        """Store entry inputs as objects, refusing an explicit id that names different content.

        `made` holds the entries made earlier in the same operation (checked too, and extended): they
        are in no revision yet, so the graph cannot find them.
        """
        ws = self.workspace
        out: list[tuple[str, ObjectId]] = []
        seen: dict[str, ObjectId] = {} if made is None else made
        turns = sources is None and kind in (None, "turn")
        for value in inputs:
            turn = intake_turn(value) if turns else None
            if turn is not None:
                # A chat turn (most of an import): a new id, so nothing to check, and no blobs.
                entry_id, oid, data, message_at = turn
                seen[entry_id] = oid
                out.append((entry_id, oid))
                ws.put_made(oid, data, message_at)
                continue
            entry, encoded, blobs, explicit = intake_entry(value, kind=kind, sources=sources)
            oid = encoded[0]
            if explicit:
                known = seen.get(entry.id) or self.lookup(entry.id)
                if known is not None and known != oid:
                    raise DuplicateEntryId(
                        f"entry id {shown(entry.id)} already names a different entry in this history; "
                        "use a new id, or leave the id out to have one generated")
            seen[entry.id] = oid
            out.append((entry.id, oid))
            for blob in blobs:
                ws.put_encoded(*blob)
            ws.put_encoded(*encoded)
        return out

    def record(self, oid: ObjectId, rev: Revision, pinned: Iterable[tuple[str, ObjectId]] = ()) -> None:
        """Note the entries new revision `oid` introduces: its operation's, and `pinned` (items its tree
        took from elsewhere in the graph, as a view revision does). Only when its parent's are noted: a
        revision made on an unread lineage is indexed with that lineage, on the first lookup miss."""
        ws = self.workspace
        if oid in ws.indexed or (rev.parent is not None and rev.parent not in ws.indexed):
            return
        ws.introduce_all(oid, _operation_entries(ws, rev))
        for entry_id, entry_oid in pinned:
            ws.introduce(oid, entry_id, entry_oid)
        ws.indexed.add(oid)

    def _index_graph(self) -> bool:
        """Note the entries of every revision of the graph not yet indexed; whether there were any."""
        ws = self.workspace
        # A revision is indexed only after its ancestors are, so each walk stops at the first indexed
        # one: a miss costs the revisions made since the last miss, not the whole lineage.
        todo: list[ObjectId] = []
        for tip in sorted(self.tips):
            chain = []
            for oid in self.chain(tip):
                if oid in ws.indexed:
                    break
                chain.append(oid)
            todo.extend(reversed(chain))
        for rev_oid in todo:
            if rev_oid not in ws.indexed:
                self._index_revision(rev_oid)
        return bool(todo)

    def _index_revision(self, oid: ObjectId) -> None:
        ws = self.workspace
        for entry_id, entry_oid in self._introductions(oid):
            ws.introduce(oid, entry_id, entry_oid)
        ws.indexed.add(oid)

    def introduced(self, revisions: Iterable[ObjectId]) -> dict[str, set[ObjectId]]:
        """The entries (id -> oids) that `revisions` introduce, read from them alone, indexing nothing."""
        out: dict[str, set[ObjectId]] = {}
        for oid in revisions:
            for entry_id, entry_oid in self._introductions(oid):
                out.setdefault(entry_id, set()).add(entry_oid)
        return out

    def _introductions(self, oid: ObjectId) -> Iterator[tuple[str, ObjectId]]:
        ws = self.workspace
        rev = ws.revision(oid, keep=False)
        yield from _operation_entries(ws, rev)
        # Items its tree holds that its parent's does not (leaves that differ: a superset); those it
        # shares are introduced by an ancestor already, and `introduce` drops them again.
        parent = [ws.revision(rev.parent, keep=False, operation=False).seq] if rev.parent is not None else []
        for leaf in seq.diff([rev.seq], parent, ws.node).a_leaves:
            for entry_id, entry_oid in leaf.items:
                if entry_oid is not None:
                    yield entry_id, ObjectId(entry_oid)


def _operation_entries(ws: Workspace, rev: Revision) -> Iterator[tuple[str, ObjectId]]:
    op = rev.operation
    if op is None:
        return
    if op["type"] == "append":
        # An append names its entries' ids next to their oids: no entry needs reading.
        yield from zip(op["entryIds"], op["entries"], strict=True)
        return
    for entry_oid in rev.operation_ids():
        yield ws.entry(entry_oid).id, entry_oid
