"""The LMDB environment under an `LmdbStore`: opening it, its map's growth, its reader slots, fork safety.

LMDB forbids opening one file twice in a process, so an environment is opened once per process and path
(`acquire`/`release` count its users) and shared by every `LmdbStore` on that path; a forked child opens
its own instead of touching the parent's. The map is address space, not disk: when a write fills it,
the write is re-run after growing it (`Environment.run_write`), and a map another process grew is
adopted when a transaction begins. LMDB's `set_mapsize` needs no transaction open in this process, which
`SharedLock` arranges. What the records in the databases look like is `records`; this module does not
read them; the commit log is `lmdb_log`. Only this module, `lmdb_log` and `lmdb` (the backend) import the
third-party `lmdb` package.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

import lmdb
import zstandard

from ..errors import CtxStoreError, NotARepository, RefMoved, StoreError
from .files import NO_SPACE, disk_full, disk_full_error
from .lmdb_log import (
    CHECKPOINT_BYTES,
    CommitLog,
    Stale,
    View,
    checkpoint_into,
    generation_of,
    log_name,
)
from .records import CONFIG, DATABASES, DICTS, LOG, OBJECTS, OLD_DATABASES, PACKS, REFLOG, REFS

__all__ = ["MAX_READERS", "Environment", "SharedLock", "acquire", "release",
           "store_error"]

MAX_READERS = 1022
"""Reader slots: one per concurrent read transaction across all processes (lock file grows 64 B each)."""
_GROW_STEP_LIMIT = 4 * 1024**3
APPLY_ORDER = (DICTS, PACKS, OBJECTS, CONFIG, REFLOG, REFS, LOG)
"""The order a commit log record's writes are taken into a process's overlay: what is named first."""
_LOCK_FILE = "lock.mdb"
_DATA_FILE = "data.mdb"
_LOCK_FILE_BYTES = (MAX_READERS + 2) * 64
"""LMDB's lock file for `MAX_READERS` slots: a 192-byte header and 64 bytes per further reader."""
def store_error(exc: lmdb.Error, path: str, doing: str) -> StoreError:
    """The `StoreError` for an LMDB failure while `doing` something to the store at `path`.

    LMDB reports a full disk as ENOSPC or, from a failed flush, as EIO: either is named as a full disk
    when the file system has next to no space left.
    """
    text = str(exc)
    if "No space left" in text or "Disk quota" in text or disk_full(path):
        return disk_full_error(path, doing)
    return StoreError(f"LMDB failed while {doing} in {path}: {exc}; check disk space and permissions, "
                      "and run `ctxstore fsck` if it persists")


