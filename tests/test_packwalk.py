"""The object walk and atomic unpack: only what changed is sent, and a bad pack changes nothing."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ctxstore import ids
from ctxstore.errors import BadPack, NonFastForward
from ctxstore.format import codec, seq
from ctxstore.format.objects import Entry, Revision, SeqNode, encode_object, parse_object
from ctxstore.history.message_history import MessageHistory
from ctxstore.ids import ObjectId, from_hex, to_hex
from ctxstore.pack.plan import is_ancestor, objects_to_send, pack, pack_objects, plan_pack, revisions_to_send
from ctxstore.pack.stream import read_pack, write_pack
from ctxstore.repo.receive import unpack
from ctxstore.store import MemoryStore


def _save(store: MemoryStore, history: MessageHistory) -> ObjectId:
    store.put_many(history.workspace.pending())
    return from_hex(history.revision_id)


def _state(store: MemoryStore) -> tuple[Any, ...]:
    with store.transaction() as txn:
        refs = txn.refs("refs/")
        logs = {n: txn.reflog(n) for n in txn.reflog_names()}
    return refs, len(store), sorted(store), logs


@pytest.fixture(scope="module")
def big() -> tuple[MemoryStore, ObjectId, ObjectId]:
    """A 10,000-message conversation and the same with 10 more messages appended one by one."""
    store = MemoryStore()
    history = MessageHistory().extend([{"role": "user", "content": f"message {i}"} for i in range(10_000)])
    base = _save(store, history)
    history = MessageHistory(source=store, head=history.revision_id)
    for i in range(10):
        history = history.append({"role": "assistant", "content": f"new {i}"})
    return store, base, _save(store, history)


def test_ten_appends_on_ten_thousand_send_o_of_ten_entries_and_log_n_nodes(big):
    store, base, head = big
    kinds = Counter(type(parse_object(store.get(o))).__name__ for o in objects_to_send(store, [head], [base]))
    assert kinds["Entry"] == 10
    assert kinds["Revision"] == 10
    # Each append rewrites the right spine: depth of a 10,000-item tree is about 3 levels.
    assert kinds["SeqNode"] <= 10 * 6
    assert set(kinds) <= {"Entry", "Revision", "SeqNode"}


def test_ten_appends_are_sent_as_entries_and_rebuildable_revisions_without_tree_nodes(big):
    store, base, head = big
    plan = plan_pack(store, [head], [base])
    kinds = Counter(type(parse_object(store.get(o))).__name__ for o in plan.objects)
    assert kinds == {"Entry": 10, "Revision": 10}
    assert plan.rebuildable == {o for o in plan.objects if isinstance(parse_object(store.get(o)), Revision)}
    # Only the chunks the appends closed are rebuilt: a leaf closes about once in LEAF_TARGET appends.
    assert 0 <= plan.rebuilt <= 10
    other = MemoryStore()
    unpack(other, pack(store, [base]), {"refs/heads/main": (None, base)})
    result = unpack(other, pack(store, [head], [base]), {"refs/heads/main": (base, head)})
    assert result.objects == len(plan) + plan.rebuilt
    assert objects_to_send(other, [head], []) == objects_to_send(store, [head], [])


def test_an_append_after_a_leaf_that_ended_at_a_cut_rebuilds_only_new_nodes():
    """When the parent's last leaf ends at a cut, the next append closes it: the receiver had it only
    in the parent's spine, so the rebuild stores it, once, and nothing else."""
    store = MemoryStore()
    history = MessageHistory().extend([{"role": "user", "content": f"m{i}"} for i in range(40)])
    for i in range(2000):
        history = history.append({"role": "user", "content": f"x{i}"})
        entry_oid = history.workspace.revision(from_hex(history.revision_id)).operation["entries"][0]
        if int.from_bytes(entry_oid[:4], "big") < 2**32 // seq.LEAF_TARGET:
            break  # this entry ends its leaf
    else:
        pytest.fail("no cut in 2000 appends")
    base = _save(store, history)
    head = _save(store, MessageHistory(source=store, head=history.revision_id).append({"role": "user",
                                                                                      "content": "after"}))
    plan = plan_pack(store, [head], [base])
    receiver = MemoryStore()
    unpack(receiver, pack(store, [base]), {"refs/heads/main": (None, base)})
    result = unpack(receiver, pack(store, [head], [base]), {"refs/heads/main": (base, head)})
    assert result.objects == result.new_objects == len(plan) + plan.rebuilt
    # The closed leaf, and the level-1 node it closes in turn when its id is a cut there (1 in 16).
    assert plan.rebuilt >= 1
    assert sorted(objects_to_send(receiver, [head], [base])) == sorted(objects_to_send(store, [head], [base]))


