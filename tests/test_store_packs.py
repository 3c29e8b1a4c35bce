"""Leaf packs (store/packs.py): a closed leaf stored with its entries, each entry's record a pointer.

Nothing above the store may see a difference: every object reads back as the bytes it was written
with, a render is the render of the same objects held one record each, and gc, damage and sharing
between leaves behave as they do for objects stored alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import blake3
import cbor2
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ctxstore import MessageHistory, Repository
from ctxstore.errors import CtxStoreError, DamagedData
from ctxstore.format import codec, seq
from ctxstore.format.objects import Entry, SeqNode, encode_object, entry_message, parse_object
from ctxstore.ids import ObjectId, object_id
from ctxstore.store import lmdb as lmdb_store
from ctxstore.store import packs
from ctxstore.store import records as rec
from ctxstore.store.base import LayoutSource, WriteSet, read_layout_problems, read_leaves
from ctxstore.store.lmdb import LmdbStore
from ctxstore.store.memory import MemoryStore


def _chat(n: int) -> dict[str, Any]:
    return {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n} " + "words " * (n % 7)}


def _value(store: LmdbStore, oid: ObjectId) -> bytes:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        return rec.record_value(txn.get(rec.object_key(oid), db=env.dbs[rec.OBJECTS]))


def _pieces(store: LmdbStore, key: bytes) -> list[tuple[bytes, bytes]]:
    """The keys and values in ``packs`` that start with `key`, in key order."""
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=env.dbs[rec.PACKS]) if k.startswith(key)]


def _pack(store: LmdbStore, leaf: ObjectId) -> bytes:
    """A leaf's pack record, its pieces joined."""
    return b"".join(value for _, value in _pieces(store, rec.object_key(leaf)))


def _leaves(objects: list[tuple[ObjectId, bytes]]) -> list[ObjectId]:
    return [oid for oid, data in objects if seq.is_leaf_bytes(data)]


def _with_a_closed_leaf(count: int, onto: MessageHistory | None = None) -> tuple[MessageHistory, list[dict[str, Any]]]:
    """`count` chat messages or more (onto an empty history): as many as it takes to close a leaf. Entry ids
    are random, so the leaf boundaries are too, and 100 messages stay in the one open leaf one time in 25."""
    messages = [_chat(n) for n in range(count)]
    history = (MessageHistory() if onto is None else onto).extend(messages)
    while not _leaves(history.workspace.pending()):
        more = [_chat(n) for n in range(len(messages), len(messages) + 50)]
        history, messages = history.extend(more), messages + more
    return history, messages


def _damage(store: LmdbStore, oid: ObjectId, at: int) -> None:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin(write=True) as txn:
        key = rec.object_key(oid)
        record = bytearray(txn.get(key, db=env.dbs[rec.OBJECTS]))
        record[at] ^= 0x01
        txn.put(key, bytes(record), db=env.dbs[rec.OBJECTS])


def _damage_pack(store: LmdbStore, leaf: ObjectId, at: int) -> None:
    """Flip a bit of byte `at` of a leaf's pack record, in whichever of its pieces holds it."""
    pieces = _pieces(store, rec.object_key(leaf))
    record = bytearray(b"".join(value for _, value in pieces))
    record[at] ^= 0x01
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin(write=True) as txn:
        start = 0
        for key, value in pieces:
            txn.put(key, bytes(record[start:start + len(value)]), db=env.dbs[rec.PACKS])
            start += len(value)


# -- what is stored ------------------------------------------------------------------------------------

def test_a_conversation_recorded_one_commit_each_has_its_closed_leaves_packed(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "r", durable=False)
    history = repo.history("main")
    twin = MemoryStore()
    for n in range(300):
        history = history.append(_chat(n))
        twin.put_many(history.workspace.pending())
        repo.commit("main", history)
    store = repo.store
    assert isinstance(store, LmdbStore)
    leaves = _leaves([(oid, twin.get(oid)) for oid in twin])
    assert len(leaves) >= 2  # about one leaf per 32 entries, and one per 128 at the fewest
    assert {_value(store, oid)[0] for oid in leaves} == {packs.LEAF_PACK}
    packed = {oid for leaf in leaves for oid in seq.packed_order(parse_object(twin.get(leaf)).items)}
    assert {_value(store, oid)[0] for oid in packed} == {packs.PACKED}
    # Every object reads back exactly, one at a time and in a batch; the entries not in a closed leaf
    # (the spine's) keep a record of their own.
    everything = sorted(twin)
    assert [store.get(oid) for oid in everything] == [twin.get(oid) for oid in everything]
    assert store.get_many(everything) == [twin.get(oid) for oid in everything]
    entries = [oid for oid in everything if isinstance(parse_object(twin.get(oid)), Entry)]
    assert 0 < len(set(entries) - packed) < 4 * seq.LEAF_TARGET
    assert store.stats().object_bytes == sum(len(twin.get(oid)) for oid in everything)
    reopened = Repository.open(tmp_path / "r")
    assert reopened.history("main").render() == [_chat(n) for n in range(300)]
    assert reopened.fsck().ok


def test_a_bulk_import_packs_every_closed_leaf_and_renders_the_same(tmp_path: Path) -> None:
    messages = [_chat(n) for n in range(3000)]
    with Repository.init(tmp_path / "r", durable=False) as repo:
        repo.commit("main", repo.history("main").extend(messages))
    with Repository.open(tmp_path / "r") as repo:
        assert repo.history("main").render() == messages
        assert repo.history("main").render(repo.history("main").revision_id) == messages
        assert [e.message for e in repo.history("main").refs()] == messages


