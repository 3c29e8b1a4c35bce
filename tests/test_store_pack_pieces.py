"""Leaf packs kept in pieces (`records.pack_pieces`): the split fills overflow pages exactly and keeps the
rest inline; a pack of every shape reads, deletes and is rewritten whole; a piece lost, changed, added
or misplaced is damage that fsck reports and every read refuses.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore import Repository
from ctxstore.errors import DamagedData
from ctxstore.format import codec
from ctxstore.format.objects import Entry, SeqNode, encode_object, entry_message
from ctxstore.ids import ObjectId, object_id, to_hex
from ctxstore.store import lmdb as lmdb_store
from ctxstore.store import packs
from ctxstore.store import records as rec
from ctxstore.store.lmdb import LmdbStore

_PAGE_SIZES = (4096, 8192, 16384, 65536)


def _inline_max(page_size: int) -> int:
    """The longest value LMDB 0.9 keeps in a leaf page under a piece key (docs/storage.md, *Leaf packs*)."""
    return (((page_size - 16) // 2) & ~1) - 2 - 8 - rec.PIECE_KEY_SIZE


# -- the split ------------------------------------------------------------------------------------------

@settings(max_examples=400)
@given(size=st.integers(0, 5 * 65536), page_size=st.sampled_from(_PAGE_SIZES), seed=st.integers(0, 3))
def test_a_record_is_cut_into_whole_overflow_pages_then_nearly_equal_inline_pieces(
        size: int, page_size: int, seed: int) -> None:
    record = random.Random(seed).randbytes(size)
    pieces = rec.pack_pieces(record, page_size)
    limit = rec.piece_max(page_size)
    assert b"".join(pieces) == record
    assert rec.pack_pieces(bytes(record), page_size) == pieces  # deterministic
    assert len(pieces) <= 256  # numbered in one byte
    assert limit <= _inline_max(page_size)
    if size <= limit:
        assert pieces == [record]
        return
    assert all(pieces)
    head, tail = (pieces[0], pieces[1:]) if len(pieces[0]) > limit else (b"", pieces)
    if head:
        assert (len(head) + 16) % page_size == 0  # k whole overflow pages, less their header
    # The longest such prefix: what is left would not fill one more page.
    assert size - len(head) < page_size - (16 if not head else 0)
    assert all(len(piece) <= limit for piece in tail)
    if tail:
        assert max(map(len, tail)) - min(map(len, tail)) <= 1
        assert len(tail) == -(-(size - len(head)) // limit)  # as few as fit


def test_the_pieces_are_what_lmdb_keeps_inline_or_in_whole_overflow_pages(tmp_path: Path) -> None:
    """What `pack_pieces` assumes of LMDB: a value of up to the inline maximum under a piece key stays in
    its leaf page, and a value of k pages less 16 bytes takes exactly k overflow pages."""
    env = lmdb.open(str(tmp_path / "e"), max_dbs=16, map_size=1 << 26)
    page_size = env.stat()["psize"]
    sizes = {"piece": rec.piece_max(page_size), "inline": _inline_max(page_size), "over": _inline_max(page_size) + 1,
             **{f"{k} pages": k * page_size - 16 for k in (1, 2, 3)},
             **{f"{k} pages and a byte": k * page_size - 15 for k in (1, 2)}}
    overflow = {}
    for name, size in sizes.items():
        db = env.open_db(name.encode())
        with env.begin(write=True) as txn:
            txn.put(rec.piece_key(bytes(16), 0), bytes(size), db=db)
            overflow[name] = txn.stat(db)["overflow_pages"]
    env.close()
    assert overflow == {"piece": 0, "inline": 0, "over": 1, "1 pages": 1, "2 pages": 2, "3 pages": 3,
                        "1 pages and a byte": 2, "2 pages and a byte": 3}


def test_the_keys_under_a_pack_are_its_pieces_numbered_from_zero() -> None:
    key = bytes(range(16))
    assert rec.pieces_problem([rec.piece_key(key, i) for i in range(3)]) is None
    assert "numbered 0, 2, not 0 to 1" in str(rec.pieces_problem([rec.piece_key(key, 0), rec.piece_key(key, 2)]))
    assert "numbered 1" in str(rec.pieces_problem([rec.piece_key(key, 1)]))
    assert "of 16 bytes" in str(rec.pieces_problem([key, rec.piece_key(key, 0)]))
    assert "of 18 bytes" in str(rec.pieces_problem([rec.piece_key(key, 0), rec.piece_key(key, 0) + b"\0"]))


# -- packs of every shape in a store ---------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_PHRASES = ["".join(random.Random(n).choices(_LETTERS, k=24)) for n in range(600)]
"""What messages say: phrases a dictionary trained on other messages shrinks far better than zstd alone."""


def _entry(seed: int, part: int, phrases: int, noise: int) -> bytes:
    """A chat entry of `phrases` phrases in a row (from a place `seed` picks, each of the two parts of a
    leaf from its own half) and `noise` random capitals (to tune its size)."""
    rng = random.Random(seed)
    start = rng.randrange(len(_PHRASES)) + part * len(_PHRASES) // 2
    text = " ".join(_PHRASES[(start + n) % len(_PHRASES)] for n in range(phrases)) + " " + "".join(
        rng.choice(_LETTERS.upper()) for _ in range(noise))
    return encode_object(Entry(id=f"e{seed}-{part}", kind="turn", message={"role": "user", "content": text}))[1]


def _trained_on(store: LmdbStore) -> None:
    """Messages stored loose that a dictionary is trained on."""
    store.put_many([(object_id(e), e) for e in (_entry(1000 + n, 0, 12, 0) for n in range(300))])


def _leaf(entries: list[bytes]) -> bytes:
    return encode_object(SeqNode(level=0, items=[[f"x{i}", object_id(e)] for i, e in enumerate(entries)]))[1]


def _record_size(entries: list[bytes]) -> int:
    """The length of the pack record a store with no dictionary writes for the leaf of `entries`."""
    payload = packs.pack_payload(_leaf(entries), [(e, packs.chat_message_at(e)) for e in entries], [])
    return packs.FRAMED_AT + len(codec.compress(payload))


def _largest(fits: Callable[[int], bool]) -> int:
    """The largest n >= 0 with `fits(n)`, for a `fits` true up to some n and false after (about)."""
    high = 1
    while fits(high):
        high *= 2
    low = 0
    while low + 1 < high:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low


def _entries_packing_to(size: int, exact: bool) -> list[bytes]:
    """Two chat entries whose leaf's pack record is `size` bytes (`exact`), or at most that and close."""
    for seed in range(200):
        count = _largest(lambda c, s=seed: _record_size([_entry(s, 0, c, 0), _entry(s, 1, c, 0)]) <= size)
        noise = _largest(lambda n, s=seed, c=count: _record_size([_entry(s, 0, c, 0), _entry(s, 1, c, n)]) <= size)
        entries = [_entry(seed, 0, count, 0), _entry(seed, 1, count, noise)]
        if not exact or _record_size(entries) == size:
            return entries
    raise AssertionError(f"no leaf packs to {size} bytes")


