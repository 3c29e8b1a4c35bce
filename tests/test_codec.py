"""The codec: canonical CBOR round trips, rejection of non-canonical bytes, object ids, compression."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore import report
from ctxstore.errors import CtxStoreError, EncodingError, InvalidInput
from ctxstore.format import codec
from ctxstore.format.codec import compress, decode, decompress, encode
from ctxstore.ids import from_hex, object_id, to_hex

ints = st.integers(min_value=-(2**64), max_value=2**64 - 1)
floats = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 5e-324, -5e-324, 2.2250738585072014e-308, 1.5, 65504.0, 1e300, 0.1]),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
)
scalars = st.one_of(st.none(), st.booleans(), ints, floats, st.text(), st.binary())
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5),
                            st.dictionaries(st.text(max_size=8), inner, max_size=5)),
    max_leaves=25,
)


def same(a: Any, b: Any) -> bool:
    """Equal, telling -0.0 from 0.0 and int from float."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    if type(a) is list:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return list(a) == list(b) or (set(a) == set(b) and all(same(a[k], b[k]) for k in a))
    return bool(a == b)


@settings(max_examples=300, deadline=None)
@given(values)
def test_encode_decode_round_trip(value: Any) -> None:
    data = encode(value)
    back = decode(data)
    assert same(back, value) or (type(value) is dict and set(back) == set(value))
    assert encode(back) == data