def _allocate_lock_file(path: str, readonly: bool) -> None:
    """Give LMDB's lock file real blocks before LMDB maps it.

    LMDB makes the lock file with ftruncate, which allocates nothing, then writes to it through a shared
    map: on a full disk the first write to the map kills the process with SIGBUS. Allocating the blocks
    here turns that into a `StoreError` saying the disk is full. (The data file is written with pwrite,
    whose ENOSPC LMDB reports as an error.) Other failures are left for LMDB to report.
    """
    try:
        if not readonly:
            os.makedirs(path, exist_ok=True)
        fd = os.open(os.path.join(path, _LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise disk_full_error(path, "making LMDB's lock file") from None
        return  # absent directory, read-only file system, permissions: LMDB says which
    try:
        st = os.fstat(fd)
        if st.st_blocks * 512 < _LOCK_FILE_BYTES or st.st_size < _LOCK_FILE_BYTES:
            os.posix_fallocate(fd, 0, _LOCK_FILE_BYTES)
    except OSError as exc:
        if exc.errno in NO_SPACE:
            raise disk_full_error(path, "making LMDB's lock file") from None
    finally:
        os.close(fd)


class SharedLock:
    """Many transactions or one map resize: LMDB's set_mapsize needs no transaction active in-process."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._active = 0
        self._resizing = False
        self._waiting = 0
        self._mine = threading.local()

    def held_here(self) -> int:
        """How many holds this thread has (transactions it has open)."""
        n: int = getattr(self._mine, "n", 0)
        return n

    def idle(self) -> bool:
        """Whether no thread holds the lock: no transaction of this process is in flight."""
        return self._active == 0

    def acquire(self) -> None:
        """Take a shared hold (for one transaction), waiting out a resize unless this thread holds one."""
        with self._cond:
            # A thread already inside a transaction must not wait for a resize that waits for it.
            while (self._resizing or self._waiting) and self.held_here() == 0:
                self._cond.wait()
            self._active += 1
        self._mine.n = self.held_here() + 1

    def release(self) -> None:
        """Give back one shared hold."""
        self._mine.n = self.held_here() - 1
        with self._cond:
            self._active -= 1
            if self._waiting:
                self._cond.notify_all()  # only a resize waits for transactions to end

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the lock alone (for a resize): waits until every transaction of this process has ended."""
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


class Environment:
    """One process's handle on one LMDB environment, shared by every LmdbStore on that path.

    `dbs` holds the named databases of `records.DATABASES`; `page_size` is LMDB's page size for the
    file (the OS page size it was made with); `dicts` caches the zstd dictionaries read from the
    ``dicts`` database (filled by the backend, shared by the stores on this path); `writing` marks, per
    thread, that a write transaction is open.
    """

    def __init__(self, path: str, map_size: int, durable: bool, readonly: bool) -> None:
        self.path = path
        self.pid = os.getpid()
        self.durable = durable
        self.readonly = readonly
        self.users = 0
        self.lock = SharedLock()
        self.writing = threading.local()
        self.dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        data_file = os.path.join(path, _DATA_FILE)
        if os.path.exists(data_file):
            # Start at least as large as the file so reopening a big store does not grow step by step.
            map_size = max(map_size, os.path.getsize(data_file))
        _allocate_lock_file(path, readonly)
        try:
            self.env = lmdb.open(path, map_size=map_size, subdir=True, readonly=readonly, create=not readonly,
                                 max_dbs=len(DATABASES) + 2, max_readers=MAX_READERS, sync=durable,
                                 metasync=durable, lock=True, max_spare_txns=0)
        except lmdb.Error as exc:
            raise store_error(exc, path, "opening the store") from None
        try:
            # Slots left by processes that died inside a read transaction would pin old pages forever.
            self.env.reader_check()
            self.page_size = int(self.env.stat()["psize"])
            self._refuse_old_layout()
            self.dbs = self._open_dbs()
            self.handles = [self.dbs[name] for name in DATABASES]
            self.index = {handle: i for i, handle in enumerate(self.handles)}
            self.log = CommitLog(path, tuple(APPLY_ORDER.index(name) for name in DATABASES),
                                 DATABASES.index(OBJECTS), self.dbs[LOG], readonly)
            self.checkpoint_bytes = CHECKPOINT_BYTES
            """The log's length at which a commit checkpoints it (tests lower it to checkpoint often)."""
            if not readonly:
                self._start_log()
        except BaseException:
            self.env.close()
            raise

    def _refuse_old_layout(self) -> None:
        # Named databases are keys of the main database: one lookup each, once per process and path.
        try:
            with self.env.begin() as txn:
                old = [name.decode() for name in OLD_DATABASES if txn.get(name) is not None]
        except lmdb.Error as exc:
            raise store_error(exc, self.path, "reading its list of databases") from None
        if old:
            raise NotARepository(f"{self.path} holds objects in the old layout (databases {', '.join(old)}), "
                                 "which this ctxstore does not read; it reads only the `objs` layout of "
                                 "repository format 7 (docs/storage.md)")

    def _start_log(self) -> None:
        """Make the log of the generation LMDB names if it is missing (a new store), under LMDB's writer
        lock, and delete the logs of older generations a checkpoint left behind."""
        with self.env.begin(write=True) as txn:
            generation = generation_of(txn, self.dbs[LOG])
            if not os.path.exists(os.path.join(self.path, log_name(generation))):
                self.log.create(generation)
        self.log.remove_older(generation)

    def _open_dbs(self) -> dict[bytes, lmdb._Database]:
        dbs: dict[bytes, lmdb._Database] = {}
        try:
            if self.readonly:
                for name in DATABASES:
                    dbs[name] = self.env.open_db(name, create=False)
            else:
                with self.env.begin(write=True) as txn:
                    for name in DATABASES:
                        dbs[name] = self.env.open_db(name, txn=txn, create=True)
        except lmdb.NotFoundError:
            raise NotARepository(f"{self.path} is not a ctxstore store (its databases are missing); "
                                 "open it writable once or point at the right directory") from None
        except lmdb.Error as exc:
            raise store_error(exc, self.path, "opening its databases") from None
        return dbs

    # -- transactions with map growth -----------------------------------------------------------------

    def begin(self, write: bool) -> lmdb.Transaction[bytes]:
        """Begin an LMDB transaction holding the shared lock, adopting a map another process grew."""
        while True:
            self.lock.acquire()
            try:
                return self.env.begin(write=write)
            except lmdb.MapResizedError:
                self.lock.release()
                self.adopt_growth()
            except lmdb.Error as exc:
                self.lock.release()
                raise store_error(exc, self.path, "beginning a transaction") from None
            except BaseException:
                self.lock.release()
                raise

    def end(self, txn: lmdb.Transaction[bytes], *, commit: bool) -> None:
        """Commit or abort a transaction from `begin`, and release its hold on the shared lock."""
        try:
            if commit:
                txn.commit()
            else:
                txn.abort()
        except lmdb.Error as exc:
            raise store_error(exc, self.path, "ending a transaction") from None
        finally:
            self.lock.release()

    def adopt_growth(self) -> None:
        """Take the map size another process recorded when it grew the map."""
        with self.lock.exclusive():
            try:
                self.env.set_mapsize(0)  # 0: take the size another process recorded
            except lmdb.Error as exc:
                raise store_error(exc, self.path, "adopting a map grown by another process") from None

    def grow(self, seen: int, need: int) -> None:
        """Grow the map after a MapFullError at size `seen` (unless another thread already did)."""
        with self.lock.exclusive():
            info = self.env.info()
            if info["map_size"] > seen:
                return
            used = (info["last_pgno"] + 1) * self.page_size
            step = min(max(seen, 2 * need, 1 << 20), _GROW_STEP_LIMIT)
            new = max(seen + step, used + 2 * need)
            new = -(-new // (1 << 16)) * (1 << 16)
            try:
                self.env.set_mapsize(new)
            except lmdb.Error as exc:
                raise store_error(exc, self.path, f"growing the map to {new} bytes") from None

    def begin_view(self, write: bool) -> tuple[lmdb.Transaction[bytes], Any]:
        """Begin an LMDB transaction (`begin`) and the view the store's records read and write through:
        the transaction itself when the commit log holds nothing (a read), else a `View` through the
        log's overlay (a write always: its writes go to the log). The log is caught up first; a read
        transaction begun before a checkpoint it needs the log of is begun again."""
        missing_ok = False
        for _ in range(64):
            txn = self.begin(write)
            try:
                overlay = self.log.overlay(txn, self._holds(txn), writer=write, missing_ok=missing_ok)
            except Stale as stale:
                self.end(txn, commit=False)
                missing_ok = stale.missing
                continue
            except BaseException:
                self.end(txn, commit=False)
                raise
            if not write and overlay.empty():
                return txn, txn
            return txn, View(txn, self.index, overlay, write)
        raise StoreError(f"checkpoints of the commit log in {self.path} kept overtaking a read; retry")

    def _holds(self, txn: lmdb.Transaction[bytes]) -> Callable[[bytes], bool]:
        """Whether LMDB, as `txn` sees it, holds a record under a key of ``objs`` (the overlay's count)."""
        objs = self.dbs[OBJECTS]
        return lambda key: txn.get(key, db=objs) is not None

    def _attempt(self, ltxn: lmdb.Transaction[bytes], body: Callable[[lmdb.Transaction[bytes]], None]) -> bool:
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
            raise store_error(exc, self.path, "committing a transaction") from None
        except BaseException:
            with suppress(lmdb.Error):
                ltxn.abort()
            raise
        finally:
            self.lock.release()

    def run_write(self, body: Callable[[Any], None], *, need: int, sync: bool,
                  first: tuple[lmdb.Transaction[bytes], Any] | None = None,
                  still_valid: Callable[[Any], bool] | None = None, direct: bool = False) -> None:
        """Run `body` on a write view (`begin_view`) and commit what it wrote.

        A commit appends what `body` wrote to the commit log, flushed when `sync`, and checkpoints the
        log into LMDB when that leaves it `checkpoint_bytes` long. A commit that writes about `need` >=
        `checkpoint_bytes`, or with `direct`, checkpoints first and runs `body` on LMDB's transaction
        itself, in the same LMDB commit (growing the map and re-running both if it fills). `first` is a
        write transaction and view from `begin_view` that the caller has already read through; after
        growing the map the retry runs in a fresh one, and only if `still_valid(fresh view)` says the
        caller's reads still hold (else nothing is written: `RefMoved`, a lost race the caller
        retries). With `sync`, a commit is flushed even if this environment was opened non-durable.
        """
        ltxn, view = first if first is not None else self.begin_view(True)
        if not (direct or need >= self.checkpoint_bytes):
            try:
                body(view)
                ops = view.delta_ops()
                if ops:
                    self.log.append(view.overlay, ops, sync, self._holds(ltxn))
            finally:
                self.end(ltxn, commit=False)
            if ops and view.overlay.end >= self.checkpoint_bytes:
                # The commit is in the log, and stays there if the checkpoint fails (a full disk): the
                # caller's commit succeeded, and the next commit checkpoints again.
                with suppress(CtxStoreError):
                    self.checkpoint()
            return
        made: list[int] = []

        def whole(t: lmdb.Transaction[bytes]) -> None:
            overlay = view.overlay
            made.clear()
            if not overlay.empty():
                made.append(checkpoint_into(t, overlay, self.handles, self.dbs[LOG]))
                self.log.create(made[0])  # before LMDB names it: a named generation's log always exists
            body(t)

        while True:
            seen = self.map_size()
            if self._attempt(ltxn, whole):
                break
            self.grow(seen, need)
            ltxn, view = self.begin_view(True)
            # Another writer may have run while the writer slot was free: apply only if what the caller
            # read (and based its writes on) is unchanged.
            if still_valid is not None and not still_valid(view):
                self.end(ltxn, commit=False)
                # A lost race, not an engine failure: the caller re-reads and tries again.
                raise RefMoved("another writer changed what this transaction had read while the store map "
                               "grew; nothing was written; read again and retry")
        if (sync or made) and not self.durable:
            self.sync()  # a durable store sharing an environment opened non-durable; or a checkpoint
        if made:
            self.log.checkpointed(made[0])

    def checkpoint(self) -> None:
        """Apply the commit log to LMDB in one durable LMDB commit and start an empty log (nothing to do if
        the log is empty)."""
        self.run_write(lambda t: None, need=2 * CHECKPOINT_BYTES, sync=False, direct=True)

    # -- the whole environment -------------------------------------------------------------------------

    def map_size(self) -> int:
        """The current size of this process's map, in bytes."""
        return int(self.env.info()["map_size"])

    def files(self) -> list[str]:
        """The files that hold the store's data: LMDB's data file and the current generation's commit log."""
        txn = self.begin(False)
        try:
            generation = generation_of(txn, self.dbs[LOG])
        finally:
            self.end(txn, commit=False)
        paths = [os.path.join(self.path, _DATA_FILE), os.path.join(self.path, log_name(generation))]
        return [p for p in paths if os.path.exists(p)]

    def file_bytes(self) -> int:
        """Bytes of the data file in use (the pages up to the last one written) and of the commit log."""
        return int((self.env.info()["last_pgno"] + 1) * self.page_size) + self.log.size()

    def sync(self) -> None:
        """Flush every commit so far to disk."""
        self.log.flush()
        try:
            self.env.sync(True)
        except lmdb.Error as exc:
            raise store_error(exc, self.path, "flushing to disk") from None

    def close(self) -> None:
        """Close LMDB's environment and the commit log's file."""
        self.log.close()
        self.env.close()


# -- one environment per process and path -------------------------------------------------------------

_registry: dict[tuple[str, int], Environment] = {}
_registry_lock = threading.Lock()
# Environments inherited across fork with a transaction open in some thread: closing them could release
# the parent's reader slots or wait on its writer, so the child only keeps them from the collector.
_inherited: list[Environment] = []


def _after_fork_in_child() -> None:
    global _registry_lock
    _registry_lock = threading.Lock()
    for env in _registry.values():
        if env.lock.idle():
            # Nothing of the parent's is in flight: closing only unmaps and drops this process's file
            # handles (fcntl locks are not inherited), and frees the path so the child can open it.
            try:
                env.close()
            except lmdb.Error:
                _inherited.append(env)
        else:
            _inherited.append(env)
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def acquire(path: str, map_size: int, durable: bool, readonly: bool) -> Environment:
    """This process's environment for `path`, opened on first use; pair each call with `release`."""
    key = (path, os.getpid())
    with _registry_lock:
        env = _registry.get(key)
        if env is None:
            env = Environment(path, map_size, durable, readonly)
            _registry[key] = env
        elif env.readonly and not readonly:
            raise StoreError(f"{path} is already open read-only in this process; close that store before "
                             "opening it for writing")
        env.users += 1
        return env


def release(env: Environment) -> None:
    """Give back one `acquire`; the last user's release closes the environment."""
    with _registry_lock:
        env.users -= 1
        key = (env.path, env.pid)
        if env.users <= 0 and _registry.get(key) is env:
            del _registry[key]
            env.close()
