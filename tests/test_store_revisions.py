"""Append revisions stored as deltas on their parent: they read back to the same bytes and id, the
chain a read replays is bounded, and damaged records are refused instead of returned."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import MessageHistory
from ctxstore.errors import CtxStoreError, DamagedData
from ctxstore.format import codec, seq
from ctxstore.format.objects import Entry, Revision, parse_object
from ctxstore.ids import ObjectId, from_hex, object_id
from ctxstore.store import lmdb as lmdb_store
from ctxstore.store import records as rec
from ctxstore.store import revisions
from ctxstore.store.lmdb import LmdbStore
from ctxstore.store.revisions import DELTA, MAX_CHAIN


def _revisions(history: MessageHistory) -> list[tuple[ObjectId, bytes]]:
    return [(oid, data) for oid, data in history.workspace.pending() if isinstance(parse_object(data), Revision)]


def _nodes(history: MessageHistory) -> list[ObjectId]:
    return [oid for oid, data in history.workspace.pending() if data.startswith(seq.NODE_START)]


def _forget_cache() -> None:
    lmdb_store._REVISIONS = revisions.RevisionCache()  # a fresh process's cache: reads rebuild from disk


def _commit_each(store: LmdbStore, messages: int, per_commit: int = 1) -> MessageHistory:
    history, written = MessageHistory(), set()
    for i in range(0, messages, per_commit):
        history = history.extend([{"role": "user", "content": f"message {j}"} for j in range(i, i + per_commit)])
        store.put_many([(o, d) for o, d in history.workspace.pending() if o not in written])
        written |= {o for o, _ in history.workspace.pending()}
    return history


def _codec_of(store: LmdbStore, oid: ObjectId) -> int:
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with store.environment.env.begin() as txn:
        record = txn.get(rec.object_key(oid), db=store.environment.dbs[rec.OBJECTS])
    return rec.record_value(record)[0]


def test_a_revision_per_append_is_stored_as_a_small_delta_and_reads_back_exactly(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history = _commit_each(store, 300)
        revs = _revisions(history)
        forms = [_codec_of(store, oid) for oid, _ in revs]
        assert forms.count(DELTA) > 0.8 * len(revs)
        for oid, _ in revs:
            if _codec_of(store, oid) == DELTA:
                assert store.stored_size(oid) < 200
        _forget_cache()
        for oid, data in reversed(revs):
            assert store.get(oid) == data
        assert store.get_many([oid for oid, _ in revs]) == [data for _, data in revs]
        assert store.stats().object_bytes == sum(len(d) for _, d in history.workspace.pending())


def test_no_read_replays_more_than_the_chain_limit(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history = _commit_each(store, 600)
        depths = []
        for oid, _ in _revisions(history):
            store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
            value = store.environment.env.begin().get(rec.object_key(oid), db=store.environment.dbs[rec.OBJECTS])
            value = rec.record_value(value)
            depths.append(value[1] if value[0] == DELTA else 0)
        assert max(depths) <= MAX_CHAIN
        assert 0 in depths[1:]  # checkpoints occur along the chain (where a leaf closes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(st.integers(1, 40).map(lambda n: ("append", n)),
                                st.integers(0, 1000).map(lambda n: ("remove", n)),
                                st.just(("fork", 0))), min_size=1, max_size=25),
       per_commit=st.booleans())
def test_every_stored_revision_reads_back_to_its_canonical_bytes_and_id(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]], per_commit: bool) -> None:
    """Whatever mix of appends, edits and forks made them, and whether each was committed alone or all
    at once, the store returns every revision's canonical bytes (which hash to its id)."""
    path = tmp_path_factory.mktemp("s")
    with LmdbStore(path, durable=False, auto_dictionary=False) as store:
        history, n, written = MessageHistory(), 0, set()
        for kind, arg in steps:
            if kind == "append":
                history = history.extend([{"role": "user", "content": f"m{n + j}"} for j in range(arg)])
                n += arg
            elif kind == "remove" and history.size:
                entries = history.refs()
                history = history.edit({"op": "remove", "id": entries[arg % len(entries)].id})
            else:
                history = history.fork()
            if per_commit:
                store.put_many([(o, d) for o, d in history.workspace.pending() if o not in written])
                written |= {o for o, _ in history.workspace.pending()}
        store.put_many(history.workspace.pending())
        _forget_cache()
        for oid, data in history.workspace.pending():
            assert object_id(data) == oid
            assert store.get(oid) == data


