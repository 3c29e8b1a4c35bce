"""How the LMDB store frames an object's bytes: its key, its stored value, and what is not compressed."""

from __future__ import annotations

import zstandard

from ..format import codec

__all__ = ["HEAD_SIZE", "KEY_SIZE", "TIME_SIZE", "canonical_size", "stored_value"]

KEY_SIZE = 16
"""Bytes of an object id that key the ``objs`` database; the rest is kept in the value and checked.

Object ids are uniformly random, so every object written is a B-tree insert at a random place, and a
commit's cost is the pages on the paths to its objects. Half-length keys fit about 1.6 times more
children in a branch page, so the tree is a level shallower for a range of sizes (three levels instead
of four at 100,000 objects); 128 bits still make an accidental collision impossible in practice (it
would be refused, not stored). The write time lives in the value rather than in a database of its own
for the same reason: a second database keyed by id would double the random inserts."""
TIME_SIZE = 6
HEAD_SIZE = TIME_SIZE + 32 - KEY_SIZE  # write time, then the rest of the id, then the framed bytes

_RAW = bytes([codec.RAW])
_ID_HEADER = b"\x58\x20"  # the CBOR head of a 32-byte byte string: an object id inside an object


def _incompressible(data: bytes, with_dictionary: bool) -> bool:
    """Whether zstd cannot shrink an object, so trying is wasted work on the commit path.

    Objects that are mostly ids (a seq node above the leaves) are mostly random bytes, and without a
    trained dictionary a small object (the entry of a short message) gains nothing after the frame's
    overhead. A leaf, whose entry ids share long prefixes, is about half ids and compresses to
    about 60%: it is still tried.
    """
    return (len(data) < 256 and not with_dictionary) or 34 * data.count(_ID_HEADER) >= 0.6 * len(data)


def canonical_size(value: bytes) -> int:
    """An object's canonical size from its stored value, without decompressing it."""
    codec_byte = value[0]
    if codec_byte == codec.RAW:
        return len(value) - 1
    frame = value[1:] if codec_byte == codec.ZSTD else value[5:]
    try:
        size = zstandard.frame_content_size(bytes(frame[:18]))
    except zstandard.ZstdError:
        return 0
    return max(size, 0)


def stored_value(data: bytes, dictionary: zstandard.ZstdCompressionDict | None, dict_id: int) -> bytes:
    """The codec-framed value of an object's canonical bytes: raw, zstd, or zstd with the dictionary."""
    if _incompressible(data, dictionary is not None):
        return _RAW + data
    if dictionary is not None:
        return codec.compress(data, dictionary=dictionary, dict_id=dict_id)
    return codec.compress(data)
