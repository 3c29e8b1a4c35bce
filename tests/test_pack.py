"""The pack format: round trips, back-references, staging and connectivity, and refusal of bad packs."""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Iterable

import blake3
import cbor2
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxstore.errors import BadPack, InvalidInput
from ctxstore.format import codec, seq
from ctxstore.format.codec import decode, encode
from ctxstore.format.objects import Entry, Revision, SeqNode, encode_object, parse_object
from ctxstore.ids import ObjectId, object_id
from ctxstore.pack.staging import missing_references, verify_pack
from ctxstore.pack.stream import HEADER_MAX, MAGIC, VERSION, declared_count, read_pack, write_pack
from ctxstore.store.memory import MemoryStore

# -- helpers ---------------------------------------------------------------------------------------------


def varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def pack_bytes(objects: list[tuple[ObjectId, bytes]]) -> bytes:
    return b"".join(write_pack(objects, len(objects)))


def raw(values: Iterable[object]) -> list[tuple[ObjectId, bytes]]:
    out = []
    for value in values:
        data = encode(value)
        out.append((object_id(data), data))
    return out


def craft(section: bytes, *, count: int, version: int = VERSION, magic: bytes = MAGIC,
          chunk: int = 1 << 16, frame: bytes | None = None, after_frame: bytes = b"",
          trailer: bytes | None = None) -> bytes:
    """A pack built by hand around an already laid-out object section, with a correct trailer by default."""
    if frame is None:
        cobj = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
        frame = cobj.compress(section) + cobj.flush()
    frame += after_frame
    body = magic + bytes([version]) + varint(count)
    for i in range(0, len(frame), chunk):
        body += varint(len(frame[i:i + chunk])) + frame[i:i + chunk]
    body += varint(0)
    return body + (blake3.blake3(body).digest() if trailer is None else trailer)


def section(bodies: Iterable[bytes]) -> bytes:
    return b"".join(varint(len(b)) + b for b in bodies)


def chain(n: int) -> tuple[list[tuple[ObjectId, bytes]], ObjectId]:
    """The objects of n appends, each object after those it references; returns them and the head."""
    objs: dict[ObjectId, bytes] = {}
    order: list[ObjectId] = []

    def put(obj: object) -> ObjectId:
        oid, data = encode_object(obj)  # type: ignore[arg-type]
        if oid not in objs:
            objs[oid] = data
            order.append(oid)
        return oid

    spine: seq.Spine = [[]]
    parent = None
    for i in range(n):
        eid = f"e{i:05d}"
        eoid = put(Entry(eid, "turn", {"role": "user" if i % 2 else "assistant", "content": f"message {i}"}))
        spine = seq.append(spine, [[eid, eoid]], put)
        parent = put(Revision(parent, 1_700_000_000_000 + i, {"type": "append", "entryIds": [eid],
                                                                 "entries": [eoid]}, spine, i + 1))
    assert parent is not None
    return [(o, objs[o]) for o in order], parent


SMALL, SMALL_HEAD = chain(12)
SMALL_PACK = pack_bytes(SMALL)

leaves = st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.text(max_size=20) \
    | st.binary(max_size=40) | st.floats(allow_nan=False, allow_infinity=False)
values = st.recursive(leaves, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=12)


@st.composite
def object_lists(draw: st.DrawFn) -> list[tuple[ObjectId, bytes]]:
    """Distinct CBOR objects, some of which hold the ids of earlier ones (sent as back-references)."""
    out: list[tuple[ObjectId, bytes]] = []
    seen: set[bytes] = set()
    for _ in range(draw(st.integers(0, 8))):
        value = {"v": draw(values)}
        if out and draw(st.booleans()):
            value["refs"] = [draw(st.sampled_from(out))[0] for _ in range(draw(st.integers(1, 3)))]
        data = encode(value)
        oid = object_id(data)
        if oid not in seen:
            seen.add(oid)
            out.append((oid, data))
    return out


def refuses(data: bytes | Iterable[bytes], **limits: int) -> BadPack:
    with pytest.raises(BadPack) as info:
        for _ in read_pack(data, check=decode, **limits):  # type: ignore[arg-type]
            pass
    return info.value


