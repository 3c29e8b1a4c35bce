"""The commit log under an `LmdbStore`: one flush per durable commit, LMDB as its checkpointed index.

A write transaction's records do not go into LMDB. They are appended, as one log record, to the log
file of the store's current *generation* (one `pwrite`, and one `fdatasync` when durable), and the
commit returns. Every process keeps the records of the current log in memory (`Overlay`): its own as it
writes them, other processes' read from the file when a transaction begins. Reads go through the
overlay onto LMDB (`View`). When the log passes `CHECKPOINT_BYTES`, or a commit alone would, a writer
*checkpoints*: it applies the overlay to LMDB in one durable LMDB transaction that also records the next
generation (under `MARKER` in the ``log`` database), then deletes the old log. So LMDB changes only at a
checkpoint: between two it is the state as of the last one, and the log is everything since.

There is no replay on open and no recovery step. A process reads the log of the generation LMDB names
up to its last whole record; a record cut short by a crash (or damaged) ends the log there, and the
next writer cuts the file back to that point before it appends. Writers are serialized by LMDB's own
writer lock, which a commit holds (in an LMDB write transaction it never writes to) from before it
reads the log's tail until its record is on disk. docs/storage.md (*Commit log*) says what this buys
and costs; docs/format.md (*Commit log*) specifies the file.
"""

from __future__ import annotations

import os
import struct
import threading
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator, Mapping
from contextlib import suppress
from typing import Any

import cbor2
import lmdb
from blake3 import blake3

from ..errors import DamagedData, StoreError
from .files import file_error

__all__ = ["CHECKPOINT_BYTES", "HEADER_SIZE", "MAGIC", "MARKER", "CommitLog", "Layer",
           "MergedCursor", "Overlay", "Stale", "View", "checkpoint_into", "decode_body", "encode_record",
           "generation_of", "header", "log_name", "record_check"]

MAGIC = b"ctxlog\x00\x01"
"""The first 8 bytes of a log file: the name, a NUL, the format version."""
HEADER_SIZE = 16
"""A log file's header: `MAGIC`, then the generation (8 bytes, big-endian)."""
MARKER = b"generation"
"""The key in the ``log`` database holding the current generation (8 bytes, big-endian; absent: 0)."""
CHECKPOINT_BYTES = 128 * 1024
"""A commit that leaves the log this long checkpoints it into LMDB, and one writing about this much goes
straight into LMDB (a bulk import). Measured (docs/storage.md, *Commit log*): LMDB's file grows by about
the pages a checkpoint copies, so a longer log saves flushes and costs disk."""
_RECORD_HEAD = struct.Struct(">I8s")
_MAX_BODY = 1 << 31
_GEN = struct.Struct(">Q")


def log_name(generation: int) -> str:
    """The file name of the log of a generation."""
    return f"log.{generation:016x}"


def header(generation: int) -> bytes:
    """The 16 bytes a log file of `generation` starts with."""
    return MAGIC + _GEN.pack(generation)


def record_check(generation: int, offset: int, body: bytes) -> bytes:
    """A record's check: the first 8 bytes of blake3 over the generation, the record's offset, its body."""
    h = blake3(_GEN.pack(generation))
    h.update(_GEN.pack(offset))
    h.update(body)
    return h.digest(8)


def encode_record(generation: int, offset: int, ops: list[tuple[int, bytes, bytes | None]]) -> bytes:
    """The bytes of a log record at `offset` holding `ops` (database index, key, value or None)."""
    body = cbor2.dumps(ops)  # each (index, key, value) tuple is a CBOR array of three
    return _RECORD_HEAD.pack(len(body), record_check(generation, offset, body)) + body


