"""The PostgreSQL layout: the tables (docs/storage.md, *PostgreSQL and S3*), the advisory locks, and
the rules for what a repository may be called and which objects go to a bucket. Pure text and
functions: `database` and `store` run the SQL."""

from __future__ import annotations

import hashlib

from ..base import check_repository_name

__all__ = ["BATCH", "DDL", "DEFAULT_BLOB_THRESHOLD", "GC_LOCK", "SCHEMA", "SCHEMA_LOCK", "SCHEMA_VERSION", "STAGE",
           "WRITER_LOCK", "check_repository_name", "is_blob", "lock_key"]

SCHEMA = "ctxstore"
"""The PostgreSQL schema (namespace) that holds every table, so one database can hold other things too."""
SCHEMA_VERSION = 1
DEFAULT_BLOB_THRESHOLD = 256 * 1024
"""Blob objects whose stored value is larger than this go to the bucket, when there is one."""
BATCH = 4096
"""Ids per statement of a batched read, delete or listing."""
# Advisory lock classes (the first key of the two-key form); the second key is the repository's `lock_key`.
SCHEMA_LOCK = 0x63747301
WRITER_LOCK = 0x63747302
GC_LOCK = 0x63747303
_BLOB_HEAD = b"\xa2\x64data"  # canonical CBOR of {"data": ..., "type": "blob"} starts and ends so
_BLOB_TAIL = b"\x64type\x64blob"

DDL = f"""
CREATE SCHEMA IF NOT EXISTS {SCHEMA};
CREATE TABLE IF NOT EXISTS {SCHEMA}.meta (
    key text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.repositories (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name text COLLATE "C" NOT NULL UNIQUE,
    created_at bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.objects (
    repo bigint NOT NULL REFERENCES {SCHEMA}.repositories (id) ON DELETE CASCADE,
    oid bytea NOT NULL CHECK (octet_length(oid) = 32),
    written_at bigint NOT NULL,
    size bigint NOT NULL,
    stored_size bigint NOT NULL,
    value bytea,
    PRIMARY KEY (repo, oid)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.refs (
    repo bigint NOT NULL REFERENCES {SCHEMA}.repositories (id) ON DELETE CASCADE,
    name text COLLATE "C" NOT NULL,
    target bytea NOT NULL,
    PRIMARY KEY (repo, name)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.reflog (
    repo bigint NOT NULL REFERENCES {SCHEMA}.repositories (id) ON DELETE CASCADE,
    name text COLLATE "C" NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY,
    record bytea NOT NULL,
    PRIMARY KEY (repo, name, seq)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.config (
    repo bigint NOT NULL REFERENCES {SCHEMA}.repositories (id) ON DELETE CASCADE,
    key text COLLATE "C" NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (repo, key)
);
CREATE TABLE IF NOT EXISTS {SCHEMA}.tokens (
    name text COLLATE "C" PRIMARY KEY,
    scope text NOT NULL CHECK (scope IN ('read', 'write', 'admin')),
    digest bytea NOT NULL UNIQUE
);
INSERT INTO {SCHEMA}.meta (key, value) VALUES ('schema', '{SCHEMA_VERSION}') ON CONFLICT (key) DO NOTHING;
"""

STAGE = """CREATE TEMPORARY TABLE IF NOT EXISTS ctxstore_stage (
    oid bytea NOT NULL, size bigint NOT NULL, stored_size bigint NOT NULL, value bytea
) ON COMMIT DELETE ROWS"""



def lock_key(name: str) -> int:
    """A repository's advisory lock key: 32 bits of a hash of its name (a collision only serializes)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=4).digest(), "big", signed=True)


def is_blob(data: bytes) -> bool:
    """Whether canonical bytes are a blob object's (``{"data": ..., "type": "blob"}``)."""
    return data.startswith(_BLOB_HEAD) and data.endswith(_BLOB_TAIL)

