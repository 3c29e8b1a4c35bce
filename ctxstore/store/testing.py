"""The store conformance suite: what every `TransactionalStore` backend must do the same way.

Run it against a backend by subclassing `StoreConformance` in a pytest module and providing a `store`
fixture that yields a fresh, empty store whose write times come from the `clock` fixture (a
`FakeClock`, which the tests move by hand), and that closes it afterwards::

    import pytest
    from ctxstore.store.testing import FakeClock, StoreConformance

    class TestMyStore(StoreConformance):
        @pytest.fixture
        def store(self, clock: FakeClock, tmp_path):
            s = MyStore(tmp_path / "db", clock=clock)
            yield s
            s.close()

Every test of the class then runs against the backend: objects (put, get, delete, iteration, write times,
stored sizes and stats), refs (listing, deletion, compare-and-swap under concurrent writers), reflogs,
config, transactions (own writes visible, all-or-nothing, read-only refusal, use after the block, and a
property test against a model) and the errors each call raises. It needs pytest and hypothesis (the
``test`` extra). ctxstore runs it for `MemoryStore` and `LmdbStore` in tests/test_store.py.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ..errors import CtxStoreError, InvalidInput, InvalidObject, MissingObject, StoreError
from ..format import codec, seq
from ..format.objects import Revision, encode_object, revision_header
from ..ids import ObjectId, object_id
from .base import ObjectStore, Transaction, TransactionalStore, read_revision_header

__all__ = ["FakeClock", "StoreConformance", "make_object", "make_revisions", "store_state"]


class FakeClock:
    """A clock (ms since the epoch) that a test moves by hand: pass it as a store's `clock`."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_object(i: int, text: str = "message") -> tuple[ObjectId, bytes]:
    """A distinct small object (id, canonical bytes) for each `i` and `text`."""
    data = codec.encode({"role": "user", "content": f"{text} {i}", "n": i})
    return object_id(data), data


def make_revisions(n: int, start: int = 1_700_000_000_000) -> list[tuple[ObjectId, bytes]]:
    """A chain of `n` append revisions (id, canonical bytes), one entry each, each the parent of the next:
    what a conversation recorded one message per commit stores (a backend may keep them as deltas)."""
    out: list[tuple[ObjectId, bytes]] = []
    parent: ObjectId | None = None
    spine: seq.Spine = [[]]
    for i in range(n):
        entry_id, entry_oid = f"e{i}", make_object(i, "entry")[0]
        spine = seq.append(spine, [[entry_id, entry_oid]], seq.node_id)
        rev = Revision(parent, start + i, {"type": "append", "entryIds": [entry_id], "entries": [entry_oid]},
                       spine, i + 1)
        parent, data = encode_object(rev)
        out.append((parent, data))
    return out


def store_state(store: TransactionalStore, config_keys: tuple[str, ...] = ("a", "b", "c")) -> dict[str, object]:
    """Everything a store holds (config: the keys given), for before/after comparisons."""
    with store.transaction() as txn:
        names = txn.reflog_names()
        return {
            "objects": {oid: store.get(oid) for oid in store},
            "refs": txn.refs(),
            "reflogs": {n: txn.reflog(n) for n in names},
            "config": {k: txn.get_config(k) for k in config_keys},
        }


def _wipe(store: TransactionalStore, config_keys: tuple[str, ...]) -> None:
    """Empty a store through its public API (the model test reuses one store for many examples)."""
    with store.transaction(write=True) as txn:
        txn.delete_objects(list(store))
        for name in txn.refs():
            txn.set_ref(name, None)
        for name in txn.reflog_names():
            txn.delete_reflog(name)
        for key in config_keys:
            txn.set_config(key, None)


_REF_NAMES = ["refs/heads/a", "refs/heads/b"]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 15)),
        st.tuples(st.just("delete"), st.integers(0, 15)),
        st.tuples(st.just("ref"), st.sampled_from(_REF_NAMES), st.one_of(st.none(), st.integers(0, 15))),
        st.tuples(st.just("log"), st.sampled_from(_REF_NAMES), st.binary(max_size=4)),
        st.tuples(st.just("config"), st.sampled_from(["a", "b"]), st.one_of(st.none(), st.binary(max_size=4))),
    ),
    max_size=12,
)
_Op = tuple[object, ...]
_Model = dict[str, dict[object, object]]