def decode_body(body: bytes, databases: int) -> list[tuple[int, bytes, bytes | None]]:
    """The operations of a record's body; `ValueError` if it is not an array of [index, key, value]."""
    try:
        items = cbor2.loads(body)
    except Exception as exc:  # cbor2 raises several types for bytes that are not CBOR
        raise ValueError(f"its body is not CBOR ({exc})") from None
    if type(items) is not list:
        raise ValueError("its body is not an array")
    ops: list[tuple[int, bytes, bytes | None]] = []
    for item in items:
        if type(item) is not list or len(item) != 3:
            raise ValueError("an operation is not an array of three")
        db, key, value = item
        if type(db) is not int or not 0 <= db < databases or type(key) is not bytes or not key \
                or not (value is None or type(value) is bytes):
            raise ValueError("an operation is not [database index, key, value or null]")
        ops.append((db, key, value))
    return ops


def _whole_record_at(data: bytes, at: int, generation: int, offset: int) -> bool:
    """Whether `data` holds, at `at`, a whole record whose check matches (it lies at `offset` in its log)."""
    if len(data) - at < _RECORD_HEAD.size:
        return False
    length, check = _RECORD_HEAD.unpack_from(data, at)
    start = at + _RECORD_HEAD.size
    return bool(start + length <= len(data) and record_check(generation, offset, data[start:start + length]) == check)


class Layer:
    """One database's writes over what lies beneath: the value by key (None: deleted) and the keys in
    order."""

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.values: dict[bytes, bytes | None] = {}
        self.keys: list[bytes] = []

    def set(self, key: bytes, value: bytes | None) -> None:
        if key not in self.values:
            insort(self.keys, key)
        self.values[key] = value


_ABSENT = object()


class Overlay:
    """One process's copy of a generation's log: each database's writes (`layers`, by index), where the
    next record goes (`end`; 0 until the file's header has been read and checked), and how many objects
    the log adds to LMDB's count (`added`).

    `rank` gives, for each database by index, its place in the order a record's writes are taken in
    (`apply`); `objects` is the index of ``objs``."""

    def __init__(self, generation: int, rank: tuple[int, ...], objects: int) -> None:
        self.generation = generation
        self._rank = rank
        self.layers: list[Layer] = [Layer() for _ in rank]
        self.end = 0
        self.added = 0
        self.records = 0
        self.objects = objects
        """The index of ``objs``, whose count the overlay keeps (`added`)."""

    def empty(self) -> bool:
        return self.records == 0

    def apply(self, ops: list[tuple[int, bytes, bytes | None]], base_has: Callable[[bytes], bool]) -> None:
        """Take in one record's operations; `base_has(key)`: whether LMDB holds an object key.

        The databases are taken in the order of `rank` (the store's: dictionaries, packs, objects, then
        config, reflogs and refs), so that a thread reading meanwhile finds a pack before the pointers
        into it and the objects before a ref that names them."""
        objects, rank = self.objects, self._rank
        for db, key, value in sorted(ops, key=lambda op: rank[op[0]]):
            layer = self.layers[db]
            if db == objects:
                held = layer.values.get(key, _ABSENT)
                before = base_has(key) if held is _ABSENT else held is not None
                self.added += (value is not None) - before
            layer.set(key, value)
        self.records += 1


