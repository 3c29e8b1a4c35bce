"""The PostgreSQL store (`ctxstore.store.postgres`) against a real server: the conformance suite, then what
only it does (many repositories in one database, compare-and-swap across connections, tokens, errors)."""

from __future__ import annotations

import hashlib
import itertools
import multiprocessing
import re
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("psycopg")

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import Repository
from ctxstore.errors import (
    CtxStoreError,
    DamagedData,
    InvalidInput,
    NotARepository,
    RefMoved,
    RepositoryExists,
    StoreError,
)
from ctxstore.format.objects import Blob, encode_object
from ctxstore.ids import ObjectId, from_hex
from ctxstore.pack.plan import pack
from ctxstore.refs import Refs
from ctxstore.store import TransactionalStore
from ctxstore.store.base import maintenance_lock
from ctxstore.store.blobs import MemoryBucket, blob_key
from ctxstore.store.memory import MemoryStore
from ctxstore.store.postgres import SCHEMA, PostgresDatabase, PostgresStore
from ctxstore.store.postgres.schema import GC_LOCK, lock_key
from ctxstore.store.testing import FakeClock, StoreConformance, make_object, store_state

_names = itertools.count()


def fresh_name(stem: str = "t") -> str:
    """A repository name no other test (or earlier run against the same server) has used."""
    return f"{stem}/{uuid.uuid4().hex[:12]}-{next(_names)}"


@pytest.fixture(scope="module")
def db(postgres_url: str) -> Iterator[PostgresDatabase]:
    database = PostgresDatabase(postgres_url)
    yield database
    database.close()


class TestPostgresStore(StoreConformance):
    """The conformance suite: one fresh repository per test in one shared database."""

    @pytest.fixture
    def store(self, clock: FakeClock, db: PostgresDatabase) -> Iterator[TransactionalStore]:
        store = db.create(fresh_name("conformance"), clock=clock)
        yield store
        store.close()


class TestPostgresStoreWithSmallBlobs(StoreConformance):
    """The suite again with every object kept in an in-memory bucket (tests/test_store_s3.py runs it with
    SeaweedFS), so a failure there can be told apart from the service's."""

    @pytest.fixture
    def store(self, clock: FakeClock, postgres_url: str) -> Iterator[TransactionalStore]:
        database = PostgresDatabase(postgres_url, blobs=MemoryBucket(), blob_threshold=0, bucket_every_kind=True)
        store = database.create(fresh_name("conformance-blobs"), clock=clock)
        yield store
        store.close()
        database.close()


# -- repositories --------------------------------------------------------------------------------------

def test_repositories_are_created_listed_opened_and_dropped(db: PostgresDatabase) -> None:
    name = fresh_name("life")
    store = db.create(name)
    assert name in db.names()
    with pytest.raises(RepositoryExists):
        db.create(name)
    oid, data = make_object(1)
    store.put_many([(oid, data)])
    assert db.open(name).get(oid) == data
    db.drop(name)
    assert name not in db.names()
    with pytest.raises(NotARepository):
        db.open(name)
    with pytest.raises(StoreError, match="dropped"), store.transaction(write=True) as txn:
        txn.set_config("a", b"1")


def test_repositories_do_not_see_each_others_objects_refs_or_config(db: PostgresDatabase) -> None:
    a, b = db.create(fresh_name("iso")), db.create(fresh_name("iso"))
    oid, data = make_object(7)
    with a.transaction(write=True) as txn:
        txn.put_objects([(oid, data)])
        txn.set_ref("refs/heads/main", oid)
        txn.append_reflog("refs/heads/main", b"r")
        txn.set_config("a", b"1")
    assert store_state(b) == {"objects": {}, "refs": {}, "reflogs": {}, "config": {"a": None, "b": None, "c": None}}
    assert a.get(oid) == data and not b.has(oid)


@pytest.mark.parametrize("bad", ["", "/x", "x/", "a//b", ".hidden", "a/../b", "sp ace", "x" * 201, "ümlaut", None])
def test_bad_repository_names_are_refused_before_anything_is_written(db: PostgresDatabase, bad: object) -> None:
    before = db.names()
    with pytest.raises(InvalidInput):
        db.create(bad)  # type: ignore[arg-type]
    with pytest.raises(NotARepository):
        db.open(bad)  # type: ignore[arg-type]
    assert db.names() == before


