"""Where a store may keep its large blobs: a bucket of content-addressed keys, and its in-memory twin.

A `BlobBucket` holds opaque bytes under text keys. The PostgreSQL store keeps the stored value (codec
byte and payload, as in a record) of each large blob object under ``<repository>/<hex id>``
(`blob_key`), writes a key only when it is absent (content-addressed, so what is there is already
right) and only before the SQL transaction that makes the object reachable commits, and deletes it only
after the SQL commit that deleted the object (docs/storage.md, *PostgreSQL and S3*). `ctxstore.store.s3`
implements it over an S3-compatible service; `MemoryBucket` here is the same thing in a dict, for tests.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from ..errors import InvalidInput, MissingObject, StoreError
from ..ids import ObjectId, to_hex

__all__ = ["BlobBucket", "MemoryBucket", "blob_key", "check_key"]


@runtime_checkable
class BlobBucket(Protocol):
    """Bytes under text keys, written once: what a store needs of an object bucket."""

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store `data` under `key` unless the key is there; returns whether this call wrote it."""
        ...

    def get(self, key: str) -> bytes:
        """The bytes under `key`; `MissingObject` if there are none."""
        ...

    def delete(self, key: str) -> None:
        """Remove `key` (nothing happens if it is absent)."""
        ...

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key that starts with `prefix`, in no particular order."""
        ...


def blob_key(repository: str, oid: ObjectId) -> str:
    """The key of an object's stored value in a repository's part of a bucket: ``<repository>/<hex id>``."""
    return f"{repository}/{to_hex(oid)}"


def check_key(key: object) -> str:
    """A bucket key: non-empty text without NUL, at most 900 UTF-8 bytes (S3 allows 1024 with its prefix)."""
    if not isinstance(key, str) or not key or "\x00" in key or len(key.encode("utf-8", "replace")) > 900:
        raise InvalidInput(f"not a bucket key: {key!r}")
    return key


class MemoryBucket:
    """A `BlobBucket` in a dict, safe across threads; it counts its writes, for tests."""

    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.writes = 0
        """How many `put_if_absent` calls wrote something."""

    def _check(self) -> None:
        if self._closed:
            raise StoreError("the memory bucket is closed")

    def put_if_absent(self, key: str, data: bytes) -> bool:
        check_key(key)
        with self._lock:
            self._check()
            if key in self._data:
                return False
            self._data[key] = bytes(data)
            self.writes += 1
            return True

    def get(self, key: str) -> bytes:
        check_key(key)
        with self._lock:
            self._check()
            try:
                return self._data[key]
            except KeyError:
                raise MissingObject(f"no key {key} in the bucket") from None

    def delete(self, key: str) -> None:
        check_key(key)
        with self._lock:
            self._check()
            self._data.pop(key, None)

    def keys(self, prefix: str) -> Iterator[str]:
        with self._lock:
            self._check()
            found = [k for k in self._data if k.startswith(prefix)]
        return iter(found)

    def close(self) -> None:
        with self._lock:
            self._closed = True
