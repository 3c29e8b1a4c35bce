"""The four object types: entry, revision, sequence-tree node and blob.

Each object is one canonical CBOR map with a ``type`` key; its id is the blake3 of those bytes
(`codec.object_id`). Objects are immutable values: equal content is one object.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import cbor2

from ..errors import InvalidObject, shown
from ..ids import OID_SIZE, ObjectId, is_oid, object_id
from .codec import MAX_OBJECT_SIZE, cbor_head, decode, encode

__all__ = [
    "BLOB_THRESHOLD",
    "Blob",
    "Entry",
    "Object",
    "Revision",
    "SPINE_KEY",
    "UNREAD_OPERATION",
    "SeqNode",
    "encode_entry",
    "encode_object",
    "encode_turn",
    "entry_message",
    "fields_before_spine",
    "from_value",
    "parse_object",
    "references",
    "revision_header",
    "revision_without_operation",
]

BLOB_THRESHOLD = 4096
"""A content block whose canonical encoding is at least this many bytes is stored as a blob."""

ENTRY_KINDS = ("turn", "summary")
OPERATION_TYPES = ("append", "edit", "fork", "view")
PATCH_OPS = ("remove", "replace", "insertBefore", "insertAfter", "move", "split", "summary")



def _fail(kind: str, why: str) -> InvalidObject:
    return InvalidObject(f"invalid {kind} object: {why}")


@dataclass(frozen=True, slots=True, eq=True)
class Entry:
    """One message with its metadata, in stored form (large content blocks replaced by blob ids)."""

    id: str
    kind: str
    message: dict[str, Any]
    meta: dict[str, Any] | None = None
    sources: list[str] | None = None
    meta_null: bool = False
    """The entry was given ``meta: null`` (kept as a CBOR null, distinct from no meta at all)."""

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"type": "entry", "id": self.id, "kind": self.kind, "message": self.message}
        if self.meta is not None:
            value["meta"] = self.meta
        elif self.meta_null:
            value["meta"] = None
        if self.sources is not None:
            value["sources"] = self.sources
        return value

    def check(self) -> None:
        if type(self.id) is not str or not self.id:
            raise _fail("entry", "id must be a non-empty string")
        if self.kind not in ENTRY_KINDS:
            raise _fail("entry", f"kind must be one of {ENTRY_KINDS}, not {shown(self.kind)}")
        if type(self.message) is not dict or type(self.message.get("role")) is not str:
            raise _fail("entry", f"entry {self.id}: message must be a map with a text 'role'")
        content = self.message.get("content")
        if type(content) is bytes and not is_oid(content):
            raise _fail("entry", f"entry {self.id}: content blob reference must be {OID_SIZE} bytes")
        if type(content) is list:
            for block in content:
                if type(block) is bytes and not is_oid(block):
                    raise _fail("entry", f"entry {self.id}: block blob reference must be {OID_SIZE} bytes")
        if self.meta is not None and type(self.meta) is not dict:
            raise _fail("entry", f"entry {self.id}: meta must be a map")
        if self.sources is not None and (type(self.sources) is not list
                                         or any(type(s) is not str for s in self.sources)):
            raise _fail("entry", f"entry {self.id}: sources must be a list of entry ids")

    def blob_ids(self) -> Iterator[ObjectId]:
        content = self.message.get("content")
        if type(content) is bytes:
            yield ObjectId(content)
        elif type(content) is list:
            for block in content:
                if type(block) is bytes:
                    yield ObjectId(block)


SPINE_KEY = "treeSpine"
"""A revision's field for its spine. Canonical key order puts it last (the longest key, and after
`createdAt` and `operation` among those of its length), so the other fields are read without it."""
UNREAD_OPERATION: dict[str, Any] = {"type": "unread"}
"""The operation of a revision read or kept without it, for its spine, size, parent and time (never a
valid operation, so never mistaken for one)."""


@dataclass(frozen=True, slots=True, eq=True)
class Revision:
    """An ordered view of entries, the operation that made it, a parent.

    `seq` is the view's sequence tree as its right-hand spine: for each level from the leaves up, the
    items of the level's last node, without (above the leaves) the last item, which is the ref to the
    spine node below. The nodes left of the spine are stored `SeqNode`s it points to (see `seq`).
    """

    parent: ObjectId | None
    created_at: int
    operation: dict[str, Any] | None
    seq: list[list[list[Any]]]
    size: int

    def to_value(self) -> dict[str, Any]:
        value: dict[str, Any] = {"type": "revision", "createdAt": self.created_at, SPINE_KEY: self.seq,
                                 "size": self.size}
        if self.parent is not None:
            value["parent"] = self.parent
        if self.operation is not None:
            value["operation"] = self.operation
        return value

    def check(self, items: bool = True) -> None:
        """Check the fields; `items=False` leaves out the spine's items (bytes checked when stored)."""
        if self.parent is not None and not is_oid(self.parent):
            raise _fail("revision", "parent must be an object id")
        if type(self.created_at) is not int or self.created_at < 0:
            raise _fail("revision", "createdAt must be a non-negative integer (ms since the epoch)")
        spine = self.seq
        if type(spine) is not list or not spine or len(spine) > 64 or any(type(s) is not list for s in spine):
            raise _fail("revision", "seq must be a list of 1 to 64 levels, each a list of items")
        if type(self.size) is not int or self.size < 0:
            raise _fail("revision", "size must be a non-negative integer")
        if items:
            for level, listed in enumerate(spine):
                _check_items(listed, level, "revision")
            if self.size != len(spine[0]) + sum(item[1] for listed in spine[1:] for item in listed):
                raise _fail("revision", "size must be the number of entries seq holds")
        if self.operation is not None:
            _check_operation(self.operation)

    def operation_ids(self) -> Iterator[ObjectId]:
        """Entry object ids the recorded operation names (what a replay needs)."""
        op = self.operation
        if op is None:
            return
        if op["type"] == "append":
            yield from op["entries"]
        elif op["type"] == "edit":
            for patch in op["patches"]:
                if "entries" in patch:
                    yield from patch["entries"]
                if "entry" in patch:
                    yield patch["entry"]