class View:
    """LMDB's transaction seen through a generation's overlay and, for a write, this transaction's own
    writes (`delta`): the part of `lmdb.Transaction`'s interface the store's records use (`get`, `put`,
    `delete`, `cursor`, `stat`). Writes never reach LMDB; the commit logs the delta."""

    __slots__ = ("_delta", "_index", "_ov", "_t")

    def __init__(self, txn: lmdb.Transaction[bytes], index: Mapping[Any, int], overlay: Overlay,
                 write: bool) -> None:
        self._t = txn
        self._index = index
        self._ov = overlay
        self._delta: list[Layer] | None = [Layer() for _ in overlay.layers] if write else None

    @property
    def overlay(self) -> Overlay:
        return self._ov

    def delta_ops(self) -> list[tuple[int, bytes, bytes | None]]:
        """This transaction's writes, database by database, in key order."""
        if self._delta is None:
            return []
        return [(db, key, layer.values[key]) for db, layer in enumerate(self._delta) for key in layer.keys]

    def _below(self, db: int, handle: Any, key: bytes) -> bytes | None:
        held = self._ov.layers[db].values.get(key, _ABSENT)
        if held is _ABSENT:
            return self._t.get(key, db=handle)
        return held  # type: ignore[return-value]

    def get(self, key: bytes, db: Any = None) -> bytes | None:
        i = self._index[db]
        if self._delta is not None:
            held = self._delta[i].values.get(key, _ABSENT)
            if held is not _ABSENT:
                return held  # type: ignore[return-value]
        return self._below(i, db, key)

    def put(self, key: bytes, value: bytes, db: Any = None, *, overwrite: bool = True,
            append: bool = False) -> bool:
        if self._delta is None:
            raise StoreError("a write through a read transaction (this is a bug in ctxstore)")
        if not overwrite and self.get(key, db) is not None:
            return False
        self._delta[self._index[db]].set(bytes(key), bytes(value))
        return True

    def delete(self, key: bytes, db: Any = None) -> bool:
        if self._delta is None:
            raise StoreError("a delete through a read transaction (this is a bug in ctxstore)")
        if self.get(key, db) is None:
            return False
        self._delta[self._index[db]].set(bytes(key), None)
        return True

    def stat(self, db: Any) -> dict[str, int]:
        """LMDB's count of entries as this view sees it. The overlay keeps its change to the count of
        ``objs`` (the one a commit asks for); another database's is counted key by key."""
        i = self._index[db]
        entries = int(self._t.stat(db)["entries"])
        if i == self._ov.objects:
            entries += self._ov.added
        else:
            for key, value in self._ov.layers[i].values.items():
                entries += (value is not None) - (self._t.get(key, db=db) is not None)
        if self._delta is not None:
            for key, value in self._delta[i].values.items():
                entries += (value is not None) - (self._below(i, db, key) is not None)
        return {"entries": entries}

    def cursor(self, db: Any = None) -> Any:
        i = self._index[db]
        layers = [self._ov.layers[i]] if self._ov.layers[i].keys else []
        if self._delta is not None:
            layers.append(self._delta[i])
        raw = self._t.cursor(db=db)
        return MergedCursor(self, db, raw, layers) if layers else raw


