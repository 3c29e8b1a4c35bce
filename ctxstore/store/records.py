"""The LMDB store's record layout: which databases it has, and how each kind of record is keyed and framed.

Pure functions over bytes (no LMDB here): `lmdb` reads and writes records through them, so the layout
is written down in one place. docs/storage.md draws the same table.

=========  ==================================  ==================================================
database   key                                 value
=========  ==================================  ==================================================
objs       first 16 bytes of the object id     write time (ms, 6 bytes BE), last 16 bytes of the id,
                                               codec byte + (raw | zstd | dict id + zstd |
                                               append delta or bulk revision without its
                                               lists, see `revisions` | leaf pack or
                                               pointer into one, see `packs`) bytes
refs       ref name (UTF-8)                    object id (32 raw bytes)
reflog     ref name, NUL, sequence (8 bytes)   a record (the refs layer encodes it)
config     key (UTF-8)                         bytes
dicts      dictionary id (4 bytes BE)          a zstd dictionary; the highest id is current
packs      a packed leaf's key in ``objs``,    piece i of its pack (seal, framed payload, see
           then piece number i (1 byte)        `packs`), split by `pack_pieces`
log        ``generation``                      the commit log's generation LMDB holds up to (8
                                               bytes BE; absent: 0), see `lmdb_log`
=========  ==================================  ==================================================
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import zstandard

from ..format import codec
from ..ids import OID_SIZE, ObjectId
from .packs import LEAF_PACK, PACKED, stored_size_of
from .revisions import BULK, DELTA, parse_bulk, parse_delta

__all__ = [
    "CONFIG",
    "DATABASES",
    "DICTS",
    "HEAD_SIZE",
    "KEY_SIZE",
    "LOG",
    "OBJECTS",
    "OLD_DATABASES",
    "PACKS",
    "PIECE_KEY_SIZE",
    "REFLOG",
    "REFS",
    "TIME_SIZE",
    "canonical_size",
    "dict_id",
    "dict_key",
    "name_key",
    "object_key",
    "object_record",
    "pack_pieces",
    "packer",
    "piece_key",
    "piece_max",
    "pieces_problem",
    "record_holds",
    "record_id",
    "record_time",
    "record_value",
    "reflog_end",
    "reflog_key",
    "reflog_name",
    "reflog_prefix",
    "reflog_seq",
    "restamped",
    "stored_value",
    "value_dict_id",
]

OBJECTS = b"objs"
REFS = b"refs"
REFLOG = b"reflog"
CONFIG = b"config"
DICTS = b"dicts"
PACKS = b"packs"
LOG = b"log"
DATABASES = (OBJECTS, REFS, REFLOG, CONFIG, DICTS, PACKS, LOG)
"""The named databases of a store, every one created when a store is first opened for writing."""
OLD_DATABASES = (b"objects", b"times")
"""Databases of the layout before ``objs`` (full-length keys, write times apart): refused on open."""

KEY_SIZE = 16
"""Bytes of an object id that key the ``objs`` database; the rest is kept in the value and checked.

Object ids are uniformly random, so every object written is a B-tree insert at a random place, and a
commit's cost is the pages on the paths to its objects. Half-length keys fit about 1.6 times more
children in a branch page, so the tree is a level shallower for a range of sizes (three levels instead
of four at 100,000 objects); 128 bits still make an accidental collision impossible in practice (it
would be refused, not stored). The write time lives in the value rather than in a database of its own
for the same reason: a second database keyed by id would double the random inserts."""
TIME_SIZE = 6
HEAD_SIZE = TIME_SIZE + OID_SIZE - KEY_SIZE  # write time, then the rest of the id, then the framed bytes
_SEQ_SIZE = 8
_DICT_ID_SIZE = 4

_RAW = bytes([codec.RAW])
_ID_HEADER = b"\x58\x20"  # the CBOR head of a 32-byte byte string: an object id inside an object
_ENTRY_START = b"\x62id"  # an entry's first key in canonical order


# -- objects -------------------------------------------------------------------------------------------

def object_key(oid: bytes) -> bytes:
    """The key of an object's record in ``objs``: the first `KEY_SIZE` bytes of its id."""
    return oid[:KEY_SIZE]


def object_record(oid: bytes, time: bytes, value: bytes) -> bytes:
    """An object's record: its write time (`TIME_SIZE` bytes BE), the rest of its id, its stored value."""
    return time + oid[KEY_SIZE:] + value