def test_a_tree_not_chunked_by_the_rule_is_refused_by_unpack():
    """A leaf that goes on past a cut: valid objects with the right hashes, but not the tree `build`
    makes, so appends and edits on it would diverge from every other copy. The pack is refused."""
    entries = [Entry(f"e{i}", "turn", {"role": "user", "content": f"m{i}"}) for i in range(2)]
    n = 0
    while True:  # an entry whose oid is a cut: a leaf must end right after it
        cut = Entry(f"c{n}", "turn", {"role": "user", "content": "c"})
        if int.from_bytes(encode_object(cut)[0][:4], "big") < 2**32 // seq.LEAF_TARGET:
            break
        n += 1
    made = [encode_object(e) for e in (entries[0], cut, entries[1])]
    items = [[e.id, oid] for e, (oid, _) in zip((entries[0], cut, entries[1]), made, strict=True)]
    assert seq.spine_fault([items]) is not None
    rev, rev_data = encode_object(Revision(None, 1, None, [items], 3))
    sender = MemoryStore()
    sender.put_many([*made, (rev, rev_data)])
    receiver = MemoryStore()
    _refused(receiver, b"".join(pack(sender, [rev])), {"refs/heads/main": (None, rev)})
    with pytest.raises(BadPack, match="is a cut and should have ended a node"):
        unpack(receiver, b"".join(pack(sender, [rev])), {"refs/heads/main": (None, rev)})


def test_a_stored_node_that_does_not_end_at_a_cut_is_refused_by_unpack():
    """Only chunks the rule closed are stored; a stored leaf that could still grow is some other tree."""
    made = []
    n = 0
    while len(made) < 3:  # entries that are not cuts, so no leaf may end after them
        oid, data = encode_object(Entry(f"e{n}", "turn", {"role": "user", "content": f"m{n}"}))
        if int.from_bytes(oid[:4], "big") >= 2**32 // seq.LEAF_TARGET:
            made.append((oid, data))
        n += 1
    open_leaf = SeqNode(0, [[f"x{i}", oid] for i, (oid, _) in enumerate(made[:2])])
    assert seq.node_fault(open_leaf) is not None
    leaf_oid, leaf_data = encode_object(open_leaf)
    spine = [[["x2", made[2][0]]], [[leaf_oid, 2]]]
    rev, rev_data = encode_object(Revision(None, 1, None, spine, 3))
    sender = MemoryStore()
    sender.put_many([*made, (leaf_oid, leaf_data), (rev, rev_data)])
    receiver = MemoryStore()
    with pytest.raises(BadPack, match="does not end at a cut"):
        unpack(receiver, b"".join(pack(sender, [rev])), {"refs/heads/main": (None, rev)})
    assert list(receiver) == []