def read_all(data: object, **kw: object) -> list[tuple[ObjectId, bytes]]:
    return list(read_pack(data, **kw))  # type: ignore[arg-type]


# -- round trips -----------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(object_lists(), st.integers(1, 64))
def test_round_trip_gives_the_same_objects_in_the_same_order(objects: list[tuple[ObjectId, bytes]],
                                                             chunk_size: int) -> None:
    data = pack_bytes(objects)
    assert read_all(data, check=decode) == objects
    chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
    assert read_all(iter(chunks), check=decode) == objects


def test_real_objects_round_trip_with_shape_checks() -> None:
    assert read_all(SMALL_PACK) == SMALL
    assert read_all(io.BytesIO(SMALL_PACK)) == SMALL


def test_empty_pack_round_trips() -> None:
    assert read_all(pack_bytes([])) == []


def test_the_documented_examples_hold() -> None:
    """docs/protocol.md shows these bytes; a change here is a format change."""
    empty = pack_bytes([])
    assert empty[:21] == bytes.fromhex("43545850 03 00 0d 28b52ffd0400 010000 99e9d851 00")
    assert empty[21:] == blake3.blake3(empty[:21]).digest()
    objs = raw([{"a": 1}])
    objs += raw([{"r": objs[0][0]}])
    objs += raw([{"r": [objs[0][0], objs[1][0]]}])
    data = pack_bytes(objs)
    assert data[:6] == bytes.fromhex("43545850 03 03")
    frame = data[7:7 + data[6]]
    plain = zstandard.ZstdDecompressor().decompressobj().decompress(frame)
    assert plain == bytes.fromhex("04a1616101 05a16172c601 08a1617282c602c601")


def test_a_file_source_is_read_only_up_to_the_end_of_the_pack() -> None:
    source = io.BytesIO(SMALL_PACK + b"next message")
    assert read_all(source) == SMALL
    assert source.read() == b"next message"


def test_a_large_pack_streams_in_many_chunks() -> None:
    objs = raw({"n": i, "text": f"item {i} " + "word " * (i % 50)} for i in range(3000))
    chunks = list(write_pack(objs, len(objs)))
    assert len(chunks) > 2
    assert read_all(iter(chunks), check=decode) == objs


def test_ids_of_earlier_objects_are_sent_as_back_references() -> None:
    """No 32-byte id of an object already in the pack appears in the decompressed object section."""
    objs, _ = chain(200)
    plain = plain_section(pack_bytes(objs))
    assert all(oid not in plain for oid, _ in objs)
    assert len(plain) < sum(len(d) for _, d in objs) * 0.6


def test_write_pack_refuses_a_wrong_count_a_duplicate_or_a_wrong_id() -> None:
    objs = raw([{"a": 1}, {"a": 2}])
    with pytest.raises(InvalidInput):
        list(write_pack(objs, 3))
    with pytest.raises(InvalidInput):
        list(write_pack(objs, 1))
    with pytest.raises(InvalidInput):
        list(write_pack([objs[0], objs[0]], 2))
    with pytest.raises(InvalidInput):
        list(write_pack([(objs[1][0], objs[0][1])], 1))
    with pytest.raises(InvalidInput, match="must be bytes"):
        list(write_pack([(objs[0][0], objs[0][1].decode("latin-1"))], 1))  # type: ignore[list-item]


# -- staging and connectivity ----------------------------------------------------------------------------


def test_verify_pack_stages_every_object_and_its_links() -> None:
    with verify_pack(SMALL_PACK) as staged:
        assert list(staged) == SMALL
        assert staged.ids == [oid for oid, _ in SMALL]
        assert missing_references(staged.links, [SMALL_HEAD], MemoryStore()) == set()


def test_verify_pack_spills_to_disk_and_reads_back() -> None:
    with verify_pack(SMALL_PACK, spool_size=100) as staged:
        assert list(staged) == SMALL


def test_missing_references_names_what_neither_the_pack_nor_the_store_holds() -> None:
    objs, head = chain(5)
    first_entry = next(oid for oid, data in objs if isinstance(parse_object(data), Entry))
    partial = {oid: parse_object(data) for oid, data in objs if oid != first_entry}
    assert missing_references(partial, [head], MemoryStore()) == {first_entry}
    store = MemoryStore()
    store.put(first_entry, dict(objs)[first_entry])
    assert missing_references(partial, [head], store) == set()
    unknown = ObjectId(bytes(32))
    assert missing_references(partial, [unknown], store) == {unknown}


