"""The pack form of an object: how one object is written into a pack's stream and restored from it.

Two substitutions make the pack form smaller than the object. A 32-byte id of an earlier object of the
same pack becomes a back-reference (CBOR tag 6 holding how far back it is). And a revision made by
appending entries to its parent can be sent *rebuildable*: its spine, its size and its operation's entry
ids are each replaced by CBOR tag 7 (null), because the receiver computes them from the parent's spine
and the appended entries, and the sequence nodes the append closed are not sent at all. The receiver
rebuilds them with `seq.append`, which gives the same tree as the sender's by the chunking rule, and
hashes the result like any other object: a wrong rebuild gives a different id, never a silently
different object. ``docs/protocol.md`` specifies both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import cbor2

from ..errors import BadPack, CtxStoreError, InvalidInput
from ..format import seq
from ..format.codec import MAX_DEPTH, bounded_loads, refused_tag
from ..format.objects import (
    SPINE_KEY,
    Entry,
    Object,
    Revision,
    SeqNode,
    encode_object,
    fields_before_spine,
    from_value,
    parse_object,
)
from ..ids import OID_SIZE, ObjectId, object_id, to_hex

__all__ = ["BACKREF_TAG", "DERIVED_TAG", "AppendForm", "Lookup", "Rebuilder", "decode_record", "encode_append",
           "encode_record", "rebuild_tree"]

BACKREF_TAG = 6
"""CBOR tag of a back-reference; stored objects never contain tags, so it cannot be confused."""
DERIVED_TAG = 7
"""CBOR tag (holding null) of a revision field the receiver computes: treeSpine, size, the append's entryIds."""

_DERIVED = cbor2.CBORTag(DERIVED_TAG, None)
_OID_HEAD = bytes([0x58, OID_SIZE])  # the CBOR head of a 32-byte byte string
_RECENT = 8192
_RECENT_SIZE = 1 << 16
_ENTRY_IDS = 1 << 18


def _substitute(value: Any, index: Mapping[bytes, int], here: int) -> tuple[Any, bool]:
    """The value with every id of an earlier pack object replaced by a back-reference.

    It is the distance back from object `here`: each revision of a chain then names its parent and its
    entry by the same small numbers, so successive revisions repeat each other byte for byte and compress
    to little more than their timestamps.
    """
    t = type(value)
    if t is bytes:
        if len(value) == OID_SIZE:
            at = index.get(value)
            if at is not None:
                return cbor2.CBORTag(BACKREF_TAG, here - at), True
        return value, False
    if t is list:
        changed = False
        out = []
        for item in value:
            new, c = _substitute(item, index, here)
            out.append(new)
            changed |= c
        return (out, True) if changed else (value, False)
    if t is dict:
        changed = False
        new_map = {}
        for key, item in value.items():
            new, c = _substitute(item, index, here)
            new_map[key] = new
            changed |= c
        return (new_map, True) if changed else (value, False)
    return value, False


def _appends(value: Any) -> bool:
    """Whether a decoded object is a revision made by an append (the only kind sent rebuildable)."""
    op = value.get("operation") if type(value) is dict and value.get("type") == "revision" else None
    return type(op) is dict and op.get("type") == "append"


def encode_record(data: bytes, index: Mapping[bytes, int], *, rebuild: bool = False) -> bytes:
    """The pack form of the object with canonical bytes `data`, sent after the objects in `index` (the
    positions of the records before it).

    With `rebuild`, the object must be an append revision, and its treeSpine, size and entryIds are sent as
    tag 7 for the receiver to compute (the caller has checked that the computation gives them back).
    """
    if not rebuild and _OID_HEAD not in data:
        return data  # holds no 32-byte byte string, so nothing to replace (most entries)
    # A rebuildable revision's spine is not sent, so it is not decoded either.
    value = (fields_before_spine(data) if rebuild else None) or cbor2.loads(data)
    if rebuild:
        if not _appends(value):
            raise InvalidInput(f"object {to_hex(object_id(data))} is not an append revision; only those are "
                               "sent rebuildable")
        value[SPINE_KEY] = value["size"] = _DERIVED
        value["operation"] = {**value["operation"], "entryIds": _DERIVED}
    new, changed = _substitute(value, index, len(index))
    return cbor2.dumps(new, canonical=True) if changed or rebuild else data


class AppendForm(NamedTuple):
    """What a rebuildable revision's record carries: an append revision without its spine, size and
    entry ids (a store that keeps append revisions as deltas has exactly this, `read_stored_append`)."""

    parent: bytes
    created_at: int
    entries: tuple[bytes, ...]