def test_a_second_database_object_is_a_second_hub_on_the_same_data(db: PostgresDatabase, postgres_url: str) -> None:
    name = fresh_name("two")
    oid, data = make_object(3)
    with db.create(name).transaction(write=True) as txn:
        txn.put_objects([(oid, data)])
        txn.set_ref("refs/heads/main", oid)
    with PostgresDatabase(postgres_url) as other:
        store = other.open(name)
        assert store.get(oid) == data
        with store.transaction() as txn:
            assert txn.get_ref("refs/heads/main") == oid


# -- compare-and-swap across hubs ----------------------------------------------------------------------

def test_writers_on_two_database_objects_lose_no_update(db: PostgresDatabase, postgres_url: str) -> None:
    """Two hubs (each its own pool) advancing one ref through `Refs.set_if_equals` in threads: every
    increment lands once, since the writer lock makes the second read what the first committed."""
    name = fresh_name("race")
    chain = [make_object(i) for i in range(61)]
    db.create(name).put_many(chain)
    step = {oid: chain[n + 1][0] for n, (oid, _) in enumerate(chain[:-1])}
    with db.open(name).transaction(write=True) as txn:
        txn.set_ref("refs/heads/main", chain[0][0])
    other = PostgresDatabase(postgres_url)
    errors: list[BaseException] = []

    def advance(database: PostgresDatabase) -> None:
        refs = Refs(database.open(name))
        try:
            for _ in range(30):
                while True:
                    with database.open(name).transaction() as txn:
                        head = txn.get_ref("refs/heads/main")
                    assert head is not None
                    try:
                        refs.set_if_equals("refs/heads/main", head, step[head])
                        break
                    except RefMoved:
                        continue
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=advance, args=(d,)) for d in (db, other)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    other.close()
    assert errors == []
    with db.open(name).transaction() as txn:
        assert txn.get_ref("refs/heads/main") == chain[60][0]
        assert len(txn.reflog("refs/heads/main")) == 60


def test_a_ref_moved_behind_the_writer_lock_is_ref_moved_and_nothing_is_written(
        db: PostgresDatabase, postgres_url: str) -> None:
    """The compare-and-swap in SQL holds even against a writer that bypassed the lock."""
    name = fresh_name("cas")
    store = db.create(name)
    a, b, c = make_object(1), make_object(2), make_object(3)
    store.put_many([a, b, c])
    with store.transaction(write=True) as txn:
        txn.set_ref("refs/heads/main", a[0])
    with pytest.raises(RefMoved) as caught, store.transaction(write=True) as txn:
        assert txn.get_ref("refs/heads/main") == a[0]
        with psycopg.connect(postgres_url, autocommit=True) as rogue:
            rogue.execute(f"UPDATE {SCHEMA}.refs SET target = %s WHERE repo = %s AND name = %s",
                          (b[0], store.repo, "refs/heads/main"))
        txn.set_ref("refs/heads/main", c[0])
        txn.set_config("a", b"lost")
    assert caught.value.ref == "refs/heads/main"
    assert caught.value.current == b[0].hex() and caught.value.expected == a[0].hex()
    with store.transaction() as txn:
        assert txn.get_ref("refs/heads/main") == b[0]
        assert txn.get_config("a") is None


def test_a_ref_read_as_absent_and_created_meanwhile_is_ref_moved(db: PostgresDatabase, postgres_url: str) -> None:
    store = db.create(fresh_name("cas"))
    a, b = make_object(1), make_object(2)
    store.put_many([a, b])
    with pytest.raises(RefMoved), store.transaction(write=True) as txn:
        assert txn.get_ref("refs/heads/new") is None
        with psycopg.connect(postgres_url, autocommit=True) as rogue:
            rogue.execute(f"INSERT INTO {SCHEMA}.refs (repo, name, target) VALUES (%s, %s, %s)",
                          (store.repo, "refs/heads/new", b[0]))
        txn.set_ref("refs/heads/new", a[0])
    with store.transaction() as txn:
        assert txn.get_ref("refs/heads/new") == b[0]