@settings(max_examples=100, deadline=None)
@given(st.dictionaries(st.text(max_size=6), ints, max_size=8))
def test_map_order_does_not_change_the_bytes(value: dict[str, int]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert encode(reordered) == encode(value)
    assert object_id(encode(reordered)) == object_id(encode(value))


def test_floats_keep_sign_and_subnormals() -> None:
    for value in (-0.0, 5e-324, -5e-324, 1.5, 0.1, 1e300):
        back = decode(encode(value))
        assert same(back, value)
    assert encode(-0.0) == bytes([0xF9, 0x80, 0x00])
    assert encode(1.5) == bytes([0xF9, 0x3E, 0x00])
    assert len(encode(0.1)) == 9


def test_known_encodings() -> None:
    assert encode(0) == b"\x00"
    assert encode(23) == b"\x17"
    assert encode(24) == b"\x18\x18"
    assert encode(-1) == b"\x20"
    assert encode(2**64 - 1) == b"\x1b" + b"\xff" * 8
    assert encode(-(2**64)) == b"\x3b" + b"\xff" * 8
    assert encode({"b": 1, "a": 2, "aa": 3}) == b"\xa3\x61a\x02\x61b\x01\x62aa\x03"
    assert encode([True, False, None]) == b"\x83\xf5\xf4\xf6"


@pytest.mark.parametrize("value", [
    float("nan"), float("inf"), -float("inf"), 2**64, -(2**64) - 1, {1: "x"}, {("a",): 1}, {b"k": 1},
    object(), (1, 2), {1.5}, [float("nan")], {"a": {"b": float("inf")}},
])
def test_encode_refuses_what_has_no_canonical_form(value: Any) -> None:
    with pytest.raises(EncodingError) as caught:
        encode(value)
    assert isinstance(caught.value, CtxStoreError) and isinstance(caught.value, ValueError)


def test_encode_refuses_deep_nesting() -> None:
    value: Any = []
    for _ in range(500):
        value = [value]
    with pytest.raises(EncodingError):
        encode(value)


NON_CANONICAL = {
    "unsorted keys": b"\xa2\x61b\x01\x61a\x02",
    "length-first order broken": b"\xa2\x62aa\x01\x61b\x02",
    "duplicate keys": b"\xa2\x61a\x01\x61a\x02",
    "non-minimal int (1 byte for 5)": b"\x18\x05",
    "non-minimal int (2 bytes for 200)": b"\x19\x00\xc8",
    "non-minimal int (8 bytes)": b"\x1b\x00\x00\x00\x00\x00\x00\x00\x01",
    "non-minimal negative int": b"\x38\x00",
    "non-minimal text length": b"\x78\x01a",
    "non-minimal bytes length": b"\x59\x00\x01\x00",
    "non-minimal array length": b"\x98\x01\x00",
    "non-minimal map length": b"\xb8\x01\x61a\x00",
    "indefinite array": b"\x9f\x01\x02\xff",
    "indefinite map": b"\xbf\x61a\x01\xff",
    "indefinite text": b"\x7f\x61a\x61b\xff",
    "indefinite bytes": b"\x5f\x41\x00\xff",
    "NaN half": b"\xf9\x7e\x00",
    "NaN double": b"\xfb" + struct.pack(">d", float("nan")),
    "Infinity half": b"\xf9\x7c\x00",
    "-Infinity double": b"\xfb" + struct.pack(">d", -float("inf")),
    "float not shortest": b"\xfb" + struct.pack(">d", 1.5),
    "float single not shortest": b"\xfa" + struct.pack(">f", 1.5),
    "integer key": b"\xa1\x01\x02",
    "bytes key": b"\xa1\x41a\x02",
    "array key": b"\xa1\x80\x02",
    "tag 0": b"\xc0\x61a",
    "tag 42 (CID)": b"\xd8\x2a\x41\x00",
    "tag 0 with a valid date": b"\xc0\x742013-03-21T20:04:00Z",
    "tag 1 epoch date": b"\xc1\x01",
    "self-describe tag": b"\xd9\xd9\xf7\x01",
    "bignum tag": b"\xc2\x49\x01\x00\x00\x00\x00\x00\x00\x00\x00",
    "trailing bytes": b"\x01\x02",
    "trailing garbage after map": b"\xa0\x00",
    "undefined": b"\xf7",
    "simple value": b"\xf0",
    "truncated": b"\x62a",
    "empty": b"",
    "break alone": b"\xff",
    "invalid utf-8": b"\x61\xff",
}


@pytest.mark.parametrize("data", list(NON_CANONICAL.values()), ids=list(NON_CANONICAL))
def test_decode_refuses_non_canonical_bytes(data: bytes) -> None:
    with pytest.raises(EncodingError) as caught:
        decode(data)
    assert str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_decode_error_names_the_problem() -> None:
    with pytest.raises(EncodingError, match="after the top-level item"):
        decode(b"\x01\x02")
    with pytest.raises(EncodingError, match="tag 42"):
        decode(b"\xd8\x2a\x41\x00")
    with pytest.raises(EncodingError, match="canonical"):
        decode(b"\xa2\x61b\x01\x61a\x02")


def test_decode_refuses_deep_nesting_without_crashing() -> None:
    with pytest.raises(EncodingError):
        decode(b"\x81" * 100_000 + b"\x00")


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_decode_of_random_bytes_either_round_trips_or_raises_encoding_error(data: bytes) -> None:
    try:
        value = decode(data)
    except EncodingError:
        return
    assert encode(value) == data


def test_object_id_is_blake3_256() -> None:
    import blake3

    data = encode({"type": "blob", "data": "x"})
    assert object_id(data) == blake3.blake3(data).digest()
    assert len(object_id(data)) == 32


def test_hex_round_trip_and_errors() -> None:
    oid = object_id(b"\x00")
    assert from_hex(to_hex(oid)) == oid
    assert from_hex(to_hex(oid).upper()) == oid
    for bad in ("", "00", "zz" * 32, "0" * 63, "0" * 65, None, 5):
        with pytest.raises(InvalidInput):
            from_hex(bad)  # type: ignore[arg-type]


# -- compression ------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([1, 3, 10]))
def test_compress_round_trip(data: bytes, level: int) -> None:
    assert decompress(compress(data, level=level)) == data


def test_compress_keeps_the_smaller_form() -> None:
    assert compress(b"\x01\x02\x03") == b"\x00\x01\x02\x03"
    packed = compress(b"a" * 10_000)
    assert packed[0] == 0x01 and len(packed) < 100
    assert decompress(packed) == b"a" * 10_000


def test_compress_with_a_dictionary() -> None:
    samples = [encode({"role": "user", "content": f"message number {n} about the deploy"})
               for n in range(300)]
    dictionary = zstandard.train_dictionary(2048, samples)
    data = encode({"role": "user", "content": "message number 9999 about the deploy window"}) * 3
    packed = compress(data, dictionary=dictionary, dict_id=7)
    assert packed[0] == 0x02 and packed[1:5] == (7).to_bytes(4, "big")
    assert decompress(packed, dictionaries={7: dictionary}) == data
    with pytest.raises(EncodingError, match="dictionary 7"):
        decompress(packed)


def test_decompress_refuses_a_bomb() -> None:
    """A frame declaring more than the limit is refused before it is inflated."""
    bomb = compress(b"\x00" * 5_000_000)
    assert len(bomb) < 1000
    with pytest.raises(EncodingError, match="limit"):
        decompress(bomb, max_size=1_000_000)
    assert decompress(bomb, max_size=5_000_000) == b"\x00" * 5_000_000


def test_decompress_refuses_a_bomb_without_declared_size() -> None:
    frame = zstandard.ZstdCompressor(write_content_size=False).compress(b"\x00" * 3_000_000)
    with pytest.raises(EncodingError, match="limit"):
        decompress(b"\x01" + frame, max_size=1_000_000)
    assert decompress(b"\x01" + frame, max_size=3_000_000) == b"\x00" * 3_000_000


def test_decompress_refuses_a_truncated_frame() -> None:
    packed = compress(b"abc" * 1000)
    with pytest.raises(EncodingError):
        decompress(packed[:-5])


def test_decompress_refuses_bytes_after_the_frame() -> None:
    """A stored value is one frame and nothing after it (a stray piece after a leaf pack's frame is damage)."""
    packed = compress(b"abc" * 1000)
    assert packed[0] == codec.ZSTD
    for read in (decompress, codec.decompressor({})):
        assert read(packed) == b"abc" * 1000
        with pytest.raises(EncodingError, match="unused data"):
            read(packed + b"more")


@pytest.mark.parametrize("value", [b"", b"\x09abc", b"\x01not zstd", b"\x02\x00\x00"])
def test_decompress_refuses_bad_values(value: bytes) -> None:
    with pytest.raises(EncodingError):
        decompress(value)


def test_raw_over_the_limit_is_refused() -> None:
    with pytest.raises(EncodingError):
        decompress(b"\x00" + b"a" * 101, max_size=100)


_anything = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**66), max_value=2**66), st.floats(),
              st.text(max_size=4), st.binary(max_size=4), st.tuples(st.integers()), st.sets(st.integers())),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.text(max_size=3), st.integers()), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=400)
