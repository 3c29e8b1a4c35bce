"""The commit log under the LMDB store (`store.lmdb_log`, docs/storage.md *Commit log*).

A write goes to the log, not into LMDB; reads see LMDB through the log's overlay; a checkpoint moves the
log into LMDB. What is held here: the view and its cursor behave exactly as LMDB would holding the
merged contents (checked against a real LMDB database as the oracle), the log's records are what
docs/format.md specifies, a torn tail is cut and nothing before it lost, a changed record is refused,
other processes see each commit and each checkpoint, and a writer killed at any moment loses no commit
it was told had landed.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import re
import signal
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore import Repository
from ctxstore.errors import DamagedData
from ctxstore.interop.formats import import_messages
from ctxstore.store import lmdb_log
from ctxstore.store import records as rec
from ctxstore.store.lmdb import LmdbStore
from ctxstore.store.lmdb_log import HEADER_SIZE, Overlay, View, encode_record, header, log_name

KEYS = st.binary(min_size=1, max_size=2).map(lambda b: bytes(x % 6 + 97 for x in b))
VALUES = st.binary(min_size=1, max_size=3)
MOVES = st.lists(st.one_of(
    st.tuples(st.sampled_from(["first", "last", "next", "prev", "delete", "iterate"]), st.just(b"")),
    st.tuples(st.just("set_range"), st.binary(max_size=2).map(lambda b: bytes(x % 7 + 96 for x in b)))),
    max_size=12)


def _log_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name.startswith("log."))


def _cursor_moves(cursor: Any, moves: list[tuple[str, bytes]]) -> list[object]:
    seen: list[object] = []
    for move, key in moves:
        if move == "iterate":
            seen.append([(bytes(k), bytes(v)) for k, v in cursor])
            continue
        found = getattr(cursor, move)(key) if move == "set_range" else getattr(cursor, move)()
        seen.append((move, found, bytes(cursor.key()), bytes(cursor.value()) if cursor.key() else b""))
    return seen


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(base=st.dictionaries(KEYS, VALUES, max_size=8),
       logged=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=8),
       written=st.lists(st.tuples(KEYS, st.one_of(st.none(), VALUES)), max_size=8),
       moves=MOVES)
def test_a_view_reads_and_moves_as_lmdb_holding_the_merged_contents(
        tmp_path_factory: pytest.TempPathFactory, base: dict[bytes, bytes],
        logged: list[tuple[bytes, bytes | None]], written: list[tuple[bytes, bytes | None]],
        moves: list[tuple[str, bytes]]) -> None:
    """LMDB's records under the log's (`logged`, None deleting) under the transaction's own
    (`written`): `get`, `stat` and every cursor move through the view give what a real LMDB database
    holding the merged contents gives, deletes through the cursor included."""
    path = tmp_path_factory.mktemp("view")
    env = lmdb.open(str(path), max_dbs=4, map_size=1 << 22)
    db, oracle_db = env.open_db(b"d"), env.open_db(b"oracle")
    with env.begin(write=True) as txn:
        for key, value in base.items():
            txn.put(key, value, db=db)
    merged = dict(base)
    overlay = Overlay(0, (0,), 0)
    with env.begin() as txn:
        for key, value in logged:
            overlay.apply([(0, key, value)], lambda k, t=txn: t.get(k, db=db) is not None)
            merged.pop(key, None) if value is None else merged.__setitem__(key, value)
    with env.begin(write=True) as txn:
        view = View(txn, {db: 0}, overlay, write=True)
        for key, value in written:
            if value is None:
                assert view.delete(key, db) == (key in merged)
                merged.pop(key, None)
            else:
                assert view.put(key, value, db, overwrite=False) == (key not in merged)
                view.put(key, value, db)
                merged[key] = value
        for key, value in merged.items():
            txn.put(key, value, db=oracle_db)
        for key in {k for k, _ in logged} | {k for k, _ in written} | set(base):
            assert view.get(key, db) == merged.get(key)
        assert view.stat(db)["entries"] == len(merged)
        overlay.objects = 1  # counted key by key, as for a database other than ``objs``
        assert view.stat(db)["entries"] == len(merged)
        overlay.objects = 0
        assert _cursor_moves(view.cursor(db), moves) == _cursor_moves(txn.cursor(db=oracle_db), moves)
        # What the cursor deleted is in the view's writes, as in the oracle.
        assert {k: view.get(k, db) for k in merged} == {k: txn.get(k, db=oracle_db) for k in merged}
        txn.abort()
    env.close()


def test_a_log_record_is_the_bytes_docs_format_md_gives() -> None:
    """Known-answer vector (docs/format.md, *Commit log*): the header of generation 1 and its first record,
    setting one ref and deleting one setting."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "format.md").read_text()
    section = text[text.index("## Commit log"):]
    header_hex, record_hex = re.findall(r"^    ([0-9a-f ]+)$", section, re.M)[:2]
    ops: list[tuple[int, bytes, bytes | None]] = [
        (rec.DATABASES.index(rec.REFS), b"refs/heads/main", bytes(range(32))),
        (rec.DATABASES.index(rec.CONFIG), b"k", None)]
    assert bytes.fromhex(header_hex) == header(1)
    assert bytes.fromhex(record_hex) == encode_record(1, HEADER_SIZE, ops)
    assert lmdb_log.decode_body(bytes.fromhex(record_hex)[12:], len(rec.DATABASES)) == ops


