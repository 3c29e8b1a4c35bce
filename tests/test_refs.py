"""Ref names, compare-and-swap updates, multi-ref atomicity and reflogs, on both store backends."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxstore import ids
from ctxstore.errors import InvalidRefName, MissingObject, NonFastForward, UnknownRef
from ctxstore.format import codec
from ctxstore.refs import ANY, ReflogRecord, Refs, check_ref_name, default_ref_name, is_valid_ref_name, ref_candidates
from ctxstore.store import MemoryStore, TransactionalStore
from ctxstore.store.lmdb import LmdbStore


def obj(i: int) -> tuple[ids.ObjectId, bytes]:
    data = codec.encode({"revision": i})
    return ids.object_id(data), data


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


@pytest.fixture(params=["memory", "lmdb"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TransactionalStore]:
    s: TransactionalStore
    s = MemoryStore() if request.param == "memory" else LmdbStore(tmp_path / "s", durable=False)
    yield s
    s.close()


@pytest.fixture
def refs(store: TransactionalStore) -> Refs:
    return Refs(store, clock=Clock())


# -- names ----------------------------------------------------------------------------------------------

COMPONENT = st.text(alphabet=st.characters(codec=None, categories=("L", "N"), include_characters="-_+=,é"),
                    min_size=1, max_size=12).filter(lambda c: not c.endswith(".lock"))
VALID = st.one_of(
    st.lists(COMPONENT, min_size=1, max_size=4).map(lambda cs: "refs/heads/" + "/".join(cs)),
    st.lists(COMPONENT, min_size=1, max_size=3).map(lambda cs: "refs/tags/" + "/".join(cs)),
    st.lists(COMPONENT, min_size=2, max_size=4).map(lambda cs: "refs/remotes/" + "/".join(cs)),
)


@given(VALID)
def test_valid_names_are_accepted_unchanged(name: str) -> None:
    if len(name.encode()) <= 255:
        assert check_ref_name(name) == name
        assert is_valid_ref_name(name)


@given(st.one_of(st.text(max_size=40), st.text(max_size=20).map(lambda t: "refs/heads/" + t),
                 st.binary(max_size=10).map(lambda b: "refs/heads/x" + b.decode("latin-1"))))
def test_any_text_either_validates_or_raises_invalid_ref_name(name: str) -> None:
    try:
        assert check_ref_name(name) == name
    except InvalidRefName as exc:
        assert isinstance(exc, ValueError)
        assert repr(name)[:10] in str(exc) or "invalid ref name" in str(exc)


@pytest.mark.parametrize("name", [
    "", "main", "refs/heads", "refs/heads/", "refs/heads/a/", "refs/heads//a", "/refs/heads/a",
    "refs/heads/a..b", "refs/heads/.hidden", "refs/heads/a/.b", "refs/heads/a.lock", "refs/heads/x.lock/y",
    "refs/heads/a@{1}", "refs/heads/a b", "refs/heads/a~1", "refs/heads/a^", "refs/heads/a:b",
    "refs/heads/a?", "refs/heads/a*", "refs/heads/a[", "refs/heads/a\\b", "refs/heads/a.", "refs/heads/a\x00",
    "refs/heads/a\x7f", "refs/heads/a\u200b", "refs/heads/a\ud800", "refs/remotes/origin",
    "refs/notes/x", "refs/heads/" + "x" * 300,
])
def test_names_that_break_the_rules_are_invalid(name: str) -> None:
    with pytest.raises(InvalidRefName):
        check_ref_name(name)


def test_short_names_expand_like_git() -> None:
    assert ref_candidates("main") == ["refs/heads/main", "refs/tags/main"]
    assert ref_candidates("origin/main")[-1] == "refs/remotes/origin/main"
    assert ref_candidates("tags/v1")[0] == "refs/tags/v1"
    assert ref_candidates("refs/heads/x") == ["refs/heads/x"]
    assert default_ref_name("support/42") == "refs/heads/support/42"
    assert default_ref_name("heads/x") == "refs/heads/x"
    with pytest.raises(InvalidRefName):
        default_ref_name("a..b")


def test_short_names_resolve_to_existing_refs_first(refs: Refs, store: TransactionalStore) -> None:
    refs.set_if_equals("refs/remotes/origin/main", None, obj(1)[0], objects=[obj(1)])
    refs.set_if_equals("refs/tags/v1", None, obj(1)[0])
    assert refs.resolve("origin/main") == "refs/remotes/origin/main"
    assert refs.resolve("v1") == "refs/tags/v1"
    assert refs.resolve("main") == "refs/heads/main"  # unborn: a head
    assert refs.get("origin/main") == obj(1)[0]
    assert refs.get("main") is None
    with pytest.raises(UnknownRef):
        refs["main"]


# -- updates --------------------------------------------------------------------------------------------


def test_compare_and_swap_moves_the_ref_and_writes_its_objects(refs: Refs,
                                                               store: TransactionalStore) -> None:
    assert refs.set_if_equals("main", None, obj(1)[0], objects=[obj(1)], message="first") == "refs/heads/main"
    refs.set_if_equals("main", obj(1)[0], obj(2)[0], objects=[obj(2)], message="second")
    assert refs["main"] == obj(2)[0]
    assert store.get(obj(2)[0]) == obj(2)[1]
    log = refs.reflog("main")
    assert [(e.old, e.new, e.message) for e in log] == [(obj(1)[0], obj(2)[0], "second"),
                                                        (None, obj(1)[0], "first")]
    assert log[0].time_ms > log[1].time_ms


def test_a_stale_compare_and_swap_names_both_heads_and_writes_nothing(refs: Refs,
                                                                       store: TransactionalStore) -> None:
    refs.set_if_equals("main", None, obj(1)[0], objects=[obj(1)])
    refs.set_if_equals("main", obj(1)[0], obj(2)[0], objects=[obj(2)])
    with pytest.raises(NonFastForward) as info:
        refs.set_if_equals("main", obj(1)[0], obj(3)[0], objects=[obj(3)])
    err = info.value
    assert err.ref == "refs/heads/main"
    assert err.current == ids.to_hex(obj(2)[0]) and err.expected == ids.to_hex(obj(1)[0])
    assert ids.to_hex(obj(2)[0])[:12] in str(err) and ids.to_hex(obj(1)[0])[:12] in str(err)
    assert not store.has(obj(3)[0])
    assert refs["main"] == obj(2)[0]
    assert len(refs.reflog("main")) == 2


def test_creating_a_ref_that_exists_is_refused(refs: Refs) -> None:
    refs.set_if_equals("main", None, obj(1)[0], objects=[obj(1)])
    with pytest.raises(NonFastForward):
        refs.set_if_equals("main", None, obj(1)[0])


def test_a_ref_cannot_point_at_a_missing_object(refs: Refs) -> None:
    with pytest.raises(MissingObject):
        refs.set_if_equals("main", None, obj(1)[0])
    assert refs.items() == {}


def test_several_refs_move_all_or_nothing(refs: Refs, store: TransactionalStore) -> None:
    refs.set_many_if_equals({"a": (None, obj(1)[0]), "b": (None, obj(1)[0])}, objects=[obj(1)])
    with pytest.raises(NonFastForward) as info:
        refs.set_many_if_equals({"a": (obj(1)[0], obj(2)[0]), "b": (obj(9)[0], obj(2)[0]),
                                 "c": (None, obj(2)[0])}, objects=[obj(2)])
    assert info.value.ref == "refs/heads/b"
    assert refs.items() == {"refs/heads/a": obj(1)[0], "refs/heads/b": obj(1)[0]}
    assert not store.has(obj(2)[0])
    assert len(refs.reflog("a")) == 1
    refs.set_many_if_equals({"a": (obj(1)[0], obj(2)[0]), "b": (obj(1)[0], obj(2)[0])}, objects=[obj(2)])
    assert set(refs.items().values()) == {obj(2)[0]}


def test_delete_keeps_the_reflog_and_its_targets(refs: Refs) -> None:
    refs.set_if_equals("topic", None, obj(1)[0], objects=[obj(1)])
    with pytest.raises(NonFastForward):
        refs.delete("topic", old=obj(2)[0])
    refs.delete("topic", old=obj(1)[0])
    assert "topic" not in refs
    with pytest.raises(UnknownRef):
        refs.delete("topic")
    assert [(e.old, e.new) for e in refs.reflog("refs/heads/topic")] == [(obj(1)[0], None), (None, obj(1)[0])]
    assert refs.reflog_names() == ["refs/heads/topic"]
    assert refs.reflog_targets() == {obj(1)[0]}


def test_rename_moves_the_reflog_and_refuses_a_taken_name(refs: Refs) -> None:
    refs.set_if_equals("old", None, obj(1)[0], objects=[obj(1)])
    refs.set_if_equals("taken", None, obj(2)[0], objects=[obj(2)])
    with pytest.raises(NonFastForward):
        refs.rename("old", "taken")
    assert refs.rename("old", "new") == "refs/heads/new"
    assert refs.items() == {"refs/heads/new": obj(1)[0], "refs/heads/taken": obj(2)[0]}
    log = refs.reflog("new")
    assert len(log) == 2 and "renamed" in log[0].message and log[1].new == obj(1)[0]
    assert refs.reflog("refs/heads/old") == []


def test_forced_set_records_the_old_head(refs: Refs) -> None:
    refs.set_if_equals("main", None, obj(1)[0], objects=[obj(1)])
    refs.set("main", obj(2)[0], objects=[obj(2)], message="force")
    assert refs.reflog("main")[0].old == obj(1)[0]


def test_reflog_entries_round_trip() -> None:
    entry = ReflogRecord(None, obj(1)[0], 123, "hello")
    assert ReflogRecord.decode(entry.encode()) == entry
    assert ANY is not None


# -- concurrency ----------------------------------------------------------------------------------------


def _increment(path: str, times: int) -> None:
    store = LmdbStore(path, durable=False)
    refs = Refs(store)
    done = 0
    while done < times:
        head = refs.get("counter")
        n = codec.decode(store.get(head))["n"] if head else 0
        new = codec.encode({"n": n + 1})
        try:
            refs.set_if_equals("counter", head, ids.object_id(new), objects=[(ids.object_id(new), new)])
        except NonFastForward:
            continue
        done += 1
    store.close()


def test_eight_processes_incrementing_one_ref_lose_no_update(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    LmdbStore(path).close()
    ctx = mp.get_context("spawn")
    workers = [ctx.Process(target=_increment, args=(path, 40)) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0] * 8
    with LmdbStore(path) as store:
        refs = Refs(store)
        assert codec.decode(store.get(refs["counter"]))["n"] == 320
        assert len(refs.reflog("counter")) == 320


def test_a_lost_compare_and_swap_is_a_ref_moved_that_is_also_a_non_fast_forward(refs: Refs) -> None:
    """set_if_equals losing to another writer raises RefMoved, the retryable NonFastForward."""
    from ctxstore.errors import RefMoved

    refs.set_if_equals("main", None, obj(1)[0], objects=[obj(1)])
    with pytest.raises(RefMoved) as info:
        refs.set_if_equals("main", obj(2)[0], obj(1)[0], objects=[obj(2)])
    assert isinstance(info.value, NonFastForward) and info.value.current == ids.to_hex(obj(1)[0])


def test_a_damaged_reflog_record_is_damaged_data_not_a_store_error(refs: Refs, store: TransactionalStore) -> None:
    """Undecodable reflog bytes are DamagedData (an InvalidObject): the engine did not fail."""
    from ctxstore.errors import DamagedData, InvalidObject, StoreError

    refs.set_if_equals("main", None, obj(1)[0], objects=[obj(1)])
    with store.transaction(write=True) as txn:
        txn.append_reflog("refs/heads/main", b"\xff not cbor")
    with pytest.raises(DamagedData) as info:
        refs.reflog("main")
    assert isinstance(info.value, InvalidObject) and not isinstance(info.value, StoreError)


def test_a_negative_reflog_limit_is_invalid_input(refs: Refs) -> None:
    from ctxstore.errors import InvalidInput

    with pytest.raises(InvalidInput):
        refs.reflog("main", -1)