def encode_append(form: AppendForm, index: Mapping[bytes, int]) -> bytes:
    """The pack form of the rebuildable revision `form` stands for, sent after the objects in `index`:
    the record `encode_record(data, index, rebuild=True)` makes from the revision's canonical bytes."""
    value = {"type": "revision", "parent": form.parent, "createdAt": form.created_at,
             "operation": {"type": "append", "entries": list(form.entries), "entryIds": _DERIVED},
             "size": _DERIVED, SPINE_KEY: _DERIVED}
    new, _changed = _substitute(value, index, len(index))
    return cbor2.dumps(new, canonical=True)


class _Restore:
    """Turns a decoded pack form back into the object's value, refusing anything a writer cannot send."""

    def __init__(self, oids: Sequence[bytes], index: Mapping[bytes, int]) -> None:
        self.oids = oids
        self.index = index
        self.resolved = 0  # back-references resolved so far

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
            n = value.value
            at = len(self.oids) - n if type(n) is int else -1
            if not 0 <= at < len(self.oids) or n == 0:
                raise BadPack(f"back-reference {n!r} does not name an earlier object")
            self.resolved += 1
            return self.oids[at]
        if t is float:
            if not math.isfinite(value):
                raise BadPack(f"{value} is not allowed (no NaN or infinities)")
            return value
        if t is cbor2.CBORTag:
            where = "outside a rebuildable revision's treeSpine, size and entryIds" if value.tag == DERIVED_TAG else ""
            raise BadPack(f"CBOR tag {value.tag} is not allowed {where}".rstrip())
        raise BadPack(f"holds a {t.__name__}, which objects never contain (a CBOR tag?)")


def _split_derived(raw: Any) -> bool:
    """Whether a decoded record is a rebuildable revision; its tag-7 fields are removed if so.

    A record is rebuildable when its treeSpine is tag 7; then its size and its append operation's entryIds
    must be tag 7 too (all three or none, so that each object has one pack form).
    """
    if type(raw) is not dict or raw.get(SPINE_KEY) != _DERIVED:
        return False
    if not _appends(raw):
        raise BadPack("a tag-7 seq is allowed only in a revision whose operation is an append")
    op = raw["operation"]
    if raw.get("size") != _DERIVED or op.get("entryIds") != _DERIVED:
        raise BadPack("a rebuildable revision sends treeSpine, size and operation entryIds all as tag 7")
    del raw[SPINE_KEY], raw["size"], op["entryIds"]
    return True


Lookup = Callable[[ObjectId], bytes | None]


def rebuild_tree(parent: tuple[seq.Spine, int] | None,
                 pairs: list[list[Any]]) -> tuple[seq.Spine, int, list[tuple[ObjectId, bytes, SeqNode]]]:
    """The rule both sides of a pack follow to rebuild an append revision: its tree is the parent's
    tree (its spine and size; an empty tree without a parent) with the appended (entry id, entry oid)
    `pairs` added by the chunking rule, and its size the parent's plus their number.

    Returns the spine, the size, and the nodes the append closes (id, canonical bytes, node), each once.
    Nothing is read: the parent's spine is all an append changes.
    """
    made: dict[ObjectId, tuple[ObjectId, bytes, SeqNode]] = {}

    def put(node: SeqNode) -> ObjectId:
        data = seq.encode_node(node) or encode_object(node)[1]
        nid = object_id(data)
        made.setdefault(nid, (nid, data, node))
        return nid

    spine = seq.append(parent[0] if parent is not None else [[]], pairs, put)
    return spine, (parent[1] if parent is not None else 0) + len(pairs), list(made.values())