def record_holds(record: bytes, oid: bytes) -> bool:
    """Whether a record found under `object_key(oid)` is that object's (and not another id's with the key)."""
    return record[TIME_SIZE:HEAD_SIZE] == oid[KEY_SIZE:]


def record_id(key: bytes, record: bytes) -> ObjectId:
    """The whole id of the object a record (found under `key`) holds."""
    return ObjectId(bytes(key) + bytes(record[TIME_SIZE:HEAD_SIZE]))


def record_time(record: bytes) -> int:
    """When the record's object was last written, in ms since the epoch."""
    return int.from_bytes(record[:TIME_SIZE], "big")


def record_value(record: bytes) -> bytes:
    """The stored value of a record's object: the codec byte, then the (compressed) bytes."""
    return bytes(record[HEAD_SIZE:])


def restamped(record: bytes, time: bytes) -> bytes:
    """The same record with a new write time."""
    return time + record[TIME_SIZE:]


def _incompressible(data: bytes, with_dictionary: bool) -> bool:
    """Whether zstd cannot shrink an object, so trying is wasted work on the commit path.

    Objects that are mostly ids (a seq node above the leaves) are mostly random bytes, and without a
    trained dictionary a small object (the entry of a short message) gains nothing after the frame's
    overhead. A leaf, whose entry ids share long prefixes, is about half ids and compresses to
    about 60%: it is still tried. Entries (a map whose first key is ``id``) are not counted: they are
    most of what a store holds, and their ids are only those of their blobs.
    """
    if len(data) < 256 and not with_dictionary:
        return True
    return data[1:4] != _ENTRY_START and 34 * data.count(_ID_HEADER) >= 0.6 * len(data)


def canonical_size(value: bytes) -> int:
    """An object's canonical size from its stored value, without decompressing it."""
    codec_byte = value[0]
    if codec_byte in (LEAF_PACK, PACKED):
        return stored_size_of(value)
    if codec_byte == codec.RAW:
        return len(value) - 1
    if codec_byte == DELTA:
        return parse_delta(ObjectId(b"\0" * OID_SIZE), value, check=False)[1][4]
    if codec_byte == BULK:
        return parse_bulk(ObjectId(b"\0" * OID_SIZE), value, check=False)[3]
    frame = value[1:] if codec_byte == codec.ZSTD else value[1 + _DICT_ID_SIZE:]
    try:
        size = zstandard.frame_content_size(bytes(frame[:18]))
    except zstandard.ZstdError:
        return 0
    return max(size, 0)


def stored_value(data: bytes, dictionary: zstandard.ZstdCompressionDict | None, dict_id: int) -> bytes:
    """The codec-framed value of an object's canonical bytes: raw, zstd, or zstd with the dictionary."""
    return packer(dictionary, dict_id)(data)


def packer(dictionary: zstandard.ZstdCompressionDict | None, dict_id: int) -> Callable[[bytes], bytes]:
    """`stored_value` with its dictionary fixed, for the many objects of one commit."""
    frame = codec.compressor(dictionary=dictionary, dict_id=dict_id)
    with_dictionary = dictionary is not None

    def pack(data: bytes) -> bytes:
        return _RAW + data if _incompressible(data, with_dictionary) else frame(data)

    return pack


def value_dict_id(value: bytes) -> int | None:
    """The id of the dictionary a stored value was compressed with, or None if it used none."""
    if value[:1] == bytes([codec.ZSTD_DICT]):
        return int.from_bytes(value[1:1 + _DICT_ID_SIZE], "big")
    return None


# -- refs and config -----------------------------------------------------------------------------------

def name_key(name: str) -> bytes:
    """The key of a ref (in ``refs``) or a setting (in ``config``): the name in UTF-8."""
    return name.encode()


# -- reflogs -------------------------------------------------------------------------------------------

def reflog_prefix(name: str) -> bytes:
    """What the key of every reflog record of `name` starts with: the name and a NUL."""
    return name.encode() + b"\x00"


def reflog_end(name: str) -> bytes:
    """The first key after every reflog record of `name` (so a cursor can step back to its newest)."""
    return name.encode() + b"\x01"


def reflog_key(name: str, seq: int) -> bytes:
    """The key of the `seq`-th record of `name`'s reflog (0 is the oldest)."""
    return reflog_prefix(name) + seq.to_bytes(_SEQ_SIZE, "big")


