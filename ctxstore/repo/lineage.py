"""Revisions of one store read as lineages: stored objects parsed with damage named, parents cached.

Revisions are immutable, so a parent once read never goes stale: after the first walk, fast-forward
checks and ``~N`` lookups cost dictionary lookups.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..errors import CtxStoreError, DamagedData, UnknownRevision
from ..format.objects import Object, Revision, SeqNode, parse_object
from ..history.graph import split_at_common
from ..history.message_history import MessageHistory
from ..ids import ObjectId, from_hex, to_hex
from ..store.base import TransactionalStore, read_revision_header
from .reports import RevisionInfo

__all__ = ["KNOWN_WALK", "Lineage", "read_object", "revision_info"]

KNOWN_WALK = 256
"""How far `Lineage.known_descent` walks from pending objects and cached parents before giving up."""


def read_object(oid: ObjectId, data: bytes) -> Object:
    """Parse stored bytes (checked when they were stored); bytes that no longer parse are `DamagedData`."""
    try:
        return parse_object(data, trusted=True)
    except CtxStoreError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        # trusted parsing skips the checks that would name the fault; the stored bytes changed under us
        raise DamagedData(f"object {to_hex(oid)} no longer parses ({exc}); run `ctxstore fsck`") from None


def revision_info(oid: ObjectId, rev: Revision) -> RevisionInfo:
    """The public view of a stored revision: its fields, every object id in hex."""
    return RevisionInfo(id=to_hex(oid), parent=None if rev.parent is None else to_hex(rev.parent),
                        created_at=rev.created_at, operation=_hex_ids(rev.operation), size=rev.size)


def _hex_ids(value: Any) -> Any:
    """A recorded operation with its object ids (the only bytes an operation holds) spelled in hex."""
    if isinstance(value, bytes):
        return to_hex(value)
    if isinstance(value, dict):
        return {k: _hex_ids(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_hex_ids(v) for v in value]
    return value


class Lineage:
    """The revisions of one store, read lazily and parsed with damage named; parents are cached."""

    def __init__(self, store: TransactionalStore) -> None:
        self._store = store
        self._parents: dict[ObjectId, ObjectId | None] = {}

    def object(self, oid: ObjectId) -> Object:
        """The stored object `oid` (`MissingObject` if absent, `DamagedData` if it no longer parses)."""
        return read_object(oid, self._store.get(oid))

    def revision(self, oid: ObjectId) -> Revision:
        """The stored revision `oid`; another kind of object is an `UnknownRevision`."""
        obj = self.object(oid)
        if not isinstance(obj, Revision):
            raise UnknownRevision(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a revision")
        self._parents[oid] = obj.parent
        return obj

    def node(self, oid: ObjectId) -> SeqNode:
        """The stored sequence-tree node `oid`; another kind of object where a node belongs is damage."""
        obj = self.object(oid)
        if not isinstance(obj, SeqNode):
            raise DamagedData(f"object {to_hex(oid)} should be a seq node but is a "
                              f"{type(obj).__name__.lower()}; run `ctxstore fsck`")
        return obj

    def note(self, oid: ObjectId, parent: ObjectId | None) -> None:
        """Remember a revision's parent (a history that made the revision knows it without a read)."""
        self._parents.setdefault(oid, parent)

    def parent(self, oid: ObjectId, history: MessageHistory | None = None) -> ObjectId | None:
        """The parent of revision `oid`, read from `history`'s workspace when given, else the store."""
        if oid in self._parents:
            return self._parents[oid]
        if history is not None:
            parent = history.workspace.parent(oid)
        else:
            try:
                parent = read_revision_header(self._store, oid)[0]  # no rebuild of a delta revision
            except CtxStoreError:
                self.revision(oid)  # names what the object is instead
                raise
            except (ValueError, TypeError, KeyError, IndexError):
                raise DamagedData(f"revision {to_hex(oid)} no longer parses; run `ctxstore fsck`") from None
        self._parents[oid] = parent
        return parent

    def known_descent(self, head: ObjectId, ancestor: ObjectId, pending: Mapping[ObjectId, bytes]) -> bool:
        """Whether `ancestor` is in head's lineage, judged only from pending objects and cached parents.

        False means "not known", not "no": the caller then walks the lineage with `descends`.
        """
        oid: ObjectId | None = head
        for _step in range(KNOWN_WALK):
            if oid is None:
                return False
            if oid == ancestor:
                return True
            if oid in self._parents:
                oid = self._parents[oid]
                continue
            data = pending.get(oid)
            if data is None:
                return False
            rev = read_object(oid, data)
            if not isinstance(rev, Revision):
                return False
            self._parents[oid] = rev.parent
            oid = rev.parent
        return False

    def descends(self, history: MessageHistory, ancestor: ObjectId) -> bool:
        """Whether `ancestor` is in the history's lineage (the history's head included).

        It is exactly when the newest revision the two chains share is `ancestor` itself, so a history
        that does not descend (the ref moved on elsewhere) costs the two ends back to their common
        revision, not the whole lineage.
        """
        _mine, _theirs, common = split_at_common(self._chain(from_hex(history.revision_id), history),
                                                 self._chain(ancestor))
        return common == ancestor

    def _chain(self, oid: ObjectId | None, history: MessageHistory | None = None) -> Iterator[ObjectId]:
        while oid is not None:
            yield oid
            oid = self.parent(oid, history)

    def base_of(self, history: MessageHistory) -> ObjectId | None:
        """The newest revision of the lineage that the store already holds: where the history was loaded."""
        made = {oid for oid, _ in history.workspace.pending()}
        oid: ObjectId | None = from_hex(history.revision_id)
        while oid is not None:
            if oid not in made and self._store.has(oid):
                return oid
            oid = self.parent(oid, history)
        return None
