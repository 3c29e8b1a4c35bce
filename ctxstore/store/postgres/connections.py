"""Connections to PostgreSQL: a small pool, what each thread holds, the cache of objects read, and the
one translation of psycopg's errors into `StoreError` naming the server."""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg
import psycopg.conninfo
import psycopg.errors

from ...errors import InvalidInput, StoreError
from ...ids import ObjectId
from .schema import STAGE

__all__ = ["Connections", "ObjectCache", "Pool", "ThreadState", "first_line", "last_rows", "rollback"]

_T = TypeVar("_T")
_INHERITED: list[psycopg.Connection[Any]] = []
"""The connections a forked child found in its pools (see `Pool`)."""
POOL_WAIT = 60.0
"""Seconds a caller waits for a free connection before `StoreError`."""
LOCK_TIMEOUT = "120s"
"""How long a statement waits for a lock (PostgreSQL's lock_timeout) before `StoreError`."""


class ObjectCache:
    """Verified canonical bytes by object id, least recently used first out, bounded in bytes."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._held: OrderedDict[ObjectId, bytes] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, oid: ObjectId) -> bytes | None:
        with self._lock:
            data = self._held.get(oid)
            if data is not None:
                self._held.move_to_end(oid)
            return data

    def put(self, oid: ObjectId, data: bytes) -> None:
        if len(data) > self._limit // 4:
            return
        with self._lock:
            if oid in self._held:
                return
            self._held[oid] = data
            self._bytes += len(data)
            while self._bytes > self._limit:
                _old, gone = self._held.popitem(last=False)
                self._bytes -= len(gone)


class Pool:
    """A small thread-safe pool of autocommit connections (transactions are begun explicitly).

    Fork-safe: a forked child never uses or closes the connections it inherited (they are the parent's
    sessions, and a Terminate message sent from the child would end them); it opens its own.
    """

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], size: int, where: str) -> None:
        self._connect = connect
        self._idle: list[psycopg.Connection[Any]] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._size = size
        self._where = where
        self._pid = os.getpid()
        self.closed = False

    def _forked(self) -> None:
        """In a forked child: let go of the parent's connections without touching their sessions."""
        # The lock and the semaphore may have been held by threads that do not exist in this process.
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self._size)
        inherited, self._idle = self._idle, []
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            for conn in inherited:
                # This process's copy of the socket now points at /dev/null: whatever libpq writes when
                # the object is finalized (its Terminate message) goes nowhere, not to the server.
                with contextlib.suppress(OSError, psycopg.Error):
                    os.dup2(devnull, conn.fileno())
        finally:
            os.close(devnull)
        _INHERITED.extend(inherited)  # never finalized early: nothing to gain, and no warnings
        self._pid = os.getpid()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._pid != os.getpid():
            self._forked()
        if self.closed:
            raise StoreError(f"the PostgreSQL database at {self._where} is closed; open it again")
        if not self._slots.acquire(timeout=POOL_WAIT):
            raise StoreError(f"all {self._size} connections to PostgreSQL at {self._where} stayed busy for "
                             f"{POOL_WAIT:.0f}s; open the database with a larger pool_size")
        conn: psycopg.Connection[Any] | None = None
        try:
            with self._lock:
                while self._idle and conn is None:
                    conn = self._idle.pop()
                    if conn.closed:
                        conn = None
            if conn is None:
                conn = self._connect()
            yield conn
        finally:
            if conn is not None:
                healthy = not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                if healthy and not self.closed:
                    with self._lock:
                        self._idle.append(conn)
                else:
                    conn.close()
            self._slots.release()

    def drop_idle(self) -> None:
        """Close every idle connection: one was found dropped by the server, so the others likely were
        too (a restart ends them all)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        if self._pid != os.getpid():
            self._forked()
        self.closed = True
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class ThreadState(threading.local):
    """What one thread holds of a database: the connection of its open write transaction, if any
    (one-shot reads in that thread reuse it rather than wait for a second connection), the repositories
    it is writing to (a nested write transaction would wait for its own lock), and the connections of
    its `maintenance()` blocks."""

    def __init__(self) -> None:
        self.conns: list[psycopg.Connection[Any]] = []
        self.writing: set[int] = set()
        self.pinned: dict[int, psycopg.Connection[Any]] = {}


class Connections:
    """The way to one PostgreSQL database: its URL (never shown; `where` is ``host:port/dbname``), a pool
    of autocommit connections (each set up with a lock timeout and the staging table), and what each
    thread holds of them."""

    def __init__(self, url: str, *, pool_size: int, connect_timeout: float, application_name: str) -> None:
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"not a PostgreSQL URL: {url!r}")
        try:
            info = psycopg.conninfo.conninfo_to_dict(url)
        except psycopg.Error as exc:
            raise InvalidInput(f"not a PostgreSQL URL ({exc}); use postgresql://user@host:port/database") from None
        self.where = f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"
        self._url = url
        self._timeout = connect_timeout
        self._application = application_name
        self.local = ThreadState()
        self.pool = Pool(self._connect, max(2, pool_size), self.where)

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            conn = psycopg.connect(self._url, autocommit=True, connect_timeout=max(1, int(self._timeout)),
                                   application_name=self._application)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to PostgreSQL at {self.where}: {first_line(exc)}") from None
        try:
            conn.execute(f"SET lock_timeout = '{LOCK_TIMEOUT}'")
            conn.execute(STAGE)
        except psycopg.Error as exc:
            conn.close()
            raise StoreError(f"PostgreSQL at {self.where} refused the session set-up: {first_line(exc)}") from None
        return conn

    def failed(self, what: str, exc: psycopg.Error) -> StoreError:
        """The `StoreError` for a PostgreSQL failure while doing `what`."""
        if isinstance(exc, psycopg.errors.LockNotAvailable):
            return StoreError(f"PostgreSQL at {self.where}: {what} waited {LOCK_TIMEOUT} for a lock another "
                              "writer holds; try again")
        return StoreError(f"PostgreSQL at {self.where} failed while {what}: {first_line(exc)}")

    @contextmanager
    def connection(self, what: str) -> Iterator[psycopg.Connection[Any]]:
        """A connection for one-shot statements: the thread's open write transaction's if it has one."""
        if self.local.conns:
            try:
                yield self.local.conns[-1]
            except psycopg.Error as exc:
                raise self.failed(what, exc) from None
            return
        with self.pool.connection() as conn:
            try:
                yield conn
            except psycopg.Error as exc:
                raise self.failed(what, exc) from None

    def run(self, what: str, read: Callable[[psycopg.Connection[Any]], _T]) -> _T:
        """`read(conn)` on a connection for one-shot statements (as `connection`); read-only work only:
        if the pooled connection it got had been dropped by the server (a restart, an idle timeout), it
        runs once more on a new one."""
        if self.local.conns:
            with self.connection(what) as conn:
                return read(conn)
        for attempt in (0, 1):
            with self.pool.connection() as conn:
                try:
                    return read(conn)
                except psycopg.OperationalError as exc:
                    if attempt == 0 and conn.closed:
                        self.pool.drop_idle()
                        continue  # the pool drops this one on the way back
                    raise self.failed(what, exc) from None
                except psycopg.Error as exc:
                    raise self.failed(what, exc) from None
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def holding(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Mark `conn` as this thread's transaction connection while the block runs."""
        self.local.conns.append(conn)
        try:
            yield
        finally:
            self.local.conns.pop()

    @property
    def closed(self) -> bool:
        """Whether the pool was closed."""
        return self.pool.closed

    def close(self) -> None:
        """Close every idle connection and refuse new ones (those in use close when they come back)."""
        self.pool.close()


def first_line(exc: BaseException) -> str:
    """An exception's type and the first line of its message, for a `StoreError` that names the cause."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def last_rows(cur: psycopg.Cursor[Any]) -> list[tuple[Any, ...]]:
    """The rows of the last statement a multi-statement execute ran."""
    while cur.nextset():
        pass
    return cur.fetchall()


def rollback(conn: psycopg.Connection[Any]) -> None:
    """End `conn`'s open transaction, if any; a connection that cannot is closed (the pool drops it)."""
    try:
        if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.execute("ROLLBACK")
    except psycopg.Error:
        conn.close()  # the pool drops it