def test_a_nested_write_transaction_in_one_thread_is_refused(db: PostgresDatabase) -> None:
    store = db.create(fresh_name("nest"))
    with store.transaction(write=True), pytest.raises(StoreError, match="already open"), \
            store.transaction(write=True):
        pass
    with store.transaction(write=True) as txn:  # the refusal left nothing held
        txn.set_config("a", b"1")


def test_reads_inside_a_transaction_reuse_its_connection(postgres_url: str) -> None:
    """A one-shot read in a thread that holds a transaction does not wait for a second connection, so
    a pool of two serves a writer that reads through the store (as a commit's lineage walk does)."""
    with PostgresDatabase(postgres_url, pool_size=2) as small:
        store = small.create(fresh_name("pool"))
        oid, data = make_object(1)
        store.put_many([(oid, data)])
        with store.transaction(write=True) as txn:
            for _ in range(5):
                assert store.get(oid) == data and store.has(oid) and len(store) == 1
            txn.set_config("a", b"1")



def _statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement psycopg sends from now on (a pipeline's statements each count)."""
    sent: list[str] = []
    for name in ("execute", "executemany"):
        original = getattr(psycopg.Cursor, name)

        def counting(self: Any, query: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            sent.append(str(query))
            return _original(self, query, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, name, counting)
    return sent


def test_receiving_a_push_costs_the_same_few_statements_however_long_the_conversation(
        db: PostgresDatabase, monkeypatch: pytest.MonkeyPatch) -> None:
    """Receiving one appended message runs a fixed handful of statements: the objects the pack refers
    to are looked up in one statement, not one each (which grew with the conversation)."""
    client = Repository(MemoryStore())
    server = Repository(db.create(fresh_name("push")))
    sent = _statements(monkeypatch)
    costs: dict[int, int] = {}
    old: str | None = None
    for n in range(1, 81):
        client.append("main", [{"role": "user", "content": f"message {n}"}])
        new = client.resolve("main")
        chunks = pack(client.store, [from_hex(new)], [] if old is None else [from_hex(old)])
        del sent[:]
        server.unpack(chunks, {"refs/heads/main": (old, new)})
        costs[n] = len(sent)
        old = new
    assert server.resolve("main") == old
    assert costs[80] == costs[10] <= 9, costs


# -- reads -----------------------------------------------------------------------------------------------

def test_a_value_changed_in_the_database_is_damaged_data(db: PostgresDatabase, postgres_url: str) -> None:
    store = db.create(fresh_name("damage"))
    oid, data = make_object(1, "tampered")
    store.put_many([(oid, data)])
    with psycopg.connect(postgres_url, autocommit=True) as rogue:
        rogue.execute(f"UPDATE {SCHEMA}.objects SET value = %s WHERE repo = %s AND oid = %s",
                      (b"\x00" + data[:-1] + b"!", store.repo, oid))
    with PostgresDatabase(postgres_url) as fresh, pytest.raises(DamagedData):  # a cache without it
        fresh.open(store.name).get(oid)


def test_a_cached_object_deleted_elsewhere_is_missing_at_once(db: PostgresDatabase, postgres_url: str) -> None:
    store = db.create(fresh_name("cache"))
    oid, data = make_object(1)
    store.put_many([(oid, data)])
    assert store.get(oid) == data  # now cached
    with PostgresDatabase(postgres_url) as other:
        other.open(store.name).delete_many([oid])
    assert not store.has(oid)
    with pytest.raises(KeyError):
        store.get(oid)


def test_many_objects_round_trip_through_copy_and_batched_reads(db: PostgresDatabase) -> None:
    store = db.create(fresh_name("bulk"))
    items = [make_object(i, "bulk " * (i % 50)) for i in range(9000)]
    assert store.put_many(items) == 9000
    assert store.put_many(items[:100]) == 0
    asked = [oid for oid, _ in reversed(items)]
    assert store.get_many(asked) == [data for _, data in reversed(items)]
    assert len(store) == 9000 and len(set(store)) == 9000


# -- tokens ----------------------------------------------------------------------------------------------

def test_tokens_keep_name_scope_and_digest_only(db: PostgresDatabase) -> None:
    name = f"tok-{uuid.uuid4().hex[:8]}"
    digest = bytes(range(32))
    db.set_token(name, "write", digest)
    assert (name, "write", digest) in db.tokens()
    db.set_token(name, "admin", digest)
    assert [t for t in db.tokens() if t.name == name] == [(name, "admin", digest)]
    for bad in ((name, "root", digest), (name, "read", b"short"), ("", "read", digest)):
        with pytest.raises(InvalidInput):
            db.set_token(*bad)
    assert db.delete_token(name) and not db.delete_token(name)
    assert all(t.name != name for t in db.tokens())


# -- errors ----------------------------------------------------------------------------------------------

def test_a_server_that_is_not_there_is_a_store_error_naming_it() -> None:
    with pytest.raises(StoreError, match=re.escape("127.0.0.1:9")) as caught:
        PostgresDatabase("postgresql://nobody@127.0.0.1:9/none", connect_timeout=2)
    assert isinstance(caught.value, CtxStoreError)
    with pytest.raises(InvalidInput):
        PostgresDatabase("host=127.0.0.1 port= '")


def test_gc_keeps_what_refs_reach_and_young_objects(db: PostgresDatabase) -> None:
    clock = FakeClock()
    store = db.create(fresh_name("gc"), clock=clock)
    repo = Repository(store, clock=clock)
    repo.append("main", [{"role": "user", "content": "kept"}])
    reachable = set(store)
    loose = make_object(2)
    store.put_many([loose])
    clock.now += 1000
    assert repo.gc(grace=3600).deleted == 0  # young
    clock.now += 7200 * 1000
    report = repo.gc(grace=3600)
    assert report.deleted == 1 and set(store) == reachable
    assert repo.history("main").render() == [{"role": "user", "content": "kept"}]


def test_the_maintenance_lock_keeps_writers_of_other_hubs_out(db: PostgresDatabase, postgres_url: str) -> None:
    """While gc holds a repository's maintenance lock, a write transaction from another hub waits; it
    runs once the lock is let go (checked by order of events, not by time)."""
    name = fresh_name("lock")
    store = db.create(name)
    events: list[str] = []
    started = threading.Event()

    def write() -> None:
        with PostgresDatabase(postgres_url) as other:
            started.set()
            with other.open(name).transaction(write=True) as txn:
                events.append("writer in")
                txn.set_config("a", b"1")

    with maintenance_lock(store):
        thread = threading.Thread(target=write)
        thread.start()
        started.wait()
        with psycopg.connect(postgres_url, autocommit=True) as probe:  # wait until it queues on the gc lock
            queued = ("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                      "AND classid = %s::bigint::oid AND objid = %s::bigint::oid")
            while not probe.execute(queued, (GC_LOCK, lock_key(name) & 0xFFFFFFFF)).fetchone():
                threading.Event().wait(0.01)
        with store.transaction(write=True) as txn:  # this thread's own writes run under the lock
            txn.set_config("b", b"2")
        events.append("gc done")
    thread.join()
    assert events == ["gc done", "writer in"]
    with store.transaction() as txn:
        assert txn.get_config("a") == b"1" and txn.get_config("b") == b"2"


def test_a_write_inside_a_read_transaction_is_seen_by_one_shot_reads(db: PostgresDatabase) -> None:
    """One-shot reads never go through a read transaction's older snapshot; the transaction keeps it."""
    store = db.create(fresh_name("snap"))
    oid, data = make_object(1)
    with store.transaction() as txn:
        assert txn.refs() == {}  # the snapshot is taken here
        store.put_many([(oid, data)])
        assert store.get(oid) == data and store.has(oid)
        assert not txn.has(oid)


# -- the bucket's keys against the rows: a property ------------------------------------------------------

def _blob(seed: int) -> tuple[ObjectId, bytes]:
    text = "".join(hashlib.sha512(f"{seed}/{i}".encode()).hexdigest() for i in range(4))
    return encode_object(Blob(text))


@pytest.fixture(scope="module")
def bucketed(postgres_url: str) -> Iterator[tuple[PostgresDatabase, MemoryBucket]]:
    bucket = MemoryBucket()
    database = PostgresDatabase(postgres_url, blobs=bucket, blob_threshold=64)
    yield database, bucket
    database.close()


_BUCKET_OPS = st.lists(st.one_of(
    st.tuples(st.just("put"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("delete"), st.integers(0, 7)),
    st.tuples(st.just("orphan"), st.integers(0, 7)),
    st.tuples(st.just("gc"))), max_size=14)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_BUCKET_OPS)
def test_every_row_kept_in_the_bucket_has_its_key_and_gc_leaves_no_other(
        bucketed: tuple[PostgresDatabase, MemoryBucket], ops: list[tuple[Any, ...]]) -> None:
    """Whatever commits, fails or is deleted, and whatever keys a commit that failed after its bucket
    writes left ("orphan"): every object whose row says it is in the bucket has its key there and reads
    back, and after a maintenance block the keys are exactly those objects'."""
    database, bucket = bucketed
    store = database.create(fresh_name("prop"))
    prefix = f"{store.name}/"
    held: dict[ObjectId, bytes] = {}
    for op in ops:
        if op[0] == "put":
            oid, data = _blob(op[1])
            try:
                with store.transaction(write=True) as txn:
                    txn.write_objects([(oid, data)])
                    if op[2]:
                        raise RuntimeError("fails after writing")
                held[oid] = data
            except RuntimeError:
                pass
        elif op[0] == "orphan":
            oid, data = _blob(op[1])
            bucket.put_if_absent(blob_key(store.name, oid), b"\x00" + data)
        elif op[0] == "delete":
            oid = _blob(op[1])[0]
            store.delete_many([oid])
            held.pop(oid, None)
        else:
            with maintenance_lock(store):
                pass
            assert set(bucket.keys(prefix)) == {blob_key(store.name, oid) for oid in held}
        keys = set(bucket.keys(prefix))
        assert {blob_key(store.name, oid) for oid in held} <= keys
        assert set(store) == set(held)
        assert store.get_many(list(held)) == list(held.values())


def test_appends_from_three_hubs_to_one_ref_all_land(db: PostgresDatabase, postgres_url: str) -> None:
    """`Repository.append` from three hubs at once (each its own pool) onto one ref: the commit loop of
    repo/commit.py rebases whoever lost, and every message lands exactly once."""
    name = fresh_name("appends")
    Repository(db.create(name)).append("main", [{"role": "user", "content": "start"}])
    hubs = [PostgresDatabase(postgres_url) for _ in range(3)]
    errors: list[BaseException] = []

    def append(hub: int) -> None:
        try:
            repo = Repository(hubs[hub].open(name))
            for i in range(12):
                repo.append("main", [{"role": "user", "content": f"hub {hub} message {i}"}])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=append, args=(h,)) for h in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for hub in hubs:
        hub.close()
    assert errors == []
    contents = [m["content"] for m in Repository(db.open(name)).history("main").render()]
    assert contents[0] == "start" and len(contents) == 37
    assert sorted(contents[1:]) == sorted(f"hub {h} message {i}" for h in range(3) for i in range(12))
    for h in range(3):  # each hub's own messages keep their order
        mine = [c for c in contents if c.startswith(f"hub {h} ")]
        assert mine == [f"hub {h} message {i}" for i in range(12)]


def test_large_objects_round_trip_inline_without_a_bucket(db: PostgresDatabase) -> None:
    store = db.create(fresh_name("large"))
    big = [encode_object(Blob(hashlib.sha512(str(i).encode()).hexdigest() * 40_000)) for i in range(20)]
    store.put_many(big[:1])  # the one-INSERT path
    store.put_many(big)  # the COPY path
    assert store.get_many([oid for oid, _ in big]) == [data for _, data in big]
    assert all(store.stored_size(oid) < len(data) for oid, data in big)  # compressed


def test_a_database_of_another_schema_version_is_refused(postgres_url: str) -> None:
    other = f"ctxstore_v{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{other}"')
    url = postgres_url.rsplit("/", 1)[0] + f"/{other}"
    try:
        PostgresDatabase(url).close()
        PostgresDatabase(url).close()  # creating the schema again is a no-op
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"UPDATE {SCHEMA}.meta SET value = '99' WHERE key = 'schema'")
        with pytest.raises(NotARepository, match="version 99"):
            PostgresDatabase(url)
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{other}" WITH (FORCE)')


def _child_uses(name: str, db: PostgresDatabase, queue: Any) -> None:
    try:
        store = db.open(name)  # the parent's database object, inherited by fork
        oid, data = make_object(99)
        store.put_many([(oid, data)])
        ok = store.get(oid) == data and len(store) == 2
        db.close()  # closing the parent's sessions from here would end them for the parent too
        queue.put(ok)
    except BaseException as exc:
        queue.put(repr(exc))


def test_a_forked_child_opens_its_own_connections_and_leaves_the_parents_alone(db: PostgresDatabase) -> None:
    name = fresh_name("fork")
    store = db.create(name)
    oid, data = make_object(1)
    store.put_many([(oid, data)])
    with store.transaction(write=True) as txn:  # several connections sit idle in the pool now
        assert store.get(oid) == data
        txn.set_config("a", b"1")
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_uses, args=(name, db, queue))
    child.start()
    assert queue.get() is True
    child.join()
    assert child.exitcode == 0
    for _ in range(20):  # every pooled connection of the parent still works
        assert store.get(oid) == data and len(store) == 2
        with store.transaction() as txn:
            assert txn.get_config("a") == b"1"


