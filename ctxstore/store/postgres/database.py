"""Many repositories in one PostgreSQL database: `PostgresDatabase` creates the schema, creates, opens,
lists and drops repositories, and keeps the hub's tokens."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import psycopg
import psycopg.errors

from ...errors import InvalidInput, NotARepository, RepositoryExists, StoreError
from ...format.codec import check_time_ms
from ...format.codec import now_ms as _now_ms
from ..blobs import BlobBucket
from .connections import Connections, ObjectCache
from .schema import (
    DDL,
    DEFAULT_BLOB_THRESHOLD,
    GC_LOCK,
    SCHEMA,
    SCHEMA_LOCK,
    SCHEMA_VERSION,
    WRITER_LOCK,
    check_repository_name,
    lock_key,
)
from .store import PostgresStore

__all__ = ["DEFAULT_CACHE_BYTES", "PostgresDatabase", "StoredToken"]

DEFAULT_CACHE_BYTES = 64 * 1024 * 1024
_SCOPES = ("read", "write", "admin")


class StoredToken(NamedTuple):
    """A hub token as the database keeps it: a name, a scope (read, write or admin) and the blake3
    digest of the secret (never the secret), the fields of ``ctxstore.sync.server.Token`` in its order."""

    name: str
    scope: str
    digest: bytes



class PostgresDatabase:
    """Many repositories in one PostgreSQL database, with an optional bucket for large blobs.

    `url` is a libpq connection string or ``postgresql://`` URL. The schema (docs/storage.md,
    *PostgreSQL and S3*) is created if absent; a database holding another schema version is refused with
    `NotARepository`. `blobs`, when given, receives blob objects whose stored value is larger than
    `blob_threshold` bytes (with `bucket_every_kind`, every object over it, whatever its kind: for tests
    of the bucket path). Connections come from a pool of `pool_size`, shared by the database's stores and
    safe across threads; `cache_bytes` bounds the cache of objects read; `application_name` is what
    the sessions show in ``pg_stat_activity``. `close()` releases it all.
    """

    def __init__(self, url: str, *, blobs: BlobBucket | None = None, blob_threshold: int = DEFAULT_BLOB_THRESHOLD,
                 pool_size: int = 16, cache_bytes: int = DEFAULT_CACHE_BYTES, connect_timeout: float = 10.0,
                 bucket_every_kind: bool = False, application_name: str = "ctxstore") -> None:
        if not isinstance(blob_threshold, int) or blob_threshold < 0:
            raise InvalidInput(f"blob_threshold must be a non-negative number of bytes, not {blob_threshold!r}")
        self.connections = Connections(url, pool_size=pool_size, connect_timeout=connect_timeout,
                                       application_name=application_name)
        self.where = self.connections.where
        """``host:port/dbname``, for messages (the URL, which may hold a password, is never shown)."""
        self.blobs = blobs
        self.blob_threshold = blob_threshold
        self.bucket_every_kind = bucket_every_kind
        self.cache = ObjectCache(cache_bytes)
        try:
            self._ensure_schema()
        except BaseException:
            self.connections.close()
            raise

    def _ensure_schema(self) -> None:
        with self.connections.pool.connection() as conn:
            try:
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(%s, 0)", (SCHEMA_LOCK,))
                    conn.execute(DDL)
                    row = conn.execute(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema'").fetchone()
            except psycopg.Error as exc:
                raise self.connections.failed("creating the ctxstore schema", exc) from None
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise NotARepository(f"the PostgreSQL database at {self.where} holds ctxstore schema version "
                                 f"{row[0] if row else '?'}; this ctxstore knows version {SCHEMA_VERSION}")

    # -- repositories --------------------------------------------------------------------------------

    def create(self, name: str, *, clock: Callable[[], int] | None = None) -> PostgresStore:
        """Create the repository `name` (`check_repository_name`) and open it; `RepositoryExists` if there."""
        check_repository_name(name)
        now = check_time_ms((clock or _now_ms)(), "the clock")
        with self.connections.connection(f"creating repository {name}") as conn:
            row = conn.execute(f"INSERT INTO {SCHEMA}.repositories (name, created_at) VALUES (%s, %s) "
                               "ON CONFLICT (name) DO NOTHING RETURNING id", (name, now)).fetchone()
        if row is None:
            raise RepositoryExists(f"repository {name} already exists in the PostgreSQL database at {self.where}")
        return PostgresStore(self, name, int(row[0]), clock=clock)

    def open(self, name: str, *, clock: Callable[[], int] | None = None) -> PostgresStore:
        """Open the repository `name`; `NotARepository` if there is none (or the name cannot be one)."""
        try:
            check_repository_name(name)
        except InvalidInput:
            raise NotARepository(f"no repository {name!r} in the PostgreSQL database at {self.where}") from None
        repo = self._repository_id(name)
        if repo is None:
            raise NotARepository(f"no repository {name} in the PostgreSQL database at {self.where}; "
                                 "create it first")
        return PostgresStore(self, name, repo, clock=clock)

    def tokens_and_open(self, name: str, *, clock: Callable[[], int] | None = None
                        ) -> tuple[list[StoredToken], PostgresStore | None]:
        """The hub tokens (as `tokens`) and the repository `name` opened (None if there is none), read in
        one statement: what a hub needs of the database before it serves a request."""
        try:
            check_repository_name(name)
        except InvalidInput:
            return self.tokens(), None
        rows = self.connections.run(f"reading tokens and looking up repository {name}", lambda conn: conn.execute(
            f"SELECT name, scope, digest, NULL::bigint FROM {SCHEMA}.tokens UNION ALL "
            f"SELECT NULL, NULL, NULL, id FROM {SCHEMA}.repositories WHERE name = %s", (name,)).fetchall())
        tokens = sorted(StoredToken(str(n), str(s), bytes(d)) for n, s, d, repo in rows if repo is None)
        found = [int(repo) for *_, repo in rows if repo is not None]
        return tokens, PostgresStore(self, name, found[0], clock=clock) if found else None

    def _repository_id(self, name: str) -> int | None:
        rows = self.connections.run(f"looking up repository {name}", lambda conn: conn.execute(
            f"SELECT id FROM {SCHEMA}.repositories WHERE name = %s", (name,)).fetchall())
        return int(rows[0][0]) if rows else None

    def names(self) -> list[str]:
        """Every repository's name, sorted."""
        rows = self.connections.run("listing repositories", lambda conn: conn.execute(
            f"SELECT name FROM {SCHEMA}.repositories ORDER BY name").fetchall())
        return [str(r[0]) for r in rows]

    def drop(self, name: str) -> None:
        """Delete the repository `name` and everything it holds (its bucket keys after the SQL commit);
        `NotARepository` if there is none."""
        check_repository_name(name)
        repo = self._repository_id(name)
        local = self.connections.local
        if repo is not None and (repo in local.writing or repo in local.pinned):
            raise StoreError(f"repository {name} is being written or maintained in this thread; drop it after")
        key = lock_key(name)
        with self.connections.pool.connection() as conn:
            try:
                conn.execute("SELECT pg_advisory_lock(%s, %s)", (GC_LOCK, key))
                try:
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", (WRITER_LOCK, key))
                        gone = conn.execute(f"DELETE FROM {SCHEMA}.repositories WHERE name = %s RETURNING id",
                                            (name,)).fetchone()
                    if gone is None:
                        raise NotARepository(f"no repository {name} in the PostgreSQL database at {self.where}")
                    if self.blobs is not None:
                        for k in list(self.blobs.keys(f"{name}/")):
                            if "/" not in k[len(name) + 1:]:  # not a key of a repository named name/...
                                self.blobs.delete(k)
                finally:
                    conn.execute("SELECT pg_advisory_unlock(%s, %s)", (GC_LOCK, key))
            except psycopg.Error as exc:
                raise self.connections.failed(f"dropping repository {name}", exc) from None

    # -- tokens --------------------------------------------------------------------------------------

    def tokens(self) -> list[StoredToken]:
        """The hub tokens kept in the database (name, scope, digest), by name."""
        rows = self.connections.run("reading tokens", lambda conn: conn.execute(
            f"SELECT name, scope, digest FROM {SCHEMA}.tokens ORDER BY name").fetchall())
        return [StoredToken(str(n), str(s), bytes(d)) for n, s, d in rows]

    def set_token(self, name: str, scope: str, digest: bytes) -> None:
        """Keep a token under `name` (replacing one of that name): its scope and the digest of its secret
        (``ctxstore.sync.server.token_digest``; the secret itself is never stored)."""
        if not isinstance(name, str) or not name or "\x00" in name or len(name) > 200:
            raise InvalidInput(f"a token name must be 1 to 200 characters without NUL, not {name!r}")
        if scope not in _SCOPES:
            raise InvalidInput(f"token scope must be one of {', '.join(_SCOPES)}, not {scope!r}")
        if not isinstance(digest, bytes) or len(digest) != 32:
            raise InvalidInput("a token digest must be 32 bytes (token_digest of the secret)")
        with self.connections.connection(f"storing token {name}") as conn:
            try:
                conn.execute(f"INSERT INTO {SCHEMA}.tokens (name, scope, digest) VALUES (%s, %s, %s) "
                             "ON CONFLICT (name) DO UPDATE SET scope = EXCLUDED.scope, digest = EXCLUDED.digest",
                             (name, scope, digest))
            except psycopg.errors.UniqueViolation:
                raise InvalidInput(f"that token is already stored under another name than {name}") from None

    def delete_token(self, name: str) -> bool:
        """Forget the token called `name`; returns whether there was one."""
        if not isinstance(name, str):
            raise InvalidInput(f"a token name must be text, not {name!r}")
        with self.connections.connection(f"deleting token {name}") as conn:
            return conn.execute(f"DELETE FROM {SCHEMA}.tokens WHERE name = %s", (name,)).rowcount > 0

    # -- lifecycle -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every pooled connection; the database's stores then raise `StoreError`."""
        self.connections.close()

    @property
    def closed(self) -> bool:
        """Whether `close()` was called."""
        return self.connections.closed

    def __enter__(self) -> PostgresDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