class MergedCursor:
    """A cursor over LMDB's database and the layers above it (the upper one wins a key; None hides it),
    with the moves of `lmdb.Cursor` the store uses, as LMDB makes them (a move that fails leaves no
    current key, and where the next move starts from is LMDB's: a failed `next` stays at the last
    key, a failed `prev` at the first, a failed `set_range` past the end). Each move seeks by key, so
    writes through the view while the cursor is open (`delete`) are seen."""

    __slots__ = ("_db", "_key", "_layers", "_lost", "_raw", "_value", "_view")

    def __init__(self, view: View, db: Any, raw: lmdb.Cursor[bytes], layers: list[Layer]) -> None:
        self._view = view
        self._db = db
        self._raw = raw
        self._layers = layers
        self._key: bytes | None = None
        self._value = b""
        self._lost: tuple[str, bytes] = ("fresh", b"")
        """Without a current key: where a move starts from ("fresh", "end", or after/before a key)."""

    def _visible(self, key: bytes, from_raw: bool) -> bytes | None:
        for layer in reversed(self._layers):
            value = layer.values.get(key, _ABSENT)
            if value is not _ABSENT:
                return value  # type: ignore[return-value]
        return self._raw.value() if from_raw else self._raw.get(key)

    def _stand(self, found: tuple[bytes | None, bool], forward: bool, lost: tuple[str, bytes]) -> bool:
        """Stand on the visible key found, or the first visible one past it the same way; else on none,
        noting where the next move starts (`lost`)."""
        best, from_raw = found
        while best is not None:
            value = self._visible(best, from_raw)
            if value is not None:
                self._key, self._value = best, value
                return True
            best, from_raw = self._candidate(best, True) if forward else self._candidate_back(best, True)
        self._key, self._value, self._lost = None, b"", lost
        return False

    def _candidate(self, key: bytes, strict: bool) -> tuple[bytes | None, bool]:
        """The least key at or after `key` (after it, if `strict`) in LMDB or any layer, and whether it
        is LMDB's (the raw cursor then stands on it)."""
        raw = self._raw
        best: bytes | None = None
        if raw.set_range(key) and (not strict or raw.key() != key or raw.next()):
            best = raw.key()
        from_raw = best is not None
        for layer in self._layers:
            keys = layer.keys
            i = bisect_right(keys, key) if strict else bisect_left(keys, key)
            if i < len(keys) and (best is None or keys[i] <= best):
                from_raw = from_raw and keys[i] == best
                best = keys[i]
        return best, from_raw

    def _candidate_back(self, key: bytes | None, strict: bool) -> tuple[bytes | None, bool]:
        """The greatest key at or before `key` (before it, if `strict`; None: the end) in LMDB or any
        layer, and whether it is LMDB's."""
        raw = self._raw
        if key is None or not raw.set_range(key):
            found = raw.last()
        else:
            found = True if (not strict and raw.key() == key) else raw.prev()
        best: bytes | None = raw.key() if found else None
        from_raw = best is not None
        for layer in self._layers:
            keys = layer.keys
            if key is None:
                i = len(keys)
            else:
                i = bisect_left(keys, key) if strict else bisect_right(keys, key)
            if i > 0 and (best is None or keys[i - 1] >= best):
                from_raw = from_raw and keys[i - 1] == best
                best = keys[i - 1]
        return best, from_raw

    def first(self) -> bool:
        return self._stand(self._candidate(b"", False), True, ("end", b""))

    def last(self) -> bool:
        return self._stand(self._candidate_back(None, False), False, ("end", b""))

    def set_range(self, key: bytes) -> bool:
        return self._stand(self._candidate(key, False), True, ("end", b""))

    def next(self) -> bool:
        key = self._key
        if key is None:
            where, key = self._lost
            if where == "fresh":
                return self.first()
            if where != "before":
                return False
        return self._stand(self._candidate(key, True), True, ("after", key))

    def prev(self) -> bool:
        key = self._key
        if key is None:
            where, key = self._lost
            if where in ("fresh", "end"):
                return self.last()
            if where != "after":
                return False
        return self._stand(self._candidate_back(key, True), False, ("before", key))

    def key(self) -> bytes:
        return self._key if self._key is not None else b""

    def value(self) -> bytes:
        return self._value

    def item(self) -> tuple[bytes, bytes]:
        return self.key(), self._value

    def delete(self) -> bool:
        """Delete the current key and move to the next one (False if the cursor stands on none)."""
        key = self._key
        if key is None:
            return False
        self._view.delete(key, self._db)
        self._stand(self._candidate(key, True), True, ("end", b""))
        return True

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        if self._key is None and not self.first():  # as py-lmdb: an unpositioned cursor iterates from the first
            return
        while self._key is not None:
            yield self._key, self._value
            self.next()


class Stale(Exception):
    """A read transaction older than the log it needs (checkpointed meanwhile): begin it anew.

    `missing`: its generation's log file was not found, which is also what a store whose first writer
    has not yet written its log looks like; a retry that finds the same generation takes it as empty."""

    def __init__(self, missing: bool) -> None:
        super().__init__("a transaction older than the commit log")
        self.missing = missing