def _check_ids(value: Any, what: str) -> None:
    # Set arithmetic over types and lengths rather than a call per item: an append may name 100,000.
    if type(value) is not list or (value and set(map(type, value)) != {str}):
        raise _fail("revision", f"{what} must be a list of entry ids")


def _check_oids(value: Any, what: str) -> None:
    if type(value) is not list or (value and (set(map(type, value)) != {bytes} or set(map(len, value)) != {OID_SIZE})):
        raise _fail("revision", f"{what} must be a list of object ids")


def _check_operation(op: Any) -> None:
    if type(op) is not dict or op.get("type") not in OPERATION_TYPES:
        raise _fail("revision", f"operation type must be one of {OPERATION_TYPES}")
    kind = op["type"]
    if kind == "append":
        _check_ids(op.get("entryIds"), "append entryIds")
        _check_oids(op.get("entries"), "append entries")
        if len(op["entries"]) != len(op["entryIds"]):
            raise _fail("revision", "append entries and entryIds differ in length")
    elif kind == "view":
        _check_ids(op.get("entryIds"), "view entryIds")
    elif kind == "edit":
        patches = op.get("patches")
        if type(patches) is not list:
            raise _fail("revision", "edit patches must be a list")
        for patch in patches:
            _check_patch(patch)


def _check_patch(patch: Any) -> None:
    if type(patch) is not dict or patch.get("op") not in PATCH_OPS:
        raise _fail("revision", f"patch op must be one of {PATCH_OPS}")
    op = patch["op"]
    if op == "move":
        _check_ids(patch.get("ids"), "move ids")
        for anchor in ("before", "after"):
            if anchor in patch and type(patch[anchor]) is not str:
                raise _fail("revision", f"move {anchor} must be an entry id")
    elif op == "summary":
        _check_ids(patch.get("sourceIds"), "summary sourceIds")
        if not is_oid(patch.get("entry")):
            raise _fail("revision", "summary entry must be an object id")
        if "replace" in patch and type(patch["replace"]) is not bool:
            raise _fail("revision", "summary replace must be a boolean")
    else:
        if type(patch.get("id")) is not str:
            raise _fail("revision", f"{op} patch needs a target id")
        if op != "remove":
            _check_oids(patch.get("entries"), f"{op} entries")


def _check_items(items: Any, level: int, what: str) -> None:
    if type(items) is not list:
        raise _fail(what, "items must be a list")
    # Written out rather than with helpers: a revision's spine is checked on every read of it.
    if level == 0:
        for item in items:
            if type(item) is not list or len(item) != 2:
                raise _fail(what, "each item must be a pair")
            first, second = item
            if type(first) is not str or not (second is None or (type(second) is bytes and len(second) == 32)):
                raise _fail(what, "leaf items must be [entry id, entry oid or null]")
        return
    for item in items:
        if type(item) is not list or len(item) != 2:
            raise _fail(what, "each item must be a pair")
        first, second = item
        if type(first) is not bytes or len(first) != 32 or type(second) is not int or second < 1:
            raise _fail(what, "inner items must be [child oid, positive count]")


