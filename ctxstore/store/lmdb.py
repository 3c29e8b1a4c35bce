"""The durable object store: objects, refs, reflogs and config in one LMDB environment.

Three modules make the backend, one concept each: `lmdb_env` opens and grows the environment (one per
process and path, shared by every `LmdbStore` on it, fork-safe); `records` says how each record is keyed
and framed (the table of databases is there and in docs/storage.md); this module is the store itself,
reading and writing records through a transaction of the environment. Only `lmdb_env` and this module
import the third-party `lmdb` package.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import lmdb
import zstandard

from ..errors import EncodingError, MissingObject, NotARepository, StoreError
from ..format import codec
from ..format.codec import now_ms as _now_ms
from ..ids import OID_SIZE, ObjectId, to_hex
from . import records as rec
from .base import BatchWrites, StoreStats, Transaction, WriteSet, check_oid
from .lmdb_env import Environment, acquire, release

__all__ = ["DEFAULT_MAP_SIZE", "DICT_MAX_OBJECT", "LmdbStore"]

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
"""Initial map size for a new store; it grows when full (LMDB's map is address space, not disk)."""
DICT_MAX_OBJECT = 64 * 1024
"""Objects up to this size are compressed with the trained dictionary; larger ones gain nothing from it."""
_ITER_BATCH = 4096


class _Records:
    """The store's records as one LMDB transaction sees them; it is also the `Snapshot` a `Transaction`
    reads through."""

    __slots__ = ("_dbs", "_e", "_t")

    def __init__(self, env: Environment, txn: lmdb.Transaction[bytes]) -> None:
        self._e = env
        self._t = txn
        self._dbs = env.dbs

    # -- objects ------------------------------------------------------------------------------------------

    def record(self, oid: bytes) -> bytes | None:
        """The object's record in ``objs`` (write time, id tail, stored value), or None if not held."""
        record = self._t.get(rec.object_key(oid), db=self._dbs[rec.OBJECTS])
        return record if record is not None and rec.record_holds(record, oid) else None

    def find(self, oid: bytes) -> bytes | None:
        """An object's stored value (codec byte, then the payload), or None if it is not held."""
        record = self.record(oid)
        return None if record is None else rec.record_value(record)

    def get(self, oid: ObjectId) -> bytes | None:
        value = self.find(oid)
        return None if value is None else self.decode(oid, value)

    def has(self, oid: ObjectId) -> bool:
        return self.record(oid) is not None

    def written_at(self, oid: ObjectId) -> int | None:
        record = self.record(oid)
        return None if record is None else rec.record_time(record)

    def count(self) -> int:
        return int(self._t.stat(self._dbs[rec.OBJECTS])["entries"])

    def values(self) -> Iterator[tuple[ObjectId, bytes]]:
        """Every object's id and stored value, in key order."""
        for key, record in self._t.cursor(db=self._dbs[rec.OBJECTS]):
            yield rec.record_id(key, record), rec.record_value(record)

    def ids_after(self, after: bytes, limit: int) -> list[ObjectId]:
        """Up to `limit` object ids whose keys come after key `after` (b"": from the first), in key order."""
        cursor = self._t.cursor(db=self._dbs[rec.OBJECTS])
        found = cursor.set_range(after)
        if found and after and cursor.key() == after:
            found = cursor.next()
        out: list[ObjectId] = []
        while found and len(out) < limit:
            out.append(rec.record_id(cursor.key(), cursor.value()))
            found = cursor.next()
        return out

    def decode(self, oid: ObjectId, value: bytes) -> bytes:
        """An object's canonical bytes from its stored value."""
        used = rec.value_dict_id(value)
        if used is not None and used not in self._e.dicts:
            self.load_dicts()
        try:
            return codec.decompress(value, dictionaries=self._e.dicts)
        except EncodingError as exc:
            raise StoreError(f"stored object {to_hex(oid)} is corrupt ({exc}); run `ctxstore fsck`") from None

    # -- dictionaries -------------------------------------------------------------------------------------

    def load_dicts(self) -> None:
        """Read into the environment's cache every dictionary it does not hold yet."""
        for key, value in self._t.cursor(db=self._dbs[rec.DICTS]):
            dict_id = rec.dict_id(key)
            if dict_id not in self._e.dicts:
                self._e.dicts[dict_id] = zstandard.ZstdCompressionDict(bytes(value))

    def current_dict(self) -> int:
        """The id of the newest dictionary (0: none), loaded into the cache."""
        # Another process may have trained a newer dictionary; one cursor step per commit finds it.
        cursor = self._t.cursor(db=self._dbs[rec.DICTS])
        if not cursor.last():
            return 0
        dict_id = rec.dict_id(cursor.key())
        if dict_id not in self._e.dicts:
            self.load_dicts()
        return dict_id

    # -- refs, reflogs, config ----------------------------------------------------------------------------

    def get_ref(self, name: str) -> ObjectId | None:
        value = self._t.get(rec.name_key(name), db=self._dbs[rec.REFS])
        return None if value is None else ObjectId(bytes(value))

    def refs(self, prefix: str) -> dict[str, ObjectId]:
        start = rec.name_key(prefix)
        cursor = self._t.cursor(db=self._dbs[rec.REFS])
        found: dict[str, ObjectId] = {}
        if cursor.set_range(start):
            for key, value in cursor:
                if not key.startswith(start):
                    break
                found[key.decode()] = ObjectId(bytes(value))
        return found

    def _newest_reflog_key(self, cursor: lmdb.Cursor[bytes], name: str) -> bool:
        """Put `cursor` on the newest record key at or before `name`'s (False: there is none)."""
        return cursor.prev() if cursor.set_range(rec.reflog_end(name)) else cursor.last()

    def reflog(self, name: str) -> list[bytes]:
        prefix = rec.reflog_prefix(name)
        cursor = self._t.cursor(db=self._dbs[rec.REFLOG])
        found = self._newest_reflog_key(cursor, name)
        records: list[bytes] = []
        while found and cursor.key().startswith(prefix):
            if rec.reflog_seq(cursor.key(), prefix) is not None:
                records.append(bytes(cursor.value()))
            found = cursor.prev()
        return records

    def next_reflog_seq(self, name: str) -> int:
        cursor = self._t.cursor(db=self._dbs[rec.REFLOG])
        if self._newest_reflog_key(cursor, name):
            seq = rec.reflog_seq(cursor.key(), rec.reflog_prefix(name))
            if seq is not None:
                return seq + 1
        return 0

    def reflog_names(self) -> list[str]:
        cursor = self._t.cursor(db=self._dbs[rec.REFLOG])
        names: list[str] = []
        found = cursor.first()
        while found:
            name = rec.reflog_name(cursor.key())
            names.append(name.decode())
            found = cursor.set_range(name + b"\x01")
        return names

    def get_config(self, key: str) -> bytes | None:
        value = self._t.get(rec.name_key(key), db=self._dbs[rec.CONFIG])
        return None if value is None else bytes(value)

    # -- writing ------------------------------------------------------------------------------------------

    def apply(self, w: WriteSet, now_ms: int) -> None:
        """Write a transaction's buffered writes (the caller commits)."""
        txn, dbs = self._t, self._dbs
        objs = dbs[rec.OBJECTS]
        time = now_ms.to_bytes(rec.TIME_SIZE, "big")
        for oid in w.deleted:
            if self.record(oid) is not None:
                txn.delete(rec.object_key(oid), db=objs)
        if w.objects:
            dict_id = self.current_dict()
            dictionary = self._e.dicts.get(dict_id)
            put = txn.put
            for oid, data in w.objects.items():
                value = rec.stored_value(data, dictionary if len(data) <= DICT_MAX_OBJECT else None, dict_id)
                if not put(rec.object_key(oid), rec.object_record(oid, time, value), db=objs, overwrite=False):
                    self._restamp(oid, time)
        _set_or_delete(txn, dbs[rec.REFS], w.refs)
        reflog = dbs[rec.REFLOG]
        for name in w.reflog_cleared:
            prefix = rec.reflog_prefix(name)
            cursor = txn.cursor(db=reflog)
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix):
                    if not cursor.delete():
                        break
        for name, records in w.reflog_appends.items():
            seq = self.next_reflog_seq(name)
            for record in records:
                txn.put(rec.reflog_key(name, seq), record, db=reflog)
                seq += 1
        _set_or_delete(txn, dbs[rec.CONFIG], w.config)

    def _restamp(self, oid: ObjectId, time: bytes) -> None:
        """Refresh the write time of an object already held (gc's grace then protects it again)."""
        key = rec.object_key(oid)
        held = self._t.get(key, db=self._dbs[rec.OBJECTS])
        if held is None:
            raise StoreError(f"object {to_hex(oid)} vanished while it was written; run `ctxstore fsck`")
        if not rec.record_holds(held, oid):
            other = to_hex(rec.record_id(key, held))
            raise StoreError(f"objects {to_hex(oid)} and {other} share their first {rec.KEY_SIZE} bytes, "
                             "which this store cannot hold; nothing was written (report this: it should "
                             "not happen)")
        if held[:rec.TIME_SIZE] != time:
            self._t.put(key, rec.restamped(held, time), db=self._dbs[rec.OBJECTS])

    def put_dict(self, data: bytes) -> int:
        """Store a new zstd dictionary under the next id, which is returned."""
        dict_id = self.current_dict() + 1
        self._t.put(rec.dict_key(dict_id), data, db=self._dbs[rec.DICTS])
        return dict_id