def test_get_leaves_gives_a_packed_leafs_chat_messages_and_none_for_other_entries(tmp_path: Path) -> None:
    odd = {"role": "user", "content": [{"type": "text", "text": "a block"}]}
    extra = {"role": "user", "content": "hi", "name": "ann"}
    messages = [_chat(n) for n in range(200)] + [odd, extra] + [_chat(n) for n in range(200, 400)]
    history = MessageHistory().extend(messages)
    history = history.append({"role": "user", "content": "with meta"})
    made = history.workspace.pending()
    with LmdbStore(tmp_path / "s", durable=False) as store:
        store.put_many(made)
        twin = dict(made)
        found = read_leaves(store, _leaves(made))
        for (leaf, messages_of), oid in zip(found, _leaves(made), strict=True):
            # Left out only for a leaf that names exactly its entries, all of them chat entries.
            items = parse_object(twin[oid]).items
            order = seq.packed_order(items)
            assert leaf == (None if None not in messages_of and len(items) == len(order) else twin[oid])
            assert len(messages_of) == len(order)
            for entry, message in zip(order, messages_of, strict=True):
                data = twin[entry]
                expected = entry_message(data) if packs.chat_message_at(data) is not None else None
                assert message == expected
        assert any(None in m for _, m in found)  # the block and the extra field are read whole
        assert any(leaf is None for leaf, _ in found) and any(leaf is not None for leaf, _ in found)