def test_a_changed_stored_value_is_refused_not_returned(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history = _commit_each(store, 40)
        revs = _revisions(history)
        delta_oid = next(oid for oid, _ in reversed(revs) if _codec_of(store, oid) == DELTA)
        entry_oid = next(oid for oid, d in history.workspace.pending() if isinstance(parse_object(d), Entry))
        env = store.environment
        for oid in (delta_oid, entry_oid):
            store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
            with env.env.begin(write=True) as txn:
                key = rec.object_key(oid)
                record = bytearray(txn.get(key, db=env.dbs[rec.OBJECTS]))
                if record[rec.HEAD_SIZE] == DELTA:
                    # the createdAt of the delta: still a well-formed record, but not this revision's
                    fields = codec.decode(bytes(record[rec.HEAD_SIZE + 2:-revisions.CHECK_SIZE]))
                    fields[1] += 1
                    record[rec.HEAD_SIZE + 2:-revisions.CHECK_SIZE] = codec.encode(fields)
                else:
                    record[-3] ^= 0x20
                txn.put(key, bytes(record), db=env.dbs[rec.OBJECTS])
        _forget_cache()
        for oid in (delta_oid, entry_oid):
            with pytest.raises(DamagedData):
                store.get(oid)
            with pytest.raises(CtxStoreError):
                store.get_many([oid])


def test_the_delta_form_has_a_known_answer() -> None:
    """docs/storage.md gives this vector: a second implementation must store the same bytes."""
    parent = bytes(range(32))
    entry = bytes(range(32, 64))
    oid = ObjectId(bytes(range(64, 96)))
    value = revisions.delta_value(oid, (ObjectId(parent), 1_700_000_000_000, ["e1"], [ObjectId(entry)], 321), 1)
    assert value.hex() == KNOWN_DELTA
    depth, fields = revisions.parse_delta(oid, value)
    assert depth == 1 and fields == (parent, 1_700_000_000_000, ["e1"], [entry], 321)
    with pytest.raises(DamagedData):
        revisions.parse_delta(ObjectId(bytes(32)), value)  # the check binds the record to its id


KNOWN_DELTA = ("0301855820000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f1b0000018bcfe5680081626531"
               "815820202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f190141d40584336d68c206")


def test_a_header_read_of_a_delta_reads_its_record_without_rebuilding(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/storage.md, *Header reads*: a delta's parent and time come from its record (no rebuild, no
    hash of the revision); a record damaged in those fields, or one that no longer parses, is refused by
    the record's check on a header read and by the id check on a full read."""
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history = _commit_each(store, 100)
        revs = [(oid, data) for oid, data in _revisions(history) if _codec_of(store, oid) == DELTA]
        _forget_cache()
        rebuilds = []
        real = revisions.rebuild
        monkeypatch.setattr(revisions, "rebuild", lambda *a, **k: rebuilds.append(1) or real(*a, **k))
        for oid, data in reversed(revs):
            parsed = parse_object(data)
            assert isinstance(parsed, Revision)
            assert store.revision_header(oid) == (parsed.parent, parsed.created_at)
        assert rebuilds == []
        oid = revs[-1][0]
        env = store.environment
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            key = rec.object_key(oid)
            record = bytearray(txn.get(key, db=env.dbs[rec.OBJECTS]))
            fields = codec.decode(bytes(record[rec.HEAD_SIZE + 2:-revisions.CHECK_SIZE]))
            fields[1] += 1
            txn.put(key, bytes(record[:rec.HEAD_SIZE + 2]) + codec.encode(fields)
                    + bytes(record[-revisions.CHECK_SIZE:]), db=env.dbs[rec.OBJECTS])
        _forget_cache()
        with pytest.raises(DamagedData):
            store.revision_header(oid)  # the record's check
        with pytest.raises(DamagedData):
            store.get(oid)  # the full read checks the id
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            txn.put(key, bytes(record[:rec.HEAD_SIZE + 2]) + b"\xff", db=env.dbs[rec.OBJECTS])
        with pytest.raises(DamagedData):
            store.revision_header(oid)


def test_a_stored_append_is_the_revisions_own_append_and_none_for_a_whole_one(tmp_path: Path) -> None:
    """`read_stored_append` gives a delta revision's parent, time and appended entries (checked by the
    record's seal, not rebuilt), None for a revision stored whole; a damaged record is refused."""
    from ctxstore.store.base import read_stored_append
    from ctxstore.store.memory import MemoryStore

    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        history = _commit_each(store, 80)
        _forget_cache()
        kinds = set()
        with store.transaction() as txn:
            for oid, data in _revisions(history):
                parsed = parse_object(data)
                assert isinstance(parsed, Revision)
                found = read_stored_append(txn, oid)
                kinds.add(found is not None)
                if _codec_of(store, oid) == DELTA:
                    op = parsed.operation
                    assert op is not None and found == (parsed.parent, parsed.created_at, op["entryIds"],
                                                        op["entries"])
                else:
                    assert found is None
        assert kinds == {True, False}
        assert read_stored_append(MemoryStore(), _revisions(history)[-1][0]) is None
        env = store.environment
        delta_oid = next(oid for oid, _ in reversed(_revisions(history)) if _codec_of(store, oid) == DELTA)
        store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
        with env.env.begin(write=True) as txn:
            key = rec.object_key(delta_oid)
            record = bytearray(txn.get(key, db=env.dbs[rec.OBJECTS]))
            record[-1] ^= 0x01  # the seal itself
            txn.put(key, bytes(record), db=env.dbs[rec.OBJECTS])
        with store.transaction() as txn, pytest.raises(DamagedData):
            read_stored_append(txn, delta_oid)


def _stored_values(store: LmdbStore, oids: list[ObjectId]) -> list[bytes]:
    env = store.environment
    store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        return [rec.record_value(txn.get(rec.object_key(oid), db=env.dbs[rec.OBJECTS])) for oid in oids]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sizes=st.lists(st.integers(1, 40), min_size=1, max_size=30))
