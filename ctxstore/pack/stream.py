"""Packs: the versioned stream format that carries objects between repositories.

A pack is a header (magic, version, object count), one zstd stream holding the objects as
length-prefixed CBOR, and a blake3 trailer over everything before it. Object ids are not sent: the
receiver hashes every object itself. Inside an object, a 32-byte object id that names an earlier object
of the same pack is sent as a short back-reference (CBOR tag 6 holding how many objects back it is), so the
hashes that revisions and sequence nodes are mostly made of cost a byte or two on the wire; and an append
revision can be sent *rebuildable*, without its sequence nodes, which the reader rebuilds from the
parent's tree (`ctxstore.pack.records`). The byte layout is specified in ``docs/protocol.md``.

Both directions stream: `write_pack` yields chunks and `read_pack` yields objects as they arrive, holding
at most one object and one bounded decompression step in memory. Because the trailer comes last, what
`read_pack` yields is unverified until the iterator is exhausted without error; `ctxstore.pack.staging`
holds a whole pack aside until it is verified. One pack version is read and written, `VERSION`; a pack
of any other version is refused, naming both.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Iterator
from typing import Any, Protocol

import blake3
import cbor2
import zstandard

from ..errors import BadPack, CtxStoreError, InvalidInput, InvalidObject
from ..format import seq
from ..format.codec import MAX_OBJECT_SIZE
from ..format.objects import Object, from_value
from ..ids import ObjectId, object_id, to_hex
from .records import (
    BACKREF_TAG,
    DERIVED_TAG,
    AppendForm,
    Lookup,
    Rebuilder,
    decode_record,
    encode_append,
    encode_record,
)

__all__ = [
    "BACKREF_TAG",
    "DERIVED_TAG",
    "HEADER_MAX",
    "MAGIC",
    "MAX_CHUNK",
    "MAX_WINDOW_SIZE",
    "PackSource",
    "VERSION",
    "check_shape",
    "declared_count",
    "read_pack",
    "read_parsed",
    "write_pack",
]

MAGIC = b"CTXP"
VERSION = 3
"""The pack version this ctxstore reads and writes (the one byte after the magic number)."""
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


HEADER_MAX = len(MAGIC) + 1 + _MAX_VARINT
"""The most bytes a pack's header (magic, version, object count) takes."""


def declared_count(head: bytes) -> int:
    """The object count a pack's header declares, from the first bytes of a pack, or 0 while they do not
    hold all of it (or are not a pack's): what a progress meter shows before the objects arrive."""
    at = len(MAGIC) + 1
    if not head.startswith(MAGIC) or len(head) <= at:
        return 0

    def read(n: int, what: str) -> bytes:
        nonlocal at
        if at + n > len(head):
            raise BadPack(f"bad pack: {what} is cut short")
        at += n
        return head[at - n:at]

    try:
        return _read_varint(read, "object count", "the header")
    except BadPack:
        return 0


