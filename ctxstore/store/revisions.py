"""The stored form of an append revision: what a pack already sends (parent, time, appended entries),
with the spine it rebuilds to left out, so recording a conversation one message per commit stores
O(1) bytes per append instead of the tree's right spine.

A revision made by appending entries to its parent is stored as a *delta*: codec byte `DELTA`, its chain
depth (how many deltas lead back to a revision stored whole), the canonical CBOR array
``[parent, createdAt, entryIds, entries, canonicalSize]``, then an 8-byte check (the start of the blake3
of the revision's id and that array). Reading it rebuilds the spine from the parent's with `seq.append`
(the chunking rule gives one tree whatever the batching), encodes the revision and checks the result
hashes to the id asked for: a wrong rebuild or a damaged record is an error, never silently different
bytes. A writer stores a delta only after checking that it rebuilds the exact bytes that hash to the
id (for an append this process's history made by the rule and hashed itself, `MADE`, that rebuild is
the history's own, and the writer compares the bytes instead of repeating it), so a record whose check
holds is that revision's append as written: a reader that needs only the append (a pack planner sending
it rebuildable, a header read) takes it from the record without rebuilding. A writer stores a revision
whole (a *checkpoint*) when its append closed a leaf (its spine is then at its shortest), when the
chain would pass `MAX_CHAIN`, or when the parent is not at hand; so a read replays at most `MAX_CHAIN`
appends.

A bulk append (`BULK_FROM` entries or more, which closes leaves, so is a checkpoint) is stored without its
lists instead, codec byte `BULK`: its canonical bytes before the lists (the *prefix*) and from the spine's
key on (the *suffix*), how many entries it appended and its canonical size, sealed like a delta. Its
appended pairs are the last items of its own view, so a full read rebuilds the lists from its tree
(`bulk_bytes`, checked against the id), while a reader of its spine, size, parent or time reads the
prefix and suffix alone (`bulk_light`). A writer stores it so only for an append this process made by
the rule, whose tree is at hand (`MADE`). docs/storage.md specifies both forms.

Pure functions over bytes and parsed revisions, and a bounded cache of rebuilt revisions shared by the
stores of a process (ids are content hashes, so an entry can never go stale).
"""

from __future__ import annotations

import dataclasses
import io
import threading
from collections.abc import Callable, Sequence
from typing import Any

import blake3
import cbor2

from ..errors import CtxStoreError, DamagedData, EncodingError
from ..format import codec, seq
from ..format.objects import SPINE_KEY, Revision, SeqNode, fields_before_spine
from ..ids import OID_SIZE, ObjectId, object_id, to_hex

__all__ = ["BULK", "BULK_FROM", "CHECK_SIZE", "DELTA", "MADE", "MAX_CHAIN", "Bulk", "Delta", "MadeAppends",
           "RevisionCache", "bulk_bytes", "bulk_cut", "bulk_light", "bulk_value", "checked", "closes_leaf",
           "delta_of", "delta_value", "may_be_delta", "parse_bulk", "parse_delta", "rebuild", "revision_bytes"]

DELTA = 0x03
"""Codec byte of a stored append revision whose spine is rebuilt from its parent's."""
MAX_CHAIN = 64
"""Most deltas between a stored revision and the checkpoint it rebuilds from (what one read replays)."""

CHECK_SIZE = 8
"""Bytes of a delta record's check: blake3 of the revision id and the delta's array, cut short (it finds
damage to the record; the id is what the record is filed under, so a record moved to another id fails
too)."""

_REVISION_START = b"\xa6dsize"  # an append revision's canonical map (six fields), starting with "size"
_OP_KEYS = frozenset(("type", "entryIds", "entries"))
_FIELDS = frozenset(("type", "size", "parent", "createdAt", "operation"))

Delta = tuple[ObjectId, int, list[str], list[ObjectId], int]
"""A delta's fields: parent, createdAt, appended entry ids, appended entry oids, canonical size."""


def may_be_delta(data: bytes) -> bool:
    """Whether canonical bytes start as an append revision's do (`delta_of` tells whether they are one)."""
    return data.startswith(_REVISION_START)