def test_a_view_that_names_an_entry_twice_renders_two_copies(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        history = repo.history("main").extend([_chat(n) for n in range(100)])
        ids = [e.id for e in history.refs()]
        twice = history.with_view(ids[:40] + ids[:40])
        repo.commit("main", twice)
    with Repository.open(tmp_path / "r") as repo:
        view = repo.history("main").render()
        assert view == [_chat(n) for n in range(40)] * 2
        view[0]["content"] = "changed"
        assert view[40]["content"] == _chat(0)["content"]


def _tool_output(n: int) -> dict[str, Any]:
    """A message with a content block large enough to be kept as a blob."""
    return {"role": "user", "content": [{"type": "text", "text": f"output {n} " + "line of a log\n" * 800}]}


def test_the_blobs_a_leafs_entries_name_are_packed_with_them(tmp_path: Path) -> None:
    messages = [_tool_output(n % 37) if n % 3 == 0 else _chat(n) for n in range(400)]  # repeated outputs
    with Repository.init(tmp_path / "r", durable=False) as repo:
        history = repo.history("main")
        twin = MemoryStore()
        for m in messages:
            history = history.append(m)
            twin.put_many(history.workspace.pending())
            repo.commit("main", history)
        store = repo.store
        assert isinstance(store, LmdbStore)
        blobs = [oid for oid in twin if parse_object(twin.get(oid)).to_value()["type"] == "blob"]
        assert len(blobs) == 37
        codecs = [_value(store, oid)[0] for oid in blobs]
        assert codecs.count(packs.PACKED) >= 20  # all but those only the open leaf's entries name
        everything = sorted(twin)
        assert store.get_many(everything) == [twin.get(oid) for oid in everything]
        assert store.stats().object_bytes == sum(len(twin.get(oid)) for oid in everything)
    with Repository.open(tmp_path / "r") as repo:
        assert repo.history("main").render() == messages
        assert repo.fsck().ok
        # A pack's blobs outlive it: deleting a leaf gives them records of their own again.
        store = repo.store
        assert isinstance(store, LmdbStore)
        packed = [oid for oid in blobs if _value(store, oid)[0] == packs.PACKED]
        leaf_keys = {_value(store, oid)[1:1 + rec.KEY_SIZE] for oid in packed}
        leaves = [oid for oid in twin if oid[:rec.KEY_SIZE] in leaf_keys]
        store.delete_many(leaves[:1])
        for oid in packed:
            assert store.get(oid) == twin.get(oid)


# -- sharing, gc, damage -------------------------------------------------------------------------------

def _view_leaves(store: LmdbStore, revision: str) -> set[ObjectId]:
    spine = parse_object(store.get(ObjectId(bytes.fromhex(revision)))).seq
    return {part for part in seq.leaf_refs(spine, lambda oids: [parse_object(store.get(o)) for o in oids])
            if type(part) is not tuple}


def test_deleting_a_pack_keeps_the_entries_another_leaf_still_names(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False) as store:
        first = MessageHistory(source=store).extend([_chat(n) for n in range(200)])
        store.put_many(first.workspace.pending())
        # One more message at the front: a new first leaf (or two: where entry ids cut chunks decides)
        # holding the old ones' entries, which stay pointing into the old ones' packs. Should the new
        # message end a chunk itself, the old leaves stay in the tree: try another.
        for attempt in range(20):
            second = MessageHistory(source=store, head=first.revision_id)
            ids = [e.id for e in second.refs()]
            second = second.append({"role": "user", "content": f"front {attempt}"})
            second = second.with_view([[e.id for e in second.refs()][-1], *ids])
            store.put_many(second.workspace.pending())
            old = _view_leaves(store, first.revision_id) - _view_leaves(store, second.revision_id)
            if old:
                break
        assert old
        moved = [oid for leaf in old for oid in seq.packed_order(parse_object(store.get(leaf)).items)]
        assert {_value(store, oid)[0] for oid in moved} == {packs.PACKED}
        before = {oid: store.get(oid) for oid in moved}
        assert store.delete_many(old) == len(old)
        assert packs.PACKED not in {_value(store, oid)[0] for oid in moved}  # records of their own again
        assert {oid: store.get(oid) for oid in moved} == before
        assert not any(leaf in store for leaf in old)
        reread = MessageHistory(source=store, head=second.revision_id)
        assert reread.render() == [{"role": "user", "content": f"front {attempt}"}] + [_chat(n) for n in range(200)]


def test_gc_of_a_dropped_branch_deletes_its_packs_and_leaves_a_clean_store(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        base = repo.history("main").extend([_chat(n) for n in range(150)])
        repo.commit("main", base)
        side = base.fork().extend([_chat(n) for n in range(1000, 1300)])
        repo.commit("side", side)
        store = repo.store
        assert isinstance(store, LmdbStore)
        side_leaves = _view_leaves(store, side.revision_id) - _view_leaves(store, base.revision_id)
        assert side_leaves  # a leaf closes at 128 items at the latest
        held = len(store)
        repo.delete_ref("side")
        repo.expire_reflogs("refs/heads/side")
        report = repo.gc(grace=0)
        assert report.deleted >= 300 + len(side_leaves)
        assert len(store) == held - report.deleted
        assert not any(leaf in store for leaf in side_leaves)
        assert repo.fsck().ok
        assert repo.history("main").render() == [_chat(n) for n in range(150)]


@pytest.mark.parametrize("where", ["seal", "payload", "pointer size", "pointer position"])
def test_damage_to_a_pack_or_a_pointer_is_refused_not_returned(tmp_path: Path, where: str) -> None:
    history, _ = _with_a_closed_leaf(300)
    made = history.workspace.pending()
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many(made)
        leaf = _leaves(made)[0]
        entry = seq.packed_order(parse_object(dict(made)[leaf]).items)[0]
        if where == "seal":
            _damage_pack(store, leaf, 1)
        elif where == "payload":
            _damage_pack(store, leaf, -3)
        elif where == "pointer size":
            _damage(store, entry, -1)
        else:
            _damage(store, entry, rec.HEAD_SIZE + 1 + rec.KEY_SIZE)
        with pytest.raises(DamagedData):
            store.get(entry)
        if where in ("seal", "payload"):
            with pytest.raises(DamagedData):
                store.get(leaf)
            with pytest.raises(DamagedData):
                store.get_leaves([leaf])
            with pytest.raises(DamagedData):
                MessageHistory(source=store, head=history.revision_id).render()


# -- the format ----------------------------------------------------------------------------------------

def test_a_pack_has_the_layout_docs_storage_md_gives() -> None:
    """Known-answer vector (docs/storage.md, *Leaf packs*): a leaf of two chat entries and one other."""
    chat = [encode_object(Entry(id=f"e{n}", kind="turn", message={"role": "user", "content": f"m{n}"}))[1]
            for n in range(2)]
    other = encode_object(Entry(id="e2", kind="turn", message={"role": "user", "content": "x"},
                                meta={"k": 1}))[1]
    entries = [*chat, other]
    leaf_node = SeqNode(level=0, items=[[f"e{n}", object_id(e)] for n, e in enumerate(entries)])
    leaf_bytes = encode_object(leaf_node)[1]
    leaf = object_id(leaf_bytes)
    made = packs.pack_payload(leaf_bytes, [(e, packs.chat_message_at(e)) for e in entries], [b"a blob"])
    marker, value = packs.leaf_marker(leaf_bytes), packs.pack_record(leaf, made, b"\x00" + made)
    assert marker == bytes([packs.LEAF_PACK]) + len(leaf_bytes).to_bytes(4, "big")
    payload = value[packs.FRAMED_AT + 1:]
    heads = [e[:packs.chat_message_at(e)] for e in chat] + [other]
    expected = (bytes([0x86]) + bytes([0x58, len(leaf_bytes)]) + leaf_bytes + bytes([0x83])
                + b"".join(bytes([0x40 + len(h)]) + h if len(h) < 24 else bytes([0x58, len(h)]) + h for h in heads)
                + b"".join(e[packs.chat_message_at(e):] for e in chat) + b"\xf6" + b"\x46a blob")
    assert payload == expected
    assert value[:packs.SEAL_SIZE] == blake3.blake3(leaf + payload).digest()[:16]
    assert packs.split(leaf, payload) == packs.Parts(leaf_bytes, [*entries, b"a blob"], 3)
    assert packs.chat_messages(leaf, payload) == (leaf_bytes, [{"role": "user", "content": "m0"},
                                                               {"role": "user", "content": "m1"}, None])
    pointers = packs.pointer_values(leaf, [len(e) for e in entries])
    assert pointers[2] == b"\x05" + leaf[:16] + b"\x02" + len(other).to_bytes(4, "big")
    # The vector docs/format.md gives, byte for byte.
    assert leaf.hex().startswith("c2fe44c7") and leaf.hex().endswith("17c0")
    assert value.hex() == _DOC_VECTOR
    assert pointers[2].hex() == "05c2fe44c7160376733138f99bd48b55a50200000042"
    assert len(value) == 355 and rec.pack_pieces(value, 4096) == [value]
    assert rec.piece_key(leaf[:rec.KEY_SIZE], 0).hex() == "c2fe44c7160376733138f99bd48b55a500"


def _doc_vector(which: int = 0) -> str:
    text = (Path(__file__).resolve().parent.parent / "docs" / "format.md").read_text()
    block = text.split("payload framed raw (`0x00`)", 1 + which)[1 + which].split("```", 2)[1]
    return "".join(block.split())


_DOC_VECTOR = _doc_vector()


def test_a_pack_that_leaves_out_its_leaf_has_the_layout_docs_format_md_gives(tmp_path: Path) -> None:
    """Known-answer vector (docs/format.md, *Leaf packs*): a leaf of two chat entries, left out of its pack,
    as the store writes it."""
    chat = [_chat_entry(n) for n in range(2)]
    items = [[f"e{n}", object_id(e)] for n, e in enumerate(chat)]
    leaf_bytes = encode_object(SeqNode(level=0, items=items))[1]
    leaf = object_id(leaf_bytes)
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([*((object_id(e), e) for e in chat), (leaf, leaf_bytes)])
        record = _pack(store, leaf)
        payload = _payload(store, leaf)
        assert _value(store, leaf) == packs.leaf_marker(leaf_bytes)
        pointer = _value(store, object_id(chat[1]))
        lmdb_store._PACKS.clear()
        assert store.get(leaf) == leaf_bytes  # rebuilt
    heads = [e[:packs.chat_message_at(e)] for e in chat]
    assert payload == (b"\x84\xf6\x82" + b"".join(bytes([0x58, len(h)]) + h for h in heads)
                       + b"".join(e[packs.chat_message_at(e):] for e in chat))
    assert record == packs.pack_record(leaf, payload, record[packs.FRAMED_AT:])
    if record[packs.FRAMED_AT] == 0x00:  # framed raw (a store frames as it likes): then byte for byte
        assert record.hex() == _doc_vector(1)
    assert packs.pack_record(leaf, payload, b"\x00" + payload).hex() == _doc_vector(1)
    assert leaf.hex().startswith("081e3e22") and leaf.hex().endswith("f167")
    assert packs.leaf_marker(leaf_bytes).hex() == "0400000064"
    assert pointer.hex() == "05081e3e22656dcfb5bec44bc0806eecd4010000003a"


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_messages = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": _text}),
    st.fixed_dictionaries({"role": st.just("user"), "content": _text, "name": _text}),
    st.fixed_dictionaries({"role": st.just("user"),
                           "content": st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
                                               min_size=1, max_size=3)}),
    st.integers(0, 5).map(lambda n: _tool_output(n)),  # a block kept as a blob, some named again
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(st.tuples(st.lists(_messages, min_size=1, max_size=30), st.integers(0, 90)),
                        min_size=1, max_size=5),
       meta=st.booleans())
