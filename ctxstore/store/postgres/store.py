"""One repository in PostgreSQL: `PostgresStore`, a `TransactionalStore`, and the snapshot its
transactions read through (the isolation, compare-and-swap and lock rules: the package's docstring)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import psycopg

from ...errors import CtxStoreError, DamagedData, MissingObject, RefMoved, StoreError
from ...format import codec
from ...format.codec import check_time_ms
from ...format.codec import now_ms as _now_ms
from ...format.objects import revision_header
from ...ids import OID_SIZE, ObjectId, object_id, to_hex
from .. import records as rec
from ..base import BatchWrites, StoreStats, Transaction, WriteSet, check_oid
from ..blobs import BlobBucket, blob_key
from .connections import Connections, ObjectCache, last_rows, rollback
from .schema import BATCH, GC_LOCK, SCHEMA, WRITER_LOCK, is_blob, lock_key

__all__ = ["PostgresStore", "StoreHost"]

_COPY_AT = 16
"""Write sets with more objects than this are sent with COPY; smaller ones with one INSERT."""


class StoreHost(Protocol):
    """What a store needs of the database it is in (`PostgresDatabase`)."""

    connections: Connections
    cache: ObjectCache
    blobs: BlobBucket | None
    blob_threshold: int
    bucket_every_kind: bool


class PostgresStore(BatchWrites):
    """One repository of a `PostgresDatabase`: a `TransactionalStore` (``db.create(name)``, ``db.open(name)``).

    `clock` (ms since the epoch) stamps object write times; tests pass a fake one. Safe across threads;
    a thread may not open a write transaction inside one it holds on the same repository (`StoreError`).
    `close()` ends this handle only; the database stays open.
    """

    def __init__(self, db: StoreHost, name: str, repo: int, *, clock: Callable[[], int] | None = None) -> None:
        self.db = db
        self.name = name
        self.repo = repo
        self._key = lock_key(name)
        self._clock = clock or _now_ms
        self._closed = False

    def __repr__(self) -> str:
        return f"PostgresStore({self.db.connections.where!r}, {self.name!r})"

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the store of repository {self.name} is closed; open it again")
        if self.db.connections.closed:
            raise StoreError(f"the PostgreSQL database at {self.db.connections.where} is closed; open it again")

    # -- transactions --------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Transaction]:
        """A transaction; with write=True its writes apply atomically when the block exits normally.

        Write transactions on one repository run one at a time across every process (keep them short);
        reads never wait. A thread may not nest a write transaction inside another on this repository.
        """
        self._check_open()
        local = self.db.connections.local
        if write and self.repo in local.writing:
            raise StoreError(f"a write transaction on repository {self.name} is already open in this thread; "
                             "do this work inside that transaction")
        pinned = local.pinned.get(self.repo) if write else None
        if pinned is not None:
            self._begin(pinned, write, retry=False)
            with self._run(pinned, write) as txn:
                yield txn
            return
        with self._begun(write) as conn, self._run(conn, write) as txn:
            yield txn

    @contextmanager
    def _begun(self, write: bool) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection with the transaction begun; a connection the server had dropped (a
        restart, an idle timeout) is replaced once, since nothing was done on it yet."""
        for attempt in (0, 1):
            with self.db.connections.pool.connection() as conn:
                if self._begin(conn, write, retry=attempt == 0):
                    yield conn
                    return

    def _begin(self, conn: psycopg.Connection[Any], write: bool, *, retry: bool) -> bool:
        """Begin the transaction on `conn` (a write one takes its locks); False if the connection turned
        out dead and `retry` allows another one."""
        try:
            if write:
                found = last_rows(conn.execute(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; "
                    f"SELECT pg_advisory_xact_lock_shared({GC_LOCK}, {self._key}); "
                    f"SELECT pg_advisory_xact_lock({WRITER_LOCK}, {self._key}) FROM {SCHEMA}.repositories "
                    f"WHERE id = {self.repo} FOR KEY SHARE"))
                if not found:
                    conn.execute("ROLLBACK")
                    raise StoreError(f"repository {self.name} was dropped from the PostgreSQL database at "
                                     f"{self.db.connections.where}")
            else:
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        except psycopg.OperationalError as exc:
            if retry and conn.closed:
                self.db.connections.pool.drop_idle()
                return False
            rollback(conn)
            raise self.db.connections.failed(f"beginning a transaction on repository {self.name}", exc) from None
        except psycopg.Error as exc:
            rollback(conn)
            raise self.db.connections.failed(f"beginning a transaction on repository {self.name}", exc) from None
        return True

    @contextmanager
    def _run(self, conn: psycopg.Connection[Any], write: bool) -> Iterator[Transaction]:
        """The transaction begun on `conn`: yield it, then commit its writes (or roll back)."""
        db, local = self.db.connections, self.db.connections.local
        snap = _Snapshot(self, conn)
        txn = Transaction(snap, write=write)
        if write:
            local.writing.add(self.repo)
        try:
            # One-shot reads in this thread go through a write transaction's connection (they read what
            # is committed, as a connection of their own would); a read transaction's snapshot could be
            # older than writes this thread made since, so those get their own.
            with db.holding(conn) if write else contextlib.nullcontext():
                try:
                    yield txn
                except BaseException:
                    rollback(conn)
                    raise
                if write:
                    self._commit(conn, txn, snap)
                else:
                    conn.execute("ROLLBACK")
        except psycopg.Error as exc:
            rollback(conn)
            raise db.failed(f"committing a transaction on repository {self.name}", exc) from None
        finally:
            txn.end()
            if write:
                local.writing.discard(self.repo)

    def _commit(self, conn: psycopg.Connection[Any], txn: Transaction, snap: _Snapshot) -> None:
        w = txn.pending_writes()
        if not w:
            conn.execute("ROLLBACK")
            return
        try:
            now = check_time_ms(self._clock(), "the store's clock")
            deleted_in_bucket = self._apply(conn, w, now, snap)
        except BaseException:
            rollback(conn)
            raise
        conn.execute("COMMIT")
        if deleted_in_bucket and self.repo in self.db.connections.local.pinned:
            # Under maintenance() (gc's lock held exclusive): delete the keys now; otherwise they stay
            # until the next gc's sweep, since a writer may be about to rely on them.
            self._delete_keys(deleted_in_bucket)

    def _apply(self, conn: psycopg.Connection[Any], w: WriteSet, now: int, snap: _Snapshot) -> list[ObjectId]:
        """Write a transaction's buffered writes inside its SQL transaction; returns the deleted objects
        whose values were in the bucket."""
        repo = self.repo
        in_bucket: list[ObjectId] = []
        if w.deleted:
            gone = list(w.deleted)
            for start in range(0, len(gone), BATCH):
                rows = conn.execute(f"DELETE FROM {SCHEMA}.objects WHERE repo = %s AND oid = ANY(%s::bytea[]) "
                                    "RETURNING oid, value IS NULL", (repo, gone[start:start + BATCH])).fetchall()
                in_bucket.extend(ObjectId(bytes(oid)) for oid, bucketed in rows if bucketed)
        if len(w.objects) > _COPY_AT:
            self._write_objects(conn, w, now)  # COPY, which a pipeline cannot carry
        # The rest goes in one pipeline: its statements travel together and their answers come back
        # together, one round trip for a push's objects, ref moves and reflog instead of one each. The
        # compare-and-swaps are checked when it is synced, still before the COMMIT.
        with conn.pipeline():
            if w.objects and len(w.objects) <= _COPY_AT:
                self._write_objects(conn, w, now)
            checks = [self._move_ref(conn, snap, name, target) for name, target in w.refs.items()]
            self._write_logs(conn, w)
        for check in checks:
            check()
        return in_bucket

    def _write_logs(self, conn: psycopg.Connection[Any], w: WriteSet) -> None:
        """A transaction's reflog deletions and appends, and its config."""
        repo = self.repo
        if w.reflog_cleared:
            conn.execute(f"DELETE FROM {SCHEMA}.reflog WHERE repo = %s AND name = ANY(%s::text[])",
                         (repo, sorted(w.reflog_cleared)))
        appends = [(repo, name, record) for name, records in w.reflog_appends.items() for record in records]
        if appends:
            with conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {SCHEMA}.reflog (repo, name, record) VALUES (%s, %s, %s)", appends)
        for key, value in w.config.items():
            if value is None:
                conn.execute(f"DELETE FROM {SCHEMA}.config WHERE repo = %s AND key = %s", (repo, key))
            else:
                conn.execute(f"INSERT INTO {SCHEMA}.config (repo, key, value) VALUES (%s, %s, %s) "
                             "ON CONFLICT (repo, key) DO UPDATE SET value = EXCLUDED.value", (repo, key, value))

    def _write_objects(self, conn: psycopg.Connection[Any], w: WriteSet, now: int) -> None:
        pack = rec.packer(None, 0)
        rows: list[tuple[bytes, int, int, bytes | None]] = []
        large: dict[ObjectId, bytes] = {}
        bucket, threshold, every = self.db.blobs, self.db.blob_threshold, self.db.bucket_every_kind
        for oid, data in w.objects.items():
            value = pack(data)
            if bucket is not None and len(value) > threshold and (every or is_blob(data)):
                large[oid] = value
                rows.append((oid, len(data), len(value), None))
            else:
                rows.append((oid, len(data), len(value), value))
        if large:
            held = {bytes(r[0]) for r in conn.execute(
                f"SELECT oid FROM {SCHEMA}.objects WHERE repo = %s AND oid = ANY(%s::bytea[])",
                (self.repo, list(large)))}
            assert bucket is not None
            name = self.name
            # Before the commit that names them; in parallel, since each is a round trip to the service.
            _each(lambda item: bucket.put_if_absent(blob_key(name, item[0]), item[1]),
                  [(oid, value) for oid, value in large.items() if oid not in held])
        upsert = (f"INSERT INTO {SCHEMA}.objects (repo, oid, written_at, size, stored_size, value) "
                  "SELECT %s, oid, %s, size, stored_size, value FROM {source} "
                  "ON CONFLICT (repo, oid) DO UPDATE SET written_at = EXCLUDED.written_at "
                  f"WHERE {SCHEMA}.objects.written_at <> EXCLUDED.written_at")
        if len(rows) <= _COPY_AT:
            columns = list(zip(*rows, strict=True))
            conn.execute(upsert.format(source="unnest(%s::bytea[], %s::bigint[], %s::bigint[], %s::bytea[]) "
                                              "AS s (oid, size, stored_size, value)"),
                         (self.repo, now, *(list(c) for c in columns)))
            return
        with conn.cursor() as cur:
            with cur.copy("COPY ctxstore_stage (oid, size, stored_size, value) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["bytea", "int8", "int8", "bytea"])
                for row in rows:
                    copy.write_row(row)
            cur.execute(upsert.format(source="ctxstore_stage"), (self.repo, now))

    def _move_ref(self, conn: psycopg.Connection[Any], snap: _Snapshot, name: str,
                  target: ObjectId | None) -> Callable[[], None]:
        """Send one ref move, as a compare-and-swap against what the transaction read of it; returns the
        check to call once its answer is in (`RefMoved` if the ref holds something else now). A ref the
        transaction never read is simply set."""
        repo, table = self.repo, f"{SCHEMA}.refs"
        expected = snap.seen.get(name, _UNREAD)
        if expected is _UNREAD:
            if target is None:
                conn.execute(f"DELETE FROM {table} WHERE repo = %s AND name = %s", (repo, name))
            else:
                conn.execute(f"INSERT INTO {table} (repo, name, target) VALUES (%s, %s, %s) "
                             "ON CONFLICT (repo, name) DO UPDATE SET target = EXCLUDED.target", (repo, name, target))
            return _nothing
        if expected is None and target is None:
            cur = conn.execute(f"SELECT 1 FROM {table} WHERE repo = %s AND name = %s", (repo, name))
            moved: Callable[[], bool] = lambda: cur.rowcount != 0  # noqa: E731
        elif expected is None:
            cur = conn.execute(f"INSERT INTO {table} (repo, name, target) VALUES (%s, %s, %s) "
                               "ON CONFLICT (repo, name) DO NOTHING", (repo, name, target))
            moved = lambda: cur.rowcount != 1  # noqa: E731
        elif target is None:
            cur = conn.execute(f"DELETE FROM {table} WHERE repo = %s AND name = %s AND target = %s",
                               (repo, name, expected))
            moved = lambda: cur.rowcount != 1  # noqa: E731
        else:
            cur = conn.execute(f"UPDATE {table} SET target = %s WHERE repo = %s AND name = %s AND target = %s",
                               (target, repo, name, expected))
            moved = lambda: cur.rowcount != 1  # noqa: E731

        def check() -> None:
            if not moved():
                return
            row = conn.execute(f"SELECT target FROM {table} WHERE repo = %s AND name = %s", (repo, name)).fetchone()
            current = None if row is None else ObjectId(bytes(row[0]))
            raise RefMoved(f"ref {name} of repository {self.name} moved to {_short(current)} since this "
                           f"transaction read it at {_short(expected)}; nothing was written; re-read and retry",
                           ref=name, current=None if current is None else to_hex(current),
                           expected=None if expected is None else to_hex(expected))

        return check

    @contextmanager
    def maintenance(self) -> Iterator[None]:
        """Hold the repository's gc lock exclusive (what `store.base.maintenance_lock` takes): no write
        transaction of any process runs meanwhile, so deletions and their bucket keys cannot race a
        writer. Write transactions of this thread inside the block run on the lock's own connection; the
        bucket keys of objects they delete are deleted after their commit, and when the block ends every
        key of the repository's part of the bucket that no row names is deleted too (left by writes that
        failed after their bucket writes, or by deletions outside gc)."""
        self._check_open()
        local = self.db.connections.local
        if self.repo in local.pinned or self.repo in local.writing:
            raise StoreError(f"repository {self.name} is already under maintenance or being written in this "
                             "thread")
        with self.db.connections.pool.connection() as conn:
            try:
                conn.execute("SELECT pg_advisory_lock(%s, %s)", (GC_LOCK, self._key))
            except psycopg.Error as exc:
                raise self.db.connections.failed(f"taking the gc lock of repository {self.name}", exc) from None
            local.pinned[self.repo] = conn
            try:
                yield
                self._sweep(conn)
            finally:
                del local.pinned[self.repo]
                try:
                    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                        conn.execute("ROLLBACK")
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (GC_LOCK, self._key))
                except psycopg.Error:
                    conn.close()  # the session ends, and its lock with it

    def _sweep(self, conn: psycopg.Connection[Any]) -> int:
        """Delete the bucket keys of this repository that no object row names (under the gc lock)."""
        bucket = self.db.blobs
        if bucket is None:
            return 0
        prefix = f"{self.name}/"
        found: dict[bytes, str] = {}
        for key in bucket.keys(prefix):
            tail = key[len(prefix):]
            if len(tail) == 2 * OID_SIZE and re.fullmatch(r"[0-9a-f]+", tail):
                found[bytes.fromhex(tail)] = key
        if not found:
            return 0
        named: set[bytes] = set()
        oids = list(found)
        try:
            for start in range(0, len(oids), BATCH):
                named.update(bytes(r[0]) for r in conn.execute(
                    f"SELECT oid FROM {SCHEMA}.objects WHERE repo = %s AND oid = ANY(%s::bytea[]) AND value IS NULL",
                    (self.repo, oids[start:start + BATCH])))
        except psycopg.Error as exc:
            raise self.db.connections.failed(f"sweeping the bucket of repository {self.name}", exc) from None
        orphans = [key for oid, key in found.items() if oid not in named]
        _each(bucket.delete, orphans)
        return len(orphans)

    def _delete_keys(self, oids: Iterable[ObjectId]) -> None:
        bucket, name = self.db.blobs, self.name
        if bucket is not None:
            _each(lambda oid: bucket.delete(blob_key(name, oid)), list(oids))

    # -- reading -------------------------------------------------------------------------------------

    def _rows(self, sql: str, params: Sequence[Any], what: str) -> list[tuple[Any, ...]]:
        self._check_open()
        return self.db.connections.run(what, lambda conn: conn.execute(sql, params).fetchall())

    def read_objects(self, conn: psycopg.Connection[Any], oids: Sequence[ObjectId]) -> dict[bytes, bytes]:
        """The canonical bytes of those of `oids` the repository holds, through `conn`, checked against
        their ids; cached bytes are not read again (only whether the row is there)."""
        cache = self.db.cache
        out: dict[bytes, bytes] = {}
        for start in range(0, len(oids), BATCH):
            batch = list(dict.fromkeys(oids[start:start + BATCH]))
            cached = {oid: data for oid in batch if (data := cache.get(oid)) is not None}
            rows = conn.execute(
                f"SELECT oid, CASE WHEN oid = ANY(%s::bytea[]) THEN NULL ELSE value END, value IS NULL "
                f"FROM {SCHEMA}.objects WHERE repo = %s AND oid = ANY(%s::bytea[])",
                (list(cached), self.repo, batch)).fetchall()
            fetch = [ObjectId(bytes(raw)) for raw, _value, in_bucket in rows
                     if in_bucket and bytes(raw) not in cached]
            fetched = dict(zip(fetch, _each(self._fetch, fetch), strict=True))
            for raw, value, _in_bucket in rows:
                oid = ObjectId(bytes(raw))
                data = cached.get(oid)
                if data is None:
                    held = fetched.get(oid)
                    data = self._decoded(oid, held if held is not None else bytes(value))
                out[oid] = data
        return out

    def _fetch(self, oid: ObjectId) -> bytes:
        """The stored value of an object kept in the bucket."""
        bucket = self.db.blobs
        if bucket is None:
            raise StoreError(f"object {to_hex(oid)} of repository {self.name} is kept in a blob bucket, and "
                             "this database was opened without one; pass blobs=S3Bucket(...)")
        try:
            return bucket.get(blob_key(self.name, oid))
        except MissingObject:
            raise DamagedData(f"object {to_hex(oid)} of repository {self.name} is recorded as kept in the "
                              "blob bucket, and the bucket does not hold it; run `ctxstore fsck`") from None

    def _decoded(self, oid: ObjectId, value: bytes) -> bytes:
        """An object's canonical bytes from its stored value, checked against its id (and cached)."""
        try:
            data = codec.decompress(value)
        except CtxStoreError as exc:
            raise DamagedData(f"stored object {to_hex(oid)} is corrupt ({exc}); run `ctxstore fsck`") from None
        if object_id(data) != oid:
            raise DamagedData(f"stored object {to_hex(oid)} is corrupt: its bytes do not hash to its id; "
                              "run `ctxstore fsck`")
        self.db.cache.put(oid, data)
        return data

    def get(self, oid: ObjectId) -> bytes:
        """The canonical bytes of an object; `MissingObject` if absent."""
        check_oid(oid)
        return self.get_many([oid])[0]

    def get_many(self, oids: Iterable[ObjectId]) -> list[bytes]:
        """The canonical bytes of objects, in order, read in batches of one statement each;
        `MissingObject` names the first one absent."""
        asked = list(oids)
        for oid in asked:
            if type(oid) is not bytes or len(oid) != OID_SIZE:
                check_oid(oid)  # raises, saying what is wrong
        self._check_open()
        if not asked:
            return []
        found = self.db.connections.run(f"reading objects of repository {self.name}",
                                        lambda conn: self.read_objects(conn, asked))
        out: list[bytes] = []
        for oid in asked:
            data = found.get(oid)
            if data is None:
                raise MissingObject(f"object {to_hex(oid)} is not in the store")
            out.append(data)
        return out

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        check_oid(oid)
        return bool(self._rows(f"SELECT 1 FROM {SCHEMA}.objects WHERE repo = %s AND oid = %s", (self.repo, oid),
                               "looking up an object"))

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int]:
        """A revision's parent and `createdAt` (`HeaderSource`), from its bytes (kept whole here, and
        cached); `MissingObject` if absent, `InvalidObject` if it is not a revision."""
        return revision_header(self.get(oid))

    def __contains__(self, oid: object) -> bool:
        return type(oid) is bytes and len(oid) == OID_SIZE and self.has(ObjectId(oid))

    def __iter__(self) -> Iterator[ObjectId]:
        """Every object id, read in batches (no transaction stays open between them)."""
        after = b""
        while True:
            rows = self._rows(f"SELECT oid FROM {SCHEMA}.objects WHERE repo = %s AND oid > %s ORDER BY oid "
                              "LIMIT %s", (self.repo, after, BATCH), "listing objects")
            for (oid,) in rows:
                yield ObjectId(bytes(oid))
            if len(rows) < BATCH:
                return
            after = bytes(rows[-1][0])

    def __len__(self) -> int:
        rows = self._rows(f"SELECT count(*) FROM {SCHEMA}.objects WHERE repo = %s", (self.repo,), "counting objects")
        return int(rows[0][0])

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        check_oid(oid)
        rows = self._rows(f"SELECT written_at FROM {SCHEMA}.objects WHERE repo = %s AND oid = %s",
                          (self.repo, oid), "reading a write time")
        return int(rows[0][0]) if rows else None

    def stored_size(self, oid: ObjectId) -> int:
        """Bytes the object's stored value occupies (codec byte and compressed bytes, in the bucket or not)."""
        check_oid(oid)
        rows = self._rows(f"SELECT stored_size FROM {SCHEMA}.objects WHERE repo = %s AND oid = %s",
                          (self.repo, oid), "reading a stored size")
        if not rows:
            raise MissingObject(f"object {to_hex(oid)} is not in the store")
        return int(rows[0][0])

    def stats(self) -> StoreStats:
        """Object count, canonical and stored bytes; `file_bytes` is what the repository's rows occupy in
        PostgreSQL plus its values in the bucket."""
        rows = self._rows(
            f"SELECT count(*), coalesce(sum(size), 0), coalesce(sum(stored_size), 0), "
            f"coalesce(sum(pg_column_size(o.*)), 0), coalesce(sum(stored_size) FILTER (WHERE value IS NULL), 0) "
            f"FROM {SCHEMA}.objects o WHERE repo = %s", (self.repo,), "measuring the repository")
        count, size, stored, row_bytes, bucketed = (int(v) for v in rows[0])
        other = self._rows(
            f"SELECT (SELECT coalesce(sum(pg_column_size(r.*)), 0) FROM {SCHEMA}.refs r WHERE repo = %s) + "
            f"(SELECT coalesce(sum(pg_column_size(l.*)), 0) FROM {SCHEMA}.reflog l WHERE repo = %s) + "
            f"(SELECT coalesce(sum(pg_column_size(c.*)), 0) FROM {SCHEMA}.config c WHERE repo = %s)",
            (self.repo, self.repo, self.repo), "measuring the repository")
        return StoreStats(objects=count, object_bytes=size, stored_bytes=stored,
                          file_bytes=row_bytes + bucketed + int(other[0][0]))

    # -- lifecycle -----------------------------------------------------------------------------------

    def close(self) -> None:
        """End this handle (the database and its other stores stay open)."""
        self._closed = True

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_UNREAD: Any = object()
_T = TypeVar("_T")
_R = TypeVar("_R")
_BUCKET_WORKERS = 8


