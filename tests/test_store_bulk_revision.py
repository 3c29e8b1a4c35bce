"""Bulk append revisions stored without their lists (codec 0x06, docs/storage.md, *Bulk revisions*): they
read back byte for byte, light reads never rebuild their lists, a damaged record or tree is refused, and
they sync."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import MessageHistory, Repository, sync
from ctxstore.errors import CtxStoreError, DamagedData
from ctxstore.format import codec, seq
from ctxstore.format.objects import Revision, SeqNode, parse_object, revision_header
from ctxstore.history import workspace as workspace_module
from ctxstore.ids import ObjectId, from_hex, object_id
from ctxstore.store import lmdb as lmdb_store
from ctxstore.store import packs, revisions
from ctxstore.store import records as rec
from ctxstore.store.base import read_revision_header, read_revision_without_operation, read_stored_append
from ctxstore.store.lmdb import LmdbStore
from ctxstore.store.revisions import BULK, BULK_FROM, DELTA

_PLACEHOLDER: dict[str, Any] = {"type": "placeholder"}


@pytest.fixture(autouse=True)
def _fresh_vouches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test vouches into a map of its own (a vouch left by another test must not be taken here)."""
    made = revisions.MadeAppends()
    monkeypatch.setattr(revisions, "MADE", made)
    monkeypatch.setattr(workspace_module, "MADE", made)


def _fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a new process starts with: no rebuilt revisions, no split packs, no vouches."""
    monkeypatch.setattr(lmdb_store, "_REVISIONS", revisions.RevisionCache())
    lmdb_store._PACKS.clear()
    made = revisions.MadeAppends()
    monkeypatch.setattr(revisions, "MADE", made)
    monkeypatch.setattr(workspace_module, "MADE", made)


def _no_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(self: object, oid: ObjectId, value: bytes) -> bytes:
        raise AssertionError("a bulk revision's lists were rebuilt")

    monkeypatch.setattr(lmdb_store._Records, "bulk_revision", refused)


def _closes(spine: seq.Spine, pairs: list[list[Any]]) -> bool:
    closed: list[object] = []
    seq.append(spine, pairs, lambda node: closed.append(node) or seq.node_id(node))
    return bool(closed)


def _closing_no_leaf(history: MessageHistory, n: int) -> MessageHistory:
    """`history` with message `n` appended by an append that closes no leaf (one that closes one is
    stored whole, a checkpoint; about one in 32 does, entry ids being random): tried until one does not.
    The history's spine must not end at a cut (`_bulk(open_spine=True)`), or every append closes it."""
    spine = history.workspace.revision(from_hex(history.revision_id), operation=False).seq
    while True:
        child = history.append(_chat(n))
        op = child.workspace.revision(from_hex(child.revision_id)).operation
        assert op is not None
        if not _closes(spine, [[op["entryIds"][0], op["entries"][0]]]):
            return child


def _value(store: LmdbStore, oid: ObjectId) -> bytes:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        record = txn.get(rec.object_key(oid), db=env.dbs[rec.OBJECTS])
    assert record is not None
    return rec.record_value(record)


def _put_value(store: LmdbStore, oid: ObjectId, value: bytes) -> None:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin(write=True) as txn:
        key = rec.object_key(oid)
        record = txn.get(key, db=env.dbs[rec.OBJECTS])
        txn.put(key, bytes(record[:rec.HEAD_SIZE]) + value, db=env.dbs[rec.OBJECTS])


def _chat(n: int) -> dict[str, Any]:
    return {"role": "user" if n % 2 else "assistant", "content": f"message {n}"}


def _tool(n: int) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{n}", "name": "ls", "input": {"n": n}}]}