def _apply_op(txn: Transaction, model: _Model, op: _Op) -> None:
    kind = op[0]
    if kind == "put":
        assert isinstance(op[1], int)
        oid, data = make_object(op[1])
        txn.put_objects([(oid, data)])
        model["objects"][oid] = data
    elif kind == "delete":
        assert isinstance(op[1], int)
        oid = make_object(op[1])[0]
        txn.delete_objects([oid])
        model["objects"].pop(oid, None)
    elif kind == "ref":
        name, n = op[1], op[2]
        assert isinstance(name, str) and (n is None or isinstance(n, int))
        target = None if n is None else make_object(n)[0]
        txn.set_ref(name, target)
        if target is None:
            model["refs"].pop(name, None)
        else:
            model["refs"][name] = target
    elif kind == "log":
        name, record = op[1], op[2]
        assert isinstance(name, str) and isinstance(record, bytes)
        txn.append_reflog(name, record)
        log = model["reflogs"].setdefault(name, [])
        assert isinstance(log, list)
        log.append(record)
    elif kind == "config":
        key, value = op[1], op[2]
        assert isinstance(key, str) and (value is None or isinstance(value, bytes))
        txn.set_config(key, value)
        if value is None:
            model["config"].pop(key, None)
        else:
            model["config"][key] = value


