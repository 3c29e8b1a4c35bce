"""Staging a received pack: read it whole, verified, into a `StagedPack`, and check what it connects to.

A pack's trailer comes last, so nothing read from it may be used until the whole pack has been read
without error. `verify_pack` reads it into a `StagedPack` (in memory, spilling to a temporary file when
large), keeping each object's references, so the receiver can check with `missing_references` that the
refs it is about to move reach only objects the pack or the store holds, and then write everything in
one transaction (`ctxstore.repo.receive`; this layer writes into no store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from ..errors import MissingObject
from ..format.codec import MAX_OBJECT_SIZE
from ..format.objects import Object, references
from ..ids import ObjectId
from ..store.base import ObjectSource
from .stream import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_TOTAL_SIZE, PackSource, read_parsed

if TYPE_CHECKING:
    import tempfile

__all__ = ["StagedPack", "missing_references", "verify_pack"]


class StagedPack:
    """A fully verified pack, held aside (in memory, spilling to a temporary file) until it is written.

    Iterating yields (id, canonical bytes) in pack order; `links` maps each id to the ids it references.
    """

    def __init__(self, spool_size: int) -> None:
        import tempfile  # here, not at start-up: most commands never receive a pack

        self._file: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=spool_size)  # noqa: SIM115
        self._spans: list[tuple[ObjectId, int, int]] = []
        self._where: dict[bytes, int] = {}
        self.links: dict[ObjectId, list[ObjectId]] = {}

    def add(self, oid: ObjectId, data: bytes, links: list[ObjectId]) -> None:
        """Stage one object read from the pack (its id, canonical bytes and the ids it references)."""
        start = self._file.seek(0, 2)  # `get` may have moved the position
        self._file.write(data)
        self._where[oid] = len(self._spans)
        self._spans.append((oid, start, len(data)))
        self.links[oid] = links

    def get(self, oid: bytes) -> bytes | None:
        """The bytes of a staged object, or None if the pack has no such object."""
        at = self._where.get(oid)
        if at is None:
            return None
        _, start, size = self._spans[at]
        self._file.seek(start)
        return self._file.read(size)

    def __len__(self) -> int:
        return len(self._spans)

    def __iter__(self) -> Iterator[tuple[ObjectId, bytes]]:
        for oid, start, size in self._spans:
            self._file.seek(start)
            yield oid, self._file.read(size)

    @property
    def ids(self) -> list[ObjectId]:
        """The objects' ids, in pack order."""
        return [oid for oid, _, _ in self._spans]

    def close(self) -> None:
        """Drop the staged bytes."""
        self._file.close()

    def __enter__(self) -> StagedPack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verify_pack(source: PackSource, *, max_object_size: int = MAX_OBJECT_SIZE,
                max_total_size: int = DEFAULT_MAX_TOTAL_SIZE, max_objects: int = DEFAULT_MAX_OBJECTS,
                spool_size: int = 64 << 20, base: ObjectSource | None = None) -> StagedPack:
    """Read and check a whole pack, trailer included, returning it staged; `BadPack` if anything is wrong.

    Objects are parsed (their canonical form is checked as they are read, their shape here) and their
    references kept, so the caller can check connectivity with
    ``missing_references(staged.links, heads, store)`` before writing anything. `base` is the receiving
    repository: rebuilding a revision may read its parent's tree from there.
    """
    staged = StagedPack(spool_size)

    def lookup(oid: ObjectId) -> bytes | None:
        data = staged.get(oid)
        if data is None and base is not None:
            try:
                data = base.get(oid)  # one read, not a lookup then a read
            except MissingObject:
                return None
        return data

    try:
        for oid, data, obj in read_parsed(source, max_object_size=max_object_size,
                                          max_total_size=max_total_size, max_objects=max_objects,
                                          lookup=lookup):
            staged.add(oid, data, references(obj))
    except BaseException:
        staged.close()
        raise
    return staged


def missing_references(objects: Mapping[ObjectId, Object] | Mapping[ObjectId, list[ObjectId]],
                       heads: Iterable[ObjectId], store: ObjectSource) -> set[ObjectId]:
    """The ids reachable from `heads` that are neither in `objects` nor in `store` (empty: complete).

    `objects` maps the ids of incoming objects to the parsed objects or to their reference lists (as
    `StagedPack.links` does). The walk follows references through incoming objects only: an object the
    store already holds is taken to come with everything it reaches, as the store keeps that invariant.
    """
    outside: list[ObjectId] = []
    seen: set[ObjectId] = set()
    stack = [ObjectId(h) for h in heads]
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        item = objects.get(oid)
        if item is None:
            outside.append(oid)  # the walk stops here: held objects come with what they reach
            continue
        targets = item if isinstance(item, list) else references(item)
        stack.extend(t for t in targets if t not in seen)
    # One lookup for all of them where the store has one (a database server's: one round trip, not one
    # per object, while a receiving transaction holds the repository's writer lock).
    has_many: Callable[[list[ObjectId]], set[ObjectId]] | None = getattr(store, "has_many", None)
    if has_many is not None and len(outside) > 1:
        held = has_many(outside)
        return {oid for oid in outside if oid not in held}
    return {oid for oid in outside if not store.has(oid)}
