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
appends. docs/storage.md specifies it.

Pure functions over bytes and parsed revisions, and a bounded cache of rebuilt revisions shared by the
stores of a process (ids are content hashes, so an entry can never go stale).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import blake3

from ..errors import DamagedData, EncodingError
from ..format import codec, seq
from ..format.objects import SPINE_KEY, Revision, SeqNode, fields_before_spine
from ..ids import OID_SIZE, ObjectId, object_id, to_hex

__all__ = ["CHECK_SIZE", "DELTA", "MADE", "MAX_CHAIN", "Delta", "MadeAppends", "RevisionCache", "checked",
           "closes_leaf", "delta_of", "delta_value", "may_be_delta", "parse_delta", "rebuild", "revision_bytes"]

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
    `object_id(data)` is `oid`, and no node closed (the append left every level but the leaf's open).
    That is what `rebuild` and `checked` establish for a delta, so a store writing exactly these bytes
    under `oid` may store the delta without rebuilding it; any other bytes, or an id not vouched for,
    take the full check. Only the history's own append (`Workspace.put_append`) vouches.
    """

    def __init__(self, limit: int = 256) -> None:
        self._limit = limit
        self._made: dict[ObjectId, tuple[bytes, Revision, seq.SpineBytes | None]] = {}
        self._lock = threading.Lock()

    def vouch(self, oid: ObjectId, data: bytes, revision: Revision, levels: seq.SpineBytes | None) -> None:
        """Note an append revision made by the rule onto its parent, with no node closed (see above)."""
        with self._lock:
            _make_room(self._made, self._limit)
            self._made[oid] = (data, revision, levels)

    def take(self, oid: ObjectId, data: bytes) -> tuple[Delta, Revision, seq.SpineBytes | None] | None:
        """The delta of revision `oid` if it was vouched for with exactly `data` (then forgotten), else None."""
        with self._lock:
            found = self._made.pop(oid, None)
        if found is None or found[0] != data:
            return None
        _data, rev, levels = found
        op, parent, created = rev.operation, rev.parent, rev.created_at
        # The shape `delta_of` would find in the bytes (a revision it would store whole stays whole).
        if (type(parent) is not bytes or len(parent) != OID_SIZE or type(created) is not int or created < 0
                or type(op) is not dict or op.keys() != _OP_KEYS or op["type"] != "append"
                or not _appended(op["entryIds"], op["entries"])):
            return None
        return (ObjectId(parent), created, op["entryIds"], op["entries"], len(data)), rev, levels


MADE = MadeAppends()
"""The appends this process's histories made, for its stores' delta check."""