def _bulk(repo: Repository, n: int, *, start: int = 0, chat: bool = True, ref: str = "main",
          open_spine: bool = False) -> tuple[MessageHistory, ObjectId, bytes]:
    """A bulk import of `n` messages onto `ref`, committed: the history, its revision's id and bytes.
    With `open_spine`, made again until its spine's leaf does not end at a cut (so a later append of
    one message need not close it)."""
    while True:
        history = repo.history(ref).extend([(_chat if chat or k % 3 else _tool)(k) for k in range(start, start + n)])
        spine = history.workspace.revision(from_hex(history.revision_id), operation=False).seq
        if not open_spine or not _closes(spine, [["probe", b"\xff" * 32]]):  # not a cut itself
            break
    oid = from_hex(history.revision_id)
    data = dict(history.workspace.pending())[oid]
    repo.commit(ref, history)
    return history, oid, data


@pytest.fixture()
def repo(tmp_path: Path) -> Iterator[Repository]:
    with Repository.init(tmp_path / "r", durable=False) as made:
        yield made


def _store(repo: Repository) -> LmdbStore:
    assert isinstance(repo.store, LmdbStore)
    return repo.store


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(before=st.sampled_from([0, 0, 1, 37, 300]), n=st.integers(BULK_FROM - 8, 700), chat=st.booleans())
def test_a_bulk_import_reads_back_byte_for_byte_however_it_is_read(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, before: int, n: int,
        chat: bool) -> None:
    """Onto an empty or a longer parent, of chat or other entries, around and above the threshold: an
    append of `BULK_FROM` entries or more is stored without its lists, and `get`, `get_many`, a fresh
    process's read and a render give what was written."""
    with Repository.init(tmp_path_factory.mktemp("r"), durable=False) as repo:
        if before:
            _bulk(repo, before, chat=chat)
        history, oid, data = _bulk(repo, n, start=before, chat=chat)
        store = _store(repo)
        parent = history.workspace.revision(oid).parent
        assert parent is not None
        assert (_value(store, oid)[0] == BULK) == (n >= BULK_FROM)
        if n >= BULK_FROM:
            assert store.stored_size(oid) < len(data) - 34 * n  # not one of its n oids
        expected = [(_chat if chat or k % 3 else _tool)(k) for k in range(before + n)]
        for fresh in (False, True):
            if fresh:
                _fresh_process(monkeypatch)
            assert store.get(oid) == data
            assert store.get_many([parent, oid])[1] == data
            with store.transaction() as txn:
                assert txn.get(oid) == data
            assert repo.history("main").render() == expected
        assert object_id(store.get(oid)) == oid