def test_any_history_reads_back_from_packs_as_from_a_store_of_one_record_each(
        tmp_path_factory: pytest.TempPathFactory, batches: list[tuple[list[dict[str, Any]], int]], meta: bool
) -> None:
    """Whatever is appended, in whatever batches (each with a run of chat turns, so leaves close and are
    packed with whatever the batch holds): every object, and the render, are those of a store that keeps
    an object per record."""
    path = tmp_path_factory.mktemp("packs")
    twin = MemoryStore()
    with LmdbStore(path / "s", durable=False) as store:
        history = MessageHistory(source=store)
        for drawn, turns in batches:
            batch = [*drawn, *(_chat(n) for n in range(turns))]
            if meta:
                history = history.append({"message": batch[0], "meta": {"n": len(batch)}})
                batch = batch[1:]
            history = history.extend(batch)
            made = history.workspace.pending()
            twin.put_many(made)
            store.put_many(made)
            history.workspace.forget([oid for oid, _ in made])
        everything = sorted(twin)
        assert store.get_many(everything) == [twin.get(oid) for oid in everything]
        assert MessageHistory(source=store, head=history.revision_id).render() == MessageHistory(
            source=twin, head=history.revision_id).render()
        for leaf in _leaves([(oid, twin.get(oid)) for oid in twin]):
            order = seq.packed_order(parse_object(twin.get(leaf)).items)
            if _value(store, leaf)[0] == packs.LEAF_PACK:
                assert all(_value(store, oid)[0] == packs.PACKED for oid in order)
                event("a leaf was packed")


@settings(max_examples=200)
@given(items=st.lists(st.tuples(_text, st.one_of(st.none(), st.sampled_from([b"\x01" * 32, b"\x02" * 32]),
                                                 st.binary(min_size=32, max_size=32))), min_size=1, max_size=60))
def test_the_pack_order_read_from_a_leafs_bytes_is_the_one_its_node_gives(
        items: list[tuple[str, bytes | None]]) -> None:
    """`seq.leaf_items_of` (what a commit reads a leaf's entries by) agrees with the decoded node's."""
    leaf = encode_object(SeqNode(level=0, items=[[i, o] for i, o in items]))[1]
    assert seq.leaf_items_of(leaf) == parse_object(leaf).items
    inner = encode_object(SeqNode(level=1, items=[[b"\x03" * 32, 2]]))[1]
    assert seq.leaf_items_of(inner) is None


# -- objects that hash to their ids but are not what a leaf expects (found in review) ---------------------

def _chat_entry(n: int) -> bytes:
    return encode_object(Entry(id=f"e{n}", kind="turn", message={"role": "user", "content": f"m{n}"}))[1]


def _leaf_of(parts: list[bytes]) -> bytes:
    return encode_object(SeqNode(level=0, items=[[f"x{i}", object_id(p)] for i, p in enumerate(parts)]))[1]