def test_commits_go_to_the_log_and_a_checkpoint_moves_them_into_lmdb(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with Repository.init(path) as repo:
        store = repo.store
        assert isinstance(store, LmdbStore)
        env = store.environment
        for i in range(20):
            repo.append("main", [{"role": "user", "content": f"m{i}"}])
        assert _log_files(path / "db") == [log_name(0)]
        with env.env.begin() as txn:  # LMDB itself holds none of it yet
            assert txn.get(b"refs/heads/main", db=env.dbs[rec.REFS]) is None
        head = repo.head("main")
        store.checkpoint()
        assert _log_files(path / "db") == [log_name(1)]
        assert (path / "db" / log_name(1)).read_bytes() == header(1)
        with env.env.begin() as txn:
            assert bytes(txn.get(b"refs/heads/main", db=env.dbs[rec.REFS])).hex() == head
        store.checkpoint()  # nothing in the log: no new generation
        assert _log_files(path / "db") == [log_name(1)]
    with Repository.open(path) as repo:
        assert [m["content"] for m in repo.history("main").render()] == [f"m{i}" for i in range(20)]


def test_a_commit_that_fills_the_log_checkpoints_it(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r") as repo:
        store = repo.store
        assert isinstance(store, LmdbStore)
        store.environment.checkpoint_bytes = 8 * 1024
        for i in range(60):
            repo.append("main", [{"role": "user", "content": f"m{i} " + "w" * 200}])
        files = _log_files(tmp_path / "r" / "db")
        assert len(files) == 1 and files[0] != log_name(0)
        assert os.path.getsize(tmp_path / "r" / "db" / files[0]) < 8 * 1024 + 4096
        assert len(repo.history("main").render()) == 60
        assert repo.fsck().ok


def test_a_large_commit_goes_straight_into_lmdb(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r", durable=False) as repo:
        repo.append("main", [{"role": "user", "content": "first"}])  # in the log
        import_messages(repo, "bulk", [{"role": "user", "content": f"m{i} " + "z" * 100} for i in range(3000)])
        (name,) = _log_files(tmp_path / "r" / "db")
        assert (tmp_path / "r" / "db" / name).read_bytes() == header(int(name[4:], 16))  # empty: all in LMDB
        assert len(repo.history("bulk").render()) == 3000 and len(repo.history("main").render()) == 1


def _commit_some(path: str, start: int, count: int) -> None:
    with Repository.open(path) as repo:
        for i in range(start, start + count):
            repo.append("main", [{"role": "user", "content": f"m{i}"}])


def test_a_torn_tail_is_cut_by_the_next_writer_and_nothing_before_it_is_lost(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with Repository.init(path) as repo:
        repo.append("main", [{"role": "user", "content": "m0"}])
    log = path / "db" / log_name(0)
    good = log.read_bytes()
    record = encode_record(0, len(good), [(1, b"refs/heads/torn", bytes(32))])
    for cut in (1, 11, 12, len(record) - 1):  # a crash mid-write leaves any prefix of the record
        log.write_bytes(good + record[:cut])
        with Repository.open(path, readonly=True) as repo:
            assert [m["content"] for m in repo.history("main").render()] == ["m0"]
            assert "refs/heads/torn" not in repo.refs()
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=_commit_some, args=(str(path), 1, 2))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    with Repository.open(path) as repo:
        assert [m["content"] for m in repo.history("main").render()] == ["m0", "m1", "m2"]
        assert repo.fsck().ok


def test_a_changed_record_with_whole_records_after_it_is_refused_as_damage(tmp_path: Path) -> None:
    path = tmp_path / "r"
    with Repository.init(path) as repo:
        for i in range(3):
            repo.append("main", [{"role": "user", "content": f"m{i}"}])
    log = path / "db" / log_name(0)
    data = bytearray(log.read_bytes())
    data[HEADER_SIZE + 20] ^= 0x01  # inside the first record's body
    log.write_bytes(bytes(data))
    with pytest.raises(DamagedData, match=r"record at byte 16 of the commit log .* is damaged"), \
            Repository.open(path) as repo:
        repo.history("main").render()
    assert log.read_bytes() == bytes(data)  # left as it was
    data[:HEADER_SIZE] = header(5)
    log.write_bytes(bytes(data))
    with pytest.raises(DamagedData, match="does not start with the header of generation 0"), \
            Repository.open(path) as repo:
        repo.history("main").render()


def _other_process(path: str, inbox: Any, outbox: Any) -> None:
    with Repository.open(path) as repo:
        store = repo.store
        assert isinstance(store, LmdbStore)
        while True:
            what = inbox.get(timeout=60)
            if what == "stop":
                return
            if what == "read":
                outbox.put([m["content"] for m in repo.history("main").render()])
            elif what == "checkpoint":
                store.checkpoint()
                outbox.put("done")
            else:
                repo.append("main", [{"role": "user", "content": what}])
                outbox.put("done")


def test_other_processes_see_each_commit_and_each_checkpoint(tmp_path: Path) -> None:
    path = str(tmp_path / "r")
    Repository.init(path).close()
    ctx = mp.get_context("spawn")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_other_process, args=(path, inbox, outbox))
    child.start()
    try:
        with Repository.open(path) as repo:
            store = repo.store
            assert isinstance(store, LmdbStore)
            repo.append("main", [{"role": "user", "content": "parent 1"}])
            inbox.put("read")
            assert outbox.get(timeout=60) == ["parent 1"]
            inbox.put("child 1")
            assert outbox.get(timeout=60) == "done"
            assert [m["content"] for m in repo.history("main").render()] == ["parent 1", "child 1"]
            inbox.put("checkpoint")  # the child moves the log into LMDB; this process held its overlay
            assert outbox.get(timeout=60) == "done"
            assert [m["content"] for m in repo.history("main").render()] == ["parent 1", "child 1"]
            repo.append("main", [{"role": "user", "content": "parent 2"}])
            store.checkpoint()
            inbox.put("child 2")
            assert outbox.get(timeout=60) == "done"
            inbox.put("read")
            assert outbox.get(timeout=60) == ["parent 1", "child 1", "parent 2", "child 2"]
            assert repo.fsck().ok
        inbox.put("stop")
        child.join(60)
        assert child.exitcode == 0
    finally:
        if child.is_alive():
            child.kill()


def _append_forever(path: str, acked: Any, checkpoint_bytes: int) -> None:
    with Repository.open(path) as repo:
        store = repo.store
        assert isinstance(store, LmdbStore)
        store.environment.checkpoint_bytes = checkpoint_bytes
        i = len(repo.history("main").render())
        while True:
            repo.append("main", [{"role": "user", "content": f"m{i} " + "q" * (i % 700)}])
            acked.send(i)  # only once the commit returned
            i += 1


@pytest.mark.parametrize("checkpoint_bytes", [2048, 64 * 1024, 1 << 20])
def test_a_writer_killed_at_any_moment_loses_no_commit_it_acknowledged(tmp_path: Path,
                                                                       checkpoint_bytes: int) -> None:
    """SIGKILL mid-append, mid-record or mid-checkpoint (checkpoints every few commits, now and then,
    or never): every commit the writer returned from is there, in order, none twice, and the store is
    sound; the next writer carries on."""
    path = str(tmp_path / "r")
    Repository.init(path).close()
    ctx = mp.get_context("spawn")
    acked = -1
    for round_ in range(4):
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_append_forever, args=(path, send, checkpoint_bytes))
        child.start()
        send.close()
        goal = acked + 15 + 7 * round_
        deadline = time.monotonic() + 60
        while acked < goal and time.monotonic() < deadline and receive.poll(5):
            acked = receive.recv()
        time.sleep(0.001 * round_)  # land the kill at other points of a commit
        os.kill(child.pid or 0, signal.SIGKILL)
        child.join(60)
        try:
            while receive.poll(0):
                acked = receive.recv()
        except EOFError:
            pass
        assert acked >= goal
        with Repository.open(path) as repo:
            contents = [m["content"].split()[0] for m in repo.history("main").render()]
            assert contents == [f"m{k}" for k in range(len(contents))] and len(contents) > acked
            assert repo.fsck().ok


def test_a_record_is_taken_in_packs_objects_refs_order() -> None:
    """A thread reading while another takes a record in finds a pack before the pointers into it and the
    objects before the ref that names them (`lmdb_env.APPLY_ORDER`)."""
    from ctxstore.store.lmdb_env import APPLY_ORDER

    index = {name: i for i, name in enumerate(rec.DATABASES)}
    overlay = Overlay(0, tuple(APPLY_ORDER.index(name) for name in rec.DATABASES), index[rec.OBJECTS])
    seen: list[tuple[bool, bool]] = []

    def base_has(key: bytes) -> bool:  # asked while the object is taken in
        seen.append((b"p" in overlay.layers[index[rec.PACKS]].values,
                     b"refs/heads/main" in overlay.layers[index[rec.REFS]].values))
        return False

    overlay.apply([(index[rec.OBJECTS], b"o", b"1"), (index[rec.REFS], b"refs/heads/main", b"2"),
                   (index[rec.PACKS], b"p", b"3")], base_has)
    assert seen == [(True, False)] and overlay.added == 1


def test_a_commit_whose_checkpoint_fails_still_commits_and_the_next_one_checkpoints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxstore.errors import StoreError
    from ctxstore.store import lmdb_env

    with Repository.init(tmp_path / "r") as repo:
        store = repo.store
        assert isinstance(store, LmdbStore)
        env = store.environment
        env.checkpoint_bytes = 4096
        real = lmdb_env.checkpoint_into

        def full(*args: Any) -> int:
            raise StoreError("the disk is full (no space left on device) while checkpointing")

        monkeypatch.setattr(lmdb_env, "checkpoint_into", full)
        for i in range(12):  # past the limit: every commit tries and fails to checkpoint
            repo.append("main", [{"role": "user", "content": f"m{i} " + "v" * 500}])
        assert _log_files(tmp_path / "r" / "db") == [log_name(0)]
        assert os.path.getsize(tmp_path / "r" / "db" / log_name(0)) > 4096
        monkeypatch.setattr(lmdb_env, "checkpoint_into", real)
        repo.append("main", [{"role": "user", "content": "m12"}])
        assert _log_files(tmp_path / "r" / "db") == [log_name(1)]
    with Repository.open(tmp_path / "r") as repo:
        assert [m["content"].split()[0] for m in repo.history("main").render()] == [f"m{i}" for i in range(13)]


def test_the_disk_a_repository_reports_counts_the_commit_log(tmp_path: Path) -> None:
    with Repository.init(tmp_path / "r") as repo:
        for i in range(30):
            repo.append("main", [{"role": "user", "content": f"m{i} " + os.urandom(400).hex()}])
        store = repo.store
        assert isinstance(store, LmdbStore)
        db = tmp_path / "r" / "db"
        assert store.files() == [str(db / "data.mdb"), str(db / log_name(0))]

        def allocated(path: Path) -> int:
            st = path.stat()
            return min(st.st_blocks * 512, st.st_size)

        log = allocated(db / log_name(0))
        assert log > 30 * 800  # the thirty commits are in the log
        assert repo.stats().disk_bytes == allocated(db / "data.mdb") + log