def test_a_light_read_and_a_header_read_give_the_revisions_fields_without_rebuilding(
        repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    """Opening a history at a bulk import's head, rendering it, reading its header, size and stats, and
    appending to it read the record's prefix and suffix only: with the rebuild refused, all still work
    and agree with the revision's bytes."""
    _bulk(repo, 50)
    _history, oid, data = _bulk(repo, 900, start=50, open_spine=True)
    store = _store(repo)
    full = parse_object(data)
    assert isinstance(full, Revision)
    _fresh_process(monkeypatch)
    _no_rebuild(monkeypatch)
    with pytest.raises(AssertionError, match="rebuilt"):
        store.get(oid)
    light = read_revision_without_operation(store, oid, _PLACEHOLDER)
    assert light is not None
    rev, levels = light
    assert (rev.parent, rev.created_at, rev.seq, rev.size, rev.operation) == (
        full.parent, full.created_at, full.seq, full.size, _PLACEHOLDER)
    assert levels == seq.spine_bytes(full, data)
    with store.transaction() as txn:
        assert read_revision_without_operation(txn, oid, _PLACEHOLDER) == light
        assert txn.revision_header(oid) == revision_header(data)
    assert read_revision_header(store, oid) == revision_header(data) == store.revision_header(oid)
    assert rec.canonical_size(_value(store, oid)) == len(data)
    assert store.stats().object_bytes >= len(data)
    assert read_stored_append(store, oid) is None  # not a delta
    opened = repo.history("main")
    assert opened.size == 950
    assert [m["content"] for m in opened.render()] == [f"message {k}" for k in range(950)]
    child = _closing_no_leaf(opened, 950)
    repo.commit("main", child)  # the delta check reads the parent through the light read
    assert _value(store, from_hex(child.revision_id))[0] == DELTA
    assert len(repo.history("main").render()) == 951


def test_a_child_written_without_a_vouch_is_still_a_delta_on_it(
        repo: Repository, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A child whose bytes come from elsewhere (no vouch) takes the full delta check, whose parent is the
    bulk revision read light as its checkpoint; it reads back exactly in a fresh process."""
    _history, oid, _data = _bulk(repo, 400, open_spine=True)
    store = _store(repo)
    child = _closing_no_leaf(repo.history("main"), 400)
    child_oid = from_hex(child.revision_id)
    child_data = dict(child.workspace.pending())[child_oid]
    _fresh_process(monkeypatch)  # forgets the vouch
    _no_rebuild(monkeypatch)
    store.put_many(child.workspace.pending())
    assert _value(store, oid)[0] == BULK and _value(store, child_oid)[0] == DELTA
    _fresh_process(monkeypatch)
    assert store.get(child_oid) == child_data


def test_bytes_without_the_vouch_are_stored_whole(repo: Repository, tmp_path: Path) -> None:
    """docs/storage.md: only the vouched bulk append is stored without its lists; the same bytes from
    elsewhere (a pack, `put_many` of another store's objects) are stored whole, and read back."""
    history = repo.history("main").extend([_chat(k) for k in range(300)])
    oid = from_hex(history.revision_id)
    revisions.MADE.take(oid, b"")  # forgets the vouch
    with LmdbStore(tmp_path / "other", durable=False) as other:
        other.put_many(history.workspace.pending())
        assert _value(other, oid)[0] <= codec.ZSTD_DICT
        assert other.get(oid) == dict(history.workspace.pending())[oid]


def test_a_vouch_whose_nodes_are_not_at_hand_stores_it_whole(tmp_path: Path) -> None:
    """The tree its lists are rebuilt from must be written with it or held: a vouched bulk append
    written without the nodes it closed is stored whole."""
    history = MessageHistory().extend([_chat(k) for k in range(300)])
    oid = from_hex(history.revision_id)
    alone = [(o, d) for o, d in history.workspace.pending() if not d.startswith(seq.NODE_START)]
    with LmdbStore(tmp_path / "s", durable=False) as store:
        store.put_many(alone)
        assert _value(store, oid)[0] <= codec.ZSTD_DICT


def _damaged_record(value: bytes, where: str) -> bytes:
    damaged = bytearray(value)
    prefix, count, suffix, size = codec.decode(value[1:-revisions.CHECK_SIZE])
    if where == "check":
        damaged[-1] ^= 0x01
    elif where == "prefix":
        damaged[value.index(prefix) + 8] ^= 0x01
    elif where == "suffix":
        damaged[value.index(suffix) + len(suffix) - 3] ^= 0x01
    elif where == "count":
        array = codec.encode([prefix, count - 1, suffix, size])
        return bytes([BULK]) + array + value[-revisions.CHECK_SIZE:]
    return bytes(damaged)


@pytest.mark.parametrize("where", ["check", "prefix", "suffix", "count"])
def test_a_damaged_record_is_refused_not_returned(
        repo: Repository, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    _history, oid, _data = _bulk(repo, 300)
    store = _store(repo)
    _put_value(store, oid, _damaged_record(_value(store, oid), where))
    _fresh_process(monkeypatch)
    with pytest.raises(DamagedData):
        store.get(oid)
    with pytest.raises(DamagedData):
        store.get_many([oid])
    with pytest.raises(DamagedData):
        store.revision_header(oid)
    with pytest.raises(DamagedData):
        read_revision_without_operation(store, oid, _PLACEHOLDER)
    assert not repo.fsck().ok


def test_a_record_resealed_with_other_fields_is_refused_by_the_full_read(
        repo: Repository, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record whose check was made again over a changed prefix (another `createdAt`) passes the light
    reads, which trust the check as a delta's header read does, and fails the full read's id check."""
    _history, oid, data = _bulk(repo, 300)
    store = _store(repo)
    prefix, count, suffix, size = revisions.parse_bulk(oid, _value(store, oid))
    created = revision_header(data)[1]
    changed = prefix.replace(codec.encode(created), codec.encode(created + 1))
    assert changed != prefix
    _put_value(store, oid, revisions.bulk_value(oid, changed, count, suffix, size))
    _fresh_process(monkeypatch)
    assert store.revision_header(oid)[1] == created + 1
    with pytest.raises(DamagedData, match="does not rebuild to its id"):
        store.get(oid)


def _tree(store: LmdbStore, data: bytes) -> tuple[list[ObjectId], list[ObjectId]]:
    """The stored leaves and inner nodes of a revision's tree."""
    rev = parse_object(data)
    assert isinstance(rev, Revision)
    leaves, inner = [], []
    todo = [oid for oid, _level in seq.subtrees(rev.seq)]
    while todo:
        oid = todo.pop()
        node = parse_object(store.get(oid))
        assert isinstance(node, SeqNode)
        if node.level == 0:
            leaves.append(oid)
        else:
            inner.append(oid)
            todo.extend(ObjectId(child) for child, _ in node.items)
    return leaves, inner


@pytest.mark.parametrize("where", ["missing leaf", "pack seal", "inner node"])
def test_damage_to_the_tree_it_rebuilds_from_is_refused(
        repo: Repository, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    """The lists come from the tree: a leaf gone, a leaf pack damaged or an inner node changed fails the
    full read with `DamagedData`, while the light reads (which do not read the tree) still answer."""
    _history, oid, data = _bulk(repo, 3000)
    store = _store(repo)
    leaves, inner = _tree(store, data)
    assert inner and _value(store, leaves[0])[0] == packs.LEAF_PACK and _value(store, oid)[0] == BULK
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin(write=True) as txn:
        if where == "missing leaf":
            txn.delete(rec.object_key(leaves[0]), db=env.dbs[rec.OBJECTS])
        elif where == "pack payload":
            key = rec.object_key(leaves[0])
            pack = bytearray(txn.get(key, db=env.dbs[rec.PACKS]))
            pack[0] ^= 0x01  # its seal: the payload no longer reads as what was sealed
            txn.put(key, bytes(pack), db=env.dbs[rec.PACKS])
        else:
            key = rec.object_key(inner[0])
            record = bytearray(txn.get(key, db=env.dbs[rec.OBJECTS]))
            record[-5] ^= 0x01
            txn.put(key, bytes(record), db=env.dbs[rec.OBJECTS])
    _fresh_process(monkeypatch)
    with pytest.raises(DamagedData):
        store.get(oid)
    with pytest.raises(CtxStoreError):
        store.get_many([oid])
    assert store.revision_header(oid) == revision_header(data)
    assert read_revision_without_operation(store, oid, _PLACEHOLDER) is not None


def test_fsck_of_a_store_holding_bulk_revisions_is_clean(repo: Repository) -> None:
    _bulk(repo, 200)
    _bulk(repo, 500, start=200, chat=False)
    repo.commit("main", repo.history("main").append(_chat(700)))
    report = repo.fsck()
    assert report.ok, report


def test_a_bulk_revision_syncs_both_ways(repo: Repository, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetched (cloned) and pushed, a bulk import arrives whole and renders the same; the receiver, which
    has no vouch for bytes it did not make, stores it whole (docs/storage.md)."""
    _history, oid, data = _bulk(repo, 600)
    mine = sync.clone(str(repo.path), tmp_path / "mine")
    try:
        assert isinstance(mine.store, LmdbStore)
        assert mine.store.get(oid) == data
        assert _value(mine.store, oid)[0] <= codec.ZSTD_DICT
        assert mine.history("main").render() == repo.history("main").render()
        _history, pushed, pushed_data = _bulk(mine, 400, start=600)
        assert _value(mine.store, pushed)[0] == BULK
        sync.push(mine, "origin", ["main"])
        _fresh_process(monkeypatch)
        assert repo.store.get(pushed) == pushed_data
        assert [m["content"] for m in repo.history("main").render()] == [f"message {k}" for k in range(1000)]
        assert repo.fsck().ok and mine.fsck().ok
        sync.fetch(mine, "origin")
        assert mine.history("main").render() == repo.history("main").render()
        # Later appends sync without rebuilding the bulk revision either side holds as their base.
        _no_rebuild(monkeypatch)
        mine.commit("main", mine.history("main").append(_chat(1000)))
        sync.push(mine, "origin", ["main"])
        repo.commit("main", repo.history("main").append(_chat(1001)))
        sync.fetch(mine, "origin")
        assert mine.head("refs/remotes/origin/main") == repo.head("main")
        assert [m["content"] for m in mine.history("refs/remotes/origin/main").render()][-3:] == [
            f"message {k}" for k in (999, 1000, 1001)]
    finally:
        mine.close()


@settings(max_examples=40, deadline=None)
@given(size=st.integers(0, 2500), data=st.data())
def test_items_from_gives_the_lists_tail_reading_only_what_holds_it(size: int, data: st.DataObject) -> None:
    history = MessageHistory().extend([_chat(k) for k in range(size)]) if size else MessageHistory()
    ws = history.workspace
    spine = ws.revision(from_hex(history.revision_id)).seq
    items = seq.items_batched(spine, ws.nodes)
    start = data.draw(st.integers(0, size))
    read: list[ObjectId] = []

    def nodes(oids: list[ObjectId]) -> list[Any]:
        read.extend(oids)
        return ws.nodes(oids)

    assert seq.items_from(spine, start, nodes) == items[start:]
    if start == size:
        assert not read


def test_the_bulk_form_has_a_known_answer() -> None:
    """docs/format.md gives this vector: a second implementation must store, and rebuild, the same bytes."""
    oids = [ObjectId(bytes([0x00 if i == 126 else 0x80]) + bytes([i]) * 31) for i in range(128)]
    pairs = [[f"e{i}", o] for i, o in enumerate(oids)]
    spine = seq.append([[]], pairs, seq.node_id)
    rev = Revision(ObjectId(bytes(range(32))), 1_700_000_000_000,
                   {"type": "append", "entryIds": [p[0] for p in pairs], "entries": oids}, spine, 128)
    data = codec.encode({**rev.to_value(), "treeSpine": rev.seq})
    oid = object_id(data)
    assert oid.hex() == KNOWN_BULK_ID and len(data) == 5098
    levels = seq.spine_bytes(rev, data)
    assert levels is not None
    cut = revisions.bulk_cut(rev, data, levels)
    assert cut is not None
    for other in (data.replace(b"\x1b\x00\x00\x01\x8b", b"\x1b\x00\x00\x01\x8c"), data[:200] + data[201:],
                  data + b"\x00"):
        assert revisions.bulk_cut(rev, other, levels) is None
    value = revisions.bulk_value(oid, cut[0], 128, cut[1], len(data))
    assert value.hex() == KNOWN_BULK
    bulk = revisions.parse_bulk(oid, value)
    light = revisions.bulk_light(oid, bulk, _PLACEHOLDER)
    assert (light.parent, light.created_at, light.seq, light.size) == (rev.parent, rev.created_at, spine, 128)
    assert revisions.bulk_bytes(oid, bulk, [(i, o) for i, o in pairs]) == data
    with pytest.raises(DamagedData):
        revisions.parse_bulk(ObjectId(bytes(32)), value)  # the check binds the record to its id
    with pytest.raises(DamagedData):
        revisions.bulk_bytes(oid, bulk, [(i, o) for i, o in pairs[::-1]])


KNOWN_BULK_ID = "24d0487fcc470a94589f35fa34eeb2d985a14ac4ebce268d0601029b7a7ca712"
KNOWN_BULK = ("06845871a66473697a6518806474797065687265766973696f6e66706172656e745820000102030405060708090a0b0c0d0e"
              "0f101112131415161718191a1b1c1d1e1f696372656174656441741b0000018bcfe56800696f7065726174696f6ea3647479"
              "706566617070656e6467656e74726965731880585a69747265655370696e6582818264653132375820807f7f7f7f7f7f7f7f"
              "7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f7f81825820f26331e105575ac035606d09fc1ee1830cb07e542056f8"
              "1f3d2aecc900a23d9c187f1913ea78befb1f41994017")