def test_a_leaf_naming_a_packed_leaf_as_an_entry_leaves_that_leaf_readable(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history, messages = _with_a_closed_leaf(100, MessageHistory(source=store))
        made = history.workspace.pending()
        store.put_many(made)
        victim = _leaves(made)[0]
        victims = seq.packed_order(parse_object(dict(made)[victim]).items)
        entry = _chat_entry(0)
        crafted = _leaf_of([entry, dict(made)[victim]])
        store.put_many([(object_id(entry), entry), (object_id(crafted), crafted)])  # later, alone
        other = _chat_entry(1)
        both = [_leaf_of([other]), _leaf_of([other, _leaf_of([other])])]  # one commit: a leaf naming the other
        store.put_many([(object_id(other), other), *((object_id(b), b) for b in both)])
        lmdb_store._PACKS.clear()  # as a new process reads
        assert _value(store, victim)[0] == packs.LEAF_PACK
        assert [store.get(oid) for oid in victims] == [dict(made)[oid] for oid in victims]
        assert [store.get(object_id(b)) for b in both] == both
        store.delete_many([object_id(crafted)])
        lmdb_store._PACKS.clear()
        assert [store.get(oid) for oid in victims] == [dict(made)[oid] for oid in victims]
        assert MessageHistory(source=store, head=history.revision_id).render() == messages


def test_an_entry_whose_text_is_not_utf8_is_kept_whole_and_its_pack_reads(tmp_path: Path) -> None:
    good = [_chat_entry(n) for n in range(3)]
    bad = good[0].replace(b"\x62m0", b"\x62\xff\xfe").replace(b"\x62e0", b"\x62zz")  # hashes to its id
    assert packs.chat_message_at(bad) is None and packs.chat_message_at(good[0]) is not None
    parts = [*good, bad]
    leaf = _leaf_of(parts)
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([(object_id(p), p) for p in parts] + [(object_id(leaf), leaf)])
        assert _value(store, object_id(leaf))[0] == packs.LEAF_PACK
        lmdb_store._PACKS.clear()
        assert [store.get(object_id(p)) for p in parts] == parts
        _, messages = store.get_leaves([object_id(leaf)])[0]
        assert messages == [{"role": "user", "content": f"m{n}"} for n in range(3)] + [None]
        assert store.delete_many([object_id(leaf)]) == 1
        assert [store.get(object_id(p)) for p in parts] == parts


def test_a_leaf_too_large_to_pack_with_its_entries_is_stored_whole(tmp_path: Path) -> None:
    entry = encode_object(Entry(id="i" * 70_000, kind="turn", message={"role": "user", "content": "x"}))[1]
    leaf = encode_object(SeqNode(level=0, items=[["i" * 70_000, object_id(entry)]] * 64))[1]
    assert len(leaf) + len(entry) > packs.MAX_PAYLOAD
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([(object_id(entry), entry), (object_id(leaf), leaf)])
        assert _value(store, object_id(leaf))[0] != packs.LEAF_PACK
        assert store.get(object_id(leaf)) == leaf and store.get(object_id(entry)) == entry


def test_a_commit_whose_leaf_another_writer_stored_meanwhile_prepares_again(tmp_path: Path) -> None:
    """What a retry after the map grew checks (`_Records.holds_any`): records made before another writer
    stored one of the leaves they pack are made again, so no pointer names a pack that is not written."""
    history, _ = _with_a_closed_leaf(100)
    made = dict(history.workspace.pending())
    leaf = _leaves(list(made.items()))[0]
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        env = store.environment
        writes = WriteSet(objects=dict(made))
        txn, view = env.begin_view(True)
        stale = lmdb_store._Records(env, view).prepare(writes, 1, 0, None)
        env.end(txn, commit=False)
        store.put_many([(leaf, made[leaf])])  # meanwhile: the leaf alone (so it is stored whole)
        first = env.begin_view(True)
        records = lmdb_store._Records(env, first[1])
        assert records.holds_any(key for key, _ in stale.packs)
        env.run_write(lambda t: records.apply(writes, 2, records.prepare(writes, 2, 0, None)), need=0, sync=False,
                      first=first)
        lmdb_store._PACKS.clear()
        assert all(store.get(oid) == data for oid, data in made.items())


@settings(max_examples=300)
@given(ident=st.text(min_size=1, max_size=300), kind=st.sampled_from(["turn", "summary"]),
       role=st.text(max_size=300), content=st.text(max_size=400))
def test_a_chat_entry_is_cut_where_its_message_starts(ident: str, kind: str, role: str, content: str) -> None:
    """`packs.chat_message_at` finds the message of every chat entry it can (ids and roles up to 255
    bytes), and what follows the cut decodes to that message."""
    message = {"role": role, "content": content}
    data = encode_object(Entry(id=ident, kind=kind, message=message))[1]
    cut = packs.chat_message_at(data)
    if len(ident.encode()) <= 255 and len(role.encode()) <= 255:
        assert cut is not None
    if cut is not None:
        assert cbor2.loads(data[cut:]) == message
        assert entry_message(data) == message
    with_meta = encode_object(Entry(id=ident, kind=kind, message=message, meta={"k": 1}))[1]
    assert packs.chat_message_at(with_meta) is None


# -- ids a writer vouches for (`write_objects(hashed=True)`) ---------------------------------------------

def test_a_leaf_is_packed_with_an_entry_whose_id_is_wrong_only_if_its_writer_vouched_for_it(
        tmp_path: Path) -> None:
    """Packing checks each entry's id unless the writer hashed the bytes itself and said so; a vouch is
    dropped when the same id is written again without one, or deleted."""
    entry, other = _chat_entry(0), _chat_entry(1)
    wrong = object_id(other)  # `entry`'s bytes written under another entry's id
    leaf = encode_object(SeqNode(level=0, items=[["e0", wrong]]))[1]
    for case in ("plain", "vouched", "vouched, then written plain", "vouched, deleted, written plain"):
        with LmdbStore(tmp_path / case, durable=False, auto_dictionary=False) as store:
            with store.transaction(write=True) as txn:
                txn.write_objects([(wrong, entry)], hashed=case != "plain")
                if case.endswith("written plain"):
                    if "deleted" in case:
                        txn.delete_objects([wrong])
                    txn.write_objects([(wrong, entry)])
                txn.write_objects([(object_id(leaf), leaf)], hashed=True)
            packed = _value(store, object_id(leaf))[0] == packs.LEAF_PACK
            assert packed == (case == "vouched"), case


_ROLES = st.sampled_from(["user", "assistant", "r" * 255, "r" * 256, "é" * 128, ""])


@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_ROLES, st.text(max_size=300)), min_size=1, max_size=300))
def test_a_leaf_packs_the_same_whether_its_writer_said_where_the_messages_start_or_not(
        tmp_path_factory: pytest.TempPathFactory, turns: list[tuple[str, str]]) -> None:
    """`write_objects(message_at=...)`: what a history says of the entries it laid out is what the packer
    reads from their layout, so the packs are the same bytes either way (roles of every head length,
    and ids and roles past 255 bytes, for which it says nothing)."""
    history = MessageHistory().extend([{"role": role, "content": content} for role, content in [("user", ""), *turns]])
    pending, said = history.workspace.pending(), history.workspace.message_at()
    assert said and set(said) <= {oid for oid, _ in pending}
    held = []
    for hinted in (True, False):
        root = tmp_path_factory.mktemp("hinted" if hinted else "read")
        with LmdbStore(root, durable=False, auto_dictionary=False) as store:
            with store.transaction(write=True) as txn:
                txn.write_objects(pending, hashed=True, message_at=said if hinted else None)
            held.append(_packs_held(store))
            assert MessageHistory(source=store, head=history.revision_id).render() == history.render()
    assert held[0] == held[1]


