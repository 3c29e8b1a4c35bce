"""The store's fast paths give exactly what the general ones give: a commit's records made once and
reused by a retry, a dictionary trained on a large first commit's own objects, cached revision bytes,
revision encoding that reuses its parent's levels, framing many values, and reading a whole view in
batches."""

from __future__ import annotations

import gc
from pathlib import Path

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore import MessageHistory, Repository
from ctxstore.errors import CtxStoreError, DamagedData
from ctxstore.format import codec, seq
from ctxstore.format.objects import Revision, SeqNode, encode_object, parse_object
from ctxstore.ids import ObjectId, object_id
from ctxstore.store import lmdb as lmdb_store
from ctxstore.store import packs, revisions
from ctxstore.store import records as rec
from ctxstore.store.lmdb import AUTO_DICT_OBJECTS, LmdbStore
from ctxstore.store.memory import MemoryStore


def _chat(i: int) -> dict[str, str]:
    words = ("deploy", "window", "rollback", "plan", "review", "migration", "latency", "budget", "queue")
    return {"role": "user" if i % 2 else "assistant",
            "content": f"[{i}] " + " ".join(words[(i * k) % len(words)] for k in range(40))}


def _value(store: LmdbStore, oid: ObjectId) -> bytes:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        return rec.record_value(txn.get(rec.object_key(oid), db=env.dbs[rec.OBJECTS]))


def _codecs(store: LmdbStore, oids: list[ObjectId]) -> list[int]:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        return [rec.record_value(txn.get(rec.object_key(oid), db=env.dbs[rec.OBJECTS]))[0] for oid in oids]


def _forget_cache() -> None:
    lmdb_store._REVISIONS = revisions.RevisionCache()


# -- a large first commit ------------------------------------------------------------------------------

def test_a_large_first_commit_is_written_with_a_dictionary_trained_on_its_own_objects(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False) as store:
        history = MessageHistory().extend([_chat(i) for i in range(2 * AUTO_DICT_OBJECTS)])
        made = history.workspace.pending()
        store.put_many(made)
        assert store.dictionary_id() == 1
        entries = [oid for oid, data in made if data[1:4] == b"bid"]
        # Each entry is compressed with it alone, or kept in its closed leaf's pack, compressed with it too.
        assert set(_codecs(store, entries)) == {codec.ZSTD_DICT, packs.PACKED}
        leaves = [oid for oid, data in made if seq.is_leaf_bytes(data)]
        assert leaves and set(_codecs(store, leaves)) == {packs.LEAF_PACK}
        env = store.environment
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin() as txn:
            framing = {txn.get(rec.piece_key(rec.object_key(oid), 0), db=env.dbs[rec.PACKS])[packs.FRAMED_AT]
                       for oid in leaves}
        assert framing == {codec.ZSTD_DICT}
        assert store.get_many([oid for oid, _ in made]) == [data for _, data in made]


def test_a_commit_retried_after_the_map_grew_writes_the_same_records(tmp_path: Path) -> None:
    """The first attempt fills a tiny map; the retry writes the records (and dictionary) it made."""
    with LmdbStore(tmp_path / "s", durable=False, map_size=1 << 16) as store:
        history = MessageHistory().extend([_chat(i) for i in range(3 * AUTO_DICT_OBJECTS)])
        made = history.workspace.pending()
        store.put_many(made)
        assert store.map_size() > 1 << 16
        assert store.dictionary_id() == 1
        assert store.get_many([oid for oid, _ in made]) == [data for _, data in made]
        assert len(store) == len(made)


