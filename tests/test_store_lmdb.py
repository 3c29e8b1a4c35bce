"""What only the LMDB store does: map growth across processes, fork, durability, dictionaries."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from ctxstore import ids
from ctxstore.errors import NotARepository, StoreError
from ctxstore.format import codec
from ctxstore.store.lmdb import AUTO_DICT_OBJECTS, LmdbStore


def chat(i: int, salt: str = "") -> tuple[ids.ObjectId, bytes]:
    """A small chat-message-like object, the kind a dictionary should help with."""
    roles = ["user", "assistant"]
    data = codec.encode({
        "kind": "turn",
        "id": f"e{salt}{i:06d}",
        "message": {"role": roles[i % 2], "content": [
            {"type": "text", "text": f"Could you check order {i * 7919 % 100000} for {salt} and tell me "
                                     f"whether it shipped? Reference number {i}."}]},
        "meta": {"createdAt": 1_700_000_000_000 + i * 1000, "model": "claude-sonnet-4-6"},
    })
    return ids.object_id(data), data


def bulky(i: int) -> tuple[ids.ObjectId, bytes]:
    """An object that does not compress, to fill the map quickly."""
    data = codec.encode({"n": i, "noise": os.urandom(2000)})
    return ids.object_id(data), data


# -- workers for real processes (module level so 'spawn' can import them) ------------------------------


def _reader_after_growth(path: str, ready: mp.Queue, go: mp.Queue, oids: mp.Queue, out: mp.Queue) -> None:
    with LmdbStore(path, map_size=64 * 1024) as store:
        before = store.map_size()
        ready.put(before)
        go.get(timeout=60)
        wanted = oids.get(timeout=60)
        found = sum(store.get(oid) is not None for oid in wanted)
        # Write after adopting the bigger map: the parent must see it.
        extra = bulky(10_000)
        store.put_many([extra])
        out.put((before, store.map_size(), found, extra[0]))


def _fork_child(store: LmdbStore, out: mp.Queue) -> None:
    oid, data = chat(1)
    ok = store.get(oid) == data
    new = chat(2)
    store.put_many([new])
    with store.transaction(write=True) as txn:
        txn.set_ref("refs/heads/child", new[0])
    out.put((ok, os.getpid()))


def _commit_then_die(path: str, durable: bool) -> None:
    store = LmdbStore(path, durable=durable)
    with store.transaction(write=True) as txn:
        txn.put_objects([chat(7)])
        txn.set_ref("refs/heads/main", chat(7)[0])
    os.kill(os.getpid(), signal.SIGKILL)


def _read_dict_objects(path: str, oids: list[bytes], out: mp.Queue) -> None:
    with LmdbStore(path, readonly=True) as store:
        out.put([store.get(ids.ObjectId(o)) for o in oids])


def _hold_reader_and_die(path: str, ready: Connection) -> None:
    store = LmdbStore(path)
    with store.transaction():
        ready.send(True)
        os.kill(os.getpid(), signal.SIGKILL)


def _open_and_close(path: str) -> None:
    LmdbStore(path).close()


# -- tests ----------------------------------------------------------------------------------------------


def test_a_tiny_map_grows_and_another_process_adopts_the_growth(tmp_path: Path) -> None:
    path = str(tmp_path / "store")
    ctx = mp.get_context("spawn")
    ready, go, oids, out = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Queue()
    with LmdbStore(path, map_size=64 * 1024) as store:
        child = ctx.Process(target=_reader_after_growth, args=(path, ready, go, oids, out))
        child.start()
        try:
            child_map = ready.get(timeout=60)
            items = [bulky(i) for i in range(400)]  # ~800 KB, far past 64 KiB
            for start in range(0, len(items), 50):
                store.put_many(items[start:start + 50])
            store.checkpoint()  # the commit log into LMDB, which fills the map
            assert store.map_size() > 64 * 1024
            go.put(True)
            oids.put([oid for oid, _ in items])
            before, after, found, extra = out.get(timeout=60)
        finally:
            child.join(timeout=60)
        assert child.exitcode == 0
        assert before == child_map <= 64 * 1024
        assert after > before
        assert found == len(items)
        assert store.has(extra)


def test_a_forked_child_reads_and_writes_through_its_own_environment(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    with LmdbStore(tmp_path / "s") as store:
        store.put_many([chat(1)])
        child = ctx.Process(target=_fork_child, args=(store, out))
        child.start()
        ok, pid = out.get(timeout=60)
        child.join(timeout=60)
        assert child.exitcode == 0 and ok and pid != os.getpid()
        assert store.get(chat(2)[0]) == chat(2)[1]
        with store.transaction() as txn:
            assert txn.get_ref("refs/heads/child") == chat(2)[0]
        # The parent's environment is untouched by the child: it keeps working.
        store.put_many([chat(3)])
        assert len(store) == 3


@pytest.mark.parametrize("durable", [True, False])
def test_a_commit_that_returned_survives_the_process_being_killed(tmp_path: Path, durable: bool) -> None:
    path = str(tmp_path / "s")
    child = mp.get_context("spawn").Process(target=_commit_then_die, args=(path, durable))
    child.start()
    child.join(timeout=60)
    assert child.exitcode == -signal.SIGKILL
    with LmdbStore(path) as store:
        assert store.get(chat(7)[0]) == chat(7)[1]
        with store.transaction() as txn:
            assert txn.get_ref("refs/heads/main") == chat(7)[0]


def test_durability_modes_and_sync(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "fast", durable=False) as fast:
        assert not fast.durable
        fast.put_many([chat(1)])
        fast.sync()
    with LmdbStore(tmp_path / "fast") as again:
        assert again.durable
        assert again.get(chat(1)[0]) == chat(1)[1]


def test_a_durable_store_on_an_environment_opened_non_durable_still_syncs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    original = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), original(fd))[1])
    with LmdbStore(tmp_path / "s", durable=False) as fast, LmdbStore(tmp_path / "s") as safe:
        synced.clear()  # making the empty log flushed it
        fast.put_many([chat(1)])
        assert synced == []
        safe.put_many([chat(2)])  # its record is flushed with the commit
        assert len(synced) == 1
        env = safe.environment
        flushed: list[bool] = []
        lmdb_sync = env.sync
        env.sync = lambda: (flushed.append(True), lmdb_sync())[1]  # type: ignore[method-assign]
        safe.checkpoint()  # LMDB is flushed before the log it took in is deleted
        assert flushed == [True] and safe.get(chat(2)[0]) == chat(2)[1]


def test_stores_on_one_path_share_one_environment_until_the_last_closes(tmp_path: Path) -> None:
    a = LmdbStore(tmp_path / "s")
    b = LmdbStore(tmp_path / "s")
    assert a.environment is b.environment
    a.put_many([chat(1)])
    a.close()
    assert b.get(chat(1)[0]) == chat(1)[1]
    b.close()
    with pytest.raises(StoreError):
        b.get(chat(1)[0])


def test_read_only_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s") as store:
        store.put_many([chat(1)])
    with LmdbStore(tmp_path / "s", readonly=True) as ro:
        assert ro.get(chat(1)[0]) == chat(1)[1]
        with pytest.raises(StoreError):
            ro.put_many([chat(2)])
        assert len(ro) == 1
    with pytest.raises(NotARepository):
        LmdbStore(tmp_path / "absent", readonly=True)


def test_a_damaged_data_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "data.mdb").write_bytes(b"this is not an lmdb file" * 1000)
    with pytest.raises(StoreError):
        LmdbStore(tmp_path / "s")


def test_a_nested_write_transaction_in_one_thread_is_refused(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s") as store:
        with store.transaction(write=True) as txn:
            txn.put_objects([chat(1)])
            with pytest.raises(StoreError):
                store.put_many([chat(2)])
        assert store.has(chat(1)[0])
        assert not store.has(chat(2)[0])


def _in_threads(work: Callable[[int], None], n: int) -> list[BaseException]:
    """Run `work(0)` .. `work(n - 1)` in threads at once; the exceptions they raised."""
    errors: list[BaseException] = []

    def guarded(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def test_threads_writing_through_map_growth_lose_nothing(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", map_size=64 * 1024, durable=False) as store:
        store.environment.checkpoint_bytes = 16 * 1024  # checkpoints, which grow the map, among the commits

        def work(t: int) -> None:
            for j in range(20):
                store.put_many([bulky(t * 1000 + j * 10 + k) for k in range(5)])
                with store.transaction() as txn:
                    txn.refs()

        assert _in_threads(work, 4) == []
        assert len(store) == 4 * 20 * 5
        assert store.map_size() > 64 * 1024


def test_a_transaction_filling_the_map_is_retried_whole(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", map_size=64 * 1024) as store:
        items = [bulky(i) for i in range(300)]
        with store.transaction(write=True) as txn:
            txn.put_objects(items)
            txn.set_ref("refs/heads/main", items[0][0])
            txn.append_reflog("refs/heads/main", b"one")
        assert len(store) == 300
        with store.transaction() as txn:
            assert txn.reflog("refs/heads/main") == [b"one"]


def test_stale_reader_slots_of_dead_processes_are_cleared_on_open(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    ctx = mp.get_context("spawn")
    with LmdbStore(path) as store:  # held open, so later opens are not the first and must clean up
        mine, theirs = ctx.Pipe()
        dying = ctx.Process(target=_hold_reader_and_die, args=(path, theirs))
        dying.start()
        assert mine.recv()
        dying.join(timeout=60)
        assert dying.exitcode == -signal.SIGKILL

        def reader_pids() -> list[str]:
            table = store.environment.env.readers().splitlines()[1:]
            return [line.split()[0] for line in table if line.strip()]

        assert str(dying.pid) in reader_pids()
        opener = ctx.Process(target=_open_and_close, args=(path,))
        opener.start()
        opener.join(timeout=60)
        assert opener.exitcode == 0
        assert str(dying.pid) not in reader_pids()


def test_a_trained_dictionary_shrinks_small_messages_and_everything_round_trips(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    with LmdbStore(path, durable=False, auto_dictionary=False) as store:
        old = [chat(i, "alpha") for i in range(1500)]
        store.put_many(old)
        assert store.dictionary_id() == 0
        before = [(oid, store.stored_size(oid)) for oid, _ in old[:200]]
        dict_id = store.train_dictionary()
        assert dict_id == store.dictionary_id() == 1
        new = [chat(i, "beta") for i in range(1500, 2000)]
        store.put_many(new)
        with_dict = sum(store.stored_size(oid) for oid, _ in new)
        without = sum(len(codec.compress(data)) for _, data in new)
        assert with_dict < 0.8 * without
        # Old values keep their encoding and still decode; new ones decode too.
        assert [(oid, store.stored_size(oid)) for oid, _ in old[:200]] == before
        for oid, data in old[:100] + new:
            assert store.get(oid) == data
        stats = store.stats()
        assert stats.object_bytes == sum(len(d) for _, d in old + new)
    # Another process, which never saw the dictionary in memory, decodes with it.
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_read_dict_objects, args=(path, [oid for oid, _ in new[:50]], out))
    child.start()
    got = out.get(timeout=60)
    child.join(timeout=60)
    assert got == [data for _, data in new[:50]]


def test_a_growing_store_trains_its_dictionary_and_recompresses_what_it_holds(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s", durable=False) as store:
        small = [chat(i, "gamma") for i in range(AUTO_DICT_OBJECTS - 1)]
        store.put_many(small)
        assert store.dictionary_id() == 0
        before = sum(store.stored_size(oid) for oid, _ in small)
        store.put_many([chat(AUTO_DICT_OBJECTS, "gamma")])
        assert store.dictionary_id() == 1
        assert sum(store.stored_size(oid) for oid, _ in small) < 0.8 * before
        for oid, data in small:
            assert store.get(oid) == data


def test_training_on_too_few_objects_keeps_no_dictionary(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s") as store:
        store.put_many([chat(i) for i in range(10)])
        assert store.train_dictionary() is None
        assert store.dictionary_id() == 0


def test_appenders_to_one_ref_through_map_growth_lose_no_commit(tmp_path: Path) -> None:
    """Threads appending to one conversation on a tiny map: a transaction whose reads another writer
    changed while the map grew is a lost race (RefMoved), which the commit loop retries; no append
    fails and every message lands once."""
    from ctxstore import Repository

    with LmdbStore(tmp_path / "s", map_size=64 * 1024, durable=False) as store:
        store.environment.checkpoint_bytes = 16 * 1024  # checkpoints, which grow the map, among the commits
        repo = Repository(store)

        def work(t: int) -> None:
            for j in range(15):
                repo.append("main", [{"role": "user", "content": f"{t}:{j} " + os.urandom(1500).hex()}])

        assert _in_threads(work, 4) == []
        texts = sorted(m["content"].split()[0] for m in repo.history("main").render())
        assert texts == sorted(f"{t}:{j}" for t in range(4) for j in range(15))
        assert store.map_size() > 64 * 1024