def delta_of(data: bytes) -> Delta | None:
    """The delta fields of a revision's canonical bytes if it is an append onto a parent, else None.

    Only the exact shape of an append revision qualifies; whether the spine really is the parent's with
    the entries appended is for the caller to check (`rebuild` and compare). An append of more entries
    than a leaf holds certainly closes one (`closes_leaf`), so is stored whole: None, before its lists
    are checked (a bulk import's names every entry it appended).
    """
    if not data.startswith(_REVISION_START):
        return None
    fields = fields_before_spine(data)
    if fields is None or fields.keys() != _FIELDS or fields["type"] != "revision":
        return None
    parent, created, op = fields["parent"], fields["createdAt"], fields["operation"]
    if type(parent) is not bytes or len(parent) != OID_SIZE or type(created) is not int or created < 0:
        return None
    if type(op) is not dict or op.keys() != _OP_KEYS or op["type"] != "append":
        return None
    ids, oids = op["entryIds"], op["entries"]
    if (type(ids) is list and len(ids) >= _WHOLE_FROM) or not _appended(ids, oids):
        return None
    return ObjectId(parent), created, ids, [ObjectId(o) for o in oids], len(data)


def _appended(ids: Any, oids: Any) -> bool:
    """Whether an append's lists have a delta's shape: as many entry ids (text) as oids, at least one."""
    return (type(ids) is list and type(oids) is list and len(ids) == len(oids) and bool(ids)
            and all(type(i) is str for i in ids) and all(type(o) is bytes and len(o) == OID_SIZE for o in oids))


_CUT = 2**32 // seq.LEAF_TARGET
_WHOLE_FROM = 4 * seq.LEAF_TARGET  # appended entries from which an append certainly closes a leaf


def closes_leaf(delta: Delta) -> bool:
    """Whether an append certainly closes a leaf (so its revision is stored whole), told from its own
    entries: more than a leaf holds, or a cut before the last of them (the chunking rule of `seq`). False
    only means the rebuild must tell."""
    _parent, _created, ids, oids, _size = delta
    if len(ids) >= _WHOLE_FROM:
        return True
    return any(int.from_bytes(seq.leaf_hash(i, o)[:4], "big") < _CUT for i, o in zip(ids[:-1], oids[:-1], strict=True))


def _check(oid: bytes, array: bytes) -> bytes:
    return blake3.blake3(oid + array).digest()[:CHECK_SIZE]


def delta_value(oid: ObjectId, delta: Delta, depth: int) -> bytes:
    """The stored value of revision `oid`'s delta, `depth` links from its checkpoint (1 to `MAX_CHAIN`)."""
    parent, created, ids, oids, size = delta
    array = codec.encode([parent, created, ids, oids, size])
    return bytes([DELTA, depth]) + array + _check(oid, array)


def parse_delta(oid: ObjectId, value: bytes, *, check: bool = True) -> tuple[int, Delta]:
    """The depth and fields of revision `oid`'s stored delta; `DamagedData` if the record is damaged
    (malformed, or with `check` its check does not match: the record is not what was written for `oid`)."""
    try:
        depth = value[1]
        array = bytes(value[2:-CHECK_SIZE])
        parent, created, ids, oids, size = codec.decode(array)
        ok = (1 <= depth <= MAX_CHAIN and type(parent) is bytes and len(parent) == OID_SIZE
              and type(created) is int and created >= 0 and type(ids) is list and type(oids) is list
              and len(ids) == len(oids) and type(size) is int
              and (not check or _check(oid, array) == value[-CHECK_SIZE:]))
    except (IndexError, ValueError, TypeError, EncodingError):
        ok = False
    if not ok:
        raise DamagedData(f"stored revision {to_hex(oid)} is corrupt (a damaged delta record); "
                         "run `ctxstore fsck`")
    return depth, (ObjectId(parent), created, ids, oids, size)


def _node_id(node: SeqNode) -> ObjectId:
    return seq.node_id(node)


def rebuild(parent: Revision, delta: Delta, put: Callable[[SeqNode], ObjectId] = _node_id) -> Revision:
    """The revision a delta stands for: the parent's tree with the delta's entries appended by the rule."""
    parent_oid, created, ids, oids, _size = delta
    spine = seq.append(parent.seq, [[i, o] for i, o in zip(ids, oids, strict=True)], put)
    operation: dict[str, Any] = {"type": "append", "entryIds": ids, "entries": oids}
    return Revision(parent_oid, created, operation, spine, parent.size + len(ids))


def revision_bytes(revision: Revision, base: seq.SpineBytes | None = None) -> tuple[bytes, seq.SpineBytes | None]:
    """A revision's canonical bytes (the spine encoded directly where it has the usual shape, reusing
    the encoded levels `base` of its parent's spine) and its own encoded levels, for its child."""
    fast = seq.encode_revision(revision, base)
    if fast is not None:
        return fast
    value = revision.to_value()
    value[SPINE_KEY] = revision.seq
    return codec.encode(value), None


