"""The LMDB store's record layout: half-length keys, write times in values, and stores of the old layout."""

from __future__ import annotations

from pathlib import Path

import lmdb
import pytest

from ctxstore import Repository, ids
from ctxstore.errors import MissingObject, StoreError
from ctxstore.format import codec
from ctxstore.store.lmdb import KEY_SIZE, LmdbStore


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


def test_a_store_of_the_old_layout_reads_writes_and_collects_in_place(tmp_path: Path) -> None:
    clock = Clock()
    old = [chat(i) for i in range(10)]
    write_old_layout(tmp_path / "s", old, when=clock.now - 1000)
    # Read-only first: the `objs` database does not exist yet and cannot be created.
    with LmdbStore(tmp_path / "s", readonly=True) as store:
        assert len(store) == 10 and sorted(store) == sorted(oid for oid, _ in old)
        assert store.get(old[3][0]) == old[3][1]
        assert store.written_at(old[3][0]) == clock.now - 1000
        assert store.stats().objects == 10
    with LmdbStore(tmp_path / "s", durable=False, clock=clock) as store:
        new = [chat(i) for i in range(10, 15)]
        store.put_many([*new, old[0]])  # rewriting an old object refreshes its time where it is
        assert len(store) == 15
        assert store.written_at(old[0][0]) == clock.now
        assert store.written_at(old[1][0]) == clock.now - 1000
        assert sorted(store) == sorted(oid for oid, _ in old + new)
        assert all(store.get(oid) == data for oid, data in old + new)
        assert store.delete_many([old[2][0], new[0][0]]) == 2
        assert not store.has(old[2][0]) and not store.has(new[0][0]) and len(store) == 13
    dbs = raw_databases(tmp_path / "s")
    assert len(dbs[b"objects"]) == 9 and len(dbs[b"times"]) == 9 and len(dbs[b"objs"]) == 4
    assert dbs[b"times"][old[0][0]] == clock.now.to_bytes(8, "big")


def test_a_repository_over_the_old_layout_commits_and_stays_sound(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        history = repo.history("main").extend([{"role": "user", "content": f"m{i}"} for i in range(50)])
        repo.commit("main", history)
        head = history.revision_id
    # Rewrite its store in the old layout, ref and all, then keep working on it.
    db = tmp_path / "r" / "db"
    dbs = raw_databases(db)
    objects = [(ids.ObjectId(k + v[6:22]), codec.decompress(v[22:])) for k, v in dbs[b"objs"].items()]
    for name in ("data.mdb", "lock.mdb"):
        (db / name).unlink()
    write_old_layout(db, objects, when=1)
    env = lmdb.open(str(db), max_dbs=8)
    with env.begin(write=True) as txn:
        txn.put(b"refs/heads/main", bytes.fromhex(head), db=env.open_db(b"refs", txn=txn))
    env.close()
    with Repository.open(tmp_path / "r") as repo:
        history = repo.history("main")
        assert history.size == 50
        repo.commit("main", history.append({"role": "user", "content": "after"}))
        assert repo.history("main").render()[-1]["content"] == "after"
        assert repo.fsck().ok
        report = repo.gc(grace=0)
        assert report.deleted == 0 and repo.fsck().ok
