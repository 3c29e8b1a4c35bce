"""Large blobs in an S3-compatible bucket (`ctxstore.store.s3`), against a real SeaweedFS server: the
bucket itself, and a PostgreSQL store keeping its large blobs there (written once, readable from a second
hub, gone after gc once unreachable and past the grace period)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("boto3")
pytest.importorskip("psycopg")

import psycopg

from ctxstore import Repository
from ctxstore.errors import DamagedData, InvalidInput, MissingObject, StoreError
from ctxstore.ids import ObjectId
from ctxstore.store import TransactionalStore
from ctxstore.store.blobs import BlobBucket, blob_key
from ctxstore.store.postgres import SCHEMA, PostgresDatabase, PostgresStore
from ctxstore.store.s3 import S3Bucket
from ctxstore.store.testing import FakeClock, StoreConformance

DAY_MS = 24 * 3600 * 1000


def bucket_for(endpoint: Any, prefix: str = "") -> S3Bucket:
    """A bucket of the test server (made if missing), under a prefix no other test uses."""
    prefix = prefix or f"run-{uuid.uuid4().hex[:10]}"
    return S3Bucket(f"s3://ctxstore-tests/{prefix}", endpoint_url=endpoint.url, access_key=endpoint.key,
                    secret_key=endpoint.secret)


class CountingBucket:
    """A bucket that counts the keys it was asked to write and those it wrote."""

    def __init__(self, inner: BlobBucket) -> None:
        self.inner = inner
        self.asked = 0
        self.written = 0

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self.asked += 1
        wrote = self.inner.put_if_absent(key, data)
        self.written += wrote
        return wrote

    def get(self, key: str) -> bytes:
        return self.inner.get(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def keys(self, prefix: str) -> Iterator[str]:
        return self.inner.keys(prefix)


# -- the bucket ------------------------------------------------------------------------------------------

def test_a_key_is_written_once_read_listed_and_deleted(s3_endpoint: Any) -> None:
    bucket = bucket_for(s3_endpoint)
    assert bucket.put_if_absent("r/one", b"first")
    assert not bucket.put_if_absent("r/one", b"first")
    assert bucket.get("r/one") == b"first"
    bucket.put_if_absent("r/two", b"2")
    bucket.put_if_absent("other/three", b"3")
    assert sorted(bucket.keys("r/")) == ["r/one", "r/two"]
    bucket.delete("r/one")
    bucket.delete("r/one")  # absent: nothing happens
    with pytest.raises(MissingObject):
        bucket.get("r/one")
    assert sorted(bucket.keys("")) == ["other/three", "r/two"]


def test_listing_pages_through_more_than_one_page(s3_endpoint: Any) -> None:
    bucket = bucket_for(s3_endpoint)
    for i in range(1005):
        bucket.put_if_absent(f"p/{i:05d}", b"x")
    assert sorted(bucket.keys("p/")) == [f"p/{i:05d}" for i in range(1005)]


def test_without_conditional_puts_a_look_first_still_writes_once(s3_endpoint: Any) -> None:
    bucket = S3Bucket(f"s3://ctxstore-tests/nocond-{uuid.uuid4().hex[:8]}", endpoint_url=s3_endpoint.url,
                      access_key=s3_endpoint.key, secret_key=s3_endpoint.secret, conditional=False)
    assert bucket.put_if_absent("k", b"v") and not bucket.put_if_absent("k", b"v")
    assert bucket.get("k") == b"v"


def test_a_missing_bucket_is_created(s3_endpoint: Any) -> None:
    name = f"made-{uuid.uuid4().hex[:10]}"
    bucket = S3Bucket(f"s3://{name}", endpoint_url=s3_endpoint.url, access_key=s3_endpoint.key,
                      secret_key=s3_endpoint.secret)
    assert bucket.put_if_absent("k", b"v") and bucket.get("k") == b"v"


def test_wrong_credentials_and_no_server_are_store_errors_naming_the_endpoint(s3_endpoint: Any) -> None:
    with pytest.raises(StoreError, match=re.escape(s3_endpoint.url)):
        S3Bucket("s3://ctxstore-tests", endpoint_url=s3_endpoint.url, access_key="nobody", secret_key="wrong")
    with pytest.raises(StoreError, match=re.escape("127.0.0.1:9")):
        S3Bucket("s3://ctxstore-tests", endpoint_url="http://127.0.0.1:9", access_key="a", secret_key="b",
                 timeout=2)


@pytest.mark.parametrize("url", ["http://bucket/x", "s3://", "bucket/prefix", "s3://b/p?x=1"])
def test_a_bad_bucket_url_is_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInput):
        S3Bucket(url, endpoint_url="http://127.0.0.1:9")


@pytest.mark.parametrize("key", ["", "a\x00b", "k" * 1000])
def test_bad_keys_are_refused_before_any_request(s3_endpoint: Any, key: str) -> None:
    bucket = bucket_for(s3_endpoint)
    for call in (lambda: bucket.put_if_absent(key, b"x"), lambda: bucket.get(key), lambda: bucket.delete(key)):
        with pytest.raises(InvalidInput):
            call()


# -- a PostgreSQL store with its large blobs in the bucket -----------------------------------------------

def big_text(seed: int, size: int = 40_000) -> str:
    """Text that compresses poorly, so its blob's stored value stays over the threshold."""
    return os.urandom(size // 2).hex() + f" #{seed}"


@pytest.fixture
def hub(postgres_url: str, s3_endpoint: Any) -> Iterator[tuple[PostgresDatabase, CountingBucket]]:
    bucket = CountingBucket(bucket_for(s3_endpoint))
    db = PostgresDatabase(postgres_url, blobs=bucket, blob_threshold=4096)
    yield db, bucket
    db.close()


def bucketed_rows(postgres_url: str, store: PostgresStore) -> list[bytes]:
    """The ids of the objects whose rows say their value is in the bucket."""
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute(f"SELECT oid FROM {SCHEMA}.objects WHERE repo = %s AND value IS NULL",
                            (store.repo,)).fetchall()
    return [bytes(r[0]) for r in rows]


def test_a_large_blob_lands_in_the_bucket_once_and_reads_from_a_second_hub(
        hub: tuple[PostgresDatabase, CountingBucket], postgres_url: str, s3_endpoint: Any) -> None:
    db, bucket = hub
    name = f"team/{uuid.uuid4().hex[:10]}"
    store = db.create(name)
    repo = Repository(store)
    text = big_text(1)
    repo.append("main", [{"role": "user", "content": text}, {"role": "assistant", "content": "short"}])
    rows = bucketed_rows(postgres_url, store)
    assert len(rows) == 1 and bucket.written == 1
    blob = ObjectId(rows[0])
    assert sorted(bucket.keys(f"{name}/")) == [blob_key(name, blob)]
    # The same blob again (another message quoting it, and the same pack pushed twice): no new write.
    repo.append("main", [{"role": "user", "content": text}])
    repo.append("other", [{"role": "user", "content": text}])
    assert bucket.written == 1 and bucket.asked == 1
    assert bucketed_rows(postgres_url, store) == rows
    # A second hub: its own pool, cache and bucket client.
    with PostgresDatabase(postgres_url, blobs=bucket_for(s3_endpoint, bucket.inner.prefix)) as second:
        view = Repository(second.open(name)).history("main").render()
        assert [m["content"] for m in view] == [text, "short", text]
    # Without a bucket, a bucketed object is a clear StoreError, not a wrong answer.
    with PostgresDatabase(postgres_url) as bare, pytest.raises(StoreError, match="blob bucket"):
        bare.open(name).get(blob)


def test_a_second_hub_writing_the_same_blob_writes_no_second_key(
        postgres_url: str, s3_endpoint: Any) -> None:
    prefix = f"race-{uuid.uuid4().hex[:8]}"
    first, second = CountingBucket(bucket_for(s3_endpoint, prefix)), CountingBucket(bucket_for(s3_endpoint, prefix))
    name = f"r{uuid.uuid4().hex[:10]}"
    text = big_text(2)
    with PostgresDatabase(postgres_url, blobs=first, blob_threshold=4096) as a, \
            PostgresDatabase(postgres_url, blobs=second, blob_threshold=4096) as b:
        a.create(name)
        Repository(a.open(name)).append("one", [{"role": "user", "content": text}])
        Repository(b.open(name)).append("two", [{"role": "user", "content": text}])
        assert first.written + second.written == 1
        assert len(list(first.keys(f"{name}/"))) == 1


def test_gc_deletes_an_unreachable_blob_and_its_key_only_after_the_grace_period(
        hub: tuple[PostgresDatabase, CountingBucket], postgres_url: str) -> None:
    db, bucket = hub
    clock = FakeClock()
    name = f"gc/{uuid.uuid4().hex[:10]}"
    store = db.create(name, clock=clock)
    repo = Repository(store, clock=clock)
    repo.append("keep", [{"role": "user", "content": big_text(3)}])
    kept = set(bucketed_rows(postgres_url, store))
    repo.append("drop", [{"role": "user", "content": big_text(4)}])
    dropped = set(bucketed_rows(postgres_url, store)) - kept
    assert len(kept) == len(dropped) == 1
    repo.delete_ref("drop")
    repo.expire_reflogs("refs/heads/drop")
    clock.now += DAY_MS
    report = repo.gc(grace=7 * 24 * 3600)  # unreachable, but younger than the grace period: kept
    assert report.deleted == 0 and len(list(bucket.keys(f"{name}/"))) == 2
    clock.now += 30 * DAY_MS
    report = repo.gc(grace=7 * 24 * 3600)
    assert report.deleted > 0
    assert set(bucketed_rows(postgres_url, store)) == kept
    assert sorted(bucket.keys(f"{name}/")) == [blob_key(name, ObjectId(b)) for b in kept]
    assert repo.history("keep").render()[0]["content"].endswith("#3")


def test_gc_sweeps_keys_no_row_names(hub: tuple[PostgresDatabase, CountingBucket]) -> None:
    """A key left by a write that failed after its bucket write (or a deletion outside gc) goes at the
    next gc; keys of another repository whose name extends this one's stay."""
    db, bucket = hub
    name = f"sw{uuid.uuid4().hex[:8]}"
    store = db.create(name)
    db.create(f"{name}/sub")
    repo = Repository(store)
    with pytest.raises(RuntimeError), store.transaction(write=True) as txn:
        repo_blob = make_blob(5)
        txn.write_objects([repo_blob])
        raise RuntimeError("the caller gives up after the write")
    assert bucket.written == 0  # nothing reaches the bucket before the commit
    orphan = make_blob(6)
    bucket.put_if_absent(blob_key(name, orphan[0]), b"\x00" + orphan[1])
    bucket.put_if_absent(blob_key(f"{name}/sub", orphan[0]), b"\x00" + orphan[1])
    store.put_many([repo_blob])
    store.delete_many([repo_blob[0]])  # outside gc: the key stays for the sweep
    assert len(list(bucket.keys(f"{name}/"))) == 3
    repo.gc(grace=0)
    assert sorted(bucket.keys(f"{name}/")) == [blob_key(f"{name}/sub", orphan[0])]


def make_blob(seed: int) -> tuple[ObjectId, bytes]:
    """A blob object of random text (a new one on every call), large enough for the bucket."""
    from ctxstore.format.objects import Blob, encode_object

    return encode_object(Blob(big_text(seed)))


def test_a_key_gone_from_the_bucket_is_damaged_data(hub: tuple[PostgresDatabase, CountingBucket],
                                                    postgres_url: str) -> None:
    db, bucket = hub
    store = db.create(f"dmg{uuid.uuid4().hex[:8]}")
    oid, data = make_blob(7)
    store.put_many([(oid, data)])
    bucket.delete(blob_key(store.name, oid))
    with PostgresDatabase(postgres_url, blobs=bucket) as fresh, pytest.raises(DamagedData):
        fresh.open(store.name).get(oid)


# -- the conformance suite with every object in the bucket -----------------------------------------------

@pytest.fixture(scope="module")
def everything_in_s3(postgres_url: str, s3_endpoint: Any) -> Iterator[PostgresDatabase]:
    """A database that keeps every object (whatever its kind and size) in the SeaweedFS bucket."""
    db = PostgresDatabase(postgres_url, blobs=bucket_for(s3_endpoint), blob_threshold=0, bucket_every_kind=True)
    yield db
    db.close()


class TestPostgresStoreInS3(StoreConformance):
    """The suite with a threshold of zero for every kind of object: everything the store holds is in
    SeaweedFS, and the store must behave exactly the same."""

    @pytest.fixture
    def store(self, clock: FakeClock, everything_in_s3: PostgresDatabase) -> Iterator[TransactionalStore]:
        store = everything_in_s3.create(f"s3conf/{uuid.uuid4().hex[:12]}", clock=clock)
        yield store
        store.close()


def test_dropping_a_repository_deletes_its_keys_and_no_other_repositorys(
        hub: tuple[PostgresDatabase, CountingBucket]) -> None:
    db, bucket = hub
    name = f"drop{uuid.uuid4().hex[:8]}"
    oid, data = make_blob(8)
    for repo_name in (name, f"{name}/sub"):
        db.create(repo_name).put_many([(oid, data)])
    assert len(list(bucket.keys(f"{name}/"))) == 2
    db.drop(name)
    assert list(bucket.keys(f"{name}/")) == [blob_key(f"{name}/sub", oid)]
    assert db.open(f"{name}/sub").get(oid) == data


def test_a_pack_received_into_postgres_and_sent_back_out_is_whole(
        hub: tuple[PostgresDatabase, CountingBucket]) -> None:
    """A repository in memory pushes (a pack and a ref update) into PostgreSQL with a bucket; fsck finds
    nothing wrong there, and the pack sent back out rebuilds the same conversation elsewhere."""
    db, bucket = hub
    source = Repository.memory()
    messages = [{"role": "user", "content": big_text(9)}, {"role": "assistant", "content": "ok"}]
    for i in range(30):
        messages.append({"role": "user", "content": f"turn {i}"})
    source.append("main", messages)
    head = source.head("main")
    assert head is not None
    target = Repository(db.create(f"push/{uuid.uuid4().hex[:8]}"))
    result = target.unpack(source.pack("main"), {"refs/heads/main": (None, head)})
    assert result.new_objects == result.objects > 0 and bucket.written == 1
    again = target.unpack(source.pack("main"))  # the same pack twice: nothing new, no second key
    assert again.new_objects == 0 and bucket.written == 1
    report = target.fsck()
    assert report.problems == [] and report.unreachable == 0
    back = Repository.memory()
    back.unpack(target.pack("main"), {"refs/heads/main": (None, head)})
    assert back.history("main").render() == source.history("main").render()
