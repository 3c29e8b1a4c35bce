"""Tampering: objects, refs and reflogs edited on disk, in data.mdb's records (through the `lmdb` package).

Each case edits a fresh copy of one repository, then runs the real CLI: `ctxstore fsck` must report the
damage (exit 6), and `ctxstore render` and `ctxstore clone` of the damaged ref must refuse with a one-line
error and a documented exit code, never print wrong content or exit 0.

Run alone: `python tools/attacks/tamper.py --seconds 30`.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lmdb
import zstandard
from _common import Row, clean_cli_error, cli, first, main, row

from ctxstore import Repository
from ctxstore.format import codec

KEY = 16     # objs keys are the first 16 bytes of the id
HEAD = 22    # a record: 6 bytes of write time, the other 16 bytes of the id, then the stored value
MARK = "tamper-target"
PACK = 0x04  # a packed leaf's value; its pack (a 16-byte seal, the framed payload) is in `packs`, in pieces
# keyed by the leaf's key in objs (KEY bytes) and the piece's number (one byte)


def _base(path: Path) -> None:
    """A repository whose main holds closed leaves (stored as leaf packs) and, in its open leaf, short
    (stored raw) and long (zstd) messages; and a fork. Leaves close where entry ids say, so messages are
    appended until there is one of each. The fork is made first: an append to it that closes its leaf
    would pack the entries main's open leaf shares with it, and the attacks need them stored loose."""
    with Repository.init(path, durable=False) as repo:
        rng = random.Random(5)
        for i in range(2000):
            text = f"{MARK} {i} " + ("plain words " * rng.choice((0, 1, 60, 80)))
            repo.append("main", [{"role": "user", "content": text}])
            if i == 0:
                repo.commit("side", repo.history("main").fork().append({"role": "user", "content": "side"}))
            if i >= 30 and _has_every_kind(repo):
                return
        raise RuntimeError("2,000 messages made no leaf pack, or no raw or zstd entry in the open leaf")


def _has_every_kind(repo: Repository) -> bool:
    """Whether the store holds a leaf pack and marked entries stored raw and zstd-compressed."""
    env = repo.store.environment  # type: ignore[attr-defined]
    codecs: set[int] = set()
    repo.store.checkpoint()  # the commit log into LMDB: what follows reads LMDB itself
    with env.env.begin() as txn:
        for _key, value in txn.cursor(db=env.dbs[b"objs"]):
            if value[HEAD] == PACK or (value[HEAD] in (0, 1) and MARK.encode() in _plain(value)):
                codecs.add(value[HEAD])
    return codecs == {0, 1, PACK}


def _plain(value: bytes) -> bytes:
    if value[HEAD] == 0:
        return value[HEAD + 1:]
    return zstandard.ZstdDecompressor().decompress(value[HEAD + 1:], max_output_size=1 << 22)


