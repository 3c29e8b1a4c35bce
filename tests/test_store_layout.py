"""The LMDB store's record layout: half-length keys, write times in values, and the old layout refused."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from ctxstore import Repository, ids
from ctxstore.errors import MissingObject, NotARepository, StoreError
from ctxstore.format import codec
from ctxstore.store.lmdb import LmdbStore
from ctxstore.store.records import DATABASES, KEY_SIZE, OLD_DATABASES


def chat(i: int) -> tuple[ids.ObjectId, bytes]:
    data = codec.encode({"role": "user", "content": f"message number {i} " * 8})
    return ids.object_id(data), data


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000_000

    def __call__(self) -> int:
        return self.now


def write_old_layout(path: Path, objects: list[tuple[ids.ObjectId, bytes]], when: int) -> None:
    """A store as written before `objs`: 32-byte keys in `objects`, write times in `times`."""
    env = lmdb.open(str(path), max_dbs=8, map_size=1 << 24)
    with env.begin(write=True) as txn:
        dbs = {name: env.open_db(name, txn=txn)
               for name in (b"objects", b"times", b"refs", b"reflog", b"config", b"dicts")}
        for oid, data in objects:
            txn.put(oid, codec.compress(data), db=dbs[b"objects"])
            txn.put(oid, when.to_bytes(8, "big"), db=dbs[b"times"])
        txn.put(b"refs/heads/main", objects[0][0], db=dbs[b"refs"])
    env.close()


def raw_databases(path: Path) -> dict[bytes, dict[bytes, bytes]]:
    env = lmdb.open(str(path), max_dbs=8, readonly=True, lock=False)
    out: dict[bytes, dict[bytes, bytes]] = {}
    with env.begin() as txn:
        for name, _ in txn.cursor():
            out[bytes(name)] = dict(txn.cursor(db=env.open_db(bytes(name), txn=txn, create=False)))
    env.close()
    return out


def test_objects_are_keyed_by_half_their_id_with_the_time_and_the_rest_in_the_value(tmp_path: Path) -> None:
    clock = Clock()
    items = [chat(i) for i in range(20)]
    with LmdbStore(tmp_path / "s", durable=False, clock=clock) as store:
        store.put_many(items)
        store.checkpoint()  # the commit log into LMDB, which is read directly below
    dbs = raw_databases(tmp_path / "s")
    assert set(dbs[b"objs"]) == {oid[:KEY_SIZE] for oid, _ in items}
    assert not dbs.get(b"objects") and not dbs.get(b"times")
    for oid, data in items:
        value = dbs[b"objs"][oid[:KEY_SIZE]]
        assert int.from_bytes(value[:6], "big") == clock.now
        assert value[6:22] == oid[KEY_SIZE:]
        assert codec.decompress(value[22:]) == data
    with LmdbStore(tmp_path / "s", readonly=True) as store:
        assert sorted(store) == sorted(oid for oid, _ in items)
        assert all(store.get(oid) == data for oid, data in items)


def test_an_id_sharing_the_key_of_a_held_object_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    (oid, data), (_, other), third = chat(1), chat(2), chat(3)
    twin = ids.ObjectId(oid[:KEY_SIZE] + bytes(32 - KEY_SIZE))  # the same key, another id
    with LmdbStore(tmp_path / "s", durable=False) as store:
        store.put_many([(oid, data)])
    before = raw_databases(tmp_path / "s")
    with LmdbStore(tmp_path / "s", durable=False) as store:
        with pytest.raises(StoreError, match="share their first 16 bytes"):
            store.put_many([third, (twin, other)])
        assert not store.has(third[0]) and not store.has(twin) and store.written_at(twin) is None
        with pytest.raises(MissingObject):
            store.get(twin)
        assert store.get(oid) == data and len(store) == 1
        assert store.delete_many([twin]) == 0 and store.get(oid) == data
    assert raw_databases(tmp_path / "s") == before


def test_ids_that_are_mostly_other_ids_are_stored_raw_and_read_back(tmp_path: Path) -> None:
    oids = [chat(i)[0] for i in range(16)]
    inner = codec.encode({"type": "seq", "items": [[oid, 10 + n] for n, oid in enumerate(oids)], "level": 1})
    small = codec.encode({"note": "tiny"})
    leaf = codec.encode({"type": "seq", "level": 0,
                         "items": [[f"01jd8e2k4m6p8r0t2v4x6z{n:04d}", oid] for n, oid in enumerate(oids)]})
    with LmdbStore(tmp_path / "s", durable=False) as store:
        store.put_many([(ids.object_id(d), d) for d in (inner, small, leaf)])
        assert store.stored_size(ids.object_id(inner)) == len(inner) + 1
        assert store.stored_size(ids.object_id(small)) == len(small) + 1
        assert store.stored_size(ids.object_id(leaf)) < len(leaf)  # entry ids share prefixes
        for data in (inner, small, leaf):
            assert store.get(ids.object_id(data)) == data
        assert store.stats().object_bytes == len(inner) + len(small) + len(leaf)


def test_a_new_store_has_exactly_the_databases_of_the_layout(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False) as store:
        store.put_many([chat(1)])
        with store.transaction(write=True) as txn:
            txn.set_ref("refs/heads/main", chat(1)[0])
            txn.append_reflog("refs/heads/main", b"r")
            txn.set_config("k", b"v")
        store.checkpoint()
    dbs = raw_databases(tmp_path / "s")
    assert set(dbs) == set(DATABASES) and not set(dbs) & set(OLD_DATABASES)
    assert dbs[b"log"] == {b"generation": (1).to_bytes(8, "big")}  # one checkpoint
    assert sorted(p.name for p in (tmp_path / "s").iterdir()) == ["data.mdb", "lock.mdb", "log.0000000000000001"]
    assert dbs[b"refs"] == {b"refs/heads/main": chat(1)[0]}
    assert dbs[b"reflog"] == {b"refs/heads/main\x00" + bytes(8): b"r"}
    assert dbs[b"config"] == {b"k": b"v"}


def test_a_store_of_the_old_layout_is_refused_clearly_and_left_as_it_is(tmp_path: Path) -> None:
    old = [chat(i) for i in range(10)]
    write_old_layout(tmp_path / "s", old, when=1)
    before = raw_databases(tmp_path / "s")
    for readonly in (True, False):
        with pytest.raises(NotARepository, match=r"old layout.*objects, times.*does not read"):
            LmdbStore(tmp_path / "s", readonly=readonly)
    assert raw_databases(tmp_path / "s") == before
    # Refused on open, the path is not left half-open: a fresh store can take its place.
    for name in ("data.mdb", "lock.mdb"):
        (tmp_path / "s" / name).unlink()
    with LmdbStore(tmp_path / "s", durable=False) as store:
        store.put_many(old)
        assert sorted(store) == sorted(oid for oid, _ in old)


def test_a_repository_over_the_old_layout_is_refused_on_open(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        history = repo.history("main").extend([{"role": "user", "content": f"m{i}"} for i in range(50)])
        repo.commit("main", history)
        head = history.revision_id
        repo.store.checkpoint()  # type: ignore[attr-defined]
    # Rewrite its store in the old layout, ref and all.
    db = tmp_path / "r" / "db"
    dbs = raw_databases(db)
    with LmdbStore(db) as store:
        objects = [(oid, store.get(oid)) for oid in store]
    assert len(objects) == len(dbs[b"objs"])
    for name in ("data.mdb", "lock.mdb"):
        (db / name).unlink()
    write_old_layout(db, objects, when=1)
    env = lmdb.open(str(db), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"refs/heads/main", bytes.fromhex(head), db=env.open_db(b"refs", txn=txn))
    env.close()
    with pytest.raises(NotARepository, match="old layout"):
        Repository.open(tmp_path / "r")
