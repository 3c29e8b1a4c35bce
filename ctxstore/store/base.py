"""The object store protocol: what a history reads and writes objects through."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Protocol, runtime_checkable

from ..codec import ObjectId

__all__ = ["ObjectSource", "ObjectStore"]


@runtime_checkable
class ObjectSource(Protocol):
    """Read access to objects by id: all that a history needs to read."""

    def get(self, oid: ObjectId) -> bytes:
        """The canonical (uncompressed) bytes of an object; `MissingObject` if absent."""
        ...

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        ...


@runtime_checkable
class ObjectStore(ObjectSource, Protocol):
    """A content-addressed object database: ids are blake3 digests of the canonical bytes."""

    def put_many(self, objects: Iterable[tuple[ObjectId, bytes]]) -> int:
        """Store objects (id, canonical bytes) in one batch; returns how many were new."""
        ...

    def delete_many(self, oids: Iterable[ObjectId]) -> int:
        """Delete objects; returns how many were there."""
        ...

    def __iter__(self) -> Iterator[ObjectId]:
        """Every object id held, in no particular order."""
        ...

    def __len__(self) -> int:
        """How many objects are held."""
        ...