@dataclass(frozen=True, slots=True, eq=True)
class SeqNode:
    """A node of the sequence tree.

    Level 0 (a leaf) holds ``[entry id, entry oid or None]`` pairs; a higher level holds
    ``[child oid, number of entries below it]`` pairs.
    """

    level: int
    items: list[list[Any]]

    def to_value(self) -> dict[str, Any]:
        return {"type": "seq", "level": self.level, "items": self.items}

    def check(self) -> None:
        if type(self.level) is not int or not 0 <= self.level < 64:
            raise _fail("seq", "level must be an integer from 0 to 63")
        if type(self.items) is not list:
            raise _fail("seq", "items must be a list")
        _check_items(self.items, self.level, "seq")
        if not self.items:
            raise _fail("seq", "a stored node must have items")

    @property
    def count(self) -> int:
        """Entries below this node."""
        if self.level == 0:
            return len(self.items)
        return sum(item[1] for item in self.items)


@dataclass(frozen=True, slots=True, eq=True)
class Blob:
    """A large content block, stored once and referenced from entries by id."""

    data: Any

    def to_value(self) -> dict[str, Any]:
        return {"type": "blob", "data": self.data}

    def check(self) -> None:
        if not isinstance(self.data, str | dict):
            raise _fail("blob", "data must be a content block (a map) or text")


Object = Entry | Revision | SeqNode | Blob


def encode_object(obj: Object) -> tuple[ObjectId, bytes]:
    """The id and canonical bytes of an object."""
    data = encode(obj.to_value())
    return object_id(data), data


def from_value(value: Any, *, trusted: bool = False) -> Object:
    """The object a decoded value stands for, checking its shape (not the encoding it came in).

    `trusted=True` leaves out the per-item check of a revision's spine, for values of bytes that were
    checked when they were stored: a spine is most of a revision, and revisions are read often.
    """
    if type(value) is not dict:
        raise InvalidObject("invalid object: not a map")
    kind = value.get("type")
    allowed = _FIELDS.get(kind) if type(kind) is str else None
    if allowed is None:
        raise InvalidObject(f"invalid object: unknown type {shown(kind)}")
    extra = set(value) - allowed
    if extra:
        raise InvalidObject(f"invalid {kind} object: unexpected fields {sorted(extra)}")
    try:
        obj: Object
        if kind == "entry":
            obj = Entry(value["id"], value["kind"], value["message"], value.get("meta"), value.get("sources"),
                        "meta" in value and value["meta"] is None)
        elif kind == "revision":
            revision = Revision(value.get("parent"), value["createdAt"], value.get("operation"),
                                value[SPINE_KEY], value["size"])
            revision.check(items=not trusted)
            return revision
        elif kind == "seq":
            obj = SeqNode(value["level"], value["items"])
        else:
            obj = Blob(value["data"])
    except KeyError as exc:
        raise InvalidObject(f"invalid {kind} object: missing field {shown(exc.args[0])}") from None
    obj.check()
    return obj


_FIELDS = {
    "entry": {"type", "id", "kind", "message", "meta", "sources"},
    "revision": {"type", "parent", "createdAt", "operation", "treeSpine", "size"},
    "seq": {"type", "level", "items"},
    "blob": {"type", "data"},
}


def parse_object(data: bytes, *, trusted: bool = False) -> Object:
    """Decode canonical bytes into an object, checking encoding and shape.

    `trusted=True` skips the canonical-form check and the per-item check of a revision's spine, for bytes
    that were checked when they were stored.
    """
    if not trusted:
        return from_value(decode(data))
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError) as exc:  # bytes that hash to their id need not decode
        raise InvalidObject(f"object does not decode: {exc}") from None
    return from_value(value, trusted=True)


_ENTRY_FIELDS = frozenset(("type", "id", "kind", "message", "meta", "sources"))
_ENTRY_START = b"\xa4bid"  # a map of four fields, the first "id": an entry without meta or sources
_ENTRY_MIDDLE = {kind: b"dkind" + encode(kind) + b"dtypeeentrygmessage" for kind in ENTRY_KINDS}
"""What follows the id in such an entry's canonical bytes, by kind: then the message, its last field."""