def test_a_small_commit_leaves_training_to_the_store_once_it_holds_enough(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False) as store:
        history = MessageHistory()
        for i in range(AUTO_DICT_OBJECTS // 2 + 2):
            history = history.append(_chat(i))
            store.put_many(history.workspace.pending())
        assert store.dictionary_id() == 1  # trained on what it held, as before


# -- revisions: cached bytes and levels ----------------------------------------------------------------

def test_a_head_read_after_its_commit_is_its_canonical_bytes_with_or_without_the_cache(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history, written = MessageHistory(), set()
        for i in range(80):
            history = history.append(_chat(i))
            new = [(o, d) for o, d in history.workspace.pending() if o not in written]
            store.put_many(new)
            written |= {o for o, _ in new}
            head = bytes.fromhex(history.revision_id)
            data = dict(history.workspace.pending())[head]
            assert store.get(head) == data
        _forget_cache()
        assert store.get(head) == data


def test_bytes_written_under_an_id_they_do_not_hash_to_are_not_served_from_the_cache(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        parent = MessageHistory().append(_chat(0))
        store.put_many(parent.workspace.pending())
        child = parent.append(_chat(1))
        rev = bytes.fromhex(child.revision_id)
        data = dict(child.workspace.pending())[rev]
        wrong = ObjectId(blake3.blake3(b"not this revision").digest())
        store.put_many([(o, d) for o, d in child.workspace.pending() if o != rev] + [(wrong, data)])
        with pytest.raises(DamagedData):
            store.get(wrong)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=1, max_size=10), st.integers(0, 2**32))
def test_a_revision_encoded_from_its_parents_cut_out_levels_has_its_canonical_bytes(
        batches: list[int], salt: int) -> None:
    nodes: dict[ObjectId, SeqNode] = {}

    def put(node: SeqNode) -> ObjectId:
        oid = seq.node_id(node)
        nodes[oid] = node
        return oid

    spine: seq.Spine = [[]]
    parent = ObjectId(bytes(32))
    n = 0
    for size in batches:
        ids = [f"e{salt}-{n + k}" for k in range(size)]
        oids = [blake3.blake3(i.encode()).digest() for i in ids]
        new = seq.append(spine, [[i, o] for i, o in zip(ids, oids, strict=True)], put)
        op = {"type": "append", "entryIds": ids, "entries": oids}
        rev = Revision(parent, 1_700_000_000_000 + n, op, new, n + size)
        data = encode_object(rev)[1]
        assert seq.encode_revision(rev)[0] == data  # type: ignore[index]
        # Parsed back from its bytes (as a loaded head is), its levels are cut out of those bytes ...
        parsed = parse_object(data, trusted=True)
        assert isinstance(parsed, Revision)
        levels = seq.spine_bytes(parsed, data)
        assert levels is not None
        assert all(encoded in data for _, encoded in levels)
        # ... and its child, encoded reusing them, has the general encoder's bytes.
        child_ids = [f"c{salt}-{n}"]
        child_oids = [blake3.blake3(child_ids[0].encode()).digest()]
        child_spine = seq.append(parsed.seq, [[child_ids[0], child_oids[0]]], put)
        child = Revision(object_id(data), 2, {"type": "append", "entryIds": child_ids, "entries": child_oids},
                         child_spine, parsed.size + 1)
        assert seq.encode_revision(child, levels)[0] == encode_object(child)[1]  # type: ignore[index]
        # Bytes that do not end with the spine's canonical encoding give no levels.
        assert seq.spine_bytes(parsed, data[:-1]) is None
        assert seq.spine_bytes(parsed, data + b"\x00") is None
        spine, parent, n = new, object_id(data), n + size


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=200),
       st.integers(0, 60), st.integers(0, 2**32))
def test_an_append_said_to_close_a_leaf_does_close_one(oids: list[bytes], held: int, salt: int) -> None:
    written: list[SeqNode] = []

    def put(node: SeqNode) -> ObjectId:
        written.append(node)
        return seq.node_id(node)

    base = seq.build([[f"p{salt}-{k}", blake3.blake3(f"{salt}/{k}".encode()).digest()] for k in range(held)],
                     lambda node: seq.node_id(node))
    ids = [f"e{k}" for k in range(len(oids))]
    delta = (ObjectId(bytes(32)), 1, ids, [ObjectId(o) for o in oids], 0)
    seq.append(base, [[i, o] for i, o in zip(ids, oids, strict=True)], put)
    if revisions.closes_leaf(delta):
        assert any(node.level == 0 for node in written)


# -- framing many values -------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(st.lists(st.binary(max_size=600) | st.text(max_size=300).map(str.encode), min_size=1, max_size=20),
       st.booleans())
