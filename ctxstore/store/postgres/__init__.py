"""Repositories in PostgreSQL: `PostgresDatabase` holds many, `PostgresStore` is one of them.

A hub that keeps its repositories here is stateless: any number of hub processes may serve one database.
Objects are keyed by (repository, object id) and hold the codec-framed stored value the LMDB store keeps
(`records.stored_value`: raw or zstd; no dictionaries and no append deltas here); refs, reflogs and
config have tables of their own; large blobs may live in a `BlobBucket` (``ctxstore.store.s3``) with
only their id and sizes in PostgreSQL. The schema, the locks and the blob layout are specified in
docs/storage.md, *PostgreSQL and S3*. This package is the only place that imports psycopg; its modules
are `schema` (the tables, the locks, the naming rule), `connections` (the pool, what each thread holds,
the cache, psycopg's errors as `StoreError`), `store` (`PostgresStore`) and `database`
(`PostgresDatabase`).

**Isolation: why write transactions are READ COMMITTED behind a lock, and reads REPEATABLE READ.**
The `Snapshot` contract is that every read inside one transaction sees one consistent state (plus the
transaction's own writes), and `repo/commit.py` builds on it: a commit reads a ref, decides, and moves
it with a compare-and-swap, and on `RefMoved` re-reads and tries again. Two concurrent write transactions
on one ref must therefore never both act on the same head, and the conformance suite (two threads racing
to advance one ref through raw transactions) requires that neither even sees an error: the second must
read what the first wrote. So a write transaction first takes the repository's writer lock (a
transaction-level advisory lock, exclusive): writers to one repository run one at a time, across every
process and host, as LMDB's writer mutex makes them on one machine; different repositories never wait
for each other. Under REPEATABLE READ the snapshot would be taken by the very statement that waits for
that lock, so it could predate the writer just ahead, and its compare-and-swap would fail with a
serialization error where it should have succeeded. Under READ COMMITTED each statement reads what is
committed when it starts, and once the lock is held nothing in the repository changes except by this
transaction: every statement of it reads the same committed state, which is the consistent view the
contract asks for. Each ref move is still a compare-and-swap in SQL against what the transaction read
(``UPDATE ... WHERE target = old``; an insert that must find no row for a ref read as absent), so a
writer that bypassed the lock could not be overwritten silently: zero rows raises `RefMoved`, as the
LMDB store does when what a transaction read moved under it. Read-only transactions take no lock and
run REPEATABLE READ READ ONLY: one snapshot for all their statements, never a serialization failure.
One-shot reads (`get`, `get_many`, `has`, ...) are single statements, consistent by themselves.

**Objects and gc.** A transaction's objects are written with ``COPY`` into a temporary staging table
(small batches: one ``INSERT ... SELECT FROM unnest(...)``), then ``INSERT ... SELECT ... ON CONFLICT
(repo, oid) DO UPDATE SET written_at``: a held object keeps its bytes and gets a fresh write time, which
is what gc's grace period relies on. Every write transaction also takes the repository's gc lock shared,
before its writer lock; `PostgresStore.maintenance()`, which `repo.maintenance.gc` holds around its
deleting transaction, takes it exclusive for the deletion, the bucket deletes after its commit, and the
sweep of bucket keys no row names. So no writer is between its bucket writes and its SQL commit while gc
deletes keys, and a key a writer relies on is never deleted under it.

**Large blobs** (`blobs`): a blob object whose stored value is larger than `blob_threshold` is written to
the bucket (key ``<repository>/<hex id>``) before the SQL transaction that makes it reachable commits,
and its row holds NULL for the value. A key is written only if the repository holds no row for the
object (and the bucket no key: a conditional put), so pushing one blob twice writes it once.

**Reads** are checked against their ids (blake3 of the canonical bytes; `DamagedData` otherwise), and
objects read are kept in a per-database cache bounded in bytes (`cache_bytes`), so a hub does not read,
decompress, hash or fetch from the bucket a hot object again. The cache never answers whether an object
is held: every read still asks PostgreSQL for the row (without its value when the bytes are cached), so
a deletion by another process is seen at once.
"""

from .database import DEFAULT_CACHE_BYTES, PostgresDatabase, StoredToken
from .schema import DEFAULT_BLOB_THRESHOLD, SCHEMA, SCHEMA_VERSION, check_repository_name
from .store import PostgresStore

__all__ = ["DEFAULT_BLOB_THRESHOLD", "DEFAULT_CACHE_BYTES", "SCHEMA", "SCHEMA_VERSION", "PostgresDatabase",
           "PostgresStore", "StoredToken", "check_repository_name"]