def test_missing_references_stops_at_objects_the_store_holds() -> None:
    objs, head = chain(6)
    store = MemoryStore()
    store.put_many(objs[:-1])  # everything but the head revision
    incoming = {objs[-1][0]: parse_object(objs[-1][1])}
    assert missing_references(incoming, [head], store) == set()


def test_verify_pack_refuses_a_pack_whose_trailer_is_wrong_before_returning() -> None:
    with pytest.raises(BadPack):
        verify_pack(SMALL_PACK[:-1] + bytes([SMALL_PACK[-1] ^ 1]))


# -- bad packs -------------------------------------------------------------------------------------------


def test_a_wrong_trailer_is_refused() -> None:
    err = refuses(SMALL_PACK[:-32] + bytes(32))
    assert "trailer" in str(err)


def test_truncation_at_every_tenth_byte_is_refused() -> None:
    for cut in range(0, len(SMALL_PACK), 10):
        refuses(SMALL_PACK[:cut])
    refuses(SMALL_PACK[:-1])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_flipped_byte_anywhere_is_refused(data: st.DataObject) -> None:
    at = data.draw(st.integers(0, len(SMALL_PACK) - 1))
    bit = data.draw(st.integers(1, 255))
    corrupt = bytearray(SMALL_PACK)
    corrupt[at] ^= bit
    with pytest.raises(BadPack):
        read_all(bytes(corrupt))


def test_bytes_after_the_trailer_are_refused() -> None:
    assert "after the trailer" in str(refuses(SMALL_PACK + b"x"))
    refuses(iter([SMALL_PACK, b"x"]))


def test_a_wrong_magic_or_version_is_refused() -> None:
    good = section([encode({"a": 1})])
    assert "not a ctxstore pack" in str(refuses(craft(good, count=1, magic=b"PACK")))
    for other in (0, 1, 2, 4, 255):
        message = str(refuses(craft(good, count=1, version=other)))
        assert f"pack version {other} is not supported" in message
        assert f"pack version {VERSION} only" in message


def test_a_wrong_count_is_refused() -> None:
    bodies = [encode({"a": i}) for i in range(3)]
    refuses(craft(section(bodies), count=2))
    refuses(craft(section(bodies), count=4))
    assert len(read_all(craft(section(bodies), count=3), check=decode)) == 3


def test_objects_that_are_not_canonical_cbor_are_refused() -> None:
    unsorted = b"\xa2\x61b\x01\x61a\x02"  # {"b": 1, "a": 2}: keys out of order
    long_int = b"\xa1\x61a\x18\x01"  # {"a": 1} with a one-byte integer argument
    indefinite = b"\xa1\x61a\x9f\x01\xff"  # an indefinite-length array
    trailing = encode({"a": 1}) + b"\x00"
    for body in (unsorted, long_int, indefinite, trailing, b"\xff", b""):
        err = refuses(craft(section([body]), count=1))
        assert "object 0" in str(err)


def test_an_object_of_the_wrong_shape_is_refused() -> None:
    bad = encode({"type": "entry", "id": "x", "kind": "turn"})  # no message
    with pytest.raises(BadPack, match="object 0"):
        read_all(craft(section([bad]), count=1))
    with pytest.raises(BadPack):
        verify_pack(craft(section([bad]), count=1))


def test_tags_and_bad_back_references_are_refused() -> None:
    first = encode({"a": 1})
    oid = object_id(first)
    refuses(craft(section([cbor2.dumps({"r": cbor2.CBORTag(6, 1)}, canonical=True)]), count=1))  # nothing back
    refuses(craft(section([first, cbor2.dumps({"r": cbor2.CBORTag(6, 0)}, canonical=True)]), count=2))  # itself
    refuses(craft(section([first, cbor2.dumps({"r": cbor2.CBORTag(6, 5)}, canonical=True)]), count=2))
    refuses(craft(section([first, cbor2.dumps({"r": cbor2.CBORTag(6, -1)}, canonical=True)]), count=2))
    refuses(craft(section([first, cbor2.dumps({"r": cbor2.CBORTag(7, 0)}, canonical=True)]), count=2))
    refuses(craft(section([first, cbor2.dumps({"r": cbor2.CBORTag(6, "0")}, canonical=True)]), count=2))
    # An earlier id sent in full is a second encoding of the same pack: refused.
    err = refuses(craft(section([first, encode({"r": oid})]), count=2))
    assert "back-reference" in str(err)
    ok = read_all(craft(section([first, cbor2.dumps({"r": cbor2.CBORTag(6, 1)}, canonical=True)]), count=2),
                  check=decode)
    assert ok[1][1] == encode({"r": oid})