class CommitLog:
    """The log files of one store directory, as one process uses them: the current overlay, the open
    file of its generation, and the writer's appends and checkpoints. Thread-safe."""

    def __init__(self, path: str, rank: tuple[int, ...], objects: int, marker_db: Any, readonly: bool) -> None:
        self.path = path
        self._rank = rank
        self._marker_db = marker_db
        self._objects = objects
        self._readonly = readonly
        self._lock = threading.Lock()
        self._overlay: Overlay | None = None
        self._fd: int | None = None
        self._fd_gen = -1

    # -- files -------------------------------------------------------------------------------------------

    def _file(self, generation: int) -> str:
        return os.path.join(self.path, log_name(generation))

    def _open(self, generation: int) -> int | None:
        """The open log of a generation (None: there is no such file)."""
        if self._fd_gen == generation and self._fd is not None:
            return self._fd
        self._close_fd()
        flags = (os.O_RDONLY if self._readonly else os.O_RDWR) | os.O_CLOEXEC
        try:
            fd = os.open(self._file(generation), flags)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise file_error(self.path, f"opening the commit log {log_name(generation)}", exc) from None
        self._fd, self._fd_gen = fd, generation
        return fd

    def _close_fd(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
        self._fd, self._fd_gen = None, -1

    def create(self, generation: int) -> None:
        """Write a new, empty log for `generation` (replacing any file of that name) and make its name
        durable."""
        name = self._file(generation)
        temp = name + ".new"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, header(generation))
                os.fdatasync(fd)
            finally:
                os.close(fd)
            os.replace(temp, name)
            dfd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            raise file_error(self.path, f"writing the commit log {log_name(generation)}", exc) from None

    def remove_older(self, generation: int) -> None:
        """Delete the logs of generations before `generation` (checkpointed into LMDB), and a new log of
        one up to it that was never renamed into place."""
        try:
            names = os.listdir(self.path)
        except OSError:
            return
        for name in names:
            # Logs of older generations, and a new log a checkpoint that did not commit left half made.
            if name.startswith("log.") and (len(name) == 20 or (len(name) == 24 and name.endswith(".new"))):
                try:
                    older = int(name[4:20], 16) < generation + name.endswith(".new")
                except ValueError:
                    continue
                if older:
                    with suppress(OSError):
                        os.unlink(os.path.join(self.path, name))

    def close(self) -> None:
        with self._lock:
            self._close_fd()
            self._overlay = None

    def size(self) -> int:
        """Bytes of the current log file (0: none)."""
        with self._lock:
            fd = self._fd
            if fd is None:
                return 0
            try:
                return os.fstat(fd).st_size
            except OSError:
                return 0

    # -- reading -----------------------------------------------------------------------------------------

    def overlay(self, txn: lmdb.Transaction[bytes], base_has: Callable[[bytes], bool], *,
                writer: bool = False, missing_ok: bool = False) -> Overlay:
        """The overlay of the generation `txn` sees, caught up with its log file's whole records.

        A writer (holding LMDB's writer lock, so `txn` sees the latest generation) makes the log if it is
        missing and cuts a torn or damaged tail off it. `Stale` if `txn` is older than the generation
        this process holds, or if its log is missing (unless `missing_ok`: a retry found the same)."""
        generation = generation_of(txn, self._marker_db)
        with self._lock:
            ov = self._overlay
            if ov is None or ov.generation != generation:
                if ov is not None and ov.generation > generation:
                    raise Stale(False)
                ov = Overlay(generation, self._rank, self._objects)
                self._overlay = ov
            fd = self._open(generation)
            if fd is None:
                if writer:
                    self.create(generation)
                    fd = self._open(generation)
                elif ov.records or not missing_ok:
                    raise Stale(True)
            if fd is not None:
                self._catch_up(ov, fd, base_has, writer)
            return ov

    def _catch_up(self, ov: Overlay, fd: int, base_has: Callable[[bytes], bool], writer: bool) -> None:
        """Take in the whole records after `ov.end`; a writer cuts off what follows the last of them."""
        try:
            size = os.fstat(fd).st_size
            if ov.end and size <= ov.end:
                return  # nothing new: one fstat per transaction
            data = os.pread(fd, size - ov.end, ov.end)
        except OSError as exc:
            raise file_error(self.path, f"reading the commit log {log_name(ov.generation)}", exc) from None
        if not ov.end:
            if data[:HEADER_SIZE] != header(ov.generation):
                raise DamagedData(f"the commit log {self._file(ov.generation)} does not start with the header "
                                  f"of generation {ov.generation}; run `ctxstore fsck`")
            data = data[HEADER_SIZE:]
            ov.end = HEADER_SIZE
        at, offset = 0, ov.end
        while len(data) - at >= _RECORD_HEAD.size:
            length, check = _RECORD_HEAD.unpack_from(data, at)
            start = at + _RECORD_HEAD.size
            if length > _MAX_BODY or start + length > len(data):
                break
            body = data[start:start + length]
            if record_check(ov.generation, offset, body) != check:
                if _whole_record_at(data, start + length, ov.generation, offset + _RECORD_HEAD.size + length):
                    # A crash cuts the last record short; a record followed by a whole one was changed.
                    raise DamagedData(f"the record at byte {offset} of the commit log {self._file(ov.generation)} "
                                      "is damaged (its "
                                      "check does not match, and whole records follow it); run `ctxstore "
                                      "fsck`")
                break
            try:
                ops = decode_body(body, len(self._rank))
            except ValueError as exc:
                raise DamagedData(f"the record at byte {offset} of the commit log {self._file(ov.generation)} "
                                  f"is damaged: {exc}; "
                                  "run `ctxstore fsck`") from None
            ov.apply(ops, base_has)
            at = start + length
            offset += _RECORD_HEAD.size + length
        ov.end = offset
        if writer and offset < size:
            try:
                os.ftruncate(fd, offset)  # a record a crash cut short, or a damaged one: the log ends before it
            except OSError as exc:
                raise file_error(self.path, f"cutting the torn tail off the commit log {log_name(ov.generation)}",
                                 exc) from None

    # -- writing -----------------------------------------------------------------------------------------

    def append(self, ov: Overlay, ops: list[tuple[int, bytes, bytes | None]], sync: bool,
               base_has: Callable[[bytes], bool]) -> None:
        """Append one record holding `ops` to the log (flushed when `sync`) and take it into `ov`. The
        caller holds LMDB's writer lock and `ov` is caught up."""
        with self._lock:
            fd = self._open(ov.generation)
            if fd is None:
                raise StoreError(f"the commit log {self._file(ov.generation)} vanished while this process "
                                 "held the writer lock; run `ctxstore fsck`")
            record = encode_record(ov.generation, ov.end, ops)
            try:
                written = os.pwrite(fd, record, ov.end)
                if written != len(record):
                    raise OSError(f"wrote {written} of {len(record)} bytes")
                if sync:
                    os.fdatasync(fd)
            except OSError as exc:
                with suppress(OSError):
                    os.ftruncate(fd, ov.end)  # nothing of the record stays to be taken for one
                raise file_error(self.path, f"appending to the commit log {log_name(ov.generation)}", exc) from None
            ov.apply(ops, base_has)
            ov.end += len(record)

    def flush(self) -> None:
        """Flush the current log file to disk."""
        with self._lock:
            if self._fd is not None:
                try:
                    os.fdatasync(self._fd)
                except OSError as exc:
                    raise file_error(self.path, "flushing the commit log", exc) from None

    def checkpointed(self, generation: int) -> None:
        """After LMDB committed generation `generation` (its marker and the previous log's writes): start
        with an empty overlay and delete the older logs."""
        with self._lock:
            self._overlay = Overlay(generation, self._rank, self._objects)
            self._close_fd()
        self.remove_older(generation)


def checkpoint_into(txn: lmdb.Transaction[bytes], ov: Overlay, handles: list[Any], marker_db: Any) -> int:
    """Write an overlay's every key into LMDB's write transaction `txn`, and the next generation's
    marker; the generation is returned (the caller creates its log before committing)."""
    for db, layer in enumerate(ov.layers):
        handle = handles[db]
        put, delete = txn.put, txn.delete
        for key in layer.keys:
            value = layer.values[key]
            if value is None:
                delete(key, db=handle)
            elif not put(key, value, db=handle, append=True):
                put(key, value, db=handle)
    generation = ov.generation + 1
    txn.put(MARKER, _GEN.pack(generation), db=marker_db)
    return generation


def generation_of(txn: lmdb.Transaction[bytes], marker_db: Any) -> int:
    """The generation LMDB's transaction names (0: none recorded)."""
    raw = txn.get(MARKER, db=marker_db)
    return 0 if raw is None else int(_GEN.unpack(raw)[0])

