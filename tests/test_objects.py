"""The four object types: encoding, ids, shape checks and the references they hold."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore.errors import EncodingError, InvalidObject
from ctxstore.format.codec import encode
from ctxstore.format.objects import (
    Blob,
    Entry,
    Revision,
    SeqNode,
    encode_entry,
    encode_object,
    entry_message,
    parse_object,
    references,
    revision_header,
    revision_without_operation,
)
from ctxstore.ids import object_id

OID = object_id(b"x")
OID2 = object_id(b"y")


def test_entry_round_trip_and_id() -> None:
    entry = Entry("e1", "turn", {"role": "user", "content": "hi"}, {"k": [1, 2.5]}, None)
    oid, data = encode_object(entry)
    assert oid == object_id(data)
    assert parse_object(data) == entry
    assert parse_object(data, trusted=True) == entry
    assert encode_object(parse_object(data)) == (oid, data)


def test_entry_fields_are_omitted_when_absent() -> None:
    value = Entry("e1", "turn", {"role": "user"}).to_value()
    assert set(value) == {"type", "id", "kind", "message"}


SPINE = [[["c", OID], ["d", None]], [[OID2, 40], [OID, 7]], [[OID2, 300]]]
"""A spine of three levels: the last leaf's items, then each level's items but the ref to the one below."""


def test_revision_round_trip() -> None:
    op = {"type": "append", "entryIds": ["a"], "entries": [OID]}
    rev = Revision(OID2, 1717000000000, op, SPINE, 349)
    _oid, data = encode_object(rev)
    assert parse_object(data) == rev
    assert parse_object(data, trusted=True) == rev
    assert encode_object(parse_object(data)) == (_oid, data)
    assert rev.to_value()["treeSpine"] == SPINE
    root = Revision(None, 0, None, [[]], 0)
    root.check()
    assert "parent" not in root.to_value() and "operation" not in root.to_value()
    assert parse_object(encode_object(root)[1]) == root
    assert references(root) == []


def test_revision_references_the_spine() -> None:
    """The entries of its leaf level, the nodes its higher levels point to, its parent, its operation's."""
    op = {"type": "append", "entryIds": ["a"], "entries": [OID2]}
    rev = Revision(OID2, 1, op, SPINE, 349)
    assert references(rev) == [OID, OID2, OID, OID2, OID2, OID2]
    assert references(Revision(None, 1, None, [[["a", None], ["b", OID2]]], 2)) == [OID2]
    assert references(Revision(None, 1, None, [[], [[OID, 3]]], 3)) == [OID]


def test_revision_size_must_be_the_spine_count() -> None:
    for size in (0, 348, 350):
        with pytest.raises(InvalidObject) as caught:
            Revision(None, 1, None, SPINE, size).check()
        assert "size" in str(caught.value)
    with pytest.raises(InvalidObject):
        parse_object(encode({"type": "revision", "createdAt": 1, "treeSpine": [[["a", None]]], "size": 2}))


def test_seq_node_and_blob_round_trip() -> None:
    leaf = SeqNode(0, [["a", OID], ["b", None]])
    inner = SeqNode(1, [[OID, 2], [OID2, 5]])
    blob = Blob({"type": "text", "text": "x" * 5000})
    for obj in (leaf, inner, blob, Blob("text")):
        _, data = encode_object(obj)
        assert parse_object(data) == obj
    assert references(leaf) == [OID]
    assert references(inner) == [OID, OID2]
    assert inner.count == 7 and leaf.count == 2
    assert references(blob) == []


def test_entry_references_its_blobs() -> None:
    entry = Entry("e", "turn", {"role": "user", "content": [OID, {"type": "text", "text": "t"}, OID2]})
    assert references(entry) == [OID, OID2]
    assert references(Entry("e", "turn", {"role": "user", "content": OID})) == [OID]


def test_edit_revision_references_patch_entries() -> None:
    op = {"type": "edit", "patches": [
        {"op": "replace", "id": "a", "entries": [OID]},
        {"op": "summary", "sourceIds": ["a"], "entry": OID2, "replace": True},
        {"op": "remove", "id": "b"},
        {"op": "move", "ids": ["c"], "before": "d"},
    ]}
    rev = Revision(None, 1, op, [[]], 0)
    rev.check()
    assert references(rev) == [OID, OID2]