def test_a_vouched_append_is_stored_exactly_as_the_full_check_stores_it(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, sizes: list[int]) -> None:
    """The history vouches for the appends it makes (`revisions.MADE`), so the store skips rebuilding
    them; what it stores is what rebuilding and checking would have stored, record for record."""
    taken: list[bool] = []
    real_take = revisions.MADE.take

    def take(oid: ObjectId, data: bytes) -> object:
        found = real_take(oid, data)
        taken.append(found is not None)
        return found

    history, n, batches, written = MessageHistory(), 0, [], set()
    for size in sizes:
        history = history.extend([{"role": "user", "content": f"m{n + j}"} for j in range(size)])
        n += size
        batches.append([(o, d) for o, d in history.workspace.pending() if o not in written])
        written |= {o for o, _ in batches[-1]}
    oids = [oid for batch in batches for oid, _ in batch]
    monkeypatch.setattr(revisions.MADE, "take", take)
    with (LmdbStore(tmp_path_factory.mktemp("vouched"), durable=False, auto_dictionary=False) as vouched,
          LmdbStore(tmp_path_factory.mktemp("checked"), durable=False, auto_dictionary=False) as checked):
        for batch in batches:
            vouched.put_many(batch)  # takes the vouches
        assert any(taken) or not any(_codec_of(vouched, oid) == DELTA for oid in oids)
        taken.clear()
        _forget_cache()
        for batch in batches:
            checked.put_many(batch)  # nothing vouched any more: every delta rebuilt and checked
        assert not any(taken)
        assert _stored_values(vouched, oids) == _stored_values(checked, oids)
        _forget_cache()
        for batch in batches:
            for oid, data in batch:
                assert vouched.get(oid) == data