def checked(oid: ObjectId, revision: Revision, base: seq.SpineBytes | None = None
            ) -> tuple[bytes, seq.SpineBytes | None]:
    """A rebuilt revision's canonical bytes and encoded levels, checked against the id they must hash to."""
    data, levels = revision_bytes(revision, base)
    if object_id(data) != oid:
        raise DamagedData(f"stored revision {to_hex(oid)} is corrupt: it does not rebuild to its id (a "
                          "damaged record or a damaged parent); run `ctxstore fsck`")
    return data, levels


BULK = 0x06
"""Codec byte of a bulk append revision stored without its lists, which its own tree names."""
BULK_FROM = _WHOLE_FROM
"""Appended entries from which an append revision may be stored without its lists (`bulk_value`)."""

_LISTS_AFTER = b"\x69operation\xa3\x64type\x66append\x67entries"  # how a bulk record's prefix ends
_IDS_KEY = b"\x68entryIds"  # what lies between the two lists
_SPINE_FIELD = b"\x69treeSpine"  # how a bulk record's suffix starts
_OID_HEAD = b"\x58\x20"
_TEXT_HEADS = codec.SMALL_HEADS[3]

Bulk = tuple[bytes, int, bytes, int]
"""A bulk record's fields: the revision's canonical bytes before its lists (the prefix), how many entries
it appended, its bytes from the spine's key on (the suffix), its canonical size."""


def _lists(ids: list[str], oids: list[bytes]) -> bytes:
    """The canonical bytes an append revision holds between its prefix and suffix: the array of entry
    oids, the ``entryIds`` key, the array of entry ids."""
    head = codec.cbor_head(4, len(oids))
    texts = [entry_id.encode() for entry_id in ids]
    try:
        heads = [_TEXT_HEADS[len(text)] for text in texts]
    except IndexError:  # an id of 256 bytes or more
        heads = [codec.cbor_head(3, len(text)) for text in texts]
    return b"".join([head, _OID_HEAD if oids else b"", _OID_HEAD.join(oids), _IDS_KEY, head,
                     *[h + t for h, t in zip(heads, texts, strict=True)]])


def bulk_cut(revision: Revision, data: bytes, levels: seq.SpineBytes) -> tuple[bytes, bytes] | None:
    """The prefix and suffix of a vouched append revision's canonical bytes `data` (the encoding of
    `revision`, `levels` its spine's encoded levels: `MADE`) around its lists, or None (store it whole)
    if they are not found where the layout puts them: the prefix is the fields before the lists, built
    here; the suffix is the spine's key and encoding, as long as `levels` make it; between them, the
    oids' array (34 bytes each) then the ``entryIds`` key and array. The lists themselves are not encoded
    again: the vouch says `data` is the canonical encoding, which `bulk_bytes` joins the same way."""
    op, parent, created, size = revision.operation, revision.parent, revision.created_at, revision.size
    if (type(op) is not dict or op.keys() != _OP_KEYS or type(op["entries"]) is not list
            or type(parent) is not bytes or len(parent) != OID_SIZE or type(created) is not int
            or not 0 <= created < 2**64 or type(size) is not int or not 0 <= size < 2**64
            or len(levels) != len(revision.seq)):
        return None
    prefix = b"".join([_REVISION_START, codec.cbor_head(0, size), b"\x64type\x68revision\x66parent", _OID_HEAD,
                       parent, b"\x69createdAt", codec.cbor_head(0, created), _LISTS_AFTER])
    count = len(op["entries"])
    head = codec.cbor_head(4, count)
    spine = len(codec.cbor_head(4, len(levels))) + sum(
        len(codec.cbor_head(4, len(items))) + len(encoded) for items, encoded in levels)
    suffix_at = len(data) - spine - len(_SPINE_FIELD)
    ids_at = len(prefix) + len(head) + len(_OID_HEAD + bytes(OID_SIZE)) * count
    if not (data.startswith(prefix) and data.startswith(head + _OID_HEAD, len(prefix))
            and data.startswith(_IDS_KEY + head, ids_at) and ids_at < suffix_at
            and data.startswith(_SPINE_FIELD, suffix_at)):
        return None
    return prefix, data[suffix_at:]


