"""One conformance suite for every object store backend: the protocol and the transaction API."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import ids
from ctxstore.errors import InvalidInput, MissingObject, StoreError
from ctxstore.format import codec
from ctxstore.store import MemoryStore, ObjectStore, TransactionalStore
from ctxstore.store.lmdb import LmdbStore


class FakeClock:
    """A clock the test moves by hand, in ms."""

    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def obj(i: int, text: str = "message") -> tuple[ids.ObjectId, bytes]:
    data = codec.encode({"role": "user", "content": f"{text} {i}", "n": i})
    return ids.object_id(data), data


def make_store(kind: str, path: str, clock: FakeClock | None = None) -> TransactionalStore:
    if kind == "memory":
        return MemoryStore(clock=clock) if clock else MemoryStore()
    return LmdbStore(path, map_size=1 << 20, durable=False, clock=clock)


BACKENDS = ["memory", "lmdb"]


@pytest.fixture(params=BACKENDS)
def clock_store(request: pytest.FixtureRequest,
                tmp_path: object) -> Iterator[tuple[TransactionalStore, FakeClock]]:
    clock = FakeClock()
    store = make_store(request.param, str(tmp_path), clock)
    yield store, clock
    store.close()


@pytest.fixture
def store(clock_store: tuple[TransactionalStore, FakeClock]) -> TransactionalStore:
    return clock_store[0]


def state(store: TransactionalStore) -> dict[str, object]:
    """Everything a store holds, for before/after comparisons."""
    with store.transaction() as txn:
        names = txn.reflog_names()
        return {
            "objects": {oid: store.get(oid) for oid in store},
            "refs": txn.refs(),
            "reflogs": {n: txn.reflog(n) for n in names},
            "config": {k: txn.get_config(k) for k in ("a", "b", "c")},
        }


class TestStoreConformance:
    """What every backend must do the same way."""

    def test_implements_the_protocols(self, store: TransactionalStore) -> None:
        assert isinstance(store, ObjectStore)
        assert isinstance(store, TransactionalStore)

    def test_put_then_get_returns_the_canonical_bytes(self, store: TransactionalStore) -> None:
        oid, data = obj(1, "x" * 500)
        assert store.put_many([(oid, data)]) == 1
        assert store.get(oid) == data
        assert store.has(oid)

    def test_get_of_an_absent_object_raises_missing_object(self, store: TransactionalStore) -> None:
        oid, _ = obj(1)
        with pytest.raises(MissingObject):
            store.get(oid)
        with pytest.raises(KeyError):
            store.get(oid)
        assert not store.has(oid)

    def test_put_many_counts_only_new_objects(self, store: TransactionalStore) -> None:
        items = [obj(i) for i in range(10)]
        assert store.put_many(items[:4]) == 4
        assert store.put_many(items + items[:2]) == 6
        assert len(store) == 10

    def test_delete_many_counts_what_was_there(self, store: TransactionalStore) -> None:
        items = [obj(i) for i in range(5)]
        store.put_many(items)
        assert store.delete_many([items[0][0], items[1][0], obj(99)[0]]) == 2
        assert not store.has(items[0][0])
        assert store.has(items[2][0])
        assert len(store) == 3

    def test_iteration_yields_every_id_once(self, store: TransactionalStore) -> None:
        items = [obj(i) for i in range(5000)]
        store.put_many(items)
        seen = list(store)
        assert len(seen) == len(set(seen)) == 5000
        assert set(seen) == {oid for oid, _ in items}

    def test_bad_object_id_is_rejected_and_nothing_is_written(self, store: TransactionalStore) -> None:
        good = obj(1)
        with pytest.raises(InvalidInput):
            store.put_many([good, (b"short", b"\x01")])  # type: ignore[list-item]
        assert len(store) == 0

    def test_written_at_is_stamped_and_refreshed_by_a_rewrite(
            self, clock_store: tuple[TransactionalStore, FakeClock]) -> None:
        store, clock = clock_store
        oid, data = obj(1)
        assert store.written_at(oid) is None
        store.put_many([(oid, data)])
        assert store.written_at(oid) == clock.now
        clock.now += 5000
        store.put_many([(oid, data)])
        assert store.written_at(oid) == clock.now

    def test_write_objects_without_lookups_keeps_held_bytes_and_refreshes_their_time(
            self, clock_store: tuple[TransactionalStore, FakeClock]) -> None:
        store, clock = clock_store
        held, fresh = obj(1), obj(2)
        store.put_many([held])
        clock.now += 5000
        with store.transaction(write=True) as txn:
            txn.write_objects([held, fresh])
            assert txn.has(fresh[0]) and txn.get(fresh[0]) == fresh[1]
        assert len(store) == 2
        assert store.get(held[0]) == held[1] and store.get(fresh[0]) == fresh[1]
        assert store.written_at(held[0]) == store.written_at(fresh[0]) == clock.now
        with pytest.raises(InvalidInput), store.transaction(write=True) as txn:
            txn.write_objects([obj(3), (b"short", b"\x01")])  # type: ignore[list-item]
        assert len(store) == 2

    def test_stored_size_and_stats(self, store: TransactionalStore) -> None:
        items = [obj(i, "hello " * 50) for i in range(20)]
        store.put_many(items)
        stats = store.stats()
        assert stats.objects == 20
        assert stats.object_bytes == sum(len(d) for _, d in items)
        assert stats.stored_bytes == sum(store.stored_size(oid) for oid, _ in items)
        assert stats.file_bytes > 0
        with pytest.raises(MissingObject):
            store.stored_size(obj(99)[0])

    def test_transaction_commits_objects_refs_reflog_and_config(self, store: TransactionalStore) -> None:
        oid, data = obj(1)
        with store.transaction(write=True) as txn:
            assert txn.put_objects([(oid, data)]) == 1
            txn.set_ref("refs/heads/main", oid)
            txn.append_reflog("refs/heads/main", b"first")
            txn.append_reflog("refs/heads/main", b"second")
            txn.set_config("a", b"1")
        assert store.get(oid) == data
        with store.transaction() as txn:
            assert txn.get_ref("refs/heads/main") == oid
            assert txn.reflog("refs/heads/main") == [b"second", b"first"]
            assert txn.reflog("refs/heads/main", limit=1) == [b"second"]
            assert txn.get_config("a") == b"1"

    def test_reads_inside_a_write_transaction_see_its_own_writes(self, store: TransactionalStore) -> None:
        a, b = obj(1), obj(2)
        store.put_many([b])
        with store.transaction(write=True) as txn:
            txn.append_reflog("refs/heads/x", b"old")
        with store.transaction(write=True) as txn:
            txn.put_objects([a])
            assert txn.has(a[0]) and txn.get(a[0]) == a[1]
            txn.delete_objects([b[0]])
            assert not txn.has(b[0])
            with pytest.raises(MissingObject):
                txn.get(b[0])
            txn.set_ref("refs/heads/x", a[0])
            assert txn.get_ref("refs/heads/x") == a[0]
            assert txn.refs("refs/heads/") == {"refs/heads/x": a[0]}
            txn.append_reflog("refs/heads/x", b"new")
            assert txn.reflog("refs/heads/x") == [b"new", b"old"]
            txn.set_config("b", b"2")
            assert txn.get_config("b") == b"2"
            # Nothing is visible outside until the block ends.
            assert not store.has(a[0])

    def test_an_exception_rolls_everything_back(self, store: TransactionalStore) -> None:
        keep = obj(1)
        with store.transaction(write=True) as txn:
            txn.put_objects([keep])
            txn.set_ref("refs/heads/main", keep[0])
            txn.append_reflog("refs/heads/main", b"r")
            txn.set_config("a", b"1")
        before = state(store)
        with pytest.raises(RuntimeError), store.transaction(write=True) as txn:
            txn.put_objects([obj(i) for i in range(2, 50)])
            txn.delete_objects([keep[0]])
            txn.set_ref("refs/heads/main", None)
            txn.set_ref("refs/heads/other", keep[0])
            txn.append_reflog("refs/heads/main", b"lost")
            txn.delete_reflog("refs/heads/main")
            txn.set_config("a", None)
            txn.set_config("c", b"3")
            raise RuntimeError("boom")
        assert state(store) == before

    def test_read_only_transaction_refuses_writes(self, store: TransactionalStore) -> None:
        with store.transaction() as txn:
            with pytest.raises(StoreError):
                txn.put_objects([obj(1)])
            with pytest.raises(StoreError):
                txn.set_ref("refs/heads/main", obj(1)[0])
        assert len(store) == 0

    def test_a_transaction_cannot_be_used_after_its_block(self, store: TransactionalStore) -> None:
        with store.transaction(write=True) as txn:
            pass
        with pytest.raises(StoreError):
            txn.get_ref("refs/heads/main")
        with pytest.raises(StoreError):
            txn.put_objects([obj(1)])

    def test_refs_listing_by_prefix_is_sorted_and_deletes_drop_refs(self, store: TransactionalStore) -> None:
        oid = obj(1)[0]
        store.put_many([obj(1)])
        with store.transaction(write=True) as txn:
            for name in ("refs/heads/b", "refs/heads/a", "refs/tags/t", "refs/heads/a/x"):
                txn.set_ref(name, oid)
        with store.transaction(write=True) as txn:
            txn.set_ref("refs/heads/b", None)
        with store.transaction() as txn:
            assert list(txn.refs("refs/heads/")) == ["refs/heads/a", "refs/heads/a/x"]
            assert list(txn.refs()) == ["refs/heads/a", "refs/heads/a/x", "refs/tags/t"]

    def test_reflogs_outlive_refs_and_can_be_deleted(self, store: TransactionalStore) -> None:
        with store.transaction(write=True) as txn:
            txn.append_reflog("refs/heads/a", b"1")
            txn.append_reflog("refs/heads/a/b", b"2")
            txn.append_reflog("refs/heads/ab", b"3")
        with store.transaction(write=True) as txn:
            txn.delete_reflog("refs/heads/a")
            txn.append_reflog("refs/heads/a", b"4")
        with store.transaction() as txn:
            assert txn.reflog_names() == ["refs/heads/a", "refs/heads/a/b", "refs/heads/ab"]
            assert txn.reflog("refs/heads/a") == [b"4"]
            assert txn.reflog("refs/heads/a/b") == [b"2"]
            assert txn.reflog("refs/heads/missing") == []

    def test_names_the_key_layout_cannot_hold_are_rejected(self, store: TransactionalStore) -> None:
        with store.transaction(write=True) as txn:
            for bad in ("", "a\x00b", "x" * 1000):
                with pytest.raises(InvalidInput):
                    txn.set_ref(bad, obj(1)[0])
        assert state(store)["refs"] == {}

    def test_close_makes_further_use_an_error(self, store: TransactionalStore) -> None:
        store.close()
        with pytest.raises(StoreError), store.transaction() as txn:
            txn.refs()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 15)),
        st.tuples(st.just("delete"), st.integers(0, 15)),
        st.tuples(st.just("ref"), st.sampled_from(["refs/heads/a", "refs/heads/b"]),
                  st.one_of(st.none(), st.integers(0, 15))),
        st.tuples(st.just("log"), st.sampled_from(["refs/heads/a", "refs/heads/b"]), st.binary(max_size=4)),
        st.tuples(st.just("config"), st.sampled_from(["a", "b"]),
                  st.one_of(st.none(), st.binary(max_size=4))),
    ),
    max_size=12,
)


@pytest.mark.parametrize("kind", BACKENDS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(OPS, st.booleans()), max_size=5))
def test_transactions_match_a_model_whether_they_commit_or_fail(
        kind: str, batches: list[tuple[list[tuple[object, ...]], bool]]) -> None:
    """Committed batches apply in full, failed ones not at all, on every backend."""
    with tempfile.TemporaryDirectory() as tmp:
        store = make_store(kind, tmp)
        model: dict[str, dict[object, object]] = {"objects": {}, "refs": {}, "reflogs": {}, "config": {}}
        try:
            for ops, fail in batches:
                staged = {k: dict(v) for k, v in model.items()}
                staged["reflogs"] = {k: list(v) for k, v in model["reflogs"].items()}  # type: ignore[misc]
                try:
                    with store.transaction(write=True) as txn:
                        for op in ops:
                            _apply_op(txn, staged, op)
                        if fail:
                            raise RuntimeError("fail this batch")
                except RuntimeError:
                    continue
                model = staged
            got = state(store)
            assert got["objects"] == model["objects"]
            assert got["refs"] == model["refs"]
            assert got["reflogs"] == {k: list(reversed(v)) for k, v in model["reflogs"].items() if v}
            config = got["config"]
            assert isinstance(config, dict)
            assert {k: v for k, v in config.items() if v is not None} == model["config"]
        finally:
            store.close()


def _apply_op(txn: object, model: dict[str, dict[object, object]], op: tuple[object, ...]) -> None:
    kind = op[0]
    if kind == "put":
        oid, data = obj(op[1])  # type: ignore[arg-type]
        txn.put_objects([(oid, data)])  # type: ignore[attr-defined]
        model["objects"][oid] = data
    elif kind == "delete":
        oid = obj(op[1])[0]  # type: ignore[arg-type]
        txn.delete_objects([oid])  # type: ignore[attr-defined]
        model["objects"].pop(oid, None)
    elif kind == "ref":
        target = None if op[2] is None else obj(op[2])[0]  # type: ignore[arg-type]
        txn.set_ref(op[1], target)  # type: ignore[attr-defined]
        if target is None:
            model["refs"].pop(op[1], None)
        else:
            model["refs"][op[1]] = target
    elif kind == "log":
        txn.append_reflog(op[1], op[2])  # type: ignore[attr-defined]
        model["reflogs"].setdefault(op[1], []).append(op[2])  # type: ignore[attr-defined]
    elif kind == "config":
        txn.set_config(op[1], op[2])  # type: ignore[attr-defined]
        if op[2] is None:
            model["config"].pop(op[1], None)
        else:
            model["config"][op[1]] = op[2]
