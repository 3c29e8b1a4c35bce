"""An object store in dicts: the in-memory twin of the LMDB store, with the same transactions."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from ..errors import MissingObject, StoreError
from ..format.codec import now_ms as _now_ms
from ..format.objects import revision_header
from ..ids import OID_SIZE, ObjectId, to_hex
from .base import BatchWrites, StoreStats, Transaction, WriteSet, check_oid

__all__ = ["MemoryStore"]


class MemoryStore(BatchWrites):
    """Objects, refs, reflogs and config held in memory. Not shared between processes.

    Transactions are serialized by one lock (readers included), so a reader never sees half of a
    commit. `clock` (ms since the epoch) stamps object write times; tests pass a fake one.
    """

    def __init__(self, *, clock: Callable[[], int] = _now_ms) -> None:
        self._objects: dict[ObjectId, bytes] = {}
        self._times: dict[ObjectId, int] = {}
        self._refs: dict[str, ObjectId] = {}
        self._reflogs: dict[str, list[bytes]] = {}
        self._config: dict[str, bytes] = {}
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False

    # -- transactions --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Transaction]:
        """A transaction; with write=True its writes apply atomically when the block exits normally."""
        self._check_open()
        with self._lock:
            txn = Transaction(_MemorySnapshot(self), write=write)
            try:
                yield txn
                if write:
                    self._apply(txn.pending_writes())
            finally:
                txn.end()

    def _apply(self, w: WriteSet) -> None:
        now = self._clock()
        for oid in w.deleted:
            self._objects.pop(oid, None)
            self._times.pop(oid, None)
        for oid, data in w.objects.items():
            self._objects.setdefault(oid, data)
            self._times[oid] = now
        for name, target in w.refs.items():
            if target is None:
                self._refs.pop(name, None)
            else:
                self._refs[name] = target
        for name in w.reflog_cleared:
            self._reflogs.pop(name, None)
        for name, records in w.reflog_appends.items():
            self._reflogs.setdefault(name, []).extend(records)
        for key, value in w.config.items():
            if value is None:
                self._config.pop(key, None)
            else:
                self._config[key] = value

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("the memory store is closed; create a new one")

    # -- the ObjectStore protocol --------------------------------------------------------------------

    def get(self, oid: ObjectId) -> bytes:
        """The canonical bytes of an object; `MissingObject` if absent."""
        self._check_open()
        check_oid(oid)
        try:
            return self._objects[oid]
        except KeyError:
            raise MissingObject(f"object {to_hex(oid)} is not in the store") from None

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        self._check_open()
        check_oid(oid)
        return oid in self._objects

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int]:
        """A revision's parent and `createdAt`, read from its bytes without decoding its spine
        (`HeaderSource`); `MissingObject` if absent, `InvalidObject` if it is not a revision."""
        return revision_header(self.get(oid))

    def __iter__(self) -> Iterator[ObjectId]:
        self._check_open()
        with self._lock:
            return iter(list(self._objects))

    def __len__(self) -> int:
        self._check_open()
        return len(self._objects)

    def __contains__(self, oid: object) -> bool:
        return type(oid) is bytes and len(oid) == OID_SIZE and self.has(ObjectId(oid))

    # -- the rest of TransactionalStore --------------------------------------------------------------

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        self._check_open()
        check_oid(oid)
        return self._times.get(oid)

    def stored_size(self, oid: ObjectId) -> int:
        """Bytes the object occupies: its canonical size (nothing is compressed in memory)."""
        check_oid(oid)
        return len(self.get(oid))

    def get_many(self, oids: Iterable[ObjectId]) -> list[bytes]:
        """The canonical bytes of objects, in order, read under one hold of the store's lock."""
        self._check_open()
        out: list[bytes] = []
        with self._lock:
            held = self._objects
            for oid in oids:
                data = held.get(check_oid(oid))
                if data is None:
                    raise MissingObject(f"object {to_hex(oid)} is not in the store")
                out.append(data)
        return out

    def stats(self) -> StoreStats:
        """Object count and sizes; in memory, stored and canonical sizes are the same."""
        self._check_open()
        with self._lock:
            total = sum(len(d) for d in self._objects.values())
            return StoreStats(objects=len(self._objects), object_bytes=total, stored_bytes=total,
                              file_bytes=total)

    def close(self) -> None:
        """Drop everything; using the store afterwards raises `StoreError`."""
        with self._lock:
            self._closed = True
            for held in (self._objects, self._times, self._refs, self._reflogs, self._config):
                held.clear()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _MemorySnapshot:
    """A MemoryStore seen from inside a transaction (which holds the store's lock)."""

    __slots__ = ("_s",)

    def __init__(self, store: MemoryStore) -> None:
        self._s = store

    def get(self, oid: ObjectId) -> bytes | None:
        return self._s._objects.get(oid)

    def has(self, oid: ObjectId) -> bool:
        return oid in self._s._objects

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int] | None:
        data = self._s._objects.get(oid)
        return None if data is None else revision_header(data)

    def written_at(self, oid: ObjectId) -> int | None:
        return self._s._times.get(oid)

    def get_ref(self, name: str) -> ObjectId | None:
        return self._s._refs.get(name)

    def refs(self, prefix: str) -> dict[str, ObjectId]:
        return {n: o for n, o in sorted(self._s._refs.items()) if n.startswith(prefix)}

    def reflog(self, name: str) -> list[bytes]:
        return list(reversed(self._s._reflogs.get(name, [])))

    def reflog_names(self) -> list[str]:
        return sorted(n for n, records in self._s._reflogs.items() if records)

    def get_config(self, key: str) -> bytes | None:
        return self._s._config.get(key)