def bulk_value(oid: ObjectId, prefix: bytes, count: int, suffix: bytes, size: int) -> bytes:
    """The stored value of bulk revision `oid` without its `count` appended pairs (`bulk_cut`'s prefix and
    suffix; `size`, its canonical size): codec byte `BULK`, the canonical CBOR array ``[prefix, count,
    suffix, size]``, an 8-byte check (blake3 of the id and that array, cut short)."""
    array = codec.encode([prefix, count, suffix, size])
    return bytes([BULK]) + array + _check(oid, array)


def _bulk_damaged(oid: bytes, why: str) -> DamagedData:
    return DamagedData(f"stored revision {to_hex(oid)} is corrupt ({why}); run `ctxstore fsck`")


def parse_bulk(oid: ObjectId, value: bytes, *, check: bool = True) -> Bulk:
    """The fields of revision `oid`'s bulk record; `DamagedData` if it is malformed or (with `check`) its
    check does not match (the record is not what was written for `oid`)."""
    try:
        array = bytes(value[1:-CHECK_SIZE])
        prefix, count, suffix, size = codec.decode(array)
        ok = (type(prefix) is bytes and prefix.startswith(_REVISION_START) and prefix.endswith(_LISTS_AFTER)
              and type(suffix) is bytes and suffix.startswith(_SPINE_FIELD) and type(count) is int
              and count >= 1 and type(size) is int and (not check or _check(oid, array) == value[-CHECK_SIZE:]))
    except (IndexError, ValueError, TypeError, EncodingError):
        ok = False
    if not ok:
        raise _bulk_damaged(oid, "a damaged bulk record")
    return prefix, count, suffix, size


def bulk_light(oid: ObjectId, bulk: Bulk, placeholder: dict[str, Any]) -> Revision:
    """The revision a bulk record stands for, read from its prefix and suffix alone, with `placeholder`
    for its operation (whose lists only a walk of its tree gives: `bulk_bytes`); `DamagedData` if the
    prefix and suffix are not a revision's."""
    prefix, count, suffix, _size = bulk
    stream = io.BytesIO(suffix)
    stream.seek(len(_SPINE_FIELD))
    try:
        fields = fields_before_spine(prefix, before="operation")
        spine = cbor2.CBORDecoder(stream).decode()
        if fields is None or fields.get("type") != "revision" or stream.tell() != len(suffix):
            raise ValueError("not a revision")
        light = Revision(fields.get("parent"), fields["createdAt"], None, spine, fields["size"])
        light.check(items=False)  # the placeholder goes in after: it is no operation
        if light.parent is None or seq.count(spine) != light.size or count > light.size:
            raise ValueError("its spine does not hold its size, or fewer entries than it appended")
    except (cbor2.CBORDecodeError, ValueError, TypeError, IndexError, KeyError, CtxStoreError):
        raise _bulk_damaged(oid, "a bulk record that is not a revision's") from None
    return dataclasses.replace(light, operation=placeholder)


def bulk_bytes(oid: ObjectId, bulk: Bulk, items: list[tuple[str, ObjectId | None]]) -> bytes:
    """A bulk revision's canonical bytes: its prefix, the lists of `items` (the last items of its view,
    as many as it appended), its suffix; checked against its id (`DamagedData` otherwise)."""
    prefix, count, suffix, _size = bulk
    ids = [entry_id for entry_id, _ in items]
    oids = [entry for _, entry in items]
    if len(items) != count or None in oids:
        raise _bulk_damaged(oid, "its tree does not end with the entries it appended")
    data = b"".join([prefix, _lists(ids, oids), suffix])  # type: ignore[arg-type]  # no None, just checked
    if object_id(data) != oid:
        raise _bulk_damaged(oid, "it does not rebuild to its id from its tree")
    return data


