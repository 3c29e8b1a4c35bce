"""Packs: the versioned stream format that carries objects between repositories.

A pack is a header (magic, version, object count), one zstd stream holding the objects as
length-prefixed CBOR, and a blake3 trailer over everything before it. Object ids are not sent: the
receiver hashes every object itself. Inside an object, a 32-byte object id that names an earlier object
of the same pack is sent as a short back-reference (CBOR tag 6 holding its position in the pack), so the
hashes that revisions and sequence nodes are mostly made of cost a byte or two on the wire. The byte
layout is specified in ``docs/protocol.md``.

Both directions stream: `write_pack` yields chunks and `read_pack` yields objects as they arrive, holding
at most one object and one bounded decompression step in memory. Because the trailer comes last, what
`read_pack` yields is unverified until the iterator is exhausted without error; `verify_pack` reads a
whole pack into a `StagedPack` (spooled to disk when large) so that a receiver can check connectivity
(`missing_references`) and then write everything in one transaction.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, BinaryIO, Protocol

import blake3
import cbor2
import zstandard

from .codec import MAX_DEPTH, MAX_OBJECT_SIZE, OID_SIZE, ObjectId, object_id, to_hex
from .errors import BadPack, CtxStoreError, InvalidInput
from .objects import Object, parse_object, references
from .store.base import ObjectSource

__all__ = [
    "BACKREF_TAG",
    "MAGIC",
    "MAX_CHUNK",
    "MAX_WINDOW_SIZE",
    "PackSource",
    "StagedPack",
    "VERSION",
    "check_shape",
    "missing_references",
    "read_pack",
    "verify_pack",
    "write_pack",
]

MAGIC = b"CTXP"
VERSION = 1
BACKREF_TAG = 6
"""CBOR tag of a back-reference; stored objects never contain tags, so it cannot be confused."""
MAX_CHUNK = 1 << 20
"""Largest compressed chunk a reader accepts (writers emit about 64 KiB)."""
MAX_WINDOW_SIZE = 1 << 25
"""Largest zstd window a reader accepts: what decompression may allocate for history."""
TRAILER_SIZE = 32

DEFAULT_MAX_TOTAL_SIZE = 1 << 32
DEFAULT_MAX_OBJECTS = 1 << 24

_CHUNK_TARGET = 1 << 16
_WINDOW_LOG = 23
# zstd turns a few input bytes into at most one 128 KiB block, so feeding this many compressed bytes at a
# time bounds what one decompression step can allocate (about 8 MiB) however hostile the stream.
_FEED = 256
_MAX_VARINT = 10


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


PackSource = _Readable | Iterable[bytes] | bytes | bytearray | memoryview
"""Where a pack is read from: a binary file object, an iterable of bytes chunks, or the bytes."""


# -- varints ---------------------------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# -- writing ---------------------------------------------------------------------------------------------

def _read_varint(read: Callable[[int, str], bytes], what: str, where: str) -> int:
    """Read one minimal LEB128 varint through `read`, naming `what` and `where` in any error."""
    value = shift = 0
    for i in range(_MAX_VARINT):
        byte = read(1, what)[0]
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            if byte == 0 and i > 0:
                raise BadPack(f"bad pack: {what} at {where} is a varint padded with zero bytes")
            return value
    raise BadPack(f"bad pack: {what} at {where} is a varint longer than {_MAX_VARINT} bytes")


def _substitute(value: Any, index: Mapping[bytes, int]) -> tuple[Any, bool]:
    """The value with every id of an earlier pack object replaced by a back-reference."""
    t = type(value)
    if t is bytes:
        if len(value) == OID_SIZE:
            at = index.get(value)
            if at is not None:
                # The absolute position, not the distance: successive versions of a sequence node then
                # repeat each other byte for byte, which the compressor turns into long matches.
                return cbor2.CBORTag(BACKREF_TAG, at), True
        return value, False
    if t is list:
        changed = False
        out = []
        for item in value:
            new, c = _substitute(item, index)
            out.append(new)
            changed |= c
        return (out, True) if changed else (value, False)
    if t is dict:
        changed = False
        new_map = {}
        for key, item in value.items():
            new, c = _substitute(item, index)
            new_map[key] = new
            changed |= c
        return (new_map, True) if changed else (value, False)
    return value, False


def _pack_form(data: bytes, value: Any, index: Mapping[bytes, int]) -> bytes:
    """How an object with canonical bytes `data`, decoding to `value`, is sent after the `index` objects."""
    new, changed = _substitute(value, index)
    return cbor2.dumps(new, canonical=True) if changed else data


def write_pack(objects: Iterable[tuple[ObjectId, bytes]], count: int, *, level: int = 9) -> Iterator[bytes]:
    """Stream a pack of `count` objects (id, canonical bytes) as bytes chunks.

    Order matters for size, not correctness: an object that comes after the objects it references (entries
    and blobs, then sequence nodes bottom-up, then revisions oldest first) sends each of those ids as a
    one- or two-byte back-reference. Raises `InvalidInput` if the objects are not `count` distinct objects
    whose ids match their bytes.
    """
    if type(count) is not int or count < 0:
        raise InvalidInput(f"write_pack needs a non-negative object count, not {count!r}")
    hasher = blake3.blake3()
    header = MAGIC + bytes([VERSION]) + _varint(count)
    hasher.update(header)
    yield header

    params = zstandard.ZstdCompressionParameters.from_level(level, window_log=_WINDOW_LOG, write_checksum=1,
                                                            write_content_size=0)
    compressor = zstandard.ZstdCompressor(compression_params=params).compressobj()
    index: dict[bytes, int] = {}
    plain = bytearray()
    packed = bytearray()

    def chunks(final: bool) -> Iterator[bytes]:
        while len(packed) >= _CHUNK_TARGET or (final and packed):
            piece = bytes(packed[:_CHUNK_TARGET])
            del packed[:_CHUNK_TARGET]
            wire = _varint(len(piece)) + piece
            hasher.update(wire)
            yield wire

    for here, (oid, data) in enumerate(objects):
        if here >= count:
            raise InvalidInput(f"write_pack was told {count} objects but given more")
        if object_id(data) != oid:
            raise InvalidInput(f"object {here} does not hash to its id {to_hex(oid)}; the store is corrupt")
        if oid in index:
            raise InvalidInput(f"object {to_hex(oid)} is given twice (objects {index[oid]} and {here})")
        body = _pack_form(data, cbor2.loads(data), index)
        index[oid] = here
        plain += _varint(len(body))
        plain += body
        if len(plain) >= _CHUNK_TARGET:
            packed += compressor.compress(bytes(plain))
            plain.clear()
            yield from chunks(False)
    if len(index) != count:
        raise InvalidInput(f"write_pack was told {count} objects but given {len(index)}")
    packed += compressor.compress(bytes(plain))
    packed += compressor.flush()
    yield from chunks(True)
    end = _varint(0)
    hasher.update(end)
    yield end + hasher.digest()


# -- reading ---------------------------------------------------------------------------------------------

class _Wire:
    """The raw bytes of a pack: exact reads, a running offset and hash, truncation reported as BadPack."""

    def __init__(self, source: PackSource) -> None:
        self.offset = 0
        self.hasher = blake3.blake3()
        self._file: _Readable | None = None
        self._chunks: Iterator[Any] | None = None
        self._buf = b""
        self._pos = 0
        if isinstance(source, bytes | bytearray | memoryview):
            self._chunks = iter((bytes(source),))
        elif callable(getattr(source, "read", None)):
            self._file = source  # type: ignore[assignment]
        elif isinstance(source, Iterable):
            self._chunks = iter(source)
        else:
            raise InvalidInput(f"a pack is read from a binary file or an iterable of bytes, not {source!r}")

    def _more(self, want: int) -> bytes:
        if self._file is not None:
            got = self._file.read(want)
            if not isinstance(got, bytes | bytearray | memoryview):
                raise InvalidInput(f"the pack's file returned {type(got).__name__}, not bytes; "
                                   "open it in binary mode")
            return bytes(got)
        assert self._chunks is not None
        for chunk in self._chunks:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                raise InvalidInput(f"a pack chunk is {type(chunk).__name__}, not bytes")
            if chunk:
                return bytes(chunk)
        return b""

    def read(self, n: int, what: str, *, hashed: bool = True) -> bytes:
        """Exactly `n` bytes, or BadPack naming `what` was cut short."""
        if len(self._buf) - self._pos >= n:
            out = self._buf[self._pos:self._pos + n]
            self._pos += n
        else:
            parts = [self._buf[self._pos:]]
            have = len(parts[0])
            self._buf, self._pos = b"", 0
            while have < n:
                # A file is never read past what it must hold, so a pack can be followed by other data.
                more = self._more(n - have)
                if not more:
                    raise BadPack(f"bad pack: truncated at byte {self.offset + have} while reading {what} "
                                  f"({n - have} more bytes expected); the transfer was cut short")
                if len(more) > n - have:
                    self._buf, self._pos = more, n - have
                    more = more[:n - have]
                parts.append(more)
                have += len(more)
            out = b"".join(parts)
        if hashed:
            self.hasher.update(out)
        self.offset += n
        return out

    def varint(self, what: str) -> int:
        return _read_varint(self.read, what, f"byte {self.offset}")

    def check_end(self) -> None:
        """Fail if an iterable source holds anything after the pack (files are left where the pack ends)."""
        if self._file is not None:
            return
        if len(self._buf) > self._pos or self._more(1):
            raise BadPack(f"bad pack: unexpected bytes after the trailer at byte {self.offset}")


class _Inflater:
    """The decompressed object section, pulled from the wire's chunks one bounded step at a time."""

    def __init__(self, wire: _Wire, max_total_size: int) -> None:
        self.wire = wire
        self.max_total_size = max_total_size
        self.total = 0  # decompressed bytes produced so far
        self.consumed = 0  # decompressed bytes handed out so far
        self._dctx = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW_SIZE).decompressobj()
        self._pending = b""  # compressed bytes of the current chunk not yet fed
        self._fed = 0
        self._ended = False  # the chunk list's terminator was read
        self._first = True
        self._buf = bytearray()
        self._pos = 0

    def _next_chunk(self) -> bool:
        at = self.wire.offset
        size = self.wire.varint("a chunk length")
        if size == 0:
            self._ended = True
            return False
        if size > MAX_CHUNK:
            raise BadPack(f"bad pack: chunk at byte {at} declares {size} bytes, over the {MAX_CHUNK}-byte "
                          "limit; the pack is corrupt or not a ctxstore pack")
        self._pending = self.wire.read(size, f"a {size}-byte compressed chunk")
        self._fed = 0
        if self._first:
            self._first = False
            self._check_frame_header(self._pending)
        return True

    def _check_frame_header(self, data: bytes) -> None:
        try:
            declared = zstandard.frame_content_size(data)
        except zstandard.ZstdError:
            return  # too short to tell here; decompression reports a bad frame
        if declared > self.max_total_size:
            raise BadPack(f"bad pack: the compressed stream declares {declared} bytes, over the "
                          f"{self.max_total_size}-byte limit")

    def _step(self) -> bool:
        """Feed one bounded slice of compressed input; False once the compressed stream has ended."""
        if self._dctx.eof:
            return False
        while self._fed >= len(self._pending):
            if self._ended or not self._next_chunk():
                raise BadPack(f"bad pack: the compressed stream is cut short at byte {self.wire.offset}")
        piece = self._pending[self._fed:self._fed + _FEED]
        self._fed += len(piece)
        try:
            out = self._dctx.decompress(piece)
        except zstandard.ZstdError as exc:
            raise BadPack(f"bad pack: corrupt compressed data near byte {self.wire.offset}: {exc}") from None
        self.total += len(out)
        if self.total > self.max_total_size:
            raise BadPack(f"bad pack: objects inflate past the {self.max_total_size}-byte limit "
                          f"(at byte {self.wire.offset}); raise max_total_size if this pack is expected")
        if self._dctx.eof and (self._dctx.unused_data or self._fed < len(self._pending)):
            raise BadPack("bad pack: bytes after the end of the compressed stream "
                          f"near byte {self.wire.offset}")
        if len(self._buf) > (1 << 20) and self._pos > len(self._buf) // 2:
            del self._buf[:self._pos]
            self._pos = 0
        self._buf += out
        return True

    def read(self, n: int, what: str) -> bytes:
        while len(self._buf) - self._pos < n:
            if not self._step():
                raise BadPack(f"bad pack: the compressed stream ends at decompressed byte "
                              f"{self.consumed + len(self._buf) - self._pos}, in the middle of {what}")
        out = bytes(self._buf[self._pos:self._pos + n])
        self._pos += n
        self.consumed += n
        return out

    def varint(self, what: str) -> int:
        return _read_varint(self.read, what, f"decompressed byte {self.consumed}")

    def finish(self) -> None:
        """Check that the compressed stream ends right after the last object and the chunk list ends too."""
        while self._step():
            pass
        extra = len(self._buf) - self._pos
        if extra:
            raise BadPack(f"bad pack: {extra} bytes after the last object in the compressed stream")
        if not self._ended:
            if self._fed < len(self._pending):
                raise BadPack("bad pack: bytes after the end of the compressed stream")
            at = self.wire.offset
            if self.wire.varint("the chunk list's end") != 0:
                raise BadPack(f"bad pack: a chunk at byte {at} follows the end of the compressed stream")


