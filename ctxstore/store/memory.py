"""An object store in a dict: the in-memory twin of the LMDB store."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from ..codec import ObjectId, to_hex
from ..errors import MissingObject

__all__ = ["MemoryStore"]


class MemoryStore:
    """Objects held in memory, keyed by id. Not shared between processes."""

    def __init__(self) -> None:
        self._objects: dict[ObjectId, bytes] = {}

    def get(self, oid: ObjectId) -> bytes:
        try:
            return self._objects[oid]
        except KeyError:
            raise MissingObject(f"object {to_hex(oid)} is not in the store") from None

    def has(self, oid: ObjectId) -> bool:
        return oid in self._objects

    def put(self, oid: ObjectId, data: bytes) -> bool:
        """Store one object; returns whether it was new."""
        if oid in self._objects:
            return False
        self._objects[oid] = data
        return True

    def put_many(self, objects: Iterable[tuple[ObjectId, bytes]]) -> int:
        return sum(self.put(oid, data) for oid, data in objects)

    def delete_many(self, oids: Iterable[ObjectId]) -> int:
        return sum(self._objects.pop(oid, None) is not None for oid in oids)

    def __iter__(self) -> Iterator[ObjectId]:
        return iter(list(self._objects))

    def __len__(self) -> int:
        return len(self._objects)

    def __contains__(self, oid: object) -> bool:
        return oid in self._objects