def test_framing_many_values_is_compress_and_decompress_value_by_value(values: list[bytes], with_dict: bool) -> None:
    dictionary = None
    if with_dict:
        samples = [f"sample {i} of the dictionary training text {i * 31}".encode() * 3 for i in range(200)]
        import zstandard

        dictionary = zstandard.ZstdCompressionDict(zstandard.train_dictionary(2048, samples).as_bytes())
    frame = codec.compressor(dictionary=dictionary, dict_id=7)
    unpack = codec.decompressor({7: dictionary} if dictionary is not None else {})
    for value in values:
        framed = frame(value)
        assert framed == codec.compress(value, dictionary=dictionary, dict_id=7)
        assert unpack(framed) == value == codec.decompress(framed, dictionaries={7: dictionary} if dictionary else {})


def test_a_damaged_frame_read_in_a_batch_is_refused(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False) as store:
        history = MessageHistory().extend([_chat(i) for i in range(AUTO_DICT_OBJECTS + 10)])
        made = history.workspace.pending()
        store.put_many(made)
        oid = next(o for o, d in made if d[1:4] == b"bid")
        env = store.environment
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            record = bytearray(txn.get(rec.object_key(oid), db=env.dbs[rec.OBJECTS]))
            record[-2] ^= 0xFF
            txn.put(rec.object_key(oid), bytes(record), db=env.dbs[rec.OBJECTS])
        with pytest.raises(CtxStoreError):
            store.get_many([oid])


# -- reading a whole view ------------------------------------------------------------------------------

def _stored_history(tmp_path: Path, n: int) -> tuple[Repository, MessageHistory]:
    repo = Repository.init(tmp_path / "r", durable=False)
    blob = {"role": "user", "content": [{"type": "text", "text": "x" * 9000}, {"type": "text", "text": "y"}]}
    repo.commit("main", repo.history("main").extend([_chat(i) for i in range(n)] + [blob]))
    return repo, repo.history("main")


def test_a_view_read_in_batches_is_the_view_read_one_object_at_a_time(tmp_path: Path) -> None:
    repo, history = _stored_history(tmp_path, 3000)
    try:
        rendered = history.render()
        assert len(rendered) == 3001
        assert rendered[:3000] == [_chat(i) for i in range(3000)]
        assert rendered[3000]["content"][0]["text"] == "x" * 9000  # its blob, read back
        rev = history.workspace.revision(bytes.fromhex(history.revision_id))
        one_by_one = list(seq.iter_items(rev.seq, history.workspace.node))
        assert seq.items_batched(rev.seq, history.workspace.nodes) == one_by_one
        assert [e.message for e in history.refs()] == rendered
        assert [e.id for e in history.refs()] == [entry_id for entry_id, _ in one_by_one]
    finally:
        repo.close()


def test_what_a_render_hands_out_is_the_callers_to_change(tmp_path: Path) -> None:
    repo, history = _stored_history(tmp_path, 50)
    try:
        first = history.render()
        first[0]["content"] = "changed"
        first[-1]["content"][0]["text"] = "changed"
        assert history.render() == [_chat(i) for i in range(50)] + [history.refs()[-1].message]
        assert history.render()[-1]["content"][0]["text"] == "x" * 9000
        # Entries made in this process (decoded and cached) are copied, not handed out.
        made = history.append(_chat(99))
        out = made.render()
        out[-1]["role"] = "changed"
        assert made.render()[-1] == _chat(99)
    finally:
        repo.close()


def test_a_render_leaves_the_garbage_collector_as_it_found_it(tmp_path: Path) -> None:
    repo, history = _stored_history(tmp_path, 20)
    try:
        assert gc.isenabled()
        history.render()
        assert gc.isenabled()
        gc.disable()
        try:
            history.render()
            assert not gc.isenabled()
        finally:
            gc.enable()
    finally:
        repo.close()


def test_a_view_reads_through_a_source_without_get_many() -> None:
    class Plain:
        def __init__(self, store: MemoryStore) -> None:
            self.store = store

        def get(self, oid: ObjectId) -> bytes:
            return self.store.get(oid)

        def has(self, oid: ObjectId) -> bool:
            return self.store.has(oid)

    store = MemoryStore()
    history = MessageHistory().extend([_chat(i) for i in range(300)])
    store.put_many(history.workspace.pending())
    loaded = MessageHistory(source=Plain(store), head=history.revision_id)
    assert loaded.render() == [_chat(i) for i in range(300)]