class _Restore:
    """Turns a decoded pack form back into the object's value, refusing anything a writer cannot send."""

    def __init__(self, oids: Sequence[bytes], index: Mapping[bytes, int]) -> None:
        self.oids = oids
        self.index = index

    def value(self, value: Any, depth: int = 0) -> Any:
        t = type(value)
        if t is str or t is bool or value is None:
            return value
        if t is int:
            if not -(2**64) <= value < 2**64:
                raise BadPack(f"integer {value} does not fit in 64 bits")
            return value
        if t is bytes:
            if len(value) == OID_SIZE and value in self.index:
                # A writer sends every such id as a back-reference; the bytes form is a second encoding.
                raise BadPack(f"the id of object {self.index[value]} is not sent as a back-reference")
            return value
        if depth >= MAX_DEPTH:
            raise BadPack(f"nested deeper than {MAX_DEPTH} levels")
        if t is list:
            return [self.value(item, depth + 1) for item in value]
        if t is dict:
            out = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise BadPack(f"map key {key!r} is not text")
                out[key] = self.value(item, depth + 1)
            return out
        if t is cbor2.CBORTag and value.tag == BACKREF_TAG:
            at = value.value
            if type(at) is not int or not 0 <= at < len(self.oids):
                raise BadPack(f"back-reference {at!r} does not name an earlier object")
            return self.oids[at]
        if t is float:
            if not math.isfinite(value):
                raise BadPack(f"{value} is not allowed (no NaN or infinities)")
            return value
        if t is cbor2.CBORTag:
            raise BadPack(f"CBOR tag {value.tag} is not allowed")
        raise BadPack(f"holds a {t.__name__}, which objects never contain (a CBOR tag?)")