def test_a_repeated_object_is_refused() -> None:
    body = encode({"a": 1})
    assert "repeats" in str(refuses(craft(section([body, body]), count=2)))


def test_declared_sizes_far_beyond_the_limits_are_refused_before_reading() -> None:
    assert "objects" in str(refuses(craft(b"", count=10**12)))
    huge_object = varint(1 << 40) + b"\x00" * 16
    assert "limit" in str(refuses(craft(huge_object, count=1)))
    chunk = MAGIC + bytes([VERSION]) + varint(1) + varint(1 << 40)
    assert "limit" in str(refuses(chunk + b"\x00" * 64))
    assert "limit" in str(refuses(craft(section([encode("x" * 5000)]), count=1), max_object_size=1000))
    frame = zstandard.ZstdCompressor(write_content_size=True).compress(b"\x00" * (8 << 20))
    assert "declares" in str(refuses(craft(b"", count=1, frame=frame), max_total_size=1 << 20))


def test_a_zstd_bomb_fails_fast_without_inflating() -> None:
    cobj = zstandard.ZstdCompressor(level=1, write_content_size=False).compressobj()
    frame = b"".join(cobj.compress(b"\x00" * (1 << 20)) for _ in range(1024)) + cobj.flush()  # 1 GiB
    assert len(frame) < 256 * 1024
    bomb = craft(b"", count=1, frame=frame)
    tracemalloc.start()
    try:
        refuses(bomb)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20


def test_objects_inflating_past_the_total_limit_are_refused() -> None:
    bodies = [encode({"n": i, "pad": "x" * 100_000}) for i in range(40)]  # 4 MB, compresses to little
    err = refuses(craft(section(bodies), count=40), max_total_size=1 << 20)
    assert "inflate" in str(err)


def test_data_after_the_compressed_stream_is_refused() -> None:
    good = section([encode({"a": 1})])
    refuses(craft(good, count=1, after_frame=b"\x00\x01"))
    refuses(craft(good + b"\x00", count=1))  # a stray byte after the last object


def test_a_padded_varint_is_refused() -> None:
    body = MAGIC + bytes([VERSION]) + b"\x81\x00"
    assert "padded" in str(refuses(body))


# -- fuzzing ---------------------------------------------------------------------------------------------


def _only_bad_pack(data: bytes, **kw: object) -> None:
    try:
        for _ in read_pack(data, **kw):  # type: ignore[arg-type]
            pass
    except BadPack:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_are_refused_or_read_never_crash(data: bytes) -> None:
    _only_bad_pack(data)
    _only_bad_pack(MAGIC + bytes([VERSION]) + data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_packs_never_crash(data: st.DataObject) -> None:
    packed = bytearray(SMALL_PACK)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(packed)))
        action = data.draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if action == "flip" and at < len(packed):
            packed[at] ^= data.draw(st.integers(1, 255))
        elif action == "insert":
            packed[at:at] = data.draw(st.binary(min_size=1, max_size=8))
        elif action == "delete":
            del packed[at:at + data.draw(st.integers(1, 8))]
        else:
            del packed[at:]
    _only_bad_pack(bytes(packed))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=60), max_size=4), st.integers(0, 5))
def test_valid_framing_around_random_objects_never_crashes(bodies: list[bytes], count: int) -> None:
    """Compression and trailer are right, so the random objects reach CBOR decoding and shape checks."""
    _only_bad_pack(craft(section(bodies), count=count))