@given(_anything)
def test_the_fast_value_check_agrees_with_the_one_that_names_the_problem(value: Any) -> None:
    try:
        codec._check(value, 0, "")
        accepted = True
    except EncodingError:
        accepted = False
    assert codec._fits(value, 0) == accepted


def test_the_fast_value_check_agrees_at_the_depth_limit() -> None:
    for depth in range(codec.MAX_DEPTH - 3, codec.MAX_DEPTH + 3):
        for leaf in ("x", b"x", 1, [["x", 1]], [[]]):
            value: Any = leaf
            for _ in range(depth):
                value = [value]
            try:
                codec._check(value, 0, "")
                accepted = True
            except EncodingError:
                accepted = False
            assert codec._fits(value, 0) == accepted, (depth, leaf)


def test_json_fields_spells_fields_in_camel_case_copies_containers_and_nests_reports() -> None:
    from dataclasses import dataclass, field

    @dataclass
    class Inner:
        round_trips: int = 1

        def to_dict(self) -> dict[str, Any]:
            return report.json_fields(self)

    @dataclass
    class Outer:
        new_objects: int
        problems: list[str] = field(default_factory=list)
        inner: Inner = field(default_factory=Inner)

        @property
        def ok(self) -> bool:
            return not self.problems

        @property
        def saved_bytes(self) -> int:
            return 7

    outer = Outer(3, ["p"])
    data = report.json_fields(outer, before=("ok",), after=("saved_bytes",))
    assert list(data) == ["ok", "newObjects", "problems", "inner", "savedBytes"]
    assert data == {"ok": False, "newObjects": 3, "problems": ["p"], "inner": {"roundTrips": 1}, "savedBytes": 7}
    data["problems"].append("q")
    assert outer.problems == ["p"]  # a copy, not the report's own list


# -- hostile input: decoding is linear, no tags, bounded (issue 12, defect 1) ----------------------------


def _sharing_bomb(levels: int) -> bytes:
    """CBOR whose value-sharing tags (28 shareable, 29 reference) make ~`levels`*6 bytes stand for a tree
    of 2**levels leaves: each level is a shared array holding the level below twice."""
    out = b"\xd8\x1c\x82\x00\x00"
    for i in range(1, levels):
        ref = b"\xd8\x1d" + (bytes([i - 1]) if i - 1 < 24 else bytes([0x18, i - 1]))
        out = b"\xd8\x1c\x82" + out + ref
    return out


@pytest.mark.parametrize("levels", [20, 70, 200])
def test_decode_refuses_value_sharing_bombs(levels: int) -> None:
    """A few hundred bytes of sharing tags are refused (a tag, or too deep) before anything is expanded."""
    with pytest.raises(EncodingError, match=r"CBOR tag 28 is not allowed|nesting depth"):
        decode(_sharing_bomb(levels))


@given(st.sampled_from(sorted(codec.SEMANTIC_TAGS | {6, 7, 42, 99999, 2**32, 2**64 - 1})),
       st.sampled_from([0, b"x", "x", [1], {"a": 1}, None]))
