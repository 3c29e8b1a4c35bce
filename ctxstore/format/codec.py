"""Canonical CBOR and the compression framing of stored values.

The encoding is RFC 8949 core deterministic CBOR with the DAG-CBOR restrictions: maps have text keys
only, sorted by their encoded bytes (shorter first, then bytewise); integers and lengths in their
shortest form; floats in the shortest of half, single and double precision that keeps the value; no
indefinite lengths, no tags, no NaN or infinities; one top-level item. `decode` rejects any bytes that
would not re-encode to themselves, so every value has exactly one encoding and one object id.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import cbor2
import zstandard

from ..errors import EncodingError, InvalidInput, shown

__all__ = [
    "MAX_DEPTH",
    "MAX_OBJECT_SIZE",
    "MAX_TIME_MS",
    "SEMANTIC_TAGS",
    "SMALL_HEADS",
    "array_head_at",
    "bounded_loads",
    "cbor_head",
    "check_time_ms",
    "compress",
    "compress_many",
    "compressor",
    "decode",
    "decompress",
    "decompressor",
    "encode",
    "now_ms",
    "refused_tag",
]

MAX_DEPTH = 200
"""Deepest nesting of arrays and maps a value may have."""
MAX_OBJECT_SIZE = 64 * 1024 * 1024
"""Largest canonical value, in bytes, that is encoded, decoded or decompressed: the one object size limit
of writes, reads, packs and fsck (docs/format.md, "Limits")."""

_INT_MIN = -(2**64)
_INT_MAX = 2**64 - 1


MAX_TIME_MS = 2**48 - 1
"""Latest time, in ms since the epoch, that entry ids, revisions, reflogs and write stamps hold (year 10889)."""


def check_time_ms(ms: object, what: str = "the clock") -> int:
    """`ms` if it is a time ctxstore can record (a whole number from 0 to `MAX_TIME_MS`), else `InvalidInput`."""
    if type(ms) is not int or not 0 <= ms <= MAX_TIME_MS:
        raise InvalidInput(f"{what} reads {shown(ms)} ms since the epoch; times are whole milliseconds from 0 to "
                           f"{MAX_TIME_MS} (before 1970 or after the year 10889 is refused): check the clock")
    return ms


def now_ms() -> int:
    """Milliseconds since the epoch: the clock of revisions, reflogs and object write times."""
    return check_time_ms(time.time_ns() // 1_000_000, "the system clock")


def _check(value: Any, depth: int, path: str) -> None:
    t = type(value)
    if t is str or t is bool or value is None or t is bytes:
        return
    if t is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise EncodingError(f"integer at {path or '/'} does not fit in 64 bits: {value}")
        return
    if t is float:
        if not math.isfinite(value):
            raise EncodingError(f"{value} at {path or '/'} is not allowed (no NaN or infinities)")
        return
    if depth >= MAX_DEPTH:
        raise EncodingError(f"value nested deeper than {MAX_DEPTH} levels at {path or '/'}")
    if t is list:
        for i, item in enumerate(value):
            _check(item, depth + 1, f"{path}/{i}")
        return
    if t is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise EncodingError(f"map key {shown(key)} at {path or '/'} is not text; keys must be strings")
            _check(item, depth + 1, f"{path}/{key}")
        return
    raise EncodingError(f"cannot encode {t.__name__} at {path or '/'}; "
                        "values are None, bool, int, float, str, bytes, list or dict")


def _fits(value: Any, depth: int) -> bool:
    """Whether `_check` accepts a value: the same rules without building paths, for the common case."""
    t = type(value)
    if t is str or t is bytes or t is bool or value is None:
        return True
    if t is int:
        return bool(_INT_MIN <= value <= _INT_MAX)
    if t is float:
        return math.isfinite(value)
    if depth >= MAX_DEPTH:
        return False
    if t is list:
        for item in value:
            # Text and ids are most items, and pairs of them (seq nodes): check those without a call.
            ti = type(item)
            if ti is str or ti is bytes:
                continue
            if ti is list and depth + 1 < MAX_DEPTH:
                for x in item:
                    tx = type(x)
                    if not (tx is str or tx is bytes or x is None or (tx is int and _INT_MIN <= x <= _INT_MAX)
                            or _fits(x, depth + 2)):
                        return False
                continue
            if not _fits(item, depth + 1):
                return False
        return True
    if t is dict:
        for key, item in value.items():
            ti = type(item)
            if type(key) is not str or not (ti is str or ti is bytes or _fits(item, depth + 1)):
                return False
        return True
    return False


def encode(value: Any) -> bytes:
    """The canonical CBOR bytes of a value (None, bool, int, float, str, bytes, list, dict).

    Refuses, with an `EncodingError` naming where, what has no canonical form: other types, integers
    outside 64 bits, NaN and infinities, text that is not Unicode scalar values (lone surrogates), nesting
    deeper than `MAX_DEPTH` (a list that contains itself among them) and results over `MAX_OBJECT_SIZE`.
    """
    try:
        ok = _fits(value, 0)
    except RecursionError:
        ok = False
    if not ok:
        _check(value, 0, "")  # raises, naming where the value goes wrong
    try:
        data = cbor2.dumps(value, canonical=True)
    except UnicodeEncodeError:
        _check_text(value, 0, "")  # raises, naming the text
        raise
    if len(data) > MAX_OBJECT_SIZE:
        raise EncodingError(f"value encodes to {len(data)} bytes, over the {MAX_OBJECT_SIZE}-byte object "
                            "limit; split large content into several blocks (each block is its own blob)")
    return data


def _check_text(value: Any, depth: int, path: str) -> None:
    """Raise for the first text (or map key) that UTF-8 cannot encode: a lone surrogate such as U+D800."""
    def bad(text: str, where: str) -> None:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EncodingError(f"text at {where or '/'} holds the lone surrogate U+{ord(text[exc.start]):04X} "
                                f"at character {exc.start}; text must be valid Unicode") from None

    t = type(value)
    if t is str:
        bad(value, path)
    elif t is list:
        for i, item in enumerate(value):
            _check_text(item, depth + 1, f"{path}/{i}")
    elif t is dict:
        for key, item in value.items():
            bad(key, f"{path}/{key.encode('utf-8', 'backslashreplace').decode()}")
            _check_text(item, depth + 1, f"{path}/{key}")


# Tags cbor2 decodes into Python values itself. Value sharing (28, 29) and string references (25, 256) make a
# few hundred bytes stand for an exponentially large value, so no decoder here lets cbor2 interpret any of
# them: each is refused when its head is read, before its content is decoded.
SEMANTIC_TAGS = frozenset({0, 1, 2, 3, 4, 5, 25, 28, 29, 30, 35, 36, 37, 52, 54, 100, 256, 258, 260, 261, 1004,
                           43000, 55799})


class _RefusedTag(Exception):
    def __init__(self, tag: int) -> None:
        super().__init__(tag)
        self.tag = tag


def _refuser(tag: int) -> Callable[[Any], Any]:
    def refuse(*_args: Any) -> Any:
        raise _RefusedTag(tag)
    return refuse


_REFUSE_SEMANTIC: dict[int, Callable[[Any], Any]] = {tag: _refuser(tag) for tag in SEMANTIC_TAGS}


def _refuse_tag(*args: Any) -> Any:
    tag = next(a for a in args if isinstance(a, cbor2.CBORTag))
    raise _RefusedTag(tag.tag)


def refused_tag(exc: BaseException) -> int | None:
    """The tag number a `bounded_loads` refused, if that is why it raised."""
    while exc is not None:
        if isinstance(exc, _RefusedTag):
            return exc.tag
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return None


def bounded_loads(data: bytes, *, max_depth: int, keep_tags: bool = False) -> Any:
    """cbor2's decoder restricted to what is linear in the input: no indefinite lengths, nesting at most
    `max_depth`, and no tag that cbor2 would interpret (sharing, string references, bignums, dates...).

    Other tags raise too, unless `keep_tags`: then they come back as `cbor2.CBORTag` for the caller to
    judge (the pack records' tags 6 and 7). cbor2 never allocates ahead of the input for a declared
    length, so memory is linear as well. Raises what cbor2 raises; `refused_tag` tells a refused tag.
    """
    return cbor2.loads(data, max_depth=max_depth, allow_indefinite=False, semantic_decoders=_REFUSE_SEMANTIC,
                       tag_hook=None if keep_tags else _refuse_tag)


def decode(data: bytes) -> Any:
    """Decode canonical CBOR, rejecting anything that would not re-encode to the same bytes.

    Time and memory are linear in `len(data)`: no tag is accepted at all (refused when its head is read),
    nor indefinite lengths, and nesting is bounded by `MAX_DEPTH`.
    """
    if len(data) > MAX_OBJECT_SIZE:
        raise EncodingError(f"object of {len(data)} bytes is over the {MAX_OBJECT_SIZE}-byte limit")
    try:
        value = bounded_loads(data, max_depth=MAX_DEPTH + 1)
    except RecursionError:
        raise EncodingError(f"CBOR nested too deeply (limit {MAX_DEPTH})") from None
    except Exception as exc:  # cbor2 raises CBORDecodeError, ValueError, TypeError, ...
        tag = refused_tag(exc)
        if tag is not None:
            raise EncodingError(f"CBOR tag {tag} is not allowed; objects hold no tags") from None
        raise EncodingError(f"not valid CBOR: {exc}") from None
    try:
        again = encode(value)
    except RecursionError:
        raise EncodingError(f"CBOR nested too deeply (limit {MAX_DEPTH})") from None
    if again != data:
        raise EncodingError(_why_not_canonical(data, again))
    return value


def _why_not_canonical(data: bytes, again: bytes) -> str:
    if len(again) < len(data) and data.startswith(again):
        return f"not canonical CBOR: {len(data) - len(again)} bytes after the top-level item"
    at = next((i for i, (a, b) in enumerate(zip(data, again, strict=False)) if a != b), min(len(data), len(again)))
    return (f"not canonical CBOR: differs from its canonical form at byte {at} "
            "(unsorted or duplicate map keys, non-shortest integer, length or float, or indefinite length)")


def cbor_head(major: int, n: int) -> bytes:
    """A CBOR item head (major type `major`, argument `n` < 2**64) in its shortest form, as canonical CBOR
    writes it: for the encoders that lay out bytes directly (an argument under 256 from a table)."""
    return SMALL_HEADS[major][n] if n < 256 else _head(major, n)


def _head(major: int, n: int) -> bytes:
    base = major << 5
    if n < 24:
        return bytes([base | n])
    if n < 0x100:
        return bytes([base | 24, n])
    if n < 0x10000:
        return bytes([base | 25]) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes([base | 26]) + n.to_bytes(4, "big")
    return bytes([base | 27]) + n.to_bytes(8, "big")


SMALL_HEADS = [[_head(major, n) for n in range(256)] for major in range(8)]
"""`cbor_head(major, n)` for every major type and `n` below 256, for encoders' inner loops to index."""


def array_head_at(data: bytes, at: int) -> tuple[int, int] | None:
    """The length of the array whose head is at `at` in `data` and where its first item starts, for heads
    of up to 2 length bytes (fewer than 65,536 items); None if there is no such head there."""
    head = data[at] if at < len(data) else 0
    if 0x80 <= head < 0x98:
        return head - 0x80, at + 1
    if head in (0x98, 0x99):
        end = at + (2 if head == 0x98 else 3)
        return (int.from_bytes(data[at + 1:end], "big"), end) if end <= len(data) else None
    return None


# Stored values start with a codec byte, so the storage format can evolve without rehashing.
RAW = 0x00
ZSTD = 0x01
ZSTD_DICT = 0x02

_local = threading.local()


def _compressor(dictionary: zstandard.ZstdCompressionDict | None, level: int) -> zstandard.ZstdCompressor:
    cache: dict[tuple[int | None, int], zstandard.ZstdCompressor] = _local.__dict__.setdefault("c", {})
    key = (id(dictionary) if dictionary is not None else None, level)
    cctx = cache.get(key)
    if cctx is None:
        cctx = zstandard.ZstdCompressor(level=level, dict_data=dictionary, write_content_size=True,
                                        write_dict_id=False)
        cache[key] = cctx
    return cctx


PARALLEL_AT = 32
"""Values `compress_many` frames in zstd's own threads once it has at least this many."""


def compress_many(values: list[bytes], *, level: int = 3, dictionary: zstandard.ZstdCompressionDict | None = None,
                  dict_id: int = 0) -> list[bytes]:
    """`compress` of each value, in order; many large values (a bulk import's leaf packs) are compressed
    on every core, by zstd's threads outside the interpreter's lock. The frames are the same kind
    `compress` makes (content size, no dictionary id), so `decompress` reads either."""
    if len(values) < PARALLEL_AT or (os.cpu_count() or 1) < 2 or zstandard.backend != "cext":
        return list(map(compressor(level=level, dictionary=dictionary, dict_id=dict_id), values))
    # (the cffi backend has no multi_compress_to_buffer)
    segments: list[bytes | bytearray | memoryview] = list(values)
    packed = _compressor(dictionary, level).multi_compress_to_buffer(segments, threads=-1)
    choose = _framing(dictionary, dict_id)
    return [choose(value, packed[n].tobytes()) for n, value in enumerate(values)]


def _decompressor(dictionary: zstandard.ZstdCompressionDict | None) -> zstandard.ZstdDecompressor:
    cache: dict[int | None, zstandard.ZstdDecompressor] = _local.__dict__.setdefault("d", {})
    key = id(dictionary) if dictionary is not None else None
    dctx = cache.get(key)
    if dctx is None:
        dctx = zstandard.ZstdDecompressor(dict_data=dictionary)
        cache[key] = dctx
    return dctx


def compress(data: bytes, *, level: int = 3, dictionary: zstandard.ZstdCompressionDict | None = None,
             dict_id: int = 0) -> bytes:
    """Frame canonical bytes for storage: a codec byte, then raw or zstd-compressed bytes.

    With a dictionary, `dict_id` (a 32-bit number the store chose for it) is written after the codec
    byte. The smaller of raw and compressed is kept.
    """
    return compressor(level=level, dictionary=dictionary, dict_id=dict_id)(data)


def compressor(*, level: int = 3, dictionary: zstandard.ZstdCompressionDict | None = None,
               dict_id: int = 0) -> Callable[[bytes], bytes]:
    """`compress` with its settings fixed and its compressor looked up once, for framing many values."""
    packer, choose = _compressor(dictionary, level).compress, _framing(dictionary, dict_id)

    def frame(data: bytes) -> bytes:
        return choose(data, packer(data))

    return frame


def _framing(dictionary: zstandard.ZstdCompressionDict | None, dict_id: int) -> Callable[[bytes, bytes], bytes]:
    """The stored value of `data` given its zstd frame `packed`: the codec head and the frame, or the raw
    bytes when compressing did not shrink them."""
    head = bytes([ZSTD_DICT]) + dict_id.to_bytes(4, "big") if dictionary is not None else bytes([ZSTD])
    raw = bytes([RAW])
    overhead = len(head) - 1

    def choose(data: bytes, packed: bytes) -> bytes:
        return raw + data if len(packed) + overhead >= len(data) else head + packed

    return choose


def decompress(value: bytes, *, dictionaries: Mapping[int, zstandard.ZstdCompressionDict] | None = None,
               max_size: int = MAX_OBJECT_SIZE) -> bytes:
    """Undo `compress`, refusing output larger than `max_size` before producing it."""
    if not value:
        raise EncodingError("empty stored value (no codec byte)")
    codec = value[0]
    if codec == RAW:
        if len(value) - 1 > max_size:
            raise EncodingError(f"object of {len(value) - 1} bytes is over the {max_size}-byte limit")
        return bytes(value[1:])
    if codec == ZSTD:
        return _unzstd(value[1:], None, max_size)
    if codec == ZSTD_DICT:
        dict_id = int.from_bytes(value[1:5], "big")
        dictionary = (dictionaries or {}).get(dict_id)
        if dictionary is None:
            raise EncodingError(f"stored value needs compression dictionary {dict_id}, which is not loaded")
        return _unzstd(value[5:], dictionary, max_size)
    raise EncodingError(f"unknown codec byte 0x{codec:02x} in stored value")


def decompressor(dictionaries: Mapping[int, zstandard.ZstdCompressionDict]) -> Callable[[bytes], bytes]:
    """`decompress` with `dictionaries` fixed and the common case (a frame that declares its size, as
    `compress` writes) taken without a call per step, for reading many values."""
    contexts: dict[int, zstandard.ZstdDecompressor] = {}
    plain = _decompressor(None)
    content_size = zstandard.frame_content_size

    def unpack(value: bytes) -> bytes:
        codec = value[0] if value else -1
        if codec == ZSTD_DICT:
            dict_id = int.from_bytes(value[1:5], "big")
            dctx = contexts.get(dict_id)
            if dctx is None:
                dictionary = dictionaries.get(dict_id)
                if dictionary is None:
                    raise EncodingError(f"stored value needs compression dictionary {dict_id}, which is not loaded")
                dctx = contexts[dict_id] = _decompressor(dictionary)
            frame = value[5:]
        elif codec == ZSTD:
            dctx, frame = plain, value[1:]
        else:
            return decompress(value, dictionaries=dictionaries)
        try:
            declared = content_size(frame)
            if 0 <= declared <= MAX_OBJECT_SIZE:
                out = dctx.decompress(frame, max_output_size=MAX_OBJECT_SIZE, allow_extra_data=False)
                if len(out) == declared:
                    return out
        except zstandard.ZstdError:
            pass
        return _unzstd(frame, dictionaries.get(dict_id) if codec == ZSTD_DICT else None, MAX_OBJECT_SIZE)

    return unpack


def _unzstd(frame: bytes, dictionary: zstandard.ZstdCompressionDict | None, max_size: int) -> bytes:
    try:
        declared = zstandard.frame_content_size(frame)
    except zstandard.ZstdError as exc:
        raise EncodingError(f"corrupt zstd frame: {exc}") from None
    if declared > max_size:
        raise EncodingError(f"zstd frame declares {declared} bytes, over the {max_size}-byte limit")
    dctx = _decompressor(dictionary)
    try:
        if declared >= 0:
            # A stored value is one frame: bytes after it are damage (a leaf pack's stray piece).
            out = dctx.decompress(frame, max_output_size=max_size, allow_extra_data=False)
        else:
            out = _bounded_stream(dctx, frame, max_size)
    except zstandard.ZstdError as exc:
        raise EncodingError(f"corrupt zstd frame: {exc}") from None
    if declared >= 0 and len(out) != declared:
        raise EncodingError(f"zstd frame declares {declared} bytes but holds {len(out)}")
    return out


def _bounded_stream(dctx: zstandard.ZstdDecompressor, frame: bytes, max_size: int) -> bytes:
    out = bytearray()
    with dctx.stream_reader(frame) as reader:
        while chunk := reader.read(1 << 16):
            out += chunk
            if len(out) > max_size:
                raise EncodingError(f"zstd frame inflates past the {max_size}-byte limit")
    return bytes(out)