def encode_entry(entry: Entry) -> tuple[ObjectId, bytes]:
    """`encode_object` of an entry. One with no meta or sources whose message holds only text (a chat
    turn, most of an import) is laid out directly: only its message goes through CBOR, and a message of
    exactly a text role and content not even that (`encode_turn`)."""
    message = entry.message
    if (entry.meta is None and not entry.meta_null and entry.sources is None and entry.kind in _ENTRY_MIDDLE
            and type(entry.id) is str and type(message) is dict):
        if len(message) == 2 and type(role := message.get("role")) is str and type(
                content := message.get("content")) is str:
            encoded = encode_turn(entry.id, entry.kind, role, content)
            if encoded is not None:
                return encoded[:2]
        elif all(type(k) is str and type(v) is str for k, v in message.items()):
            try:
                ident = entry.id.encode("utf-8")
                body = cbor2.dumps(message, canonical=True)
            except UnicodeEncodeError:
                pass  # a lone surrogate: the codec's own encoding says where
            else:
                data = b"".join((_ENTRY_START, cbor_head(3, len(ident)), ident, _ENTRY_MIDDLE[entry.kind], body))
                if len(data) <= MAX_OBJECT_SIZE:
                    return object_id(data), data
    return encode_object(entry)


def encode_turn(entry_id: str, kind: str, role: str, content: str) -> tuple[ObjectId, bytes, int | None] | None:
    """`encode_entry` of an entry of `kind` with no meta or sources whose message is ``{"role": role,
    "content": content}``, every byte laid out here: the one shape of a bulk import, for which CBOR's
    canonical encoder (it sorts every map's keys) would cost more than this whole layout. With the id and
    the bytes, where the message starts in them (it runs to their end) when the id and the role are each
    1 to 255 bytes (what a leaf pack's writer reads of an entry's layout, `store.packs.chat_message_at`,
    which a writer that laid the bytes out may say instead: `Transaction.write_objects`), else None.

    None for what the codec must refuse, saying where (text with a lone surrogate), or an entry over the
    object size limit: `encode_object` then says what is wrong.
    """
    if len(entry_id) + len(role) + len(content) > MAX_OBJECT_SIZE:
        return None  # over the limit in characters already (and so every text's length fits its head)
    try:
        ident, role_text, content_text = entry_id.encode(), role.encode(), content.encode()
    except UnicodeEncodeError:
        return None
    head = b"".join((_ENTRY_START, cbor_head(3, len(ident)), ident, _ENTRY_MIDDLE[kind]))
    # Canonical key order: "role" before "content" (shorter first).
    data = b"".join((head, b"\xa2drole", cbor_head(3, len(role_text)), role_text,
                     b"gcontent", cbor_head(3, len(content_text)), content_text))
    if len(data) > MAX_OBJECT_SIZE:
        return None
    return object_id(data), data, len(head) if 0 < len(ident) < 256 and len(role_text) < 256 else None


def entry_message(data: bytes) -> dict[str, Any] | None:
    """The message of an object's canonical bytes (checked when stored) if it is an entry, checked as
    `parse_object` checks an entry but without making the `Entry`: what reading a whole view needs.
    None if the bytes are a valid object of another type; `InvalidObject` if they are not a valid object.

    An entry with no meta or sources (most) is read from its bytes' fixed layout, decoding only the id's
    length and the message; any other shape goes through `parse_object`.
    """
    if data.startswith(_ENTRY_START) and len(data) > 6:
        head = data[4]
        start = 5 if head < 0x78 else 6
        size = head - 0x60 if head < 0x78 else data[5] if head == 0x78 else 0
        end = start + size
        middle = _ENTRY_MIDDLE["turn"] if data.startswith(_ENTRY_MIDDLE["turn"], end) else (
            _ENTRY_MIDDLE["summary"] if data.startswith(_ENTRY_MIDDLE["summary"], end) else None)
        if size > 0 and middle is not None:
            message = cbor2.loads(data[end + len(middle):])
            if (type(message) is dict and type(message.get("role")) is str
                    and type(message.get("content")) is str):
                return message
    obj = parse_object(data, trusted=True)  # the other shapes (blob references, blocks), or says what is wrong
    return obj.message if isinstance(obj, Entry) else None