def test_decode_refuses_every_tag(tag: int, inner: Any) -> None:
    """Objects hold no tags: any tag, interpreted by cbor2 or not, is an EncodingError naming it."""
    import cbor2

    with pytest.raises(EncodingError, match=f"CBOR tag {tag} is not allowed"):
        decode(cbor2.dumps(cbor2.CBORTag(tag, inner)))


@given(st.binary(min_size=1, max_size=400))
@settings(max_examples=400)
def test_decode_of_random_bytes_with_tag_and_indefinite_heads_is_refused_or_canonical(tail: bytes) -> None:
    """Random bytes seeded with sharing tags, string refs and indefinite heads: refused or canonical."""
    data = b"\xd8\x1c\x9f" + tail if tail[0] & 1 else b"\xd9\x01\x00\x82" + tail
    with pytest.raises(EncodingError):
        decode(data)
    try:
        value = decode(tail)
    except EncodingError:
        return
    assert encode(value) == tail


@pytest.mark.parametrize("data", [
    b"\x9b" + (2**40).to_bytes(8, "big"),      # an array claiming 2**40 items, none present
    b"\x5b" + (2**60).to_bytes(8, "big") + b"ab",  # a byte string far longer than the input
    b"\xbb" + (2**40).to_bytes(8, "big") + b"\x60\x00",
    b"\x9f\x01\x02\xff",                       # indefinite-length array
    b"\x81" * (codec.MAX_DEPTH + 1) + b"\x00",  # one level deeper than the limit
])
def test_decode_refuses_lengths_past_the_input_indefinite_lengths_and_deep_nesting(data: bytes) -> None:
    with pytest.raises(EncodingError):
        decode(data)


def test_decode_accepts_nesting_at_the_depth_limit() -> None:
    value: Any = 0
    for _ in range(codec.MAX_DEPTH):
        value = [value]
    assert decode(encode(value)) == value


@pytest.mark.parametrize("value", ["\ud800", ["ok", {"k": "a\udfffb"}], {"key\ud83d": 1}])
def test_encode_refuses_lone_surrogates_naming_where(value: Any) -> None:
    """Text that is not Unicode scalar values has no UTF-8 form: an EncodingError, not UnicodeEncodeError."""
    with pytest.raises(EncodingError, match="lone surrogate"):
        encode(value)


def test_encode_refuses_a_list_that_contains_itself() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(EncodingError, match="nested deeper"):
        encode(loop)


def test_encode_refuses_values_over_the_object_size_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one object size limit holds on write: nothing is encoded that decode would refuse."""
    monkeypatch.setattr(codec, "MAX_OBJECT_SIZE", 1000)
    encode("x" * 990)
    with pytest.raises(EncodingError, match="over the 1000-byte object limit"):
        encode("x" * 1000)


_SAMPLES = [(f"role user content message number {i} about the weather " * (1 + i % 5)).encode() for i in range(400)]
_DICTIONARY = zstandard.train_dictionary(2048, _SAMPLES)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=600), st.sampled_from(_SAMPLES)), max_size=2 * codec.PARALLEL_AT),
       st.booleans())
def test_compress_many_frames_each_value_as_compress_would_read_back(values: list[bytes], with_dict: bool) -> None:
    """Below `PARALLEL_AT` values and above (zstd's threads), each framed value reads back as itself, is
    never longer than raw framing, and is raw exactly where compressing would not shrink it."""
    options: dict[str, Any] = {"dictionary": _DICTIONARY, "dict_id": 9} if with_dict else {}
    framed = codec.compress_many(values, **options)
    assert len(framed) == len(values)
    for value, one in zip(values, framed, strict=True):
        assert decompress(one, dictionaries={9: _DICTIONARY}) == value
        assert len(one) <= len(value) + 1
        assert (one[0] == codec.RAW) == (compress(value, **options)[0] == codec.RAW)


def test_compress_many_frames_one_at_a_time_where_zstd_has_no_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cffi backend has no `multi_compress_to_buffer`: there the values are framed one by one, the
    same frames."""
    values = [_SAMPLES[n % len(_SAMPLES)] * (1 + n % 3) for n in range(2 * codec.PARALLEL_AT)]
    threaded = codec.compress_many(values, dictionary=_DICTIONARY, dict_id=9)
    monkeypatch.setattr(codec.zstandard, "backend", "cffi")
    assert codec.compress_many(values, dictionary=_DICTIONARY, dict_id=9) == threaded
    assert threaded == [compress(v, dictionary=_DICTIONARY, dict_id=9) for v in values]