def _set_or_delete(txn: lmdb.Transaction[bytes], db: lmdb._Database,
                   values: Mapping[str, bytes | None]) -> None:
    """Write text-keyed values into `db`; None deletes the key (a ref or a setting removed)."""
    for key, value in values.items():
        if value is None:
            txn.delete(rec.name_key(key), db=db)
        else:
            txn.put(rec.name_key(key), value, db=db)


@dataclass(frozen=True, slots=True)
class _Options:
    map_size: int
    durable: bool
    readonly: bool


class LmdbStore(BatchWrites):
    """A durable, multi-process object store with refs, reflogs and config, on LMDB.

    `path` is a directory (created unless `readonly`). With `durable=True` (the default) a write
    transaction is on disk when it returns; `durable=False` skips the fsync per commit for bulk work: a
    crash of the process loses nothing committed, a crash of the machine may lose the latest commits
    (and, on file systems that reorder writes, damage the store), and `sync()` flushes. One process
    shares one LMDB environment per path between all its stores; the first store opened decides the
    environment's sync mode, and a durable store on an environment opened non-durable flushes after
    each of its commits. A store in an older record layout is refused with `NotARepository`.
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE,
                 durable: bool = True, readonly: bool = False,
                 clock: Callable[[], int] | None = None) -> None:
        path = os.fspath(path)
        if readonly and not os.path.isdir(path):
            raise NotARepository(f"no store at {path}; create it by opening it without readonly=True")
        if not readonly:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the store directory {path}: {exc}") from None
        if map_size < 1 << 12:
            map_size = 1 << 12
        self.path = os.path.realpath(path)
        self._opts = _Options(map_size, durable, readonly)
        self._clock = clock or _now_ms
        self._env: Environment | None = acquire(self.path, map_size, durable, readonly)

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        """Whether each write transaction is flushed to disk before it returns."""
        return self._opts.durable

    @property
    def readonly(self) -> bool:
        """Whether writes are refused."""
        return self._opts.readonly

    @property
    def environment(self) -> Environment:
        """This process's LMDB environment under the store, shared with every store on its path.

        For diagnostics and tests (its reader table, its sync); `StoreError` once the store is closed.
        """
        env = self._env
        if env is None:
            raise StoreError(f"the store at {self.path} is closed; open it again")
        if env.pid != os.getpid():
            # A forked child: the parent's environment must not be used here; open our own.
            opts = self._opts
            self._env = env = acquire(self.path, opts.map_size, opts.durable, opts.readonly)
        return env

    def close(self) -> None:
        """Release this store's hold on the environment (closed when its last store closes)."""
        env, self._env = self._env, None
        if env is not None and env.pid == os.getpid():
            release(env)

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sync(self) -> None:
        """Flush every commit so far to disk (what `durable=False` skips per commit)."""
        self.environment.sync()

    # -- transactions ----------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Transaction]:
        """A transaction; with write=True its writes apply atomically when the block exits normally.

        Only one write transaction runs at a time across all processes; keep them short. A thread may
        not open a write transaction inside another one on the same store.
        """
        env = self.environment
        if write:
            if self._opts.readonly:
                raise StoreError(f"the store at {self.path} was opened read-only; open it without "
                                 "readonly=True to write")
            if getattr(env.writing, "active", False):
                raise StoreError("a write transaction is already open in this thread; LMDB allows one "
                                 "writer at a time, so do this work inside that transaction")
        ltxn = env.begin(write)
        txn = Transaction(_Records(env, ltxn), write=write)
        if write:
            env.writing.active = True
        try:
            try:
                yield txn
            except BaseException:
                env.end(ltxn, commit=False)
                raise
            if write:
                self._commit(env, txn, ltxn)
            else:
                env.end(ltxn, commit=False)
        finally:
            txn.end()
            if write:
                env.writing.active = False

    def _commit(self, env: Environment, txn: Transaction, ltxn: lmdb.Transaction[bytes]) -> None:
        w = txn.pending_writes()
        now = self._clock()

        def body(t: lmdb.Transaction[bytes]) -> None:
            if w:
                _Records(env, t).apply(w, now)

        env.run_write(body, need=w.size_hint(), sync=self._opts.durable and bool(w), first=ltxn,
                      still_valid=lambda t: txn.rebind(_Records(env, t)))

    @contextmanager
    def _reading(self) -> Iterator[_Records]:
        env = self.environment
        ltxn = env.begin(False)
        try:
            yield _Records(env, ltxn)
        finally:
            env.end(ltxn, commit=False)

    # -- the ObjectStore protocol ----------------------------------------------------------------------

    def get(self, oid: ObjectId) -> bytes:
        """The canonical bytes of an object; `MissingObject` if absent."""
        check_oid(oid)
        with self._reading() as records:
            data = records.get(oid)
        if data is None:
            raise MissingObject(f"object {to_hex(oid)} is not in the store")
        return data

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        check_oid(oid)
        with self._reading() as records:
            return records.has(oid)

    def __contains__(self, oid: object) -> bool:
        return type(oid) is bytes and len(oid) == OID_SIZE and self.has(ObjectId(oid))

    def __iter__(self) -> Iterator[ObjectId]:
        """Every object id, read in batches so no read transaction stays open between them."""
        after = b""
        while True:
            with self._reading() as records:
                batch = records.ids_after(after, _ITER_BATCH)
            yield from batch
            if len(batch) < _ITER_BATCH:
                break
            after = rec.object_key(batch[-1])

    def __len__(self) -> int:
        with self._reading() as records:
            return records.count()

    # -- the rest of TransactionalStore ----------------------------------------------------------------

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        check_oid(oid)
        with self._reading() as records:
            return records.written_at(oid)

    def stored_size(self, oid: ObjectId) -> int:
        """Bytes the object's value occupies (codec byte plus compressed bytes)."""
        check_oid(oid)
        with self._reading() as records:
            value = records.find(oid)
        if value is None:
            raise MissingObject(f"object {to_hex(oid)} is not in the store")
        return len(value)

    def stats(self) -> StoreStats:
        """Object count, canonical and stored bytes, and the pages in use in the data file."""
        objects = object_bytes = stored_bytes = 0
        with self._reading() as records:
            for _oid, value in records.values():
                objects += 1
                stored_bytes += len(value)
                object_bytes += rec.canonical_size(value)
            file_bytes = self.environment.file_bytes()
        return StoreStats(objects=objects, object_bytes=object_bytes, stored_bytes=stored_bytes,
                          file_bytes=file_bytes)

    def map_size(self) -> int:
        """The current size of this process's map of the store, in bytes."""
        return self.environment.map_size()

    # -- compression dictionary ------------------------------------------------------------------------

    def dictionary_id(self) -> int:
        """The id of the dictionary new writes are compressed with (0: none)."""
        with self._reading() as records:
            return records.current_dict()

    def train_dictionary(self, *, samples: int = 4000, dict_size: int = 32 * 1024,
                         min_gain: float = 0.05) -> int | None:
        """Train a zstd dictionary on stored objects and compress new writes with it if it helps.

        Samples up to `samples` objects of at most 64 KiB (object ids are hashes, so the first ones in
        key order are a random sample), trains on four fifths and measures the rest. If the dictionary
        saves less than `min_gain` of the compressed size it is not kept and None is returned;
        otherwise it is stored under a new id, which is returned. Values already stored keep their
        encoding and keep decoding.
        """
        if self._opts.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only; open it without "
                             "readonly=True to train a dictionary")
        picked: list[bytes | bytearray | memoryview] = []
        with self._reading() as records:
            for oid, value in records.values():
                if rec.canonical_size(value) <= DICT_MAX_OBJECT:
                    picked.append(records.decode(oid, value))
                    if len(picked) >= samples:
                        break
        if len(picked) < 64:
            return None
        random.Random(len(picked)).shuffle(picked)
        held_out = [bytes(d) for d in picked[: max(len(picked) // 5, 16)]]
        training = picked[len(held_out):]
        try:
            trained = zstandard.train_dictionary(dict_size, training)
        except zstandard.ZstdError:
            return None  # too few or too uniform samples: nothing to gain
        plain = sum(len(codec.compress(d)) for d in held_out)
        candidate = zstandard.ZstdCompressionDict(trained.as_bytes())
        with_dict = sum(len(codec.compress(d, dictionary=candidate, dict_id=1)) for d in held_out)
        if with_dict > plain * (1 - min_gain):
            return None
        env = self.environment
        data = trained.as_bytes()
        stored: list[int] = []

        def store(ltxn: lmdb.Transaction[bytes]) -> None:
            stored[:] = [_Records(env, ltxn).put_dict(data)]

        env.run_write(store, need=len(data), sync=self._opts.durable)
        env.dicts.setdefault(stored[0], zstandard.ZstdCompressionDict(data))
        return stored[0]