def _decode_object(body: bytes, restore: _Restore, here: int, max_object_size: int) -> bytes:
    """The canonical bytes of object `here` from its pack form, checking that form is the only one."""
    try:
        raw = cbor2.loads(body, max_depth=MAX_DEPTH + 2)
        canonical = cbor2.dumps(raw, canonical=True) == body
    except Exception as exc:  # cbor2 raises CBORDecodeError, ValueError, TypeError, OverflowError...
        raise BadPack(f"bad pack: object {here} is not valid CBOR: {exc}") from None
    if not canonical:
        raise BadPack(f"bad pack: object {here} is not canonical CBOR (unsorted or duplicate map keys, "
                      "a non-shortest integer, length or float, an indefinite length or trailing bytes)")
    try:
        data = cbor2.dumps(restore.value(raw), canonical=True)
    except BadPack as exc:
        raise BadPack(f"bad pack: object {here} {exc}") from None
    if len(data) > max_object_size:
        raise BadPack(f"bad pack: object {here} is {len(data)} bytes, over the {max_object_size}-byte limit")
    return data


def check_shape(data: bytes) -> None:
    """The default check of a received object: its type and fields (its encoding is checked already)."""
    parse_object(data, trusted=True)


def read_pack(source: PackSource, *, max_object_size: int = MAX_OBJECT_SIZE,
              max_total_size: int = DEFAULT_MAX_TOTAL_SIZE, max_objects: int = DEFAULT_MAX_OBJECTS,
              check: Callable[[bytes], Any] | None = check_shape) -> Iterator[tuple[ObjectId, bytes]]:
    """Yield the (id, canonical bytes) of each object of a pack, in pack order, checking as it goes.

    Every object's pack form must be canonical CBOR within the codec's rules (checked while its
    back-references are resolved, so the re-encoded bytes are canonical by construction); the result is
    hashed, and `check` validates it (by default `check_shape`; None skips it). The trailer is checked
    last, so nothing yielded may be made visible until the iterator has finished without error: stage
    the objects (or use `verify_pack`). From a file object exactly the pack's bytes are read; from an
    iterable, bytes after it are an error. Anything wrong raises `BadPack`.
    """
    wire = _Wire(source)
    magic = wire.read(len(MAGIC), "the magic number")
    if magic != MAGIC:
        raise BadPack(f"not a ctxstore pack: it starts with {magic!r}, not {MAGIC!r}")
    version = wire.read(1, "the version")[0]
    if version != VERSION:
        raise BadPack(f"bad pack: format version {version} is not supported (this ctxstore reads version "
                      f"{VERSION}); upgrade ctxstore or ask the sender for version {VERSION}")
    count = wire.varint("the object count")
    if count > max_objects:
        raise BadPack(f"bad pack: it declares {count} objects, over the limit of {max_objects}; "
                      "raise max_objects if this pack is expected")
    inflater = _Inflater(wire, max_total_size)
    oids: list[bytes] = []
    index: dict[bytes, int] = {}
    restore = _Restore(oids, index)
    for here in range(count):
        at = inflater.consumed
        size = inflater.varint(f"the length of object {here}")
        if size > max_object_size:
            raise BadPack(f"bad pack: object {here} (decompressed byte {at}) declares {size} bytes, over the "
                          f"{max_object_size}-byte limit")
        body = inflater.read(size, f"object {here}")
        data = _decode_object(body, restore, here, max_object_size)
        oid = object_id(data)
        if oid in index:
            raise BadPack(f"bad pack: object {here} repeats object {index[oid]} ({to_hex(oid)})")
        if check is not None:
            try:
                check(data)
            except CtxStoreError as exc:
                raise BadPack(f"bad pack: object {here} ({to_hex(oid)}): {exc}") from None
        oids.append(oid)
        index[oid] = here
        yield ObjectId(oid), data
    inflater.finish()
    digest = wire.hasher.digest()
    trailer = wire.read(TRAILER_SIZE, "the trailer", hashed=False)
    if trailer != digest:
        raise BadPack(f"bad pack: trailer checksum mismatch at byte {wire.offset - TRAILER_SIZE} (the pack "
                      "was corrupted in transit); nothing from it may be used, fetch again")
    wire.check_end()