def test_bytes_other_than_the_vouched_ones_take_the_full_check(tmp_path: Path) -> None:
    """A vouch covers exactly the bytes that were hashed to the id: other bytes under that id are
    rebuilt and checked (here they fail it, are stored whole, and a read refuses them)."""
    base = MessageHistory().append({"role": "user", "content": "base"})
    one = base.append({"role": "user", "content": "one"})
    two = base.append({"role": "user", "content": "two"})
    one_oid, two_oid = from_hex(one.revision_id), from_hex(two.revision_id)
    pending = dict(base.workspace.pending())  # the three share one workspace
    two_data = pending.pop(two_oid)
    del pending[one_oid]
    with LmdbStore(tmp_path / "s", durable=False, auto_dictionary=False) as store:
        store.put_many(pending.items())
        store.put_many([(one_oid, two_data)])  # the sibling's bytes under the vouched id
        assert _codec_of(store, one_oid) != DELTA
        _forget_cache()
        with pytest.raises(DamagedData):
            store.get(one_oid)


def test_a_revision_cached_with_its_bytes_stays_paired_with_them() -> None:
    """`RevisionCache.with_levels` gives the revision that was put with the checked bytes, even after
    `get`'s entry for that id was replaced by another put (a chain rebuilt before its check)."""
    history = MessageHistory()
    for n in range(3):
        history = history.append({"role": "user", "content": f"m{n}"})
    ws = history.workspace
    head = ObjectId(bytes.fromhex(history.revision_id))
    rev = ws.revision(head)
    data = dict(ws.pending())[head]
    cache = revisions.RevisionCache()
    assert cache.with_levels(head) is None
    levels = seq.spine_bytes(rev, data)
    assert levels is not None
    cache.put(head, rev, (data, levels))
    other = ws.revision(rev.parent)  # any other revision
    cache.put(head, other)  # no bytes: replaces what `get` holds, not what was kept with the bytes
    assert cache.get(head) is other
    assert cache.with_levels(head) == (rev, levels) and cache.encoded(head) == (data, levels)


def test_an_append_after_one_too_large_for_a_delta_is_a_delta_on_it_in_the_same_write(tmp_path: Path) -> None:
    """An append of more entries than a leaf holds is not a delta: without its lists where this process
    vouched for it (a bulk import's), else whole without its lists being checked; one written with it
    that appends onto it is still a delta, with it as checkpoint."""
    while True:  # until the last append closes no leaf (ids are random: it does 1 time in 32), so a delta
        big = MessageHistory().extend([{"role": "user", "content": f"m{j}"} for j in range(4 * seq.LEAF_TARGET)])
        nodes = len(_nodes(big))  # (the two share their workspace: counted before the append)
        history = big.append({"role": "user", "content": "one more"})
        if len(_nodes(history)) == nodes:
            break
    for made in (True, False):  # the append as this process vouched for it, and as read from its bytes
        if not made:
            revisions.MADE.take(from_hex(history.revision_id), b"")  # forgets the vouch
        with LmdbStore(tmp_path / f"made-{made}", durable=False, auto_dictionary=False) as store:
            store.put_many(history.workspace.pending())
            assert _codec_of(store, from_hex(big.revision_id)) == (revisions.BULK if made else codec.ZSTD)
            assert _codec_of(store, from_hex(history.revision_id)) == DELTA, made
            _forget_cache()
            for oid, data in _revisions(history):
                assert store.get(oid) == data