def write_pack(objects: Iterable[tuple[ObjectId, bytes | AppendForm]], count: int, *, level: int = 9,
               rebuildable: Container[bytes] = frozenset()) -> Iterator[bytes]:
    """Stream a pack of `count` objects (id, canonical bytes) as bytes chunks.

    Order matters for size, not correctness: an object that comes after the objects it references (entries
    and blobs, then sequence nodes bottom-up, then revisions oldest first) sends each of those ids as a
    one- or two-byte back-reference. The revisions named in `rebuildable` (append revisions whose
    spine the receiver rebuilds from the parent's; the caller has checked that it comes out the same,
    and leaves the nodes the append closed out of `objects`) are sent without treeSpine, size and entry ids.
    A rebuildable revision may be given as its `AppendForm` instead of its bytes (what a store keeping
    deltas holds, checked there): it is sent as it is, not hashed here. The pack is of version
    `VERSION`. Raises `InvalidInput` if the objects are not `count` distinct objects whose ids match
    their bytes.
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
        if oid in index:
            raise InvalidInput(f"object {to_hex(oid)} is given twice (objects {index[oid]} and {here})")
        rebuild = oid in rebuildable
        if type(data) is AppendForm:
            if not rebuild:
                raise InvalidInput(f"object {here} is given as an append, but is not named rebuildable")
            body = encode_append(data, index)
        else:
            if not isinstance(data, bytes):
                raise InvalidInput(f"object {here}: its data must be bytes, not {type(data).__name__}")
            if object_id(data) != oid:
                raise InvalidInput(f"object {here} does not hash to its id {to_hex(oid)}; the store is corrupt")
            body = encode_record(data, index, rebuild=rebuild)
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
        self._chunks: Iterator[Any] = iter(())
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


def check_shape(data: bytes) -> None:
    """The default check of a received object: its type and fields (its encoding is checked already)."""
    from_value(cbor2.loads(data))


def read_pack(source: PackSource, *, max_object_size: int = MAX_OBJECT_SIZE,
              max_total_size: int = DEFAULT_MAX_TOTAL_SIZE, max_objects: int = DEFAULT_MAX_OBJECTS,
              check: Callable[[bytes], Any] | None = check_shape,
              lookup: Lookup | None = None) -> Iterator[tuple[ObjectId, bytes]]:
    """Yield the (id, canonical bytes) of each object of a pack, in pack order, checking as it goes.

    Every object's pack form must be canonical CBOR within the codec's rules (checked while its
    back-references are resolved, so the re-encoded bytes are canonical by construction); the result is
    hashed, and `check` validates it (by default `check_shape`; None skips it). A rebuildable revision
    is preceded by the sequence nodes rebuilt for it, which are yielded like the pack's own objects; a
    rebuild reads what it needs from recent objects of the pack, else through `lookup` (earlier objects
    of the pack held aside, then the receiving repository; `verify_pack` provides both). The trailer is
    checked last, so nothing yielded may be made visible until the iterator has finished without error:
    stage the objects (or use `verify_pack`). From a file object exactly the pack's bytes are read; from
    an iterable, bytes after it are an error. Anything wrong raises `BadPack`.
    """
    parse = check is check_shape  # parsing is that check, and keeps the parsed objects for rebuilds
    for oid, data, _ in _read(source, max_object_size, max_total_size, max_objects, None if parse else check,
                              lookup, parse):
        yield oid, data


def read_parsed(source: PackSource, *, max_object_size: int = MAX_OBJECT_SIZE,
                max_total_size: int = DEFAULT_MAX_TOTAL_SIZE, max_objects: int = DEFAULT_MAX_OBJECTS,
                lookup: Lookup | None = None) -> Iterator[tuple[ObjectId, bytes, Object]]:
    """`read_pack` with the default check, yielding each object parsed too: (id, canonical bytes, object).

    What a receiver that keeps the objects' references needs (`ctxstore.pack.staging.verify_pack`):
    the parse is the shape check, so it costs nothing extra. The same rules and errors as `read_pack`.
    """
    for oid, data, obj in _read(source, max_object_size, max_total_size, max_objects, None, lookup, True):
        yield oid, data, (obj if obj is not None else from_value(cbor2.loads(data)))


def _read(source: PackSource, max_object_size: int, max_total_size: int, max_objects: int,
          check: Callable[[bytes], Any] | None, lookup: Lookup | None,
          parse: bool) -> Iterator[tuple[ObjectId, bytes, Object | None]]:
    """`read_pack`, yielding each object parsed too when `parse` is set (and for every rebuilt node)."""
    wire = _Wire(source)
    magic = wire.read(len(MAGIC), "the magic number")
    if magic != MAGIC:
        raise BadPack(f"not a ctxstore pack: it starts with {magic!r}, not {MAGIC!r}")
    version = wire.read(1, "the version")[0]
    if version != VERSION:
        raise BadPack(f"bad pack: pack version {version} is not supported (this ctxstore reads and writes "
                      f"pack version {VERSION} only); the sender and receiver need the same ctxstore pack "
                      "version")
    count = wire.varint("the object count")
    if count > max_objects:
        raise BadPack(f"bad pack: it declares {count} objects, over the limit of {max_objects}; "
                      "raise max_objects if this pack is expected")
    inflater = _Inflater(wire, max_total_size)
    rebuilder = Rebuilder(lookup)
    index, rebuilt = rebuilder.index, rebuilder.rebuilt
    for here in range(count):
        at = inflater.consumed
        size = inflater.varint(f"the length of object {here}")
        if size > max_object_size:
            raise BadPack(f"bad pack: object {here} (decompressed byte {at}) declares {size} bytes, over the "
                          f"{max_object_size}-byte limit")
        body = inflater.read(size, f"object {here}")
        try:
            data, made, built = decode_record(body, rebuilder)
        except BadPack as exc:
            raise BadPack(f"bad pack: object {here} {exc}") from None
        if len(data) > max_object_size:
            raise BadPack(f"bad pack: object {here} is {len(data)} bytes, over the {max_object_size}-byte limit")
        for nid, node_data, node in made:
            if nid in index or nid in rebuilt:
                continue
            if len(index) + len(rebuilt) >= max_objects:
                raise BadPack(f"bad pack: its objects and the nodes rebuilt for them pass the limit of "
                              f"{max_objects} objects (at object {here})")
            rebuilt.add(nid)
            yield nid, node_data, node
        oid = object_id(data)
        if oid in index:
            raise BadPack(f"bad pack: object {here} repeats object {index[oid]} ({to_hex(oid)})")
        if oid in rebuilt:
            raise BadPack(f"bad pack: object {here} repeats a node rebuilt earlier in the pack ({to_hex(oid)})")
        obj: Object | None = built
        try:
            if parse and obj is None:
                obj = from_value(cbor2.loads(data))  # canonical already (decode_record): the shape, whole
                if (fault := seq.chunking_fault(obj)) is not None:
                    raise InvalidObject(f"{fault} (docs/format.md)")
            if check is not None:
                check(data)
        except CtxStoreError as exc:
            raise BadPack(f"bad pack: object {here} ({to_hex(oid)}): {exc}") from None
        rebuilder.add_record(oid)
        rebuilder.remember(oid, data if obj is None else obj)
        yield oid, data, obj
    inflater.finish()
    digest = wire.hasher.digest()
    trailer = wire.read(TRAILER_SIZE, "the trailer", hashed=False)
    if trailer != digest:
        raise BadPack(f"bad pack: trailer checksum mismatch at byte {wire.offset - TRAILER_SIZE} (the pack "
                      "was corrupted in transit); nothing from it may be used, fetch again")
    wire.check_end()