# -- staging and connectivity ----------------------------------------------------------------------------

class StagedPack:
    """A fully verified pack, held aside (in memory, spilling to a temporary file) until it is written.

    Iterating yields (id, canonical bytes) in pack order; `objects` maps each id to its parsed object;
    `links` maps each id to the ids it references.
    """

    def __init__(self, spool_size: int) -> None:
        self._file: BinaryIO = tempfile.SpooledTemporaryFile(max_size=spool_size)  # noqa: SIM115
        self._spans: list[tuple[ObjectId, int, int]] = []
        self.links: dict[ObjectId, list[ObjectId]] = {}

    def _add(self, oid: ObjectId, data: bytes, links: list[ObjectId]) -> None:
        start = self._file.tell()
        self._file.write(data)
        self._spans.append((oid, start, len(data)))
        self.links[oid] = links

    def __len__(self) -> int:
        return len(self._spans)

    def __iter__(self) -> Iterator[tuple[ObjectId, bytes]]:
        for oid, start, size in self._spans:
            self._file.seek(start)
            yield oid, self._file.read(size)

    @property
    def ids(self) -> list[ObjectId]:
        """The objects' ids, in pack order."""
        return [oid for oid, _, _ in self._spans]

    def close(self) -> None:
        """Drop the staged bytes."""
        self._file.close()

    def __enter__(self) -> StagedPack:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def verify_pack(source: PackSource, *, max_object_size: int = MAX_OBJECT_SIZE,
                max_total_size: int = DEFAULT_MAX_TOTAL_SIZE, max_objects: int = DEFAULT_MAX_OBJECTS,
                spool_size: int = 64 << 20) -> StagedPack:
    """Read and check a whole pack, trailer included, returning it staged; `BadPack` if anything is wrong.

    Objects are parsed (their canonical form is checked as they are read, their shape here) and their
    references kept, so the caller can check
    connectivity with ``missing_references(staged.links, heads, store)`` before writing anything.
    """
    staged = StagedPack(spool_size)
    try:
        for oid, data in read_pack(source, max_object_size=max_object_size, max_total_size=max_total_size,
                                   max_objects=max_objects, check=None):
            try:
                obj = parse_object(data, trusted=True)
            except CtxStoreError as exc:
                raise BadPack(f"bad pack: object {len(staged)} ({to_hex(oid)}): {exc}") from None
            staged._add(oid, data, references(obj))
    except BaseException:
        staged.close()
        raise
    return staged


def missing_references(objects: Mapping[ObjectId, Object] | Mapping[ObjectId, list[ObjectId]],
                       heads: Iterable[ObjectId], store: ObjectSource) -> set[ObjectId]:
    """The ids reachable from `heads` that are neither in `objects` nor in `store` (empty: complete).

    `objects` maps the ids of incoming objects to the parsed objects or to their reference lists (as
    `StagedPack.links` does). The walk follows references through incoming objects only: an object the
    store already holds is taken to come with everything it reaches, as the store keeps that invariant.
    """
    missing: set[ObjectId] = set()
    seen: set[ObjectId] = set()
    stack = [ObjectId(h) for h in heads]
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        item = objects.get(oid)
        if item is None:
            if not store.has(oid):
                missing.add(oid)
            continue
        targets = item if isinstance(item, list) else references(item)
        stack.extend(t for t in targets if t not in seen)
    return missing