def fields_before_spine(data: bytes, *, before: str = SPINE_KEY) -> dict[str, Any] | None:
    """The fields of a revision's canonical bytes but its spine, decoded without it (canonical key order
    puts it last), or only those before field `before` (``"operation"``: the header, which walks read, not
    a bulk import's list of every entry it appended); None if the bytes are not a map with as many fields
    as a revision has."""
    n = data[0] - 0xA0 if data else -1
    if not 4 <= n <= 6:
        return None
    stream = io.BytesIO(data)
    stream.seek(1)
    decoder = cbor2.CBORDecoder(stream)
    fields: dict[str, Any] = {}
    for _ in range(n):
        key = decoder.decode()
        if key in (SPINE_KEY, before):
            break
        fields[key] = decoder.decode()
    return fields


_SPINE_FIELD = encode(SPINE_KEY)  # the spine's key as it is encoded: the last of a revision's fields


def revision_without_operation(data: bytes, placeholder: dict[str, Any]) -> Revision | None:
    """A stored revision's fields with its operation left undecoded, as `placeholder`: what a reader of
    the spine, size, parent and time needs of a revision whose operation is large (a bulk import's names
    every entry it appended). None if the bytes are not laid out as a revision with an operation.

    The fields before the operation are decoded from the start (canonical order: size, type, parent,
    createdAt, operation, treeSpine) and the spine from its key, found searching from the end: the last
    occurrence of the key's bytes followed by an array's head. Inside the spine those bytes cannot occur
    so followed: in an entry id's text, the byte after an ASCII ``e`` that starts an array is not UTF-8;
    an id is a hash. The bytes must be a revision's, checked when stored.
    """
    at = len(data)
    while True:
        at = data.rfind(_SPINE_FIELD, 0, at)
        if at <= 0:
            return None
        spine_at = at + len(_SPINE_FIELD)
        if spine_at < len(data) and 0x81 <= data[spine_at] <= 0x97:
            break
    stream = io.BytesIO(data)
    stream.seek(spine_at)
    try:
        fields = fields_before_spine(data, before="operation")
        spine = cbor2.CBORDecoder(stream).decode()
    except (cbor2.CBORDecodeError, ValueError):
        return None
    # With an operation, two of the map's fields (it and the spine) are not among those read.
    if fields is None or len(fields) != data[0] - 0xA2 or stream.tell() != len(data):
        return None
    parent, created, size = fields.get("parent"), fields.get("createdAt"), fields.get("size")
    if fields.get("type") != "revision" or type(size) is not int or not _counts(spine, size):
        return None
    Revision(parent, created, None, spine, size).check(items=False)  # type: ignore[arg-type]
    return Revision(parent, created, placeholder, spine, size)  # type: ignore[arg-type]


def _counts(spine: Any, size: int) -> bool:
    """Whether a decoded spine holds `size` entries (the items of its leaf and the counts above), as the
    spine a revision's size was made from does: what tells a spine found by its key from a look-alike."""
    try:
        return type(spine) is list and bool(spine) and len(spine[0]) + sum(
            item[1] for level in spine[1:] for item in level) == size
    except (TypeError, IndexError, KeyError):
        return False


def revision_header(data: bytes) -> tuple[ObjectId | None, int]:
    """A stored revision's parent and `createdAt`, read without decoding its spine (what walks over
    many revisions need). The bytes must be a revision's, checked when stored; anything else is refused.
    """
    fields = fields_before_spine(data, before="operation")
    if fields is not None:
        parent, created = fields.get("parent"), fields.get("createdAt")
        if (fields.get("type") == "revision" and (parent is None or is_oid(parent)) and type(created) is int
                and created >= 0):
            return parent, created
    obj = parse_object(data, trusted=True)
    if not isinstance(obj, Revision):
        raise InvalidObject(f"object is not a revision but a {obj.to_value()['type']} object")
    return obj.parent, obj.created_at


def references(obj: Object) -> list[ObjectId]:
    """The object ids an object points to."""
    if isinstance(obj, Revision):
        out = [ObjectId(oid) for _, oid in obj.seq[0] if oid is not None]
        out.extend(ObjectId(oid) for items in obj.seq[1:] for oid, _ in items)
        if obj.parent is not None:
            out.append(obj.parent)
        out.extend(obj.operation_ids())
        return out
    if isinstance(obj, SeqNode):
        if obj.level == 0:
            return [ObjectId(oid) for _, oid in obj.items if oid is not None]
        return [ObjectId(oid) for oid, _ in obj.items]
    if isinstance(obj, Entry):
        return list(obj.blob_ids())
    return []