def _each(call: Callable[[_T], _R], items: Sequence[_T]) -> list[_R]:
    """`call` on every item, in order; several at once when there are several (each is a request to the
    bucket's service, mostly waiting)."""
    if len(items) <= 1:
        return [call(item) for item in items]
    with ThreadPoolExecutor(min(_BUCKET_WORKERS, len(items)), thread_name_prefix="ctxstore-bucket") as pool:
        return list(pool.map(call, items))


def _nothing() -> None:
    """The check of a ref move that needs none."""


def _short(oid: ObjectId | None) -> str:
    return "nothing (no such ref)" if oid is None else to_hex(oid)[:12]


class _Snapshot:
    """A repository seen from inside one SQL transaction: what a `Transaction` reads through. It also
    remembers the first value it read of each ref, for the compare-and-swap at commit."""

    __slots__ = ("_c", "_s", "seen")

    def __init__(self, store: PostgresStore, conn: psycopg.Connection[Any]) -> None:
        self._s = store
        self._c = conn
        self.seen: dict[str, ObjectId | None] = {}

    def _rows(self, sql: str, params: Sequence[Any], what: str) -> list[tuple[Any, ...]]:
        try:
            return self._c.execute(sql, params).fetchall()
        except psycopg.Error as exc:
            raise self._s.db.connections.failed(what, exc) from None

    def get(self, oid: ObjectId) -> bytes | None:
        try:
            return self._s.read_objects(self._c, [oid]).get(oid)
        except psycopg.Error as exc:
            raise self._s.db.connections.failed("reading an object", exc) from None

    def has(self, oid: ObjectId) -> bool:
        return bool(self._rows(f"SELECT 1 FROM {SCHEMA}.objects WHERE repo = %s AND oid = %s",
                               (self._s.repo, oid), "looking up an object"))

    def has_many(self, oids: list[ObjectId]) -> set[ObjectId]:
        found: set[ObjectId] = set()
        for start in range(0, len(oids), BATCH):
            found.update(ObjectId(bytes(r[0])) for r in self._rows(
                f"SELECT oid FROM {SCHEMA}.objects WHERE repo = %s AND oid = ANY(%s::bytea[])",
                (self._s.repo, oids[start:start + BATCH]), "looking up objects"))
        return found

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int] | None:
        data = self.get(oid)
        return None if data is None else revision_header(data)

    def written_at(self, oid: ObjectId) -> int | None:
        rows = self._rows(f"SELECT written_at FROM {SCHEMA}.objects WHERE repo = %s AND oid = %s",
                          (self._s.repo, oid), "reading a write time")
        return int(rows[0][0]) if rows else None

    def get_ref(self, name: str) -> ObjectId | None:
        rows = self._rows(f"SELECT target FROM {SCHEMA}.refs WHERE repo = %s AND name = %s",
                          (self._s.repo, name), "reading a ref")
        target = ObjectId(bytes(rows[0][0])) if rows else None
        self.seen.setdefault(name, target)
        return target

    def refs(self, prefix: str) -> dict[str, ObjectId]:
        rows = self._rows(f"SELECT name, target FROM {SCHEMA}.refs WHERE repo = %s AND starts_with(name, %s) "
                          "ORDER BY name", (self._s.repo, prefix), "listing refs")
        found = {str(name): ObjectId(bytes(target)) for name, target in rows}
        for name, target in found.items():
            self.seen.setdefault(name, target)
        return found

    def reflog(self, name: str) -> list[bytes]:
        rows = self._rows(f"SELECT record FROM {SCHEMA}.reflog WHERE repo = %s AND name = %s ORDER BY seq DESC",
                          (self._s.repo, name), "reading a reflog")
        return [bytes(r[0]) for r in rows]

    def reflog_names(self) -> list[str]:
        rows = self._rows(f"SELECT DISTINCT name FROM {SCHEMA}.reflog WHERE repo = %s ORDER BY name",
                          (self._s.repo,), "listing reflogs")
        return [str(r[0]) for r in rows]

    def get_config(self, key: str) -> bytes | None:
        rows = self._rows(f"SELECT value FROM {SCHEMA}.config WHERE repo = %s AND key = %s",
                          (self._s.repo, key), "reading config")
        return bytes(rows[0][0]) if rows else None