def test_where_a_writer_said_a_message_starts_is_dropped_with_its_vouch(tmp_path: Path) -> None:
    """A message start said with a vouch is used (a wrong one stores a pack that does not read back) until
    the same id is written again without it, or deleted: then the packer reads the entry's layout."""
    entry = _chat_entry(0)
    oid = object_id(entry)
    leaf = encode_object(SeqNode(level=0, items=[["e0", oid]]))[1]
    wrong = {oid: 3}
    cases = ("kept", "written plain", "written vouched, nothing said", "deleted, written vouched")
    for case in cases:
        with LmdbStore(tmp_path / case, durable=False, auto_dictionary=False) as store:
            with store.transaction(write=True) as txn:
                txn.write_objects([(oid, entry)], hashed=True, message_at=wrong)
                if case == "written plain":
                    txn.write_objects([(oid, entry)])
                elif case == "written vouched, nothing said":
                    txn.write_objects([(oid, entry)], hashed=True)
                elif case.startswith("deleted"):
                    txn.delete_objects([oid])
                    txn.write_objects([(oid, entry)], hashed=True)
                txn.write_objects([(object_id(leaf), leaf)], hashed=True)
            assert _value(store, object_id(leaf))[0] == packs.LEAF_PACK, case
            lmdb_store._PACKS.clear()
            if case == "kept":
                with pytest.raises(DamagedData):
                    store.get(oid)
            else:
                assert store.get(oid) == entry, case


def test_a_commit_vouches_for_what_its_history_made_and_not_for_what_it_copied(tmp_path: Path) -> None:
    """`Workspace.copied` are the objects a commit writes without a vouch: bytes taken from another
    history's workspace (a rebase replays its entries); everything else the history hashed itself."""
    with Repository.init(tmp_path / "r", durable=False) as repo:
        repo.commit("main", repo.history("main").extend([_chat(n) for n in range(40)]))
        other = MessageHistory().extend([_chat(n) for n in range(40, 80)])
        rebased = other.rebase_onto(repo.history("main"))
        made = {oid for oid, _ in rebased.workspace.pending()}
        copied = rebased.workspace.copied()
        assert copied and copied < made
        repo.commit("main", rebased)
        assert rebased.workspace.copied() == set()
        lmdb_store._PACKS.clear()
        assert repo.history("main").render() == [_chat(n) for n in range(80)]


def test_a_head_just_written_loads_from_the_revision_cache_as_its_bytes_would(tmp_path: Path) -> None:
    """`LmdbStore.cached_revision`: the revision and its spine's encoded levels, as decoding its stored
    bytes gives them; None from a store that does not hold it (the cache is the process's)."""
    with LmdbStore(tmp_path / "a", durable=False) as store, LmdbStore(tmp_path / "b", durable=False) as empty:
        history = MessageHistory(source=store)
        for n in range(60):
            history = history.append(_chat(n))
            store.put_many(history.workspace.pending())
            head = ObjectId(bytes.fromhex(history.revision_id))
            cached = store.cached_revision(head)
            assert empty.cached_revision(head) is None
            if n == 0:
                continue  # the root is written whole, not rebuilt or vouched for: read as ever
            assert cached is not None
            rev, levels = cached
            data = store.get(head)
            assert encode_object(rev)[1] == data and levels == seq.spine_bytes(parse_object(data), data)
            history = MessageHistory(source=store, head=history.revision_id)  # loads from the cache
        assert history.render() == [_chat(n) for n in range(60)]


# -- fsck: packs that nothing points at ------------------------------------------------------------------

def _packs_held(store: LmdbStore) -> dict[bytes, bytes]:
    """Each pack's record (its pieces joined) by its leaf's record key."""
    env = store.environment
    held: dict[bytes, bytes] = {}
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        for key, value in txn.cursor(db=env.dbs[rec.PACKS]):
            held[bytes(key[:rec.KEY_SIZE])] = held.get(bytes(key[:rec.KEY_SIZE]), b"") + bytes(value)
    return held


def _put_pack(store: LmdbStore, key: bytes, record: bytes) -> None:
    """Store a pack's record under `key` as the store cuts it into pieces."""
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin(write=True) as txn:
        for index, piece in enumerate(rec.pack_pieces(record, env.page_size)):
            txn.put(rec.piece_key(key, index), piece, db=env.dbs[rec.PACKS])