def reflog_seq(key: bytes, prefix: bytes) -> int | None:
    """The sequence number of a reflog record's key under `prefix`, or None if it is not one of them."""
    if len(key) != len(prefix) + _SEQ_SIZE or not bytes(key).startswith(prefix):
        return None
    return int.from_bytes(key[-_SEQ_SIZE:], "big")


def reflog_name(key: bytes) -> bytes:
    """The UTF-8 name a reflog record's key belongs to."""
    return bytes(key).split(b"\x00", 1)[0]


# -- dictionaries --------------------------------------------------------------------------------------

def dict_key(dict_id: int) -> bytes:
    """The key of a zstd dictionary in ``dicts``."""
    return dict_id.to_bytes(_DICT_ID_SIZE, "big")


def dict_id(key: bytes) -> int:
    """The id of the dictionary stored under `key`."""
    return int.from_bytes(key, "big")


# -- leaf packs ----------------------------------------------------------------------------------------

PIECE_KEY_SIZE = KEY_SIZE + 1
"""Bytes of a key in ``packs``: the packed leaf's key in ``objs``, then the piece's number."""
_PAGE_HEADER = 16  # LMDB's page header, on a leaf page and on the first of a run of overflow pages
_NODE_HEADER = 8  # LMDB's header of a key and value in a leaf page (and 2 bytes in the page's index)


def piece_key(key: bytes, index: int) -> bytes:
    """The key in ``packs`` of piece `index` of the pack of the leaf whose record key is `key`."""
    return key + bytes([index])


def piece_max(page_size: int) -> int:
    """The longest piece `pack_pieces` cuts a pack's tail into, for LMDB pages of `page_size` bytes: half
    the longest value LMDB keeps in a leaf page under a piece key.

    LMDB 0.9 keeps a key and value in a leaf page when, with the node's 8-byte header, they come to at
    most its ``me_nodemax``, ``((page_size - 16) / 2, rounded down to even) - 2`` bytes (2,038 for 4 KiB
    pages: 2,013 bytes of value under a 17-byte key); a longer value goes to overflow pages of its own.
    Pieces half that long leave less room unused at the end of a leaf page, for about 27 bytes of node
    each: a bulk import of 100,000 messages took 3% fewer pages than with pieces of 2,013 bytes.
    """
    node_max = ((page_size - _PAGE_HEADER) // 2 & ~1) - 2
    return (node_max - _NODE_HEADER - PIECE_KEY_SIZE) // 2


def pack_pieces(record: bytes, page_size: int) -> list[bytes]:
    """A pack's record cut into the pieces kept under `piece_key(key, 0)`, `piece_key(key, 1)`, ... in
    ``packs`` (joined in order, they are the record), for LMDB pages of `page_size` bytes.

    LMDB keeps a value too large for a leaf page in whole overflow pages (a 16-byte header, then the
    value), so a record kept whole leaves the end of its last page unused. A record of at most `piece_max` bytes
    is one piece. A longer one is cut into the longest prefix that fills overflow pages exactly
    (``k * page_size - 16`` bytes for the largest such k; none when k is 0), then the rest into as few
    nearly equal pieces of at most `piece_max` bytes as it takes (the first ones a byte longer when it
    does not divide evenly), which LMDB keeps in leaf pages beside other packs' pieces.
    """
    limit = piece_max(page_size)
    if len(record) <= limit:
        return [record]
    pages = (len(record) + _PAGE_HEADER) // page_size
    at = pages * page_size - _PAGE_HEADER if pages else 0
    pieces = [record[:at]] if at else []
    rest = len(record) - at
    count = -(-rest // limit)
    for index in range(count):
        size = rest // count + (index < rest % count)
        pieces.append(record[at:at + size])
        at += size
    return pieces


def pieces_problem(piece_keys: Sequence[bytes]) -> str | None:
    """What is wrong with the keys found under one pack's key in ``packs`` (every key starting with it,
    in key order), or None if they are its pieces 0 to n-1, each `PIECE_KEY_SIZE` bytes."""
    for found in piece_keys:
        if len(found) != PIECE_KEY_SIZE:
            return f"a piece is under a key of {len(found)} bytes ({bytes(found).hex()}), not {PIECE_KEY_SIZE}"
    numbers = [found[KEY_SIZE] for found in piece_keys]
    if numbers != list(range(len(numbers))):
        return f"its pieces are numbered {', '.join(map(str, numbers))}, not 0 to {len(numbers) - 1}"
    return None
