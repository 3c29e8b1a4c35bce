"""The durable object store: objects, refs, reflogs and config in one LMDB environment.

Layout: one LMDB environment (a directory holding ``data.mdb`` and ``lock.mdb``) with these named
databases, all written only through transactions:

=========  ==================================  ==================================================
database   key                                 value
=========  ==================================  ==================================================
objs       first 16 bytes of the object id     write time (ms, 6 bytes BE), last 16 bytes of the id,
                                               codec byte + (raw | zstd | dict id + zstd) bytes
objects    object id (32 raw bytes)            legacy (stores written before ``objs``): codec-framed bytes
times      object id                           legacy: the write time of an object in ``objects``
refs       ref name (UTF-8)                    object id
reflog     ref name, NUL, sequence (8 bytes)   a record (the refs layer encodes it)
config     key (UTF-8)                         bytes
dicts      dictionary id (4 bytes BE)          a zstd dictionary; the highest id is current
=========  ==================================  ==================================================

The environment is opened once per process and path (LMDB forbids opening one file twice in a process)
and shared by every `LmdbStore` on that path; a forked child opens its own instead of touching the
parent's. Only this module imports `lmdb`.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import lmdb
import zstandard

from ..errors import EncodingError, MissingObject, NotARepository, StoreError
from ..format import codec
from ..format.codec import now_ms as _now_ms
from ..ids import ObjectId, to_hex
from .base import BatchWrites, StoreStats, Transaction, WriteSet, check_oid
from .records import HEAD_SIZE, KEY_SIZE, TIME_SIZE, canonical_size, stored_value

__all__ = ["DEFAULT_MAP_SIZE", "LmdbStore"]

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
"""Initial map size for a new store; it grows when full (LMDB's map is address space, not disk)."""
MAX_READERS = 1022
"""Reader slots: one per concurrent read transaction across all processes (lock file grows 64 B each)."""
DICT_MAX_OBJECT = 64 * 1024
"""Objects up to this size are compressed with the trained dictionary; larger ones gain nothing from it."""
_DB_NAMES = (b"objs", b"objects", b"times", b"refs", b"reflog", b"config", b"dicts")
_ITER_BATCH = 4096
_GROW_STEP_LIMIT = 4 * 1024**3



def _store_error(exc: lmdb.Error, path: str, doing: str) -> StoreError:
    return StoreError(f"LMDB failed while {doing} in {path}: {exc}; check disk space and permissions, "
                      "and run `ctxstore fsck` if it persists")


class _SharedLock:
    """Many transactions or one map resize: LMDB's set_mapsize needs no transaction active in-process."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._resizing = False
        self._waiting = 0
        self._mine = threading.local()

    def held_here(self) -> int:
        return getattr(self._mine, "n", 0)

    def acquire(self) -> None:
        with self._cond:
            # A thread already inside a transaction must not wait for a resize that waits for it.
            while (self._resizing or self._waiting) and self.held_here() == 0:
                self._cond.wait()
            self._active += 1
        self._mine.n = self.held_here() + 1

    def release(self) -> None:
        self._mine.n = self.held_here() - 1
        with self._cond:
            self._active -= 1
            if self._waiting:
                self._cond.notify_all()  # only a resize waits for transactions to end

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        if self.held_here():
            raise StoreError("the LMDB map must be resized while this thread holds another transaction "
                             "open; finish that transaction first")
        with self._cond:
            # Announce the resize so new transactions wait and the active ones can drain.
            self._waiting += 1
            while self._resizing or self._active:
                self._cond.wait()
            self._waiting -= 1
            self._resizing = True
        try:
            yield
        finally:
            with self._cond:
                self._resizing = False
                self._cond.notify_all()


class _Env:
    """One process's handle on one LMDB environment, shared by every LmdbStore on that path."""

    def __init__(self, path: str, map_size: int, durable: bool, readonly: bool) -> None:
        self.path = path
        self.pid = os.getpid()
        self.durable = durable
        self.readonly = readonly
        self.users = 0
        self.lock = _SharedLock()
        self.writing = threading.local()
        self.dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self.current_dict = 0
        data_file = os.path.join(path, "data.mdb")
        if os.path.exists(data_file):
            # Start at least as large as the file so reopening a big store does not grow step by step.
            map_size = max(map_size, os.path.getsize(data_file))
        try:
            self.env = lmdb.open(path, map_size=map_size, subdir=True, readonly=readonly, create=not readonly,
                                 max_dbs=len(_DB_NAMES) + 2, max_readers=MAX_READERS, sync=durable,
                                 metasync=durable, lock=True, max_spare_txns=0)
        except lmdb.Error as exc:
            raise _store_error(exc, path, "opening the store") from None
        try:
            # Slots left by processes that died inside a read transaction would pin old pages forever.
            self.env.reader_check()
            self.dbs = self._open_dbs()
            self.objs: lmdb._Database | None = self.dbs[b"objs"]
            self.legacy: lmdb._Database = self.dbs[b"objects"]
            with self.env.begin() as txn:
                self._load_dicts(txn)
        except BaseException:
            self.env.close()
            raise

    def _open_dbs(self) -> dict[bytes, lmdb._Database]:
        dbs: dict[bytes, lmdb._Database] = {}
        try:
            if self.readonly:
                for name in _DB_NAMES:
                    try:
                        dbs[name] = self.env.open_db(name, create=False)
                    except lmdb.NotFoundError:
                        if name != b"objs":
                            raise
                        dbs[name] = None  # written before objs existed: every object is in `objects`
            else:
                with self.env.begin(write=True) as txn:
                    for name in _DB_NAMES:
                        dbs[name] = self.env.open_db(name, txn=txn, create=True)
        except lmdb.NotFoundError:
            raise NotARepository(f"{self.path} is not a ctxstore store (its databases are missing); "
                                 "open it writable once or point at the right directory") from None
        except lmdb.Error as exc:
            raise _store_error(exc, self.path, "opening its databases") from None
        return dbs

    def _load_dicts(self, txn: lmdb.Transaction) -> None:
        cursor = txn.cursor(db=self.dbs[b"dicts"])
        for key, value in cursor:
            dict_id = int.from_bytes(key, "big")
            if dict_id not in self.dicts:
                self.dicts[dict_id] = zstandard.ZstdCompressionDict(bytes(value))
            self.current_dict = max(self.current_dict, dict_id)

    # -- transactions with map growth -----------------------------------------------------------------

    def begin(self, write: bool) -> lmdb.Transaction:
        """Begin an LMDB transaction, adopting a map that another process grew."""
        while True:
            self.lock.acquire()
            try:
                return self.env.begin(write=write)
            except lmdb.MapResizedError:
                self.lock.release()
                self.adopt_growth()
            except lmdb.Error as exc:
                self.lock.release()
                raise _store_error(exc, self.path, "beginning a transaction") from None
            except BaseException:
                self.lock.release()
                raise

    def end(self, txn: lmdb.Transaction, *, commit: bool) -> None:
        try:
            if commit:
                txn.commit()
            else:
                txn.abort()
        finally:
            self.lock.release()

    def adopt_growth(self) -> None:
        with self.lock.exclusive():
            try:
                self.env.set_mapsize(0)  # 0: take the size another process recorded
            except lmdb.Error as exc:
                raise _store_error(exc, self.path, "adopting a map grown by another process") from None

    def grow(self, seen: int, need: int) -> None:
        """Grow the map after a MapFullError at size `seen` (unless another thread already did)."""
        with self.lock.exclusive():
            info = self.env.info()
            if info["map_size"] > seen:
                return
            used = (info["last_pgno"] + 1) * self.env.stat()["psize"]
            step = min(max(seen, 2 * need, 1 << 20), _GROW_STEP_LIMIT)
            new = max(seen + step, used + 2 * need)
            new = -(-new // (1 << 16)) * (1 << 16)
            try:
                self.env.set_mapsize(new)
            except lmdb.Error as exc:
                raise _store_error(exc, self.path, f"growing the map to {new} bytes") from None

    def _attempt(self, ltxn: lmdb.Transaction, body: Callable[[lmdb.Transaction], object]) -> bool:
        """Run `body` in a begun write transaction and commit; False if the map filled.

        Either way the transaction is over and its hold on the shared lock released, exactly once.
        """
        try:
            body(ltxn)
            ltxn.commit()
            return True
        except lmdb.MapFullError:
            with suppress(lmdb.Error):
                ltxn.abort()
            return False
        except lmdb.Error as exc:
            with suppress(lmdb.Error):
                ltxn.abort()
            raise _store_error(exc, self.path, "committing a transaction") from None
        except BaseException:
            with suppress(lmdb.Error):
                ltxn.abort()
            raise
        finally:
            self.lock.release()

    def write(self, txn_obj: Transaction, first: lmdb.Transaction, *, now: int, sync: bool) -> None:
        """Apply a transaction's writes and commit, growing the map and retrying if it fills."""
        w = txn_obj._writes
        assert w is not None
        ltxn = first
        while True:
            seen = self.env.info()["map_size"]
            if self._attempt(ltxn, lambda t: self.apply(t, w, now) if w else None):
                break
            self.grow(seen, w.size_hint())
            ltxn = self.begin(write=True)
            # Another writer may have run while the writer slot was free: apply only if what this
            # transaction read (and based its writes on) is unchanged.
            if not txn_obj._rebind(_LmdbSnapshot(self, ltxn)):
                self.end(ltxn, commit=False)
                raise StoreError("the store map filled and grew during a transaction, and another writer "
                                 "changed what the transaction had read; nothing was written, retry it")
        if sync and w and not self.durable:
            self.sync()  # a durable store sharing an environment that was opened non-durable

    def raw_write(self, fn: Callable[[lmdb.Transaction], int], *, need: int, sync: bool) -> int:
        """Run `fn` in a write transaction of its own and commit, growing the map and re-running it."""
        result: list[int] = []
        while True:
            ltxn = self.begin(write=True)
            seen = self.env.info()["map_size"]
            result.clear()
            if self._attempt(ltxn, lambda t: result.append(fn(t))):
                break
            self.grow(seen, need)
        if sync and not self.durable:
            self.sync()
        return result[0]

    def apply(self, txn: lmdb.Transaction, w: WriteSet, now_ms: int) -> None:
        dbs = self.dbs
        time = now_ms.to_bytes(TIME_SIZE, "big")
        for oid in w.deleted:
            self.delete_object(txn, oid)
        if w.objects:
            objs = self.objs
            assert objs is not None  # a writable environment always has it
            dict_id = self._current_dict(txn)
            dictionary = self.dicts.get(dict_id)
            # A store written before `objs` existed keeps its objects where they are: one place per object.
            legacy = txn.stat(self.legacy)["entries"] > 0
            put = txn.put
            for oid, data in w.objects.items():
                if legacy and txn.get(oid, db=self.legacy) is not None:
                    put(oid, now_ms.to_bytes(8, "big"), db=dbs[b"times"])
                    continue
                value = stored_value(data, dictionary if len(data) <= DICT_MAX_OBJECT else None, dict_id)
                tail = oid[KEY_SIZE:]
                if not put(oid[:KEY_SIZE], time + tail + value, db=objs, overwrite=False):
                    self._restamp(txn, oid, time)
        _set_or_delete(txn, dbs[b"refs"], w.refs)
        reflog = dbs[b"reflog"]
        for name in w.reflog_cleared:
            prefix = name.encode() + b"\x00"
            cursor = txn.cursor(db=reflog)
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix):
                    if not cursor.delete():
                        break
        for name, records in w.reflog_appends.items():
            seq = self._next_reflog_seq(txn, name)
            prefix = name.encode() + b"\x00"
            for record in records:
                txn.put(prefix + seq.to_bytes(8, "big"), record, db=reflog)
                seq += 1
        _set_or_delete(txn, dbs[b"config"], w.config)

    def _restamp(self, txn: lmdb.Transaction, oid: ObjectId, time: bytes) -> None:
        """Refresh the write time of an object already held (gc's grace then protects it again)."""
        held = txn.get(oid[:KEY_SIZE], db=self.objs)
        if held[TIME_SIZE:HEAD_SIZE] != oid[KEY_SIZE:]:
            other = to_hex(oid[:KEY_SIZE] + held[TIME_SIZE:HEAD_SIZE])
            raise StoreError(f"objects {to_hex(oid)} and {other} share their first {KEY_SIZE} bytes, which "
                             "this store cannot hold; nothing was written (report this: it should not happen)")
        if held[:TIME_SIZE] != time:
            txn.put(oid[:KEY_SIZE], time + held[TIME_SIZE:], db=self.objs)

    # -- objects: in `objs`, or in `objects` (and `times`) for a store written before it ---------------

    def _record(self, txn: lmdb.Transaction, oid: bytes) -> bytes | None:
        """The object's record in `objs` (write time, id tail, stored value), or None if not there."""
        if self.objs is None:
            return None
        record = txn.get(oid[:KEY_SIZE], db=self.objs)
        return record if record is not None and record[TIME_SIZE:HEAD_SIZE] == oid[KEY_SIZE:] else None

    def find(self, txn: lmdb.Transaction, oid: bytes) -> bytes | None:
        """An object's stored value (codec byte, then the payload), or None if it is not held."""
        record = self._record(txn, oid)
        return record[HEAD_SIZE:] if record is not None else txn.get(oid, db=self.legacy)

    def holds(self, txn: lmdb.Transaction, oid: bytes) -> bool:
        return self._record(txn, oid) is not None or txn.get(oid, db=self.legacy) is not None

    def written(self, txn: lmdb.Transaction, oid: bytes) -> int | None:
        record = self._record(txn, oid)
        if record is not None:
            return int.from_bytes(record[:TIME_SIZE], "big")
        if txn.get(oid, db=self.legacy) is None:
            return None
        stamp = txn.get(oid, db=self.dbs[b"times"])
        return 0 if stamp is None else int.from_bytes(stamp, "big")

    def delete_object(self, txn: lmdb.Transaction, oid: bytes) -> None:
        if self._record(txn, oid) is not None:
            txn.delete(oid[:KEY_SIZE], db=self.objs)
        elif txn.delete(oid, db=self.legacy):
            txn.delete(oid, db=self.dbs[b"times"])

    def count(self, txn: lmdb.Transaction) -> int:
        held = int(txn.stat(self.legacy)["entries"])
        return held + (0 if self.objs is None else int(txn.stat(self.objs)["entries"]))

    def values(self, txn: lmdb.Transaction) -> Iterator[tuple[bytes, bytes]]:
        """Every object's id and stored value, in key order per database."""
        if self.objs is not None:
            for key, value in txn.cursor(db=self.objs):
                yield bytes(key) + value[TIME_SIZE:HEAD_SIZE], value[HEAD_SIZE:]
        for key, value in txn.cursor(db=self.legacy):
            yield bytes(key), value

    def ids_after(self, txn: lmdb.Transaction, in_objs: bool, after: bytes, limit: int) -> list[bytes]:
        """Up to `limit` object ids of one database after key `after`, in key order (with their keys)."""
        db = self.objs if in_objs else self.legacy
        if db is None:
            return []
        cursor = txn.cursor(db=db)
        found = cursor.set_range(after)
        if found and after and cursor.key() == after:
            found = cursor.next()
        out: list[bytes] = []
        while found and len(out) < limit:
            key = bytes(cursor.key())
            out.append(key + cursor.value()[TIME_SIZE:HEAD_SIZE] if in_objs else key)
            found = cursor.next()
        return out

    def _current_dict(self, txn: lmdb.Transaction) -> int:
        # Another process may have trained a newer dictionary; one cursor step per commit finds it.
        cursor = txn.cursor(db=self.dbs[b"dicts"])
        if cursor.last():
            dict_id = int.from_bytes(cursor.key(), "big")
            if dict_id not in self.dicts:
                self._load_dicts(txn)
            return dict_id
        return 0

    def _next_reflog_seq(self, txn: lmdb.Transaction, name: str) -> int:
        prefix = name.encode() + b"\x00"
        cursor = txn.cursor(db=self.dbs[b"reflog"])
        found = cursor.prev() if cursor.set_range(name.encode() + b"\x01") else cursor.last()
        if found and cursor.key().startswith(prefix) and len(cursor.key()) == len(prefix) + 8:
            return int.from_bytes(cursor.key()[-8:], "big") + 1
        return 0

    def decode_value(self, txn: lmdb.Transaction, oid: ObjectId, value: bytes) -> bytes:
        if value[:1] == bytes([codec.ZSTD_DICT]) and int.from_bytes(value[1:5], "big") not in self.dicts:
            self._load_dicts(txn)
        try:
            return codec.decompress(value, dictionaries=self.dicts)
        except EncodingError as exc:
            raise StoreError(f"stored object {to_hex(oid)} is corrupt ({exc}); run `ctxstore fsck`") from None

    def sync(self) -> None:
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise _store_error(exc, self.path, "flushing to disk") from None


class _LmdbSnapshot:
    """An LMDB transaction seen through the `Snapshot` protocol."""

    __slots__ = ("_e", "_t")

    def __init__(self, env: _Env, txn: lmdb.Transaction) -> None:
        self._e = env
        self._t = txn

    def get(self, oid: ObjectId) -> bytes | None:
        value = self._e.find(self._t, oid)
        return None if value is None else self._e.decode_value(self._t, oid, value)

    def has(self, oid: ObjectId) -> bool:
        return self._e.holds(self._t, oid)

    def written_at(self, oid: ObjectId) -> int | None:
        return self._e.written(self._t, oid)

    def get_ref(self, name: str) -> ObjectId | None:
        value = self._t.get(name.encode(), db=self._e.dbs[b"refs"])
        return None if value is None else ObjectId(bytes(value))

    def refs(self, prefix: str) -> dict[str, ObjectId]:
        start = prefix.encode()
        cursor = self._t.cursor(db=self._e.dbs[b"refs"])
        found: dict[str, ObjectId] = {}
        if cursor.set_range(start):
            for key, value in cursor:
                if not key.startswith(start):
                    break
                found[bytes(key).decode()] = ObjectId(bytes(value))
        return found

    def reflog(self, name: str) -> list[bytes]:
        prefix = name.encode() + b"\x00"
        cursor = self._t.cursor(db=self._e.dbs[b"reflog"])
        found = cursor.prev() if cursor.set_range(name.encode() + b"\x01") else cursor.last()
        records: list[bytes] = []
        while found and cursor.key().startswith(prefix):
            if len(cursor.key()) == len(prefix) + 8:
                records.append(bytes(cursor.value()))
            found = cursor.prev()
        return records

    def reflog_names(self) -> list[str]:
        cursor = self._t.cursor(db=self._e.dbs[b"reflog"])
        names: list[str] = []
        found = cursor.first()
        while found:
            name = bytes(cursor.key()).split(b"\x00", 1)[0]
            names.append(name.decode())
            found = cursor.set_range(name + b"\x01")
        return names

    def get_config(self, key: str) -> bytes | None:
        value = self._t.get(key.encode(), db=self._e.dbs[b"config"])
        return None if value is None else bytes(value)


# -- one environment per process and path -------------------------------------------------------------

_registry: dict[tuple[str, int], _Env] = {}
_registry_lock = threading.Lock()
# Environments inherited across fork with a transaction open in some thread: closing them could release
# the parent's reader slots or wait on its writer, so the child only keeps them from the collector.
_inherited: list[_Env] = []


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for env in _registry.values():
        if env.lock._active == 0:
            # Nothing of the parent's is in flight: closing only unmaps and drops this process's file
            # handles (fcntl locks are not inherited), and frees the path so the child can open it.
            try:
                env.env.close()
            except lmdb.Error:
                _inherited.append(env)
        else:
            _inherited.append(env)
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _acquire(path: str, map_size: int, durable: bool, readonly: bool) -> _Env:
    key = (path, os.getpid())
    with _registry_lock:
        env = _registry.get(key)
        if env is None:
            env = _Env(path, map_size, durable, readonly)
            _registry[key] = env
        elif env.readonly and not readonly:
            raise StoreError(f"{path} is already open read-only in this process; close that store before "
                             "opening it for writing")
        env.users += 1
        return env


def _release(env: _Env) -> None:
    with _registry_lock:
        env.users -= 1
        key = (env.path, env.pid)
        if env.users <= 0 and _registry.get(key) is env:
            del _registry[key]
            env.env.close()


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
    each of its commits.
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
        self._env: _Env | None = _acquire(self.path, map_size, durable, readonly)

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        """Whether each write transaction is flushed to disk before it returns."""
        return self._opts.durable

    @property
    def readonly(self) -> bool:
        """Whether writes are refused."""
        return self._opts.readonly

    def _handle(self) -> _Env:
        env = self._env
        if env is None:
            raise StoreError(f"the store at {self.path} is closed; open it again")
        if env.pid != os.getpid():
            # A forked child: the parent's environment must not be used here; open our own.
            opts = self._opts
            self._env = env = _acquire(self.path, opts.map_size, opts.durable, opts.readonly)
        return env

    def close(self) -> None:
        """Release this store's hold on the environment (closed when its last store closes)."""
        env, self._env = self._env, None
        if env is not None and env.pid == os.getpid():
            _release(env)

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sync(self) -> None:
        """Flush every commit so far to disk (what `durable=False` skips per commit)."""
        self._handle().sync()

    # -- transactions ----------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Transaction]:
        """A transaction; with write=True its writes apply atomically when the block exits normally.

        Only one write transaction runs at a time across all processes; keep them short. A thread may
        not open a write transaction inside another one on the same store.
        """
        env = self._handle()
        if write:
            if self._opts.readonly:
                raise StoreError(f"the store at {self.path} was opened read-only; open it without "
                                 "readonly=True to write")
            if getattr(env.writing, "active", False):
                raise StoreError("a write transaction is already open in this thread; LMDB allows one "
                                 "writer at a time, so do this work inside that transaction")
        ltxn = env.begin(write)
        txn = Transaction(_LmdbSnapshot(env, ltxn), write=write)
        if write:
            env.writing.active = True
        try:
            try:
                yield txn
            except BaseException:
                env.end(ltxn, commit=False)
                raise
            if write:
                env.write(txn, ltxn, now=self._clock(), sync=self._opts.durable)
            else:
                env.end(ltxn, commit=False)
        finally:
            txn._end()
            if write:
                env.writing.active = False

    @contextmanager
    def _reading(self) -> Iterator[tuple[_Env, lmdb.Transaction]]:
        env = self._handle()
        ltxn = env.begin(False)
        try:
            yield env, ltxn
        finally:
            env.end(ltxn, commit=False)

    # -- the ObjectStore protocol ----------------------------------------------------------------------

    def get(self, oid: ObjectId) -> bytes:
        """The canonical bytes of an object; `MissingObject` if absent."""
        with self._reading() as (env, ltxn):
            value = env.find(ltxn, oid)
            if value is None:
                raise MissingObject(f"object {to_hex(oid)} is not in the store")
            return env.decode_value(ltxn, oid, value)

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        with self._reading() as (env, ltxn):
            return env.holds(ltxn, oid)

    def __contains__(self, oid: object) -> bool:
        return isinstance(oid, bytes) and self.has(ObjectId(oid))

    def __iter__(self) -> Iterator[ObjectId]:
        """Every object id, read in batches so no read transaction stays open between them."""
        for in_objs in (True, False):
            after = b""
            while True:
                with self._reading() as (env, ltxn):
                    batch = env.ids_after(ltxn, in_objs, after, _ITER_BATCH)
                yield from (ObjectId(oid) for oid in batch)
                if len(batch) < _ITER_BATCH:
                    break
                after = batch[-1][:KEY_SIZE] if in_objs else batch[-1]

    def __len__(self) -> int:
        with self._reading() as (env, ltxn):
            return env.count(ltxn)

    # -- the rest of TransactionalStore ----------------------------------------------------------------

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        with self._reading() as (env, ltxn):
            return _LmdbSnapshot(env, ltxn).written_at(oid)

    def stored_size(self, oid: ObjectId) -> int:
        """Bytes the object's value occupies (codec byte plus compressed bytes)."""
        check_oid(oid)
        with self._reading() as (env, ltxn):
            value = env.find(ltxn, oid)
            if value is None:
                raise MissingObject(f"object {to_hex(oid)} is not in the store")
            return len(value)

    def stats(self) -> StoreStats:
        """Object count, canonical and stored bytes, and the pages in use in the data file."""
        objects = object_bytes = stored_bytes = 0
        with self._reading() as (env, ltxn):
            for _oid, value in env.values(ltxn):
                objects += 1
                stored_bytes += len(value)
                object_bytes += canonical_size(value)
            file_bytes = (env.env.info()["last_pgno"] + 1) * env.env.stat()["psize"]
        return StoreStats(objects=objects, object_bytes=object_bytes, stored_bytes=stored_bytes,
                          file_bytes=file_bytes)

    def map_size(self) -> int:
        """The current size of this process's map of the store, in bytes."""
        return int(self._handle().env.info()["map_size"])

    # -- compression dictionary ------------------------------------------------------------------------

    def dictionary_id(self) -> int:
        """The id of the dictionary new writes are compressed with (0: none)."""
        with self._reading() as (env, ltxn):
            return env._current_dict(ltxn)

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
        picked: list[bytes] = []
        with self._reading() as (env, ltxn):
            for oid, value in env.values(ltxn):
                if canonical_size(value) <= DICT_MAX_OBJECT:
                    picked.append(env.decode_value(ltxn, ObjectId(oid), value))
                    if len(picked) >= samples:
                        break
        if len(picked) < 64:
            return None
        random.Random(len(picked)).shuffle(picked)
        held_out = picked[: max(len(picked) // 5, 16)]
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
        env = self._handle()
        data = trained.as_bytes()

        def store(ltxn: lmdb.Transaction) -> int:
            dict_id = env._current_dict(ltxn) + 1
            ltxn.put(dict_id.to_bytes(4, "big"), data, db=env.dbs[b"dicts"])
            return dict_id

        dict_id = env.raw_write(store, need=len(data), sync=self._opts.durable)
        env.dicts.setdefault(dict_id, zstandard.ZstdCompressionDict(data))
        return dict_id


def _set_or_delete(txn: lmdb.Transaction, db: lmdb._Database, values: Mapping[str, bytes | None]) -> None:
    """Write text-keyed values into `db`; None deletes the key (a ref or a setting removed)."""
    for key, value in values.items():
        if value is None:
            txn.delete(key.encode(), db=db)
        else:
            txn.put(key.encode(), value, db=db)