@settings(max_examples=300, deadline=None)
@given(values, st.binary(max_size=3))
def test_valid_cbor_of_any_shape_is_refused_or_read_never_crash(value: object, junk: bytes) -> None:
    body = cbor2.dumps(value, canonical=True)
    _only_bad_pack(craft(section([body]), count=1))
    _only_bad_pack(craft(section([body + junk]), count=1))
    _only_bad_pack(craft(section([codec.encode({"type": "revision", "x": value})]), count=1))


# -- rebuildable revisions (version 2) -------------------------------------------------------------------

def rebuildable_pack(objects: list[tuple[ObjectId, bytes]]) -> tuple[bytes, list[tuple[ObjectId, bytes]]]:
    """The pack of a chain with every append revision rebuildable (no seq nodes), and what it must give."""
    kinds = {oid: type(parse_object(data)) for oid, data in objects}
    sent = [(o, d) for o, d in objects if kinds[o] is not SeqNode]
    revisions = {o for o, d in objects if kinds[o] is Revision}
    return b"".join(write_pack(sent, len(sent), rebuildable=revisions)), objects


def tag(n: int, value: object) -> cbor2.CBORTag:
    return cbor2.CBORTag(n, value)


DERIVED = tag(7, None)


def test_rebuildable_revisions_round_trip_to_the_same_objects() -> None:
    objects, _ = chain(60)
    data, expected = rebuildable_pack(objects)
    got = read_all(data)
    assert sorted(got) == sorted(expected)
    # Each rebuilt node comes before the revision that needs it, as a receiver stores them.
    position = {oid: i for i, (oid, _) in enumerate(got)}
    for oid, body in got:
        obj = parse_object(body)
        if isinstance(obj, Revision):
            assert all(position[node] < position[oid] for node, _ in seq.subtrees(obj.seq))
    assert len(data) < len(pack_bytes(objects)) / 2


def test_packs_are_written_in_the_one_version_and_other_versions_are_not_read() -> None:
    objects, _ = chain(5)
    data = bytearray(b"".join(write_pack(objects, len(objects))))
    assert data[:4] == MAGIC and data[4] == VERSION == 3
    assert [oid for oid, _ in read_pack(bytes(data))] == [oid for oid, _ in objects]
    for old in (1, 2):  # the versions of repository format 1: refused like any other
        data[4] = old
        assert f"pack version {old} is not supported" in str(refuses(bytes(data)))


def test_write_pack_refuses_to_send_a_revision_that_is_not_an_append_rebuildable() -> None:
    objects, _ = chain(2)
    entry = next(o for o, d in objects if isinstance(parse_object(d), Entry))
    with pytest.raises(InvalidInput, match="not an append revision"):
        b"".join(write_pack(objects, len(objects), rebuildable={entry}))


def _first_revision_records(first_tag: object = DERIVED, size: object = DERIVED, ids: object = DERIVED,
                            op_type: str = "append") -> list[bytes]:
    """An entry and a rebuildable revision appending it, with chosen fields (a valid pair by default)."""
    entry = Entry("e1", "turn", {"role": "user", "content": "hello"})
    op = {"type": op_type, "entries": [tag(6, 1)], "entryIds": ids}
    revision = {"type": "revision", "createdAt": 1, "operation": op, "treeSpine": first_tag, "size": size}
    return [encode_object(entry)[1], cbor2.dumps(revision, canonical=True)]


def test_a_crafted_rebuildable_revision_is_rebuilt() -> None:
    got = read_all(craft(section(_first_revision_records()), count=2))
    revision = parse_object(got[-1][1])
    assert isinstance(revision, Revision) and revision.size == 1
    assert revision.operation == {"type": "append", "entries": [got[0][0]], "entryIds": ["e1"]}
    assert revision.seq == [[["e1", got[0][0]]]] and len(got) == 2


@pytest.mark.parametrize(("fields", "reason"), [
    ({"size": 1}, "all as tag 7"),
    ({"ids": ["e1"]}, "all as tag 7"),
    ({"op_type": "view"}, "only in a revision whose operation is an append"),
    ({"first_tag": tag(7, 1), "size": 1, "ids": ["e1"]}, "tag 7"),
])
def test_malformed_rebuildable_revisions_are_refused(fields: dict[str, object], reason: str) -> None:
    assert reason in str(refuses(craft(section(_first_revision_records(**fields)), count=2)))  # type: ignore