BAD_VALUES: list[dict[str, Any]] = [
    {"type": "nope"},
    {"type": "entry", "id": "e", "kind": "turn"},
    {"type": "entry", "id": "", "kind": "turn", "message": {"role": "user"}},
    {"type": "entry", "id": "e", "kind": "other", "message": {"role": "user"}},
    {"type": "entry", "id": "e", "kind": "turn", "message": {"content": "no role"}},
    {"type": "entry", "id": "e", "kind": "turn", "message": {"role": "user", "content": b"short"}},
    {"type": "entry", "id": "e", "kind": "turn", "message": {"role": "user", "content": [b"short"]}},
    {"type": "entry", "id": "e", "kind": "turn", "message": {"role": "user"}, "meta": [1]},
    {"type": "entry", "id": "e", "kind": "turn", "message": {"role": "user"}, "sources": [1]},
    {"type": "entry", "id": "e", "kind": "turn", "message": {"role": "user"}, "extra": 1},
    {"type": "revision", "createdAt": -1, "treeSpine": [[]], "size": 0},
    {"type": "revision", "createdAt": 1.5, "treeSpine": [[]], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": -1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": 0, "parent": "hex"},
    # seq: not a spine, a bad level, a bad item, the wrong size
    {"type": "revision", "createdAt": 1, "treeSpine": OID, "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": b"x", "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [OID], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]] * 65, "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[], "level"], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[["a"]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[["a", None, 1]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[[1, OID]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[["a", b"short"]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[[OID, 1]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[], [["a", OID]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[], [[OID, 0]]], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[], [[OID, -1]]], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[], [[b"short", 1]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[], [[OID, 1.5]]], "size": 1},
    {"type": "revision", "createdAt": 1, "treeSpine": [[["a", None]]], "size": 0},
    {"type": "revision", "createdAt": 1, "treeSpine": [[["a", None]], [[OID, 5]]], "size": 5},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": 0, "operation": {"type": "merge"}},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": 0,
     "operation": {"type": "append", "entryIds": ["a"], "entries": []}},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": 0,
     "operation": {"type": "edit", "patches": [{"op": "explode"}]}},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": 0,
     "operation": {"type": "edit", "patches": [{"op": "summary", "sourceIds": ["a"], "entry": "inline"}]}},
    {"type": "revision", "createdAt": 1, "treeSpine": [[]], "size": 0,
     "operation": {"type": "edit", "patches": [{"op": "replace", "id": "a", "entries": [{"id": "x"}]}]}},
    {"type": "revision", "createdAt": 1, "size": 0},
    {"type": "seq", "level": 0, "items": [["a"]]},
    {"type": "seq", "level": 0, "items": [[1, OID]]},
    {"type": "seq", "level": 0, "items": []},
    {"type": "seq", "level": 1, "items": []},
    {"type": "seq", "level": 1, "items": [[OID, 0]]},
    {"type": "seq", "level": 64, "items": []},
    {"type": "blob", "data": 5},
    {"type": "blob"},
]


@pytest.mark.parametrize("value", BAD_VALUES)
def test_malformed_objects_are_refused(value: dict[str, Any]) -> None:
    with pytest.raises(InvalidObject) as caught:
        parse_object(encode(value))
    assert "invalid" in str(caught.value)


def test_non_canonical_object_bytes_are_refused() -> None:
    _, data = encode_object(Blob("text"))
    with pytest.raises(EncodingError):
        parse_object(data + b"\x00")
    with pytest.raises(InvalidObject):
        parse_object(encode([1, 2]))


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=20), st.sampled_from(["turn", "summary"]),
       st.dictionaries(st.text(max_size=5), st.integers(-5, 5) | st.text(max_size=5), max_size=3),
       st.none() | st.lists(st.text(max_size=5), max_size=3))
def test_entry_id_is_the_same_however_it_is_built(entry_id: str, kind: str, meta: dict[str, Any],
                                                  sources: list[str] | None) -> None:
    message = {"role": "user", "content": "x", **{f"k{k}": v for k, v in meta.items()}}
    one = Entry(entry_id, kind, message, meta, sources)
    two = Entry(entry_id, kind, dict(reversed(list(message.items()))), dict(reversed(list(meta.items()))),
                list(sources) if sources is not None else None)
    assert encode_object(one) == encode_object(two)
    assert parse_object(encode_object(one)[1]) == one


@settings(max_examples=60, deadline=None)
@given(st.none() | st.just(OID2), st.integers(0, 2**63), st.integers(0, 40),
       st.sampled_from([None, {"type": "fork"}, {"type": "view", "entryIds": ["a"]}]))
def test_a_revision_header_is_read_without_its_spine_and_matches_the_whole_parse(
        parent: bytes | None, created: int, leaf: int, op: dict[str, Any] | None) -> None:
    spine = [[[f"e{i}", OID] for i in range(leaf)]]
    _, data = encode_object(Revision(parent, created, op, spine, leaf))
    assert data.endswith(encode(spine))  # canonical key order puts the spine last
    assert revision_header(data) == (parent, created)


def test_a_revision_header_of_another_object_is_refused() -> None:
    with pytest.raises(InvalidObject, match="not a revision"):
        revision_header(encode_object(Entry("a", "turn", {"role": "user", "content": "hi"}))[1])
    with pytest.raises(InvalidObject, match="not a revision"):
        revision_header(encode_object(SeqNode(0, [["a", OID]]))[1])