class _Db:
    """The repository's LMDB environment opened directly, as someone editing the file would."""

    def __init__(self, repo: Path) -> None:
        self.path = repo
        self.env = lmdb.open(str(repo / "db"), max_dbs=16, subdir=True, lock=True, map_size=1 << 30)
        self.objs = self.env.open_db(b"objs")
        self.refs = self.env.open_db(b"refs")
        self.reflog = self.env.open_db(b"reflog")
        self.packs_db = self.env.open_db(b"packs")

    def records(self, db: object) -> list[tuple[bytes, bytes]]:
        with self.env.begin() as txn:
            return [(bytes(k), bytes(v)) for k, v in txn.cursor(db=db)]

    def put(self, db: object, key: bytes, value: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.put(key, value, db=db)

    def delete(self, db: object, key: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.delete(key, db=db)

    def close(self) -> None:
        self.env.close()

    def entries(self) -> list[tuple[bytes, bytes]]:
        """Records of entry objects holding the mark, stored raw (codec byte 0)."""
        return [(k, v) for k, v in self.records(self.objs) if v[HEAD:HEAD + 1] == b"\0" and MARK.encode() in v]

    def packs(self) -> list[tuple[bytes, bytes]]:
        """The pieces of the packs of main's closed leaves (joined in key order, each is a pack)."""
        return self.records(self.packs_db)

    def compressed(self) -> list[tuple[bytes, bytes]]:
        """Records of zstd-compressed entries holding the mark: messages main's view shows."""
        found = []
        for k, v in self.records(self.objs):
            if v[HEAD:HEAD + 1] == b"\1":
                plain = zstandard.ZstdDecompressor().decompress(v[HEAD + 1:], max_output_size=1 << 22)
                if MARK.encode() in plain:
                    found.append((k, v))
        return found


def _text_changed(db: _Db, rng: random.Random) -> str:
    key, value = rng.choice(db.entries())
    at = value.index(MARK.encode()) + rng.randrange(len(MARK))
    db.put(db.objs, key, value[:at] + bytes([value[at] ^ 0x20]) + value[at + 1:])
    return "a letter of a stored message changed"


def _compressed_flipped(db: _Db, rng: random.Random) -> str:
    key, value = rng.choice(db.compressed())
    at = rng.randrange(HEAD + 8, len(value) - 4)
    db.put(db.objs, key, value[:at] + bytes([value[at] ^ 0xFF]) + value[at + 1:])
    return "a byte of a compressed message flipped"


def _pack_flipped(db: _Db, rng: random.Random) -> str:
    key, value = rng.choice(db.packs())
    at = rng.randrange(16 + 1 if key[KEY] == 0 else 0, len(value))  # past the first piece's seal and codec
    db.put(db.packs_db, key, value[:at] + bytes([value[at] ^ 0xFF]) + value[at + 1:])
    return "a byte of a leaf pack's payload flipped"


def _piece_deleted(db: _Db, rng: random.Random) -> str:
    key, _ = rng.choice(db.packs())
    db.delete(db.packs_db, key)
    return f"piece {key[KEY]} of a leaf pack deleted"


def _piece_moved(db: _Db, rng: random.Random) -> str:
    key, value = rng.choice(db.packs())
    moved = rng.choice([key + b"\0", key[:KEY], key[:KEY] + bytes([key[KEY] + 1 + rng.randrange(3)])])
    db.delete(db.packs_db, key)
    db.put(db.packs_db, moved, value)
    return f"a leaf pack's piece moved from key {key.hex()} to {moved.hex()}"


def _truncated(db: _Db, rng: random.Random) -> str:
    key, value = rng.choice(db.entries())
    db.put(db.objs, key, value[:HEAD + (len(value) - HEAD) // 2])
    return "an object's value cut in half"


def _deleted(db: _Db, rng: random.Random) -> str:
    key, _ = rng.choice(db.entries())
    db.delete(db.objs, key)
    return "a reachable entry deleted"


def _ref_missing(db: _Db, rng: random.Random) -> str:
    db.put(db.refs, b"refs/heads/main", rng.randbytes(32))
    return "main set to an id the store lacks"


def _ref_at_entry(db: _Db, rng: random.Random) -> str:
    key, value = rng.choice(db.entries())
    db.put(db.refs, b"refs/heads/main", key + value[6:HEAD])
    return "main set to an entry instead of a revision"


def _ref_garbage(db: _Db, rng: random.Random) -> str:
    db.put(db.refs, b"refs/heads/main", rng.randbytes(rng.randrange(1, 31)))
    return "main's value is not an id"


def _reflog_garbage(db: _Db, rng: random.Random) -> str:
    key, _ = rng.choice([(k, v) for k, v in db.records(db.reflog) if k.startswith(b"refs/heads/main\0")])
    db.put(db.reflog, key, rng.choice([b"\xff\x00garbage", rng.randbytes(20), b""]))
    return "a reflog record of main replaced by garbage"


def _reflog_missing(db: _Db, rng: random.Random) -> str:
    key, _ = rng.choice([(k, v) for k, v in db.records(db.reflog) if k.startswith(b"refs/heads/side\0")])
    db.put(db.reflog, key, codec.encode({"old": None, "new": rng.randbytes(32), "time": 1, "message": "x"}))
    return "a reflog record of side naming an id the store lacks"


def _logged(db: _Db, rng: random.Random) -> tuple[Path, bytes]:
    """Three more messages on main, committed by another process into the commit log (the base holds
    none there: it was checkpointed); the log's path and bytes."""
    for n in range(3):
        done = cli("--repo", str(db.path), "append", "main", f"logged {n} {MARK}")
        if done.returncode != 0:
            raise RuntimeError(f"append to the copy failed: {done.stderr.strip()[-200:]}")
    (log,) = sorted((db.path / "db").glob("log.*"))
    return log, log.read_bytes()


def _log_record_changed(db: _Db, rng: random.Random) -> str:
    log, data = _logged(db, rng)
    first_length = int.from_bytes(data[16:20], "big")
    at = 16 + 12 + rng.randrange(first_length)  # inside the first of the three records' bodies
    log.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:])
    return "a byte of a commit log record flipped, whole records after it"


def _log_header_changed(db: _Db, rng: random.Random) -> str:
    log, data = _logged(db, rng)
    log.write_bytes(data[:15] + bytes([data[15] ^ 0x01]) + data[16:])
    return "the commit log's header names another generation"


# case name -> (edit, whether main's content is damaged so that reads and clones must refuse)
CASES: dict[str, tuple[Callable[[_Db, random.Random], str], bool]] = {
    "object text changed": (_text_changed, True),
    "compressed object corrupted": (_compressed_flipped, True),
    "leaf pack corrupted": (_pack_flipped, True),
    "leaf pack piece deleted": (_piece_deleted, True),
    "leaf pack piece moved": (_piece_moved, True),
    "object truncated": (_truncated, True),
    "reachable object deleted": (_deleted, True),
    "ref at a missing object": (_ref_missing, True),
    "ref at an entry": (_ref_at_entry, True),
    "ref value not an id": (_ref_garbage, True),
    "reflog record garbage": (_reflog_garbage, False),
    "reflog record at a missing object": (_reflog_missing, False),
    "commit log record changed": (_log_record_changed, True),
    "commit log header changed": (_log_header_changed, True),
}


def _attack(base: Path, work: Path, name: str, rng: random.Random, n: int,
            original: str) -> tuple[list[str], list[str]]:
    """Tamper one copy; return (fsck failures, read/clone failures)."""
    edit, reads_refuse = CASES[name]
    copy = work / f"t{n}"
    shutil.copytree(base, copy)
    db = _Db(copy)
    try:
        what = edit(db, rng)
    finally:
        db.close()
    fsck_fail: list[str] = []
    read_fail: list[str] = []
    # The three readers are independent: run them side by side, as real processes.
    with ThreadPoolExecutor(3) as pool:
        fsck = pool.submit(cli, "--repo", str(copy), "fsck")
        render = pool.submit(cli, "--repo", str(copy), "render", "main")
        clone = pool.submit(cli, "clone", str(copy), str(work / f"c{n}")) if reads_refuse else None
    done = fsck.result()
    if done.returncode != 6:
        fsck_fail.append(f"{what}: fsck exit {done.returncode}, want 6 "
                         f"({(done.stderr.strip() or done.stdout.strip())[-160:]!r})")
    if reads_refuse:
        assert clone is not None
        done = render.result()
        if done.returncode == 0:
            read_fail.append(f"{what}: render main exit 0, "
                             + ("printing tampered content" if done.stdout != original else "unchanged output"))
        elif why := clean_cli_error(done):
            read_fail.append(f"{what}: render main: {why}")
        done = clone.result()
        if done.returncode == 0:
            read_fail.append(f"{what}: clone exit 0")
        elif why := clean_cli_error(done):
            read_fail.append(f"{what}: clone: {why}")
    else:
        # Damage outside every ref's content: reads work; gc and a repaired fsck must cope with it.
        done = render.result()
        if done.returncode != 0:
            read_fail.append(f"{what}: render main exit {done.returncode}: {done.stderr.strip()[-160:]!r}")
        done = cli("--repo", str(copy), "gc")
        if done.returncode != 0 and (why := clean_cli_error(done)):
            read_fail.append(f"{what}: gc: {why}")
        repair = cli("--repo", str(copy), "fsck", "--repair")
        again = cli("--repo", str(copy), "fsck")
        if repair.returncode not in (0, 6) or again.returncode != 0:
            read_fail.append(f"{what}: fsck --repair exit {repair.returncode} "
                             f"({repair.stderr.strip()[-120:]!r}), then fsck exit {again.returncode}")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.rmtree(work / f"c{n}", ignore_errors=True)
    return fsck_fail, read_fail


def run(seconds: float, work: Path) -> list[Row]:
    rng = random.Random(7)
    base = work / "base"
    _base(base)
    original = cli("--repo", str(base), "render", "main").stdout
    runs = dict.fromkeys(CASES, 0)
    fails: dict[str, tuple[list[str], list[str]]] = {name: ([], []) for name in CASES}
    deadline = time.monotonic() + seconds
    n = 0
    while n < len(CASES) or (time.monotonic() < deadline and n < 2000):
        name = list(CASES)[n % len(CASES)]
        n += 1
        fsck_fail, read_fail = _attack(base, work, name, rng, n, original)
        runs[name] += 1
        fails[name][0].extend(fsck_fail)
        fails[name][1].extend(read_fail)
    rows = []
    for name, (_, reads_refuse) in CASES.items():
        rows.append(row(f"tamper: {name}: fsck", runs[name], "fsck reports it (exit 6)",
                        len(fails[name][0]), first(fails[name][0])))
        held = ("render and clone refuse (a documented exit code, one line)" if reads_refuse
                else "render still works; gc copes; `fsck --repair` drops it and fsck is clean after")
        rows.append(row(f"tamper: {name}: reads", runs[name], held, len(fails[name][1]), first(fails[name][1])))
    return rows


if __name__ == "__main__":
    main(run, default_seconds=30)