_SHAPES = ("inline", "exact overflow", "overflow and tail", "tail only")


def _target(shape: str, page_size: int) -> tuple[int, bool]:
    limit = rec.piece_max(page_size)
    return {"inline": (limit // 2, False), "exact overflow": (page_size - 16, True),
            "overflow and tail": (page_size - 16 + 2 * limit + limit // 2, False),
            "tail only": ((page_size + limit) // 2, False)}[shape]


def _pieces(store: LmdbStore, key: bytes = b"") -> list[tuple[bytes, bytes]]:
    """The keys and values in ``packs`` that start with `key` (all of them for b""), in key order."""
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=env.dbs[rec.PACKS]) if k.startswith(key)]


def _assert_shape(shape: str, lengths: list[int], page_size: int) -> None:
    limit = rec.piece_max(page_size)
    if shape == "inline":
        assert len(lengths) == 1 and lengths[0] <= limit
    elif shape == "exact overflow":
        assert lengths == [page_size - 16]
    elif shape == "overflow and tail":
        assert lengths[0] == page_size - 16 and len(lengths) >= 3 and max(lengths[1:]) <= limit
    else:
        assert len(lengths) >= 2 and max(lengths) <= limit


def _packed(store: LmdbStore, shape: str) -> tuple[ObjectId, list[bytes]]:
    """A leaf stored in `store` packed with its two entries, its pack of `shape`; the leaf id and entries."""
    page_size = store.environment.page_size
    entries = _entries_packing_to(*_target(shape, page_size))
    leaf = _leaf(entries)
    store.put_many([*((object_id(e), e) for e in entries), (object_id(leaf), leaf)])
    oid = object_id(leaf)
    held = _pieces(store, rec.object_key(oid))
    assert [k for k, _ in held] == [rec.piece_key(rec.object_key(oid), i) for i in range(len(held))]
    record = b"".join(v for _, v in held)
    assert len(record) == _record_size(entries)
    assert [v for _, v in held] == rec.pack_pieces(record, page_size)
    _assert_shape(shape, [len(v) for _, v in held], page_size)
    return oid, entries


def _reads_back(store: LmdbStore, leaf: ObjectId, entries: list[bytes]) -> None:
    lmdb_store._PACKS.clear()  # as a new process reads
    leaf_bytes = _leaf(entries)
    assert store.get(leaf) == leaf_bytes
    assert [store.get(object_id(e)) for e in entries] == entries
    assert store.get_many([leaf, *map(object_id, entries)]) == [leaf_bytes, *entries]
    assert store.get_leaves([leaf]) == [(leaf_bytes, [entry_message(e) for e in entries])]


@pytest.mark.parametrize("shape", _SHAPES)
def test_a_pack_of_each_shape_reads_back_and_its_size_counts_every_piece(tmp_path: Path, shape: str) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        leaf, entries = _packed(store, shape)
        _reads_back(store, leaf, entries)
        record = sum(len(v) for _, v in _pieces(store))
        assert store.stored_size(leaf) == len(packs.leaf_marker(_leaf(entries))) + record
        assert store.layout_problems() == []
        # fsck finds nothing wrong but that the leaf is made here, not cut by the chunking rule.
        assert [p for p in Repository(store).fsck().problems if "not chunked by the rule" not in p] == []


@pytest.mark.parametrize("shape", _SHAPES)
def test_deleting_a_pack_of_each_shape_deletes_every_piece_and_keeps_its_entries(tmp_path: Path, shape: str) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        leaf, entries = _packed(store, shape)
        other, others = _packed(store, "inline" if shape != "inline" else "tail only")
        assert store.delete_many([leaf]) == 1
        assert _pieces(store, rec.object_key(leaf)) == []
        assert leaf not in store
        assert [store.get(object_id(e)) for e in entries] == entries  # records of their own again
        _reads_back(store, other, others)  # the neighbouring pack is whole


@pytest.mark.parametrize("shape", _SHAPES)
def test_recompressing_a_pack_of_each_shape_rewrites_it_whole_in_new_pieces(tmp_path: Path, shape: str) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        leaf, entries = _packed(store, shape)
        _trained_on(store)
        before = _pieces(store, rec.object_key(leaf))
        assert store.train_dictionary(recompress=True) == 1
        after = _pieces(store, rec.object_key(leaf))
        record = b"".join(v for _, v in after)
        assert record[packs.FRAMED_AT] == codec.ZSTD_DICT  # rewritten with the dictionary, and shorter
        assert len(record) < sum(len(v) for _, v in before)
        assert [k for k, _ in after] == [rec.piece_key(rec.object_key(leaf), i) for i in range(len(after))]
        assert [v for _, v in after] == rec.pack_pieces(record, store.environment.page_size)
        assert len(_pieces(store)) == len(after)  # no piece of the old record is left anywhere
        _reads_back(store, leaf, entries)


def test_a_recompressed_pack_that_needs_fewer_pieces_leaves_no_stale_tail(tmp_path: Path) -> None:
    """The case `write_pack` deletes first for: a rewrite into fewer pieces than the pack had."""
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        leaf, entries = _packed(store, "overflow and tail")
        _trained_on(store)
        count = len(_pieces(store, rec.object_key(leaf)))
        store.train_dictionary(recompress=True)
        after = _pieces(store, rec.object_key(leaf))
        assert len(after) < count
        assert len(_pieces(store)) == len(after)
        _reads_back(store, leaf, entries)


# -- damage ------------------------------------------------------------------------------------------------

def _edit(store: LmdbStore, change: Callable[[lmdb.Transaction[bytes], lmdb._Database], None]) -> None:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin(write=True) as txn:
        change(txn, env.dbs[rec.PACKS])


def _damage(store: LmdbStore, key: bytes, how: str) -> None:
    """Change the pieces under a pack's key as damage on disk would."""
    held = _pieces(store, key)
    last = len(held) - 1

    def change(txn: lmdb.Transaction[bytes], db: lmdb._Database) -> None:
        if how.endswith("piece deleted"):
            txn.delete(held[{"first": 0, "middle": 1, "last": last}[how.split()[0]]][0], db=db)
        elif how == "piece changed":
            txn.put(held[last][0], bytes([held[last][1][0] ^ 1]) + held[last][1][1:], db=db)
        elif how == "pieces swapped":
            txn.put(held[1][0], held[2][1], db=db)
            txn.put(held[2][0], held[1][1], db=db)
        elif how == "piece added":
            txn.put(rec.piece_key(key, last + 1), b"more", db=db)
        elif how == "piece under a longer key":
            txn.delete(held[1][0], db=db)
            txn.put(held[1][0] + b"\0", held[1][1], db=db)
        elif how == "piece under the bare key":
            txn.delete(held[0][0], db=db)
            txn.put(key, held[0][1], db=db)

    _edit(store, change)


_DAMAGE = ("first piece deleted", "middle piece deleted", "last piece deleted", "piece changed",
           "pieces swapped", "piece added", "piece under a longer key", "piece under the bare key")
_SEEN_IN_KEYS = {"first piece deleted": "numbered 1, 2", "middle piece deleted": "numbered 0, 2",
                 "piece under a longer key": "of 18 bytes", "piece under the bare key": "of 16 bytes"}


@pytest.mark.parametrize("how", _DAMAGE)
def test_a_damaged_piece_is_reported_by_fsck_and_refused_by_every_read(tmp_path: Path, how: str) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        store = repo.store
        assert isinstance(store, LmdbStore)
        leaf, entries = _packed(store, "overflow and tail")
        other, others = _packed(store, "tail only")
        key = rec.object_key(leaf)
        _damage(store, key, how)
        lmdb_store._PACKS.clear()
        with pytest.raises(DamagedData, match=to_hex(leaf)):
            store.get_leaves([leaf])
        for oid in (leaf, *map(object_id, entries)):
            with pytest.raises(DamagedData, match=to_hex(leaf)):
                store.get(oid)
        with pytest.raises(DamagedData):
            store.get_many([object_id(entries[0])])
        problems = store.layout_problems()
        if how in _SEEN_IN_KEYS:
            (line,) = problems
            assert key.hex() in line and "damaged" in line and _SEEN_IN_KEYS[how] in line
        else:
            assert problems == []  # the keys are right: what is wrong shows in reading the objects
        report = repo.fsck()
        assert not report.ok
        unreadable = [p for p in report.problems if "cannot be read" in p]
        assert {p.split()[1] for p in unreadable} == {to_hex(o) for o in (leaf, *map(object_id, entries))}
        _reads_back(store, other, others)  # the neighbouring pack is untouched


def test_stray_keys_in_packs_are_reported_and_do_not_break_fsck(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        leaf, entries = _packed(store, "tail only")
        _edit(store, lambda txn, db: txn.put(b"short", b"x", db=db))
        _edit(store, lambda txn, db: txn.put(bytes(20), b"x", db=db))
        problems = store.layout_problems()
        assert len(problems) == 3  # the short key; the long one, damaged and under no object
        assert any(b"short".hex() in p and "of 5 bytes" in p for p in problems)
        assert any(bytes(16).hex() in p and "of 20 bytes" in p for p in problems)
        assert any(bytes(16).hex() in p and "orphaned" in p for p in problems)
        _reads_back(store, leaf, entries)
        assert store.stats().stored_bytes > 0