_CONTENT = st.text(max_size=40) | st.lists(st.text(max_size=5) | st.just(OID), max_size=3) | st.just(OID)
_MESSAGES = st.fixed_dictionaries({"role": st.text(max_size=8) | st.integers(0, 3), "content": _CONTENT},
                                  optional={"name": st.text(max_size=5), "n": st.integers(-3, 3)})


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30), st.sampled_from(["turn", "summary", "other"]), _MESSAGES,
       st.none() | st.dictionaries(st.text(max_size=3), st.integers(0, 3), max_size=2) | st.just([1]),
       st.none() | st.lists(st.text(max_size=3), max_size=2), st.booleans())
def test_an_entrys_message_read_from_its_bytes_is_the_parsed_entrys_or_both_refuse(
        entry_id: str, kind: str, message: dict[str, Any], meta: Any, sources: list[str] | None,
        drop_content: bool) -> None:
    """`entry_message` (the whole-view read's fast path over an entry's fixed layout) gives exactly the
    message `parse_object` gives, and refuses exactly what it refuses."""
    if drop_content:
        del message["content"]
    value: dict[str, Any] = {"type": "entry", "id": entry_id, "kind": kind, "message": message}
    if meta is not None:
        value["meta"] = meta
    if sources is not None:
        value["sources"] = sources
    data = encode(value)
    try:
        expected = parse_object(data, trusted=True)
    except InvalidObject:
        with pytest.raises(InvalidObject):
            entry_message(data)
        return
    assert isinstance(expected, Entry)
    assert entry_message(data) == expected.message


def test_the_message_of_another_object_is_none_and_of_a_malformed_one_refused() -> None:
    assert entry_message(encode_object(Blob("text"))[1]) is None
    assert entry_message(encode_object(Revision(None, 1, None, [[]], 0))[1]) is None
    for value in BAD_VALUES:
        if value["type"] == "entry":
            with pytest.raises(InvalidObject):
                entry_message(encode(value))


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=70), st.sampled_from(["turn", "summary"]),
       st.dictionaries(st.text(max_size=8), st.text(max_size=30) | st.integers(-2, 2), min_size=1, max_size=4),
       st.none() | st.just({"k": 1}), st.none() | st.lists(st.text(max_size=3), max_size=2), st.booleans())
def test_an_entry_laid_out_directly_has_the_codecs_bytes_or_is_refused_alike(
        entry_id: str, kind: str, message: dict[str, Any], meta: dict[str, Any] | None,
        sources: list[str] | None, meta_null: bool) -> None:
    """`encode_entry` (the import's fast path for chat turns) gives `encode_object`'s id and bytes, and
    refuses (a lone surrogate) exactly what it refuses."""
    entry = Entry(entry_id, kind, {"role": "user", **message}, meta, sources, meta_null and meta is None)
    try:
        expected = encode_object(entry)
    except EncodingError:
        with pytest.raises(EncodingError):
            encode_entry(entry)
        return
    assert encode_entry(entry) == expected
    assert entry_message(expected[1]) == entry.message


# -- a revision read without its operation -------------------------------------------------------------

_ids = st.one_of(st.text(max_size=12), st.sampled_from(["treeSpine", "itreeSpine", "treeSpine\x81", "e"]))
_oids = st.binary(min_size=32, max_size=32)


@settings(max_examples=300)
@given(parent=st.one_of(st.none(), _oids), created=st.integers(0, 2**48 - 1),
       appended=st.lists(st.tuples(_ids, _oids), min_size=1, max_size=40),
       upper=st.lists(st.lists(st.tuples(_oids, st.integers(1, 10**6)), min_size=0, max_size=4), max_size=3))
def test_a_revision_read_without_its_operation_has_every_other_field(
        parent: bytes | None, created: int, appended: list[tuple[str, bytes]],
        upper: list[list[tuple[bytes, int]]]) -> None:
    """Whatever the entry ids (even ones spelling the spine's key), the spine, size, parent and time are
    those `parse_object` reads, and the operation is the placeholder, undecoded."""
    ids = [i for i, _ in appended]
    oids = [o for _, o in appended]
    spine = [[[i, o] for i, o in appended], *[[[o, n] for o, n in level] for level in upper]]
    size = len(ids) + sum(n for level in upper for _, n in level)
    rev = Revision(parent, created, {"type": "append", "entryIds": ids, "entries": oids}, spine, size)
    _, data = encode_object(rev)
    light = revision_without_operation(data, {"type": "unread"})
    whole = parse_object(data)
    assert isinstance(whole, Revision) and light is not None
    assert (light.parent, light.created_at, light.seq, light.size) == (
        whole.parent, whole.created_at, whole.seq, whole.size)
    assert light.operation == {"type": "unread"}


def test_a_revision_without_an_operation_is_left_to_the_whole_read() -> None:
    rev = Revision(None, 1, None, [[["e", b"\x01" * 32]]], 1)
    assert revision_without_operation(encode_object(rev)[1], {"type": "unread"}) is None
    assert revision_without_operation(b"\xa6garbage", {"type": "unread"}) is None