def test_tag_7_outside_a_revision_is_refused() -> None:
    body = cbor2.dumps({"type": "entry", "id": DERIVED, "kind": "turn", "message": {"role": "user"}},
                       canonical=True)
    assert "tag 7 is not allowed" in str(refuses(craft(section([body]), count=1)))


def test_a_rebuild_needs_its_parent_and_entries_in_the_pack_or_the_lookup() -> None:
    objects, _ = chain(3)
    known = dict(rebuildable_pack(objects)[1])
    expected = list(known.items())
    # The pack of the third revision alone, sent rebuildable: its parent and its tree are elsewhere.
    third = expected[-1][0]
    entry = next(o for o, d in reversed(expected) if isinstance(parse_object(d), Entry))
    alone = b"".join(write_pack([(entry, known[entry]), (third, known[third])], 2, rebuildable={third}))
    error = str(refuses(alone))
    assert "names parent revision" in error and "neither in the pack before it nor in the repository" in error
    got = read_all(alone, lookup=known.get)
    assert got[-1] == (third, known[third])
    # The entry missing: the revision's entry is named by its full id, found nowhere.
    lonely = b"".join(write_pack([(third, known[third])], 1, rebuildable={third}))
    assert "names appended entry" in str(refuses(lonely))


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_mutated_rebuildable_packs_never_crash(data: st.DataObject) -> None:
    packed = bytearray(SMALL_REBUILT_PACK)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(packed) - 1))
        packed[at] ^= data.draw(st.integers(1, 255))
    _only_bad_pack(bytes(packed))


SMALL_REBUILT_PACK = rebuildable_pack(SMALL)[0]


def records_of(data: bytes) -> list[bytes]:
    """The record bodies of a pack."""
    plain = plain_section(data)
    out, at = [], 0
    while at < len(plain):
        size, at = read_varint(plain, at)
        out.append(plain[at:at + size])
        at += size
    return out


def plain_section(data: bytes) -> bytes:
    """The decompressed object section of a pack written by `write_pack` (one frame)."""
    pos = len(MAGIC) + 1
    pos = read_varint(data, pos)[1]  # past the count
    frame = b""
    while True:
        size, pos = read_varint(data, pos)
        if size == 0:
            break
        frame += data[pos:pos + size]
        pos += size
    return zstandard.ZstdDecompressor().decompressobj().decompress(frame)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


_refs = st.builds(lambda n: tag(6, n), st.integers(-2, 30)) | st.binary(min_size=31, max_size=33) | values


@settings(max_examples=300, deadline=None)
@given(st.lists(_refs, max_size=4) | _refs, _refs, values, st.booleans())
def test_rebuildable_revisions_with_any_fields_are_refused_or_read_never_crash(
        entries: object, parent: object, created: object, with_parent: bool) -> None:
    """A rebuild runs on whatever the record names: missing, wrong-typed or odd objects give BadPack."""
    records = records_of(SMALL_REBUILT_PACK)
    revision = cbor2.loads(records[-1])
    assert revision["treeSpine"] == DERIVED  # the chain's last revision, sent rebuildable
    revision["operation"]["entries"] = entries
    revision["createdAt"] = created
    if with_parent:
        revision["parent"] = parent
    else:
        revision.pop("parent", None)
    try:
        body = cbor2.dumps(revision, canonical=True)
    except Exception:  # what cbor2 cannot encode is no record at all
        return
    _only_bad_pack(craft(section([*records[:-1], body]), count=len(records)))


@settings(max_examples=200)
@given(count=st.integers(0, 2**63), cut=st.integers(0, HEADER_MAX))
def test_the_declared_count_is_read_from_a_headers_first_bytes_once_they_hold_it(count: int, cut: int) -> None:
    """What a progress meter shows: the header's count once its bytes are all there, else 0."""
    header = b"".join(write_pack([], count))[:HEADER_MAX] if count == 0 else MAGIC + bytes([VERSION]) + varint(count)
    whole = len(MAGIC) + 1 + len(varint(count))
    assert declared_count(header[:cut]) == (count if cut >= whole else 0)
    assert declared_count(bytes([MAGIC[0] ^ 1]) + header[1:]) == 0