def test_pooled_connections_the_server_dropped_are_replaced(postgres_url: str) -> None:
    """After the server ends every idle session (a restart, an idle timeout), reads and transactions
    open new connections instead of failing."""
    app = f"ctxstore-test-{uuid.uuid4().hex[:8]}"
    with PostgresDatabase(postgres_url, pool_size=4, application_name=app) as hub:
        store = hub.create(fresh_name("dropped"))
        oid, data = make_object(1)
        store.put_many([(oid, data)])
        with store.transaction(write=True) as txn:  # two pooled connections now
            assert store.get(oid) == data
            txn.set_config("a", b"1")
            with store.transaction() as other:
                assert other.get_config("a") is None
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            ended = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE application_name = %s", (app,)).fetchone()
        assert ended is not None and ended[0] >= 2
        assert store.has(oid) and store.get(oid) == data and hub.names()
        with store.transaction(write=True) as txn:
            txn.set_config("b", b"2")
        with store.transaction() as txn:
            assert txn.get_config("a") == b"1" and txn.get_config("b") == b"2"


def test_gc_running_beside_writers_never_breaks_the_repository(postgres_url: str) -> None:
    """gc with no grace period, over and over, while another hub appends messages whose blobs repeat
    (so some are unreachable leftovers of a deleted ref when written again) and drops a scratch ref:
    afterwards fsck finds nothing wrong, every bucketed row has its key, and the last gc leaves no
    other key."""
    bucket = MemoryBucket()
    texts_pool = ["".join(hashlib.sha512(f"shared {k}/{i}".encode()).hexdigest() for i in range(20))
                  for k in range(4)]
    with PostgresDatabase(postgres_url, blobs=bucket, blob_threshold=64) as writer_hub, \
            PostgresDatabase(postgres_url, blobs=bucket, blob_threshold=64) as gc_hub:
        name = fresh_name("gcrace")
        writer = Repository(writer_hub.create(name))
        collector = Repository(gc_hub.open(name))
        done = threading.Event()
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for i in range(24):
                    text = texts_pool[i % 4]
                    writer.append("scratch", [{"role": "user", "content": text + f" {i}"},
                                              {"role": "user", "content": texts_pool[(i + 1) % 4]}])
                    writer.append("main", [{"role": "user", "content": texts_pool[(i + 2) % 4]}])
                    if i % 3 == 2:
                        writer.delete_ref("scratch")
                        writer.expire_reflogs("refs/heads/scratch")
            except BaseException as exc:
                errors.append(exc)
            finally:
                done.set()

        thread = threading.Thread(target=write)
        thread.start()
        runs = 0
        while not done.is_set() or runs == 0:
            collector.gc(grace=0)
            runs += 1
        thread.join()
        assert errors == []
        collector.gc(grace=0)
        report = collector.fsck()
        assert report.problems == []
        store = collector.store
        assert isinstance(store, PostgresStore)
        with psycopg.connect(postgres_url) as conn:
            bucketed = {bytes(r[0]) for r in conn.execute(
                f"SELECT oid FROM {SCHEMA}.objects WHERE repo = %s AND value IS NULL", (store.repo,))}
        assert set(bucket.keys(f"{name}/")) == {blob_key(name, ObjectId(oid)) for oid in bucketed}
        assert len(collector.history("main").render()) == 24