def test_a_store_whose_packs_all_have_their_markers_has_no_layout_problems(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        repo.commit("main", _with_a_closed_leaf(200, repo.history("main"))[0])
        store = repo.store
        assert isinstance(store, LmdbStore)
        held = _packs_held(store)
        assert held  # the check below walks real packs, each under a leaf's marker
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with store.environment.env.begin() as txn:
            markers = {key: txn.get(key, db=store.environment.dbs[rec.OBJECTS]) for key in held}
        assert all(m is not None and rec.record_value(m)[0] == packs.LEAF_PACK for m in markers.values())
        assert store.layout_problems() == []
        assert read_layout_problems(store) == []
        report = repo.fsck()
        assert report.ok and report.problems == []


def test_fsck_names_a_pack_under_no_object_and_one_under_an_object_not_stored_packed(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        history, messages = _with_a_closed_leaf(200, repo.history("main"))
        repo.commit("main", history)
        store = repo.store
        assert isinstance(store, LmdbStore)
        everything = sorted(store)
        before = {oid: store.get(oid) for oid in everything}
        head = ObjectId(bytes.fromhex(repo.history("main").revision_id))
        assert _value(store, head)[0] != packs.LEAF_PACK
        some_pack = next(iter(_packs_held(store).values()))
        nowhere = bytes(range(rec.KEY_SIZE))  # no object's id starts with these bytes
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with store.environment.env.begin() as txn:
            assert txn.get(nowhere, db=store.environment.dbs[rec.OBJECTS]) is None
        _put_pack(store, nowhere, some_pack)
        _put_pack(store, rec.object_key(head), some_pack)

        problems = store.layout_problems()
        assert len(problems) == 2
        (under_nothing,) = [p for p in problems if nowhere.hex() in p]
        (under_head,) = [p for p in problems if rec.object_key(head).hex() in p]
        assert "no object" in under_nothing
        assert head.hex() in under_head and "not stored packed" in under_head
        assert all("orphaned" in p for p in problems)
        assert read_layout_problems(store) == problems

        report = repo.fsck()
        assert not report.ok
        assert report.problems == problems  # each once, and nothing else reported
        # No object here points into an orphaned pack: every object and the render are as before.
        lmdb_store._PACKS.clear()
        assert sorted(store) == everything
        assert {oid: store.get(oid) for oid in everything} == before
        assert store.get_many(everything) == [before[oid] for oid in everything]
        assert repo.history("main").render() == messages


def test_fsck_says_an_orphaned_pack_under_a_leaf_stored_whole_is_what_refuses_its_view(tmp_path: Path) -> None:
    """A read of whole views looks a leaf's pack up by its key alone: a pack there that is another leaf's
    makes that read refuse the leaf, which no object's `get` shows, so the line says so."""
    entry = encode_object(Entry(id="i" * 70_000, kind="turn", message={"role": "user", "content": "x"}))[1]
    whole = encode_object(SeqNode(level=0, items=[["i" * 70_000, object_id(entry)]] * 64))[1]
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([(object_id(entry), entry), (object_id(whole), whole)])
        store.put_many(_with_a_closed_leaf(200)[0].workspace.pending())
        assert _value(store, object_id(whole))[0] != packs.LEAF_PACK
        assert store.layout_problems() == []
        _put_pack(store, rec.object_key(object_id(whole)), next(iter(_packs_held(store).values())))
        lmdb_store._PACKS.clear()
        assert store.get(object_id(whole)) == whole
        with pytest.raises(DamagedData):
            read_leaves(store, [object_id(whole)])
        (line,) = store.layout_problems()
        assert rec.object_key(object_id(whole)).hex() in line and "a whole view" in line


def test_a_store_with_no_layout_check_has_no_layout_problems() -> None:
    store = MemoryStore()
    store.put_many(MessageHistory().extend([_chat(n) for n in range(100)]).workspace.pending())
    assert not isinstance(store, LayoutSource)
    assert read_layout_problems(store) == []
    assert issubclass(LmdbStore, LayoutSource)


def test_a_bulk_import_framed_in_many_small_batches_stores_the_same(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Packs are framed in batches bounded by count and bytes (`_FRAME_BATCH`, `_FRAME_BYTES`): any cut
    of the batches stores the same packs."""
    history = MessageHistory().extend([_chat(n) for n in range(600)])
    stored = {}
    for case, batch, size in (("one batch", 10_000, 1 << 40), ("a pack each", 1, 1), ("by bytes", 10_000, 20_000)):
        monkeypatch.setattr(lmdb_store, "_FRAME_BATCH", batch)
        monkeypatch.setattr(lmdb_store, "_FRAME_BYTES", size)
        with LmdbStore(tmp_path / case, durable=False, auto_dictionary=False) as store:
            store.put_many(history.workspace.pending())
            stored[case] = _packs_held(store)
            lmdb_store._PACKS.clear()
            assert MessageHistory(source=store, head=history.revision_id).render() == [_chat(n) for n in range(600)]
    assert stored["one batch"] and stored["one batch"] == stored["a pack each"] == stored["by bytes"]


# -- a leaf kept as its entries ---------------------------------------------------------------------------

_ENTRY_POOL = [
    *(encode_object(Entry(id=f"e{n}", kind="turn", message={"role": "user", "content": f"m{n}"}))[1]
      for n in range(4)),
    encode_object(Entry(id="e4", kind="summary", message={"role": "assistant", "content": "s"}))[1],
    encode_object(Entry(id="e5", kind="turn", message={"role": "user", "content": "x"}, meta={"k": 1}))[1],
    encode_object(Entry(id="e6", kind="turn", message={"role": "user", "content": [{"type": "text", "text": "b"}]},
                        sources=["e0"]))[1],
    encode_object(Entry(id="é" * 140, kind="turn", message={"role": "user", "content": "long id"}))[1],
]


def _payload(store: LmdbStore, leaf: ObjectId) -> bytes:
    record = _pack(store, leaf)
    return codec.decompress(record[packs.FRAMED_AT:], dictionaries=store.environment.dicts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(picks=st.one_of(
    st.lists(st.integers(0, len(_ENTRY_POOL) - 1), min_size=1, max_size=8, unique=True).map(
        lambda picked: [(n, "own") for n in picked]),  # each entry once, under its own id: mostly left out
    st.lists(st.tuples(st.integers(0, len(_ENTRY_POOL) - 1), st.sampled_from(["own", "own", "other", "none"])),
             min_size=1, max_size=12)))
def test_a_leaf_is_left_out_of_its_pack_exactly_when_it_is_its_entries(
        tmp_path_factory: pytest.TempPathFactory, picks: list[tuple[int, str]]) -> None:
    """A leaf naming pool entries (chat entries and others; under their own id, another id, or by id alone;
    some twice) is left out of its pack exactly when it names each of its entries once, in order, under
    its own id, and all are chat entries; either way every read gives its exact bytes, and a whole
    view's read gives the messages without them only then."""
    items = [[parse_object(_ENTRY_POOL[n]).id if how == "own" else f"other{n}",
              None if how == "none" else object_id(_ENTRY_POOL[n])] for n, how in picks]
    leaf_bytes = encode_object(SeqNode(level=0, items=items))[1]
    leaf = object_id(leaf_bytes)
    order = seq.packed_order(items)
    if not order:
        return  # names no entry: nothing to pack
    entries = [next(e for e in _ENTRY_POOL if object_id(e) == oid) for oid in order]
    chat = [packs.chat_message_at(e) is not None for e in entries]
    kept_out = len(items) == len(order) and all(how == "own" for _, how in picks) and all(chat)
    with LmdbStore(tmp_path_factory.mktemp("s") / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([*((object_id(e), e) for e in entries), (leaf, leaf_bytes)])
        lmdb_store._PACKS.clear()  # as a new process reads
        assert _value(store, leaf)[0] == packs.LEAF_PACK
        assert (cbor2.loads(_payload(store, leaf))[0] is None) is kept_out
        assert packs.names_its_entries(items, [(e, packs.chat_message_at(e)) for e in entries]) is kept_out
        assert store.get(leaf) == leaf_bytes
        assert store.get_many([leaf, *order]) == [leaf_bytes, *entries]
        [(given, messages)] = store.get_leaves([leaf])
        assert given == (None if kept_out else leaf_bytes)
        assert messages == [entry_message(e) if is_chat else None for e, is_chat in zip(entries, chat, strict=True)]
        event("left out" if kept_out else "kept whole")


@settings(max_examples=300)
@given(ident=st.text(min_size=1, max_size=300), kind=st.sampled_from(["turn", "summary"]),
       meta=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)),
       sources=st.one_of(st.none(), st.lists(st.text(max_size=5), max_size=2)))
def test_an_entrys_id_is_read_from_its_layout(ident: str, kind: str, meta: dict[str, int] | None,
                                            sources: list[str] | None) -> None:
    try:
        data = encode_object(Entry(id=ident, kind=kind, message={"role": "user", "content": "c"}, meta=meta,
                                   sources=sources))[1]
    except CtxStoreError:
        return  # an id the codec refuses (a lone surrogate)
    assert packs.entry_id_of(data) == ident
    assert packs.entry_id_of(data[:5]) is None or len(ident.encode()) == 0
    blob_like = encode_object(SeqNode(level=0, items=[[ident, None]]))[1]
    assert packs.entry_id_of(blob_like) is None


@given(st.binary(max_size=64))
def test_any_bytes_give_an_id_or_none(data: bytes) -> None:
    found = packs.entry_id_of(data)
    assert found is None or (type(found) is str and found.encode() in data)


def test_a_leaf_kept_as_its_entries_whose_entry_is_damaged_is_refused(tmp_path: Path) -> None:
    """The seal stands for a leaf left out of its pack, as for its entries' ids; a pack resealed over an
    entry that no longer rebuilds the leaf is refused on every read that rebuilds it."""
    entries = [_chat_entry(n) for n in range(3)]
    leaf_bytes = encode_object(SeqNode(level=0, items=[[f"e{n}", object_id(e)] for n, e in enumerate(entries)]))[1]
    leaf = object_id(leaf_bytes)
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([*((object_id(e), e) for e in entries), (leaf, leaf_bytes)])
        payload = _payload(store, leaf)
        assert cbor2.loads(payload)[0] is None
        forged = payload.replace(b"m1", b"m9")
        _put_pack(store, rec.object_key(leaf), packs.pack_record(leaf, forged, b"\x00" + forged))
        lmdb_store._PACKS.clear()
        with pytest.raises(DamagedData, match="do not rebuild the leaf"):
            store.get(leaf)
        with pytest.raises(DamagedData):
            store.get(object_id(entries[1]))  # its bytes in the pack no longer hash to its id
        assert store.get(object_id(entries[0])) == entries[0]  # read alone, each entry is checked alone


def test_a_pack_that_leaves_out_a_leaf_with_an_entry_to_read_whole_is_refused(tmp_path: Path) -> None:
    """A writer leaves a leaf out only when all its entries are chat entries, so a whole view's reader never
    needs its items; a pack that says otherwise is damage, not a view with a hole."""
    entries = [_chat_entry(n) for n in range(2)]
    leaf_bytes = encode_object(SeqNode(level=0, items=[[f"e{n}", object_id(e)] for n, e in enumerate(entries)]))[1]
    leaf = object_id(leaf_bytes)
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many([*((object_id(e), e) for e in entries), (leaf, leaf_bytes)])
        assert store.get_leaves([leaf])[0][0] is None
        forged = packs.pack_payload(None, [(entries[0], packs.chat_message_at(entries[0])), (entries[1], None)], [])
        _put_pack(store, rec.object_key(leaf), packs.pack_record(leaf, forged, b"\x00" + forged))
        lmdb_store._PACKS.clear()
        with pytest.raises(DamagedData, match="not its chat entries"):
            store.get_leaves([leaf])
        assert store.get(leaf) == leaf_bytes  # rebuilt from the entries, which still hash to the leaf