class Rebuilder:
    """Restores records in pack order: resolves back-references and rebuilds rebuildable revisions.

    A rebuild reads the parent revision and the entries the append names, from the objects this
    rebuilder has seen recently, else through `lookup` (the objects of this pack held aside, then the
    receiving repository). The nodes a rebuild makes are handed back to be stored
    like the pack's own objects.
    """

    def __init__(self, lookup: Lookup | None = None) -> None:
        self.oids: list[bytes] = []
        self.index: dict[bytes, int] = {}
        self.rebuilt: set[bytes] = set()
        self.spine_bytes: seq.SpineBytes | None = None
        self._restore = _Restore(self.oids, self.index)
        self._lookup = lookup
        self._recent: dict[bytes, Object | bytes] = {}
        self._entry_ids: dict[bytes, str] = {}  # all a rebuild needs of an entry, so many are kept

    def remember(self, oid: ObjectId, data: bytes | Object) -> None:
        """Keep an object at hand for the rebuilds that follow (bounded; older ones go to `lookup`)."""
        if isinstance(data, Entry):
            if len(self._entry_ids) >= _ENTRY_IDS:
                self._entry_ids.clear()
            self._entry_ids[oid] = data.id
            return
        if type(data) is bytes and len(data) > _RECENT_SIZE:
            return  # a large blob: rebuilds never read blobs
        if len(self._recent) >= _RECENT:
            self._recent.clear()
        self._recent[oid] = data

    def add_record(self, oid: ObjectId) -> int:
        """Number the next record (what back-references count); returns its position."""
        here = len(self.oids)
        self.oids.append(oid)
        self.index[oid] = here
        return here

    def _get(self, oid: ObjectId, kind: type, what: str) -> Any:
        found = self._recent.get(oid)
        if found is None and self._lookup is not None:
            found = self._lookup(oid)
        if found is None:
            raise BadPack(f"names {what} {to_hex(oid)[:12]}, which is neither in the pack before it nor in "
                          "the repository")
        if type(found) is bytes:
            try:
                found = parse_object(found, trusted=True)
            except CtxStoreError as exc:
                raise BadPack(f"names {what} {to_hex(oid)[:12]}, which is not a valid object: {exc}") from None
            self.remember(oid, found)
        if not isinstance(found, kind):
            raise BadPack(f"names {what} {to_hex(oid)[:12]}, which is a {type(found).__name__.lower()}, "
                          f"not a{'n' if kind is Entry else ''} {kind.__name__.lower()}")
        return found

    def restore(self, raw: Any) -> tuple[Any, list[tuple[ObjectId, bytes, SeqNode]], bool, bool]:
        """The object value a decoded record stands for, the nodes rebuilt for it (to store first),
        whether the value differs from the record (False: the record's bytes are the object's), and
        whether it is a rebuilt revision."""
        derived = _split_derived(raw)
        before = self._restore.resolved
        value = self._restore.value(raw)
        if not derived:
            return value, [], self._restore.resolved != before, False
        op = value["operation"]
        oids = op.get("entries")
        if type(oids) is not list or not all(type(o) is bytes and len(o) == OID_SIZE for o in oids):
            raise BadPack("a rebuildable revision's append entries must be a list of object ids")
        ids = [self._entry_ids.get(o) or self._get(ObjectId(o), Entry, "appended entry").id for o in oids]
        pairs = [[i, o] for i, o in zip(ids, oids, strict=True)]
        parent = value.get("parent")
        prev: Revision | None = None
        if parent is not None:
            if type(parent) is not bytes or len(parent) != OID_SIZE:
                raise BadPack("a rebuildable revision's parent must be an object id")
            prev = self._get(ObjectId(parent), Revision, "parent revision")

        spine, size, made = rebuild_tree(None if prev is None else (prev.seq, prev.size), pairs)
        for nid, _, node in made:
            self.remember(nid, node)
        value[SPINE_KEY], value["size"] = spine, size
        op["entryIds"] = ids
        return value, made, True, True


def decode_record(body: bytes,
                  rebuilder: Rebuilder) -> tuple[bytes, list[tuple[ObjectId, bytes, SeqNode]], Revision | None]:
    """The canonical bytes of the object a record carries (checking its pack form is the only one), the
    nodes rebuilt for it, and the revision if it is a rebuilt one (made here by the rule and checked, so
    the caller need not parse it). Raises `BadPack` with the reason (the caller adds where)."""
    try:
        # Linear in the record: no tag cbor2 interprets (no value sharing), no indefinite lengths, bounded
        # depth; tags 6 and 7 (and any other, refused by _Restore) come back as CBORTag.
        raw = bounded_loads(body, max_depth=MAX_DEPTH + 2, keep_tags=True)
        canonical = cbor2.dumps(raw, canonical=True) == body
    except Exception as exc:  # cbor2 raises CBORDecodeError, ValueError, TypeError, OverflowError...
        tag = refused_tag(exc)
        if tag is not None:
            raise BadPack(f"holds CBOR tag {tag}; pack records hold only tags {BACKREF_TAG} and {DERIVED_TAG}") \
                from None
        raise BadPack(f"is not valid CBOR: {exc}") from None
    if not canonical:
        raise BadPack("is not canonical CBOR (unsorted or duplicate map keys, a non-shortest integer, length "
                      "or float, an indefinite length or trailing bytes)")
    value, made, changed, rebuilt = rebuilder.restore(raw)
    if not rebuilt:
        return (cbor2.dumps(value, canonical=True) if changed else body), made, None
    try:
        # Its spine was made here by the rule from checked objects; its other fields get the full check.
        revision = from_value(value, trusted=True)
    except CtxStoreError as exc:
        raise BadPack(str(exc)) from None
    if not isinstance(revision, Revision):
        raise BadPack(f"is a rebuildable record of a {type(revision).__name__.lower()}; only an append "
                      "revision can be rebuildable")
    # Successive revisions of a chain share most of their spine: encoded directly, reusing the last one's.
    fast = seq.encode_revision(revision, rebuilder.spine_bytes)
    if fast is None:
        return encode_object(revision)[1], made, revision
    data, rebuilder.spine_bytes = fast
    return data, made, revision