def test_an_append_revision_whose_tree_is_not_its_parents_plus_the_entries_is_sent_whole():
    store = MemoryStore()
    first = MessageHistory().extend([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    a = _save(store, first)
    # An append revision that records entry "c" but whose tree is some other list: not rebuildable.
    c_oid, c_data = encode_object(Entry("c", "turn", {"role": "user", "content": "c"}))
    rev = Revision(a, 1, {"type": "append", "entryIds": ["c"], "entries": [c_oid]}, [[["c", c_oid]]], 1)
    b, b_data = encode_object(rev)
    store.put_many([(c_oid, c_data), (b, b_data)])
    plan = plan_pack(store, [b], [a])
    assert not plan.rebuildable and plan.objects == [c_oid, b]
    receiver = MemoryStore()
    unpack(receiver, pack(store, [a]), {"refs/heads/main": (None, a)})
    unpack(receiver, pack(store, [b], [a]), {"refs/heads/main": (a, b)})
    assert receiver.get(b) == b_data and [e.id for e in MessageHistory(source=receiver, head=to_hex(b)).refs()] == ["c"]


_OPS = st.lists(st.tuples(st.sampled_from(["append", "extend", "remove", "replace", "fork", "view"]),
                          st.integers(0, 50)), min_size=1, max_size=25)


def _apply(history: MessageHistory, op: str, n: int) -> MessageHistory:
    ids = [e.id for e in history.refs()]
    if op == "append":
        return history.append({"role": "user", "content": f"m{n}"})
    if op == "extend":
        return history.extend([{"role": "assistant", "content": f"x{n}-{i}"} for i in range(n % 40 + 1)])
    if op == "fork":
        return history.fork()
    if not ids:
        return history.append({"role": "user", "content": f"first {n}"})
    target = ids[n % len(ids)]
    if op == "remove":
        return history.edit({"op": "remove", "id": target})
    if op == "replace":
        return history.edit({"op": "replace", "id": target, "entries": [{"role": "user", "content": f"r{n}"}]})
    return history.with_view(ids[: n % len(ids) + 1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_OPS, _OPS, st.integers(0, 300))
def test_packs_of_any_history_round_trip_from_any_base(before: list[Any], after: list[Any], start: int):
    """Whatever the operations, the receiver of a pack ends up with every object the head reaches."""
    store = MemoryStore()
    history = MessageHistory().extend([{"role": "user", "content": f"s{i}"} for i in range(start)])
    for op, n in before:
        history = _apply(history, op, n)
    base = _save(store, history)
    history = MessageHistory(source=store, head=history.revision_id)
    for op, n in after:
        history = _apply(history, op, n)
    head = _save(store, history)
    receiver = MemoryStore()
    unpack(receiver, pack(store, [base]), {"refs/heads/main": (None, base)})
    unpack(receiver, pack(store, [head], [base]), {"refs/heads/main": (base, head)})
    assert sorted(objects_to_send(receiver, [head], [])) == sorted(objects_to_send(store, [head], []))
    rendered = MessageHistory(source=receiver, head=history.revision_id).render()
    assert rendered == history.render()


def test_pack_round_trips_into_an_empty_store_and_then_incrementally(big):
    store, base, head = big
    other = MemoryStore()
    first = unpack(other, b"".join(pack(store, [base])), {"refs/heads/main": (None, base)})
    assert first.new_objects == first.objects
    second = unpack(other, pack(store, [head], [base]), {"refs/heads/main": (base, head)})
    assert second.objects == len(objects_to_send(store, [head], [base]))
    # Every object that head reaches is now in the receiving store.
    assert objects_to_send(other, [head], []) == objects_to_send(store, [head], [])


def test_nothing_to_send_when_haves_include_wants(big):
    store, base, head = big
    assert objects_to_send(store, [base], [head]) == []
    assert objects_to_send(store, [head], [head]) == []
    assert is_ancestor(store, base, head) and not is_ancestor(store, head, base)


def test_divergent_pair_sends_only_one_side_like_git_log_range():
    store = MemoryStore()
    root = MessageHistory().extend([{"role": "user", "content": "shared"}])
    _save(store, root)
    left = root.append({"role": "user", "content": "left"})
    right = root.append({"role": "user", "content": "right"}).append({"role": "user", "content": "right 2"})
    a, b = _save(store, left), _save(store, right)
    revs = revisions_to_send(store, [b], [a])
    assert len(revs) == 2 and from_hex(root.revision_id) not in revs
    sent = [parse_object(store.get(o)) for o in objects_to_send(store, [b], [a])]
    contents = [o.message["content"] for o in sent if type(o).__name__ == "Entry"]
    assert contents == ["right", "right 2"]


@pytest.mark.parametrize("variant", range(12))
def test_revisions_made_in_one_millisecond_are_not_sent_twice(variant: int):
    """With every createdAt equal, the walk still stops at the common revisions, whatever the id order."""
    revisions = [{"id": "r0", "entryIds": [], "createdAt": 1000}]
    entries = []
    for name, parent, entry_ids in (("s", "r0", ["e0"]), ("a", "s", ["e0", "e1"]), ("b1", "s", ["e0", "e2"]),
                                    ("b2", "b1", ["e0", "e2", "e3"])):
        new = entry_ids[-1]
        entries.append({"id": new, "kind": "turn", "message": {"role": "user", "content": f"{new} v{variant}"}})
        revisions.append({"id": name, "parent": parent, "entryIds": entry_ids, "createdAt": 1000,
                          "operation": {"type": "append", "entryIds": [new]}})
    store = MemoryStore()
    histories = {}
    for head in ("a", "b2"):
        histories[head] = MessageHistory.from_snapshot({"entries": entries, "revisions": revisions, "head": head})
    a, b = _save(store, histories["a"]), _save(store, histories["b2"])
    assert len(revisions_to_send(store, [b], [a])) == 2


def test_unknown_haves_are_ignored():
    store = MemoryStore()
    head = _save(store, MessageHistory().append({"role": "user", "content": "x"}))
    assert objects_to_send(store, [head], [ObjectId(b"\x01" * 32)]) == objects_to_send(store, [head], [])


# -- bad packs change nothing ------------------------------------------------------------------------------

@pytest.fixture()
def pair() -> tuple[MemoryStore, MemoryStore, ObjectId, ObjectId, bytes]:
    """A sender with two revisions, a receiver with the first, and the pack of the second."""
    sender, receiver = MemoryStore(), MemoryStore()
    one = MessageHistory().append({"role": "user", "content": "one"})
    a = _save(sender, one)
    b = _save(sender, one.append({"role": "assistant", "content": "two"}))
    unpack(receiver, pack(sender, [a]), {"refs/heads/main": (None, a)})
    return sender, receiver, a, b, b"".join(pack(sender, [b], [a]))


def _refused(receiver: MemoryStore, data: bytes, updates: Any) -> None:
    before = _state(receiver)
    with pytest.raises(BadPack):
        unpack(receiver, data, updates)
    assert _state(receiver) == before


def test_flipped_bytes_are_refused_and_change_nothing(pair):
    _, receiver, a, b, data = pair
    for at in range(0, len(data), max(1, len(data) // 40)):
        bad = bytearray(data)
        bad[at] ^= 0x40
        _refused(receiver, bytes(bad), {"refs/heads/main": (a, b)})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_rebuildable_packs_are_refused_without_a_crash(pair, data: st.DataObject):
    """Rebuilds run on damaged records (reading the receiver's store) before the trailer is checked:
    whatever the damage, the pack is refused with BadPack and the store is unchanged."""
    _, receiver, a, b, packed = pair
    bad = bytearray(packed)
    for _ in range(data.draw(st.integers(1, 3))):
        bad[data.draw(st.integers(0, len(bad) - 1))] ^= data.draw(st.integers(1, 255))
    assume(bad != packed)  # two flips of one byte can cancel out
    _refused(receiver, bytes(bad), {"refs/heads/main": (a, b)})


def test_truncation_at_every_tenth_byte_is_refused(pair):
    _, receiver, a, b, data = pair
    for cut in range(0, len(data), 10):
        _refused(receiver, data[:cut], {"refs/heads/main": (a, b)})


def test_pack_missing_a_parent_or_entry_is_refused(pair):
    sender, receiver, a, b, _ = pair
    oids = objects_to_send(sender, [b], [a])
    rev = parse_object(sender.get(b))
    entry = next(o for o in oids if type(parse_object(sender.get(o))).__name__ == "Entry")
    for drop in (entry, *[o for o in oids if o == rev.seq]):
        kept = [o for o in oids if o != drop]
        _refused(receiver, b"".join(pack_objects(sender, kept)), {"refs/heads/main": (a, b)})
    # A revision whose parent the receiver lacks: the receiver never saw `a`.
    _refused(MemoryStore(), b"".join(pack(sender, [b], [a])), {"refs/heads/main": (None, b)})


def test_ref_to_an_object_not_in_pack_or_store_is_refused(pair):
    _, receiver, a, _, data = pair
    _refused(receiver, data, {"refs/heads/main": (a, ObjectId(b"\x07" * 32))})


def test_moved_ref_raises_non_fast_forward_and_writes_nothing(pair):
    _, receiver, _, b, data = pair
    before = _state(receiver)
    with pytest.raises(NonFastForward):
        unpack(receiver, data, {"refs/heads/main": (b, b)})
    assert _state(receiver) == before


def test_read_pack_of_walk_output_verifies(big):
    store, base, head = big
    plan = plan_pack(store, [head], [base])
    assert plan.rebuildable
    got = [oid for oid, _ in read_pack(pack(store, [head], [base]), lookup=_lookup(store))]
    # The records in plan order, each rebuildable revision preceded by the nodes rebuilt for it: together
    # exactly the objects a pack without rebuilding carries.
    records = set(plan.objects)
    assert [o for o in got if o in records] == plan.objects
    assert len(got) == len(plan) + plan.rebuilt
    assert sorted(got) == sorted(objects_to_send(store, [head], [base]))


def _lookup(store):
    return lambda oid: store.get(oid) if store.has(oid) else None


def test_a_revision_sent_whole_with_a_malformed_spine_is_refused_by_unpack():
    """Received objects get the whole shape check, spine items included (only stored bytes skip it)."""
    entry, entry_data = encode_object(Entry("a", "turn", {"role": "user", "content": "hi"}))
    for spine, size in (([[["a", entry[:16]]]], 1), ([[["a", entry]]], 2), ([[["a", entry]], [[entry, 0]]], 1)):
        value = {"type": "revision", "createdAt": 1, "treeSpine": spine, "size": size}
        data = codec.encode(value)
        rev = ids.object_id(data)
        receiver = MemoryStore()
        _refused(receiver, b"".join(write_pack([(entry, entry_data), (rev, data)], 2)),
                 {"refs/heads/main": (None, rev)})


def _lmdb_twin(tmp_path: Any, name: str) -> Any:
    from ctxstore.store.lmdb import LmdbStore

    return LmdbStore(tmp_path / name, durable=False, auto_dictionary=False)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(before=_OPS, after=_OPS, start=st.integers(0, 120))
def test_a_store_keeping_deltas_packs_byte_for_byte_what_a_store_keeping_revisions_whole_packs(
        tmp_path_factory: Any, before: list[Any], after: list[Any], start: int) -> None:
    """Revisions the LMDB store keeps as deltas go into a pack as stored (not rebuilt): the same pack as
    from the memory store, which plans from whole revisions, and it unpacks to the same history."""
    from ctxstore.store import lmdb as lmdb_store
    from ctxstore.store import revisions

    lmdb_store._REVISIONS = revisions.RevisionCache()
    memory = MemoryStore()
    with _lmdb_twin(tmp_path_factory.mktemp("d"), "s") as disk:
        history = MessageHistory().extend([{"role": "user", "content": f"s{i}"} for i in range(start)])
        written: set[bytes] = set()

        def save(h: MessageHistory) -> ObjectId:
            new = [(o, d) for o, d in h.workspace.pending() if o not in written]
            memory.put_many(new)
            disk.put_many(new)  # one commit per revision: appends become deltas
            written.update(o for o, _ in new)
            return from_hex(h.revision_id)

        for op, n in before:
            history = _apply(history, op, n)
            base = save(history)
        base = save(history)
        for op, n in after:
            history = _apply(history, op, n)
            save(history)
        head = save(history)
        lmdb_store._REVISIONS = revisions.RevisionCache()  # a fresh process: nothing rebuilt yet
        for haves in ([base], []):
            from_disk = b"".join(pack(disk, [head], haves))
            assert from_disk == b"".join(pack(memory, [head], haves))
        receiver = MemoryStore()
        unpack(receiver, from_disk, {"refs/heads/main": (None, head)})
        assert MessageHistory(source=receiver, head=history.revision_id).render() == history.render()


def test_a_pack_of_appends_stored_as_deltas_rebuilds_none_of_them(tmp_path: Any, monkeypatch: Any) -> None:
    from ctxstore.store import lmdb as lmdb_store
    from ctxstore.store import revisions

    with _lmdb_twin(tmp_path, "s") as store:
        history = MessageHistory().append({"role": "user", "content": "first"})
        store.put_many(history.workspace.pending())
        base = from_hex(history.revision_id)
        for i in range(200):
            history = MessageHistory(source=store, head=history.revision_id).append(
                {"role": "user", "content": f"m{i}"})
            store.put_many(history.workspace.pending())
        lmdb_store._REVISIONS = revisions.RevisionCache()
        rebuilds: list[int] = []
        real = revisions.rebuild
        monkeypatch.setattr(revisions, "rebuild", lambda *a, **k: rebuilds.append(1) or real(*a, **k))
        plan = plan_pack(store, [from_hex(history.revision_id)], [base])
        assert rebuilds == [] and len(plan.rebuildable) == 200
        receiver = MemoryStore()
        unpack(receiver, pack(store, [base]),
               {"refs/heads/main": (None, base)})
        unpack(receiver, pack_objects(store, plan), {"refs/heads/main": (base, from_hex(history.revision_id))})
        assert MessageHistory(source=receiver, head=history.revision_id).render() == history.render()


def test_a_damaged_delta_record_stops_the_pack_with_damaged_data(tmp_path: Any) -> None:
    """The planner does not rebuild stored appends, but it checks their records: damage is not sent."""
    from ctxstore.errors import DamagedData
    from ctxstore.store import lmdb as lmdb_store
    from ctxstore.store import records as rec
    from ctxstore.store import revisions

    with _lmdb_twin(tmp_path, "s") as store:
        history = MessageHistory().append({"role": "user", "content": "first"})
        store.put_many(history.workspace.pending())
        base = from_hex(history.revision_id)
        env = store.environment
        for _ in range(50):  # an append whose random entry id closes a chunk is stored whole: take the next
            history = MessageHistory(source=store, head=history.revision_id).append({"role": "user", "content": "x"})
            store.put_many(history.workspace.pending())
            head = from_hex(history.revision_id)
            store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
            with env.env.begin() as txn:
                if txn.get(rec.object_key(head), db=env.dbs[rec.OBJECTS])[rec.HEAD_SIZE] == revisions.DELTA:
                    break
            base = from_hex(history.revision_id)
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            key = rec.object_key(head)
            record = bytearray(txn.get(key, db=env.dbs[rec.OBJECTS]))
            assert record[rec.HEAD_SIZE] == revisions.DELTA
            fields = codec.decode(bytes(record[rec.HEAD_SIZE + 2:-revisions.CHECK_SIZE]))
            fields[1] += 1  # another createdAt: still a well-formed delta
            record[rec.HEAD_SIZE + 2:-revisions.CHECK_SIZE] = codec.encode(fields)
            txn.put(key, bytes(record), db=env.dbs[rec.OBJECTS])
        lmdb_store._REVISIONS = revisions.RevisionCache()
        with pytest.raises(DamagedData):
            b"".join(pack(store, [head], [base]))