def _make_room(held: dict[ObjectId, Any], limit: int) -> None:
    """Drop the oldest half of a bounded cache that is full (dicts keep insertion order)."""
    if len(held) >= limit:
        for old in list(held)[: limit // 2]:
            del held[old]


class RevisionCache:
    """Recently rebuilt or written revisions by id, bounded: a chain walked backwards (a pack, a log)
    then rebuilds each revision from its child's neighbour instead of from the checkpoint again.

    The newest few also keep their canonical bytes (checked against their ids) and encoded spine
    levels: reading a head just written returns them without encoding or hashing it again, and
    encoding its child's delta on the next commit reuses every level the append left alone.
    """

    def __init__(self, limit: int = 4096, encoded: int = 64) -> None:
        self._limit = limit
        self._encoded_limit = encoded
        self._held: dict[ObjectId, Revision] = {}
        # id -> canonical bytes, encoded levels, and the revision they were put with (which they encode)
        self._encoded: dict[ObjectId, tuple[bytes, seq.SpineBytes | None, Revision]] = {}
        self._last: seq.SpineBytes | None = None
        self._lock = threading.Lock()

    def get(self, oid: ObjectId) -> Revision | None:
        """The cached revision, or None."""
        return self._held.get(oid)

    def encoded(self, oid: ObjectId) -> tuple[bytes, seq.SpineBytes | None] | None:
        """A recent revision's canonical bytes (they hash to `oid`) and encoded levels, or None."""
        found = self._encoded.get(oid)
        return None if found is None else (found[0], found[1])

    def with_levels(self, oid: ObjectId) -> tuple[Revision, seq.SpineBytes] | None:
        """A recent revision kept with its bytes, as it was put with them (so the revision those checked
        bytes encode, whatever `get` holds now), and its encoded levels; None if none are kept."""
        found = self._encoded.get(oid)
        return None if found is None or found[1] is None else (found[2], found[1])

    def levels_for(self, parent: ObjectId | None) -> seq.SpineBytes | None:
        """Encoded levels to encode a revision with: its parent's if they are here, else the last ones
        kept (a chain walked backwards encodes each revision after its child, whose spine shares every
        level but the leaves with it; `seq.encode_revision` reuses a level only where it is the same)."""
        found = self._encoded.get(parent) if parent is not None else None
        return found[1] if found is not None else self._last

    def put(self, oid: ObjectId, revision: Revision, encoded: tuple[bytes, seq.SpineBytes | None] | None = None
            ) -> None:
        """Remember a revision (the oldest half goes when the cache is full), with its canonical bytes and
        encoded levels when given: the caller has checked that the bytes hash to `oid`."""
        with self._lock:
            _make_room(self._held, self._limit)
            self._held[oid] = revision
            if encoded is not None:
                _make_room(self._encoded, self._encoded_limit)
                self._encoded[oid] = (*encoded, revision)
                if encoded[1] is not None:
                    self._last = encoded[1]


class MadeAppends:
    """Append revisions this process made by the rule, whose bytes it hashed to their ids: what a
    store's delta check would recompute, handed to it instead (bounded; each is taken once).

    A vouch says: `data` is the canonical encoding of `revision`, made by `seq.append` of the
    operation's entries onto the spine of its parent (the revision stored under `revision.parent`),
    `object_id(data)` is `oid`, and `closed` are the ids of the nodes that append closed (none: it left
    every level but the leaf's open). With none closed, that is what `rebuild` and `checked` establish
    for a delta, so a store writing exactly these bytes under `oid` may store the delta without
    rebuilding it. A bulk append (`BULK_FROM` entries or more) closes nodes; its lists are then the
    last items of its own tree, which reads only nodes among `closed`, so a store that holds those (or
    writes them with it) may store it without its lists (`bulk_value`). Any other bytes, or an id not
    vouched for, take the full check. Only the history's own append (`Workspace.put_append`) vouches.
    """

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._made: dict[ObjectId, tuple[bytes, Revision, seq.SpineBytes | None, tuple[ObjectId, ...]]] = {}
        self._lock = threading.Lock()

    def vouch(self, oid: ObjectId, data: bytes, revision: Revision, levels: seq.SpineBytes | None,
              closed: Sequence[ObjectId] = ()) -> None:
        """Note an append revision made by the rule onto its parent, closing the nodes `closed` (see above)."""
        with self._lock:
            _make_room(self._made, self._limit)
            self._made[oid] = (data, revision, levels, tuple(closed))

    def take(self, oid: ObjectId, data: bytes
             ) -> tuple[Delta, Revision, seq.SpineBytes | None, tuple[ObjectId, ...]] | None:
        """The delta of revision `oid` and the nodes its append closed, if it was vouched for with exactly
        `data` (then forgotten), else None."""
        with self._lock:
            found = self._made.pop(oid, None)
        if found is None or found[0] != data:
            return None
        _data, rev, levels, closed = found
        op, parent, created = rev.operation, rev.parent, rev.created_at
        # The shape `delta_of` would find in the bytes (a revision it would store whole stays whole).
        if (type(parent) is not bytes or len(parent) != OID_SIZE or type(created) is not int or created < 0
                or type(op) is not dict or op.keys() != _OP_KEYS or op["type"] != "append"
                or not _appended(op["entryIds"], op["entries"])):
            return None
        return (ObjectId(parent), created, op["entryIds"], op["entries"], len(data)), rev, levels, closed


MADE = MadeAppends()
"""The appends this process's histories made, for its stores' delta check."""