class StoreConformance:
    """What every backend must do the same way. Subclass it and provide the `store` fixture (see above)."""

    @pytest.fixture
    def clock(self) -> FakeClock:
        """The clock the `store` fixture must stamp write times with."""
        return FakeClock()

    @pytest.fixture
    def store(self, clock: FakeClock) -> Iterator[TransactionalStore]:
        """A fresh, empty store of the backend under test, using `clock`; a subclass provides it."""
        raise NotImplementedError("subclass StoreConformance and define a `store` fixture for your backend")
        yield  # pragma: no cover

    # -- the protocols ------------------------------------------------------------------------------------

    def test_implements_the_protocols(self, store: TransactionalStore) -> None:
        assert isinstance(store, ObjectStore)
        assert isinstance(store, TransactionalStore)

    # -- objects ------------------------------------------------------------------------------------------

    def test_put_then_get_returns_the_canonical_bytes(self, store: TransactionalStore) -> None:
        oid, data = make_object(1, "x" * 500)
        assert store.put_many([(oid, data)]) == 1
        assert store.get(oid) == data
        assert store.has(oid)
        assert oid in store

    def test_get_of_an_absent_object_raises_missing_object(self, store: TransactionalStore) -> None:
        oid, _ = make_object(1)
        with pytest.raises(MissingObject):
            store.get(oid)
        with pytest.raises(KeyError):
            store.get(oid)
        assert not store.has(oid)
        assert oid not in store

    def test_get_many_reads_objects_in_the_order_asked_under_one_view(self, store: TransactionalStore) -> None:
        objects = [make_object(i) for i in range(20)]
        store.put_many(objects)
        asked = [oid for oid, _ in reversed(objects)] + [objects[3][0]]
        assert store.get_many(asked) == [store.get(oid) for oid in asked]
        assert store.get_many([]) == []

    def test_get_many_of_an_absent_or_bad_id_raises_a_ctxstore_error(self, store: TransactionalStore) -> None:
        oid, data = make_object(1)
        store.put_many([(oid, data)])
        with pytest.raises(MissingObject):
            store.get_many([oid, make_object(2)[0]])
        with pytest.raises(InvalidInput):
            store.get_many([oid, "not an id"])  # type: ignore[list-item]

    def test_revision_headers_read_parent_and_time_as_the_full_bytes_say(
            self, store: TransactionalStore) -> None:
        """The cheap header read (where a backend has one) agrees with the canonical bytes, for revisions
        committed one per transaction (what a backend may store as deltas) and all at once."""
        chain = make_revisions(80)
        for oid, data in chain[:40]:
            store.put_many([(oid, data)])
        store.put_many(chain[40:])
        expected = {oid: revision_header(data) for oid, data in chain}
        for oid, _data in reversed(chain):
            assert read_revision_header(store, oid) == expected[oid]
        with store.transaction() as txn:
            for oid, _data in chain:
                assert txn.revision_header(oid) == expected[oid]
        for oid, data in chain:
            assert store.get(oid) == data  # a header read leaves full reads as they were
        more = make_revisions(82)[80:]
        with store.transaction(write=True) as txn:  # its own writes, not yet committed
            txn.write_objects(more)
            for oid, data in more:
                assert txn.revision_header(oid) == revision_header(data)
            txn.delete_objects([chain[0][0]])
            with pytest.raises(MissingObject):
                txn.revision_header(chain[0][0])

    def test_a_revision_header_of_an_absent_or_other_object_is_an_error(
            self, store: TransactionalStore) -> None:
        oid, data = make_object(1)
        store.put_many([(oid, data)])
        with pytest.raises(InvalidObject):
            read_revision_header(store, oid)
        absent = make_object(2)[0]
        with pytest.raises(MissingObject):
            read_revision_header(store, absent)
        with store.transaction() as txn:
            with pytest.raises(MissingObject):
                txn.revision_header(absent)
            with pytest.raises(InvalidObject):
                txn.revision_header(oid)
            with pytest.raises(InvalidInput):
                txn.revision_header(b"short")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            read_revision_header(store, b"short")  # type: ignore[arg-type]

    def test_put_many_counts_only_new_objects(self, store: TransactionalStore) -> None:
        items = [make_object(i) for i in range(10)]
        assert store.put_many(items[:4]) == 4
        assert store.put_many(items + items[:2]) == 6
        assert len(store) == 10

    def test_delete_many_counts_what_was_there(self, store: TransactionalStore) -> None:
        items = [make_object(i) for i in range(5)]
        store.put_many(items)
        assert store.delete_many([items[0][0], items[1][0], make_object(99)[0]]) == 2
        assert not store.has(items[0][0])
        assert store.has(items[2][0])
        assert len(store) == 3

    def test_iteration_yields_every_id_once(self, store: TransactionalStore) -> None:
        items = [make_object(i) for i in range(5000)]
        store.put_many(items)
        seen = list(store)
        assert len(seen) == len(set(seen)) == 5000
        assert set(seen) == {oid for oid, _ in items}

    def test_bad_object_id_is_rejected_and_nothing_is_written(self, store: TransactionalStore) -> None:
        good = make_object(1)
        with pytest.raises(InvalidInput):
            store.put_many([good, (b"short", b"\x01")])  # type: ignore[list-item]
        assert len(store) == 0

    def test_reading_with_something_that_is_not_a_raw_id_is_invalid_input(
            self, store: TransactionalStore) -> None:
        """A hex id or any other value is refused with `InvalidInput`, never a bare built-in error."""
        oid, data = make_object(1)
        store.put_many([(oid, data)])
        for bad in (oid.hex(), oid[:16], None, 42, [oid]):
            for call in (store.get, store.has, store.written_at, store.stored_size):
                with pytest.raises(InvalidInput):
                    call(bad)  # type: ignore[arg-type]
            with store.transaction() as txn:
                for tcall in (txn.get, txn.has, txn.written_at):
                    with pytest.raises(InvalidInput):
                        tcall(bad)  # type: ignore[arg-type]
            assert bad not in store
        with pytest.raises(InvalidInput), store.transaction(write=True) as txn:
            txn.set_ref("refs/heads/main", oid.hex())  # type: ignore[arg-type]
        with pytest.raises(InvalidInput), store.transaction(write=True) as txn:
            txn.put_objects([(oid, "text")])  # type: ignore[list-item]
        with pytest.raises(InvalidInput), store.transaction(write=True) as txn:
            txn.append_reflog("refs/heads/main", "text")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput), store.transaction(write=True) as txn:
            txn.set_config("a", "text")  # type: ignore[arg-type]
        assert store_state(store) == {"objects": {oid: data}, "refs": {}, "reflogs": {},
                                      "config": {"a": None, "b": None, "c": None}}

    def test_written_at_is_stamped_and_refreshed_by_a_rewrite(
            self, store: TransactionalStore, clock: FakeClock) -> None:
        oid, data = make_object(1)
        assert store.written_at(oid) is None
        store.put_many([(oid, data)])
        assert store.written_at(oid) == clock.now
        clock.now += 5000
        store.put_many([(oid, data)])
        assert store.written_at(oid) == clock.now

    def test_write_objects_without_lookups_keeps_held_bytes_and_refreshes_their_time(
            self, store: TransactionalStore, clock: FakeClock) -> None:
        held, fresh = make_object(1), make_object(2)
        store.put_many([held])
        clock.now += 5000
        with store.transaction(write=True) as txn:
            txn.write_objects([held, fresh])
            assert txn.has(fresh[0]) and txn.get(fresh[0]) == fresh[1]
        assert len(store) == 2
        assert store.get(held[0]) == held[1] and store.get(fresh[0]) == fresh[1]
        assert store.written_at(held[0]) == store.written_at(fresh[0]) == clock.now
        with pytest.raises(InvalidInput), store.transaction(write=True) as txn:
            txn.write_objects([make_object(3), (b"short", b"\x01")])  # type: ignore[list-item]
        assert len(store) == 2

    def test_stored_size_and_stats(self, store: TransactionalStore) -> None:
        items = [make_object(i, "hello " * 50) for i in range(20)]
        store.put_many(items)
        stats = store.stats()
        assert stats.objects == 20
        assert stats.object_bytes == sum(len(d) for _, d in items)
        assert stats.stored_bytes == sum(store.stored_size(oid) for oid, _ in items)
        assert stats.file_bytes > 0
        with pytest.raises(MissingObject):
            store.stored_size(make_object(99)[0])

    # -- transactions -------------------------------------------------------------------------------------

    def test_transaction_commits_objects_refs_reflog_and_config(self, store: TransactionalStore) -> None:
        oid, data = make_object(1)
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
        a, b = make_object(1), make_object(2)
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
        keep = make_object(1)
        with store.transaction(write=True) as txn:
            txn.put_objects([keep])
            txn.set_ref("refs/heads/main", keep[0])
            txn.append_reflog("refs/heads/main", b"r")
            txn.set_config("a", b"1")
        before = store_state(store)
        with pytest.raises(RuntimeError), store.transaction(write=True) as txn:
            txn.put_objects([make_object(i) for i in range(2, 50)])
            txn.delete_objects([keep[0]])
            txn.set_ref("refs/heads/main", None)
            txn.set_ref("refs/heads/other", keep[0])
            txn.append_reflog("refs/heads/main", b"lost")
            txn.delete_reflog("refs/heads/main")
            txn.set_config("a", None)
            txn.set_config("c", b"3")
            raise RuntimeError("boom")
        assert store_state(store) == before

    def test_read_only_transaction_refuses_writes(self, store: TransactionalStore) -> None:
        with store.transaction() as txn:
            assert not txn.writable
            with pytest.raises(StoreError):
                txn.put_objects([make_object(1)])
            with pytest.raises(StoreError):
                txn.set_ref("refs/heads/main", make_object(1)[0])
        assert len(store) == 0

    def test_a_transaction_cannot_be_used_after_its_block(self, store: TransactionalStore) -> None:
        with store.transaction(write=True) as txn:
            pass
        with pytest.raises(StoreError):
            txn.get_ref("refs/heads/main")
        with pytest.raises(StoreError):
            txn.put_objects([make_object(1)])

    # -- refs ---------------------------------------------------------------------------------------------

    def test_refs_listing_by_prefix_is_sorted_and_deletes_drop_refs(self, store: TransactionalStore) -> None:
        oid = make_object(1)[0]
        store.put_many([make_object(1)])
        with store.transaction(write=True) as txn:
            for name in ("refs/heads/b", "refs/heads/a", "refs/tags/t", "refs/heads/a/x"):
                txn.set_ref(name, oid)
        with store.transaction(write=True) as txn:
            txn.set_ref("refs/heads/b", None)
        with store.transaction() as txn:
            assert list(txn.refs("refs/heads/")) == ["refs/heads/a", "refs/heads/a/x"]
            assert list(txn.refs()) == ["refs/heads/a", "refs/heads/a/x", "refs/tags/t"]
            assert txn.get_ref("refs/heads/b") is None

    def test_a_ref_read_and_set_in_one_write_transaction_is_compare_and_swap(
            self, store: TransactionalStore) -> None:
        """Writers racing to advance one ref each see the other's move: no update is lost."""
        chain = [make_object(i) for i in range(41)]
        store.put_many(chain)
        step = {oid: chain[n + 1][0] for n, (oid, _) in enumerate(chain[:-1])}
        with store.transaction(write=True) as txn:
            txn.set_ref("refs/heads/main", chain[0][0])
        errors: list[BaseException] = []

        def advance(times: int) -> None:
            try:
                for _ in range(times):
                    with store.transaction(write=True) as txn:
                        head = txn.get_ref("refs/heads/main")
                        assert head is not None
                        txn.set_ref("refs/heads/main", step[head])
                        txn.append_reflog("refs/heads/main", head)
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        threads = [threading.Thread(target=advance, args=(20,)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        with store.transaction() as txn:
            assert txn.get_ref("refs/heads/main") == chain[40][0]
            assert txn.reflog("refs/heads/main") == [oid for oid, _ in reversed(chain[:40])]

    def test_names_the_key_layout_cannot_hold_are_rejected(self, store: TransactionalStore) -> None:
        with store.transaction(write=True) as txn:
            for bad in ("", "a\x00b", "x" * 1000, "\udc80"):
                with pytest.raises(InvalidInput):
                    txn.set_ref(bad, make_object(1)[0])
                with pytest.raises(InvalidInput):
                    txn.set_config(bad, b"1")
                with pytest.raises(InvalidInput):
                    txn.append_reflog(bad, b"1")
        assert store_state(store)["refs"] == {}

    # -- reflogs ------------------------------------------------------------------------------------------

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

    # -- config -------------------------------------------------------------------------------------------

    def test_config_values_are_set_replaced_and_deleted(self, store: TransactionalStore) -> None:
        with store.transaction(write=True) as txn:
            txn.set_config("a", b"1")
            txn.set_config("b", b"")
        with store.transaction(write=True) as txn:
            txn.set_config("a", b"2")
            txn.set_config("b", None)
        with store.transaction() as txn:
            assert txn.get_config("a") == b"2"
            assert txn.get_config("b") is None
            assert txn.get_config("never") is None

    # -- lifecycle ----------------------------------------------------------------------------------------

    def test_close_makes_further_use_an_error(self, store: TransactionalStore) -> None:
        oid, data = make_object(1)
        store.put_many([(oid, data)])
        store.close()
        with pytest.raises(StoreError), store.transaction() as txn:
            txn.refs()
        for call in (lambda: store.get(oid), lambda: store.has(oid), lambda: store.put_many([(oid, data)]),
                     lambda: len(store), store.stats):
            with pytest.raises(StoreError):
                call()

    def test_every_error_is_a_ctxstore_error(self, store: TransactionalStore) -> None:
        """The errors a backend raises all derive from `CtxStoreError`, so callers can catch one base."""
        for error in (MissingObject, InvalidInput, StoreError):
            assert issubclass(error, CtxStoreError)
        with pytest.raises(CtxStoreError):
            store.get(make_object(1)[0])
        with pytest.raises(CtxStoreError):
            store.get("00" * 32)  # type: ignore[arg-type]

    # -- the model ----------------------------------------------------------------------------------------

    # One store per test (wiped at each example) and one executor per backend subclass, by design.
    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(batches=st.lists(st.tuples(_OPS, st.booleans()), max_size=5))
    def test_transactions_match_a_model_whether_they_commit_or_fail(
            self, store: TransactionalStore, batches: list[tuple[list[_Op], bool]]) -> None:
        """Committed batches apply in full, failed ones not at all."""
        _wipe(store, ("a", "b"))
        model: _Model = {"objects": {}, "refs": {}, "reflogs": {}, "config": {}}
        for ops, fail in batches:
            staged = {k: dict(v) for k, v in model.items()}
            staged["reflogs"] = {k: list(v) for k, v in model["reflogs"].items()}  # type: ignore[call-overload]
            try:
                with store.transaction(write=True) as txn:
                    for op in ops:
                        _apply_op(txn, staged, op)
                    if fail:
                        raise RuntimeError("fail this batch")
            except RuntimeError:
                continue
            model = staged
        got = store_state(store)
        assert got["objects"] == model["objects"]
        assert got["refs"] == model["refs"]
        assert got["reflogs"] == {k: list(reversed(v)) for k, v in model["reflogs"].items()  # type: ignore[call-overload]
                                  if v}
        config = got["config"]
        assert isinstance(config, dict)
        assert {k: v for k, v in config.items() if v is not None} == model["config"]
