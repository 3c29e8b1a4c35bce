"""The durable object store: objects, refs, reflogs and config in one LMDB environment.

Three modules make the backend, one concept each: `lmdb_env` opens and grows the environment (one per
process and path, shared by every `LmdbStore` on it, fork-safe); `records` says how each record is keyed
and framed (the table of databases is there and in docs/storage.md); this module is the store itself,
reading and writing records through a transaction of the environment (seen through the commit log,
`lmdb_log`). Only `lmdb_env`, `lmdb_log` and this module import the third-party `lmdb` package.
"""

from __future__ import annotations

import itertools
import os
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, TypeVar

import lmdb
import zstandard

from ..errors import (
    CtxStoreError,
    DamagedData,
    EncodingError,
    InvalidObject,
    MissingObject,
    NotARepository,
    StoreError,
)
from ..format import codec, seq
from ..format.codec import check_time_ms
from ..format.codec import now_ms as _now_ms
from ..format.objects import UNREAD_OPERATION, Entry, Revision, SeqNode, parse_object, revision_header
from ..ids import OID_SIZE, ObjectId, object_id, to_hex
from . import packs, revisions
from . import records as rec
from .base import BatchWrites, StoreStats, Transaction, WriteSet, check_oid
from .lmdb_env import Environment, acquire, release
from .revisions import BULK, DELTA

__all__ = ["AUTO_DICT_OBJECTS", "DEFAULT_MAP_SIZE", "DICT_MAX_OBJECT", "LmdbStore"]

DEFAULT_MAP_SIZE = 64 * 1024 * 1024
"""Initial map size for a new store; it grows when full (LMDB's map is address space, not disk)."""
DICT_MAX_OBJECT = 64 * 1024
"""Objects up to this size are compressed with the trained dictionary; larger ones gain nothing from it."""
AUTO_DICT_OBJECTS = 512
"""Objects a store holds when a commit first trains a compression dictionary (`auto_dictionary`)."""
DICT_SIZE = 32 * 1024
"""Bytes of a trained compression dictionary."""
DICT_MIN_GAIN = 0.05
"""A trained dictionary is kept only if it shrinks held-out objects by this much more than plain zstd."""
WRITE_SET_SAMPLES = 2000
"""Objects of a large first commit a dictionary is trained on (more gain little and cost more time)."""
RECOMPRESS_OBJECTS = 8 * AUTO_DICT_OBJECTS
"""A store holding at most this many objects rewrites them with its first dictionary (a recorded chat);
a larger one keeps their encoding (a rewrite costs a decode and a compression per object)."""
_ITER_BATCH = 4096
_PACKS_HELD = 32
_PACK_CODEC = bytes([packs.LEAF_PACK])
_RECOMPRESSIBLE = (bytes([codec.RAW]), bytes([codec.ZSTD]))
_PACKS: dict[tuple[bytes, bytes], packs.Parts] = {}
"""Packs this process read lately, split into their parts, by record key and seal."""
_TRAIN_AT: dict[str, int] = {}
_REVISIONS = revisions.RevisionCache()
"""Revisions this process rebuilt or wrote lately, shared by its stores (ids are content hashes)."""
_FRAME_BATCH, _FRAME_BYTES = 256, 8 << 20
"""Leaf packs a commit frames together (`codec.compress_many`): up to this many, or these many bytes."""
_R = TypeVar("_R")


def _collision(oid: ObjectId, key: bytes, held: bytes) -> StoreError:
    other = to_hex(rec.record_id(key, held))
    return StoreError(f"objects {to_hex(oid)} and {other} share their first {rec.KEY_SIZE} bytes, which this "
                      "store cannot hold; nothing was written (report this: it should not happen)")


def _not_its_id(oid: ObjectId) -> DamagedData:
    return DamagedData(f"stored object {to_hex(oid)} is corrupt: its bytes do not hash to its id "
                       "(changed on disk or written under the wrong id); run `ctxstore fsck`")


class _Records:
    """The store's records as one LMDB transaction sees them; it is also the `Snapshot` a `Transaction`
    reads through."""

    __slots__ = ("_dbs", "_e", "_t")

    def __init__(self, env: Environment, txn: Any) -> None:
        # `txn` is LMDB's transaction, or a `lmdb_log.View` of it through the commit log (the same calls).
        self._e = env
        self._t = txn
        self._dbs = env.dbs

    # -- objects ------------------------------------------------------------------------------------------

    def record(self, oid: bytes) -> bytes | None:
        """The object's record in ``objs`` (write time, id tail, stored value), or None if not held."""
        record = self._t.get(rec.object_key(oid), db=self._dbs[rec.OBJECTS])
        return record if record is not None and rec.record_holds(record, oid) else None

    def find(self, oid: bytes) -> bytes | None:
        """An object's stored value (codec byte, then the payload), or None if it is not held."""
        record = self.record(oid)
        return None if record is None else rec.record_value(record)

    def get(self, oid: ObjectId) -> bytes | None:
        value = self.find(oid)
        return None if value is None else self.canonical(oid, value)

    def get_many(self, oids: Iterable[ObjectId]) -> list[bytes]:
        """`get` of many objects in order (a render reads a whole view), with the record lookups inlined;
        `MissingObject` names the first one absent."""
        get, objs = self._t.get, self._dbs[rec.OBJECTS]
        key_size, tail, head = rec.KEY_SIZE, rec.TIME_SIZE, rec.HEAD_SIZE
        canonical, unpack = self.canonical, codec.decompressor(self._e.dicts)
        out: list[bytes] = []
        for oid in oids:
            if type(oid) is not bytes or len(oid) != OID_SIZE:
                check_oid(oid)  # raises, saying what is wrong
            record = get(oid[:key_size], db=objs)
            if record is None or record[tail:head] != oid[key_size:]:
                raise MissingObject(f"object {to_hex(oid)} is not in the store")
            value = record[head:]
            if value[0] >= DELTA:  # a delta, a leaf pack, an entry in a pack
                out.append(canonical(oid, value))
                continue
            try:
                data = unpack(value)
            except EncodingError:
                data = self.decode(oid, value)  # loads a dictionary another process trained, or says why not
            if object_id(data) != oid:
                raise _not_its_id(oid)
            out.append(data)
        return out

    def canonical(self, oid: ObjectId, value: bytes) -> bytes:
        """An object's canonical bytes from its stored value, checked against its id."""
        if value[0] == packs.PACKED:
            key, position = packs.pointer_target(oid, value)
            parts = self.pack(key)
            if parts is None or not 0 <= position < len(parts.objects) or len(
                    data := parts.objects[position]) != packs.stored_size_of(value):
                raise DamagedData(f"stored entry {to_hex(oid)} is kept in a leaf pack that does not hold it; "
                                  "run `ctxstore fsck`")
        elif value[0] == packs.LEAF_PACK:
            data = packs.leaf_bytes(oid, self.pack_parts(oid))
        elif value[0] == DELTA:
            known = _REVISIONS.encoded(oid)
            if known is not None:
                return known[0]  # checked against its id when it was cached
            rev = self.revision(oid, value)
            encoded = revisions.checked(oid, rev, _REVISIONS.levels_for(rev.parent))
            _REVISIONS.put(oid, rev, encoded)
            return encoded[0]
        elif value[0] == BULK:
            return self.bulk_revision(oid, value)  # checked against its id
        else:
            data = self.decode(oid, value)
        if object_id(data) != oid:
            raise _not_its_id(oid)
        return data

    def pack(self, key: bytes) -> packs.Parts | None:
        """The parts of the pack of the leaf whose record key is `key` (`pack_parts`), or None if there is
        none."""
        record = self.read_pack(key)
        if record is None:
            return None
        # Looked up by its seal first: most reads of a packed object find the pack split already (a view's
        # entries and blobs are read in runs), and need not find the leaf's id.
        parts = _PACKS.get((key, record[:packs.SEAL_SIZE]))
        if parts is not None:
            return parts
        held = self._t.get(key, db=self._dbs[rec.OBJECTS])
        if held is None or held[rec.HEAD_SIZE:rec.HEAD_SIZE + 1] != _PACK_CODEC:
            return None
        return self._split(rec.record_id(key, held), bytes(record))

    def pack_parts(self, leaf: ObjectId) -> packs.Parts:
        """The parts of a packed leaf's pack, the leaf's canonical bytes (or None: `packs.leaf_bytes`) and
        the entries' and blobs' it holds (`packs.split`: the seal checked), from the few this process holds
        split."""
        parts = self.pack(rec.object_key(leaf))
        if parts is None:
            raise DamagedData(f"stored leaf {to_hex(leaf)} is packed, but its pack is missing; run `ctxstore fsck`")
        return parts

    def _split(self, leaf: ObjectId, record: bytes) -> packs.Parts:
        parts = packs.split(leaf, packs.payload_of(leaf, record, self.unframe))
        if len(_PACKS) >= _PACKS_HELD:
            _PACKS.clear()
        # The seal names the payload (a pack written again with other blobs is another entry here), and
        # binds the leaf's whole id, so half of it keys the entry.
        _PACKS[(rec.object_key(leaf), record[:packs.SEAL_SIZE])] = parts
        return parts

    def unframe(self, value: bytes, max_size: int = 2 * packs.MAX_PAYLOAD) -> bytes:
        """Bytes framed by the store's packer (raw, zstd, dictionary) and at most `max_size` long (a pack's
        payload by default), loading a dictionary another process trained; `EncodingError` if they do not
        decode."""
        used = rec.value_dict_id(value)
        if used is not None and used not in self._e.dicts:
            self.load_dicts()
        return codec.decompress(value, dictionaries=self._e.dicts, max_size=max_size)

    def get_leaves(self, oids: Iterable[ObjectId]) -> list[tuple[bytes | None, list[Any]]]:
        """Each leaf's canonical bytes, checked against its id, with the messages of the entries it is
        packed with (`LeafSource`: the pack's seal checked, not each entry's id; None for the bytes of a
        leaf that is its entries, all chat entries), or an empty list where the leaf is not stored
        packed; `MissingObject` names the first leaf absent."""
        out: list[tuple[bytes | None, list[Any]]] = []
        read_pack = self.read_pack
        for oid in oids:
            check_oid(oid)
            record = read_pack(rec.object_key(oid), oid)  # the pack alone: no page of `objs` is read
            if record is None:
                value = self.find(oid)
                if value is None:
                    raise MissingObject(f"object {to_hex(oid)} is not in the store")
                out.append((self.canonical(oid, value), []))
                continue
            leaf, messages = packs.chat_messages(oid, packs.payload_of(oid, record, self.unframe))
            if leaf is None:  # the leaf is its chat entries: the seal stands for it, as for their ids
                out.append((None, messages))
                continue
            if object_id(leaf) != oid:
                raise _not_its_id(oid)
            out.append((leaf, messages))
        return out

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int] | None:
        """A revision's parent and `createdAt` from its record, or None if it is not held.

        A delta is not rebuilt, nor a bulk revision's lists: the parent and time are read from the record
        (its check and field types checked, not the id: a full read does that). A revision stored whole is
        decoded and checked against its id as `get` does, and its header read without decoding its spine.
        """
        value = self.find(oid)
        if value is None:
            return None
        if value[0] == DELTA:
            delta = revisions.parse_delta(oid, value)[1]
            if delta[1] < 0:
                raise DamagedData(f"stored revision {to_hex(oid)} is corrupt (a damaged delta record); "
                                  "run `ctxstore fsck`")
            return delta[0], delta[1]
        if value[0] == BULK:
            light = revisions.bulk_light(oid, revisions.parse_bulk(oid, value), UNREAD_OPERATION)
            return light.parent, light.created_at
        return revision_header(self.canonical(oid, value))

    def stored_append(self, oid: ObjectId) -> tuple[ObjectId, int, list[str], list[ObjectId]] | None:
        """The append revision `oid` is stored as, if it is stored as a delta (parent, createdAt, entry ids,
        entry oids): its record's check holds, and its write checked it rebuilds the revision's bytes.
        None if it is stored whole or absent; `DamagedData` if its record is damaged."""
        value = self.find(oid)
        if value is None or value[0] != DELTA:
            return None
        parent, created, ids, oids, _size = revisions.parse_delta(oid, value)[1]
        return parent, created, ids, oids

    def revision_without_operation(self, oid: ObjectId, placeholder: dict[str, Any]
                                   ) -> tuple[Revision, seq.SpineBytes | None] | None:
        """A bulk revision without its operation (`placeholder` instead), and its spine's encoded levels,
        from its record's prefix and suffix (its check holds), its lists not rebuilt
        (`LightRevisionSource`); None if it is absent or not stored so."""
        value = self.find(oid)
        if value is None or value[0] != BULK:
            return None
        bulk = revisions.parse_bulk(oid, value)
        light = revisions.bulk_light(oid, bulk, placeholder)
        return light, seq.spine_bytes(light, bulk[2])

    def bulk_revision(self, oid: ObjectId, value: bytes) -> bytes:
        """A bulk revision's canonical bytes: its lists rebuilt from the last items of its view, read
        from the spine through this store's own reads (leaf packs included), then checked against its id.
        `DamagedData` if the record or the tree it names is damaged."""
        bulk = revisions.parse_bulk(oid, value)
        light = revisions.bulk_light(oid, bulk, UNREAD_OPERATION)
        try:
            items = seq.items_from(light.seq, light.size - bulk[1], self._nodes)
        except DamagedData:
            raise
        except CtxStoreError as exc:
            raise DamagedData(f"stored revision {to_hex(oid)} is corrupt: the tree its lists are rebuilt from "
                              f"is damaged ({exc}); run `ctxstore fsck`") from None
        return revisions.bulk_bytes(oid, bulk, items)

    def _nodes(self, oids: list[ObjectId]) -> list[SeqNode]:
        """Seq nodes a bulk revision's tree names, each read as `get` reads it (checked against its id);
        `MissingObject` or `InvalidObject` for one absent or not a node (a revision never is one)."""
        out: list[SeqNode] = []
        for oid in oids:
            value = self.find(oid)
            if value is None:
                raise MissingObject(f"seq node {to_hex(oid)} is not in the store")
            node = None if value[0] in (DELTA, BULK) else parse_object(self.canonical(oid, value), trusted=True)
            if not isinstance(node, SeqNode):
                raise InvalidObject(f"object {to_hex(oid)} is not a seq node")
            out.append(node)
        return out

    def revision(self, oid: ObjectId, value: bytes) -> Revision:
        """The revision a stored delta stands for, rebuilt from the checkpoint (or the cached revision)
        its chain leads back to; of a revision stored whole, the revision (of a bulk revision, without
        its operation: what a child's rebuild needs). The caller checks the result by hashing it."""
        chain: list[tuple[ObjectId, revisions.Delta]] = []
        at, held = oid, value
        while True:
            base = _REVISIONS.get(at)
            if base is not None:
                break
            if held[0] == BULK:  # a checkpoint whose spine and size are all a rebuild needs: not cached
                base = revisions.bulk_light(at, revisions.parse_bulk(at, held), UNREAD_OPERATION)
                break
            if held[0] != DELTA:
                obj = parse_object(self.canonical(at, held), trusted=True)
                if not isinstance(obj, Revision):
                    raise DamagedData(f"revision {to_hex(oid)} is stored as an append onto {to_hex(at)}, "
                                      "which is not a revision; run `ctxstore fsck`")
                base = obj
                _REVISIONS.put(at, base)
                break
            delta = revisions.parse_delta(at, held)[1]
            chain.append((at, delta))
            parent = self.find(delta[0])
            if parent is None or len(chain) > revisions.MAX_CHAIN:
                raise DamagedData(f"revision {to_hex(oid)} is stored as an append onto {to_hex(delta[0])}, "
                                  "which is missing; run `ctxstore fsck`")
            at, held = delta[0], parent
        for at, delta in reversed(chain):
            base = revisions.rebuild(base, delta)
            _REVISIONS.put(at, base)
        return base

    def delta_value(self, oid: ObjectId, data: bytes, w: WriteSet, depths: dict[ObjectId, int]) -> bytes | None:
        """The stored value of an append revision as a delta on its parent, or None to store it whole.

        Whole when its append closed a leaf (a checkpoint at the spine's shortest), when the chain would
        pass `MAX_CHAIN`, when the parent is not at hand, or when the rule does not rebuild its bytes.
        """
        depths[oid] = 0  # stored whole unless it becomes a delta below: a checkpoint for a child written with it
        vouched = revisions.MADE.take(oid, data)
        if vouched is not None:
            return self._made_delta(oid, data, vouched, w, depths)
        delta = revisions.delta_of(data)
        if delta is None or revisions.closes_leaf(delta):
            return None  # closing a leaf, a checkpoint: not worth rebuilding its spine to find that out
        parent_oid = delta[0]
        depth = depths.get(parent_oid)
        held = None
        if depth is None:
            held = self.find(parent_oid)
            if held is None:
                return None
            depth = held[1] if held[0] == DELTA else 0
        parent = _REVISIONS.get(parent_oid)
        if parent is None:
            written = w.objects.get(parent_oid)
            try:
                obj = (parse_object(written, trusted=True) if written is not None
                       else self.revision(parent_oid, held or b""))
            except CtxStoreError:
                return None
            if not isinstance(obj, Revision):
                return None
            parent = obj
        closed: list[SeqNode] = []

        def put(node: SeqNode) -> ObjectId:
            closed.append(node)
            return seq.node_id(node)

        rebuilt = revisions.rebuild(parent, delta, put)
        made, levels = revisions.revision_bytes(rebuilt, _REVISIONS.levels_for(parent_oid))
        if made != data:
            return None
        # Kept with its bytes, and stored as a delta, only if they hash to the id it is written under: a
        # delta's check then vouches for the revision (`stored_append`), and a whole one is hashed on read.
        if object_id(data) != oid:
            return None
        _REVISIONS.put(oid, rebuilt, (data, levels))
        if closed or depth >= revisions.MAX_CHAIN:
            return None
        depths[oid] = depth + 1
        return revisions.delta_value(oid, delta, depth + 1)

    def _made_delta(self, oid: ObjectId, data: bytes,
                    made: tuple[revisions.Delta, Revision, seq.SpineBytes | None, tuple[ObjectId, ...]],
                    w: WriteSet, depths: dict[ObjectId, int]) -> bytes | None:
        """`delta_value` of an append this process made and vouched for (`revisions.MADE`): its bytes are
        the rule's rebuild from its parent and hash to `oid`, so only the chain depth is left to find
        (`delta_value` has noted it a checkpoint, as it is unless it becomes a delta here). A bulk append,
        vouched for with the nodes it closed, is stored without its lists where it can be (`_bulk_value`)."""
        delta, rev, levels, closed = made
        if closed:
            return self._bulk_value(oid, data, rev, levels, closed, w)
        if revisions.closes_leaf(delta):
            return None
        depth = depths.get(delta[0])
        if depth is None:
            held = self.find(delta[0])
            if held is None:
                return None
            depth = held[1] if held[0] == DELTA else 0
        _REVISIONS.put(oid, rev, (data, levels))  # vouched: `data` hashes to `oid`
        if depth >= revisions.MAX_CHAIN:
            return None
        depths[oid] = depth + 1
        return revisions.delta_value(oid, delta, depth + 1)

    def _bulk_value(self, oid: ObjectId, data: bytes, rev: Revision, levels: seq.SpineBytes | None,
                    closed: tuple[ObjectId, ...], w: WriteSet) -> bytes | None:
        """The stored value of a vouched bulk append without its lists (`revisions.bulk_value`), or None to
        store it whole: when it appended fewer than `revisions.BULK_FROM` entries, when a node it closed
        (all its tree's last items are under those) is neither held nor written here checked against its
        id, or when its bytes are not laid out as prefix, lists, suffix (`revisions.bulk_cut`). Its
        rebuild is then certain."""
        op = rev.operation
        if op is None or levels is None or len(op["entries"]) < revisions.BULK_FROM:
            return None
        if not all(self._at_rebuild(node, w) for node in closed):
            return None
        cut = revisions.bulk_cut(rev, data, levels)
        if cut is None:
            return None
        return revisions.bulk_value(oid, cut[0], len(op["entries"]), cut[1], len(data))

    def _at_rebuild(self, node: ObjectId, w: WriteSet) -> bool:
        """Whether a node a bulk revision's rebuild reads will be there as written: written by this
        transaction and vouched for or checked against its id, or held and not deleted by it."""
        found = w.objects.get(node)
        if found is None:
            return node not in w.deleted and self.has(node)
        return node in w.hashed or object_id(found) == node

    def has(self, oid: ObjectId) -> bool:
        return self.record(oid) is not None

    def written_at(self, oid: ObjectId) -> int | None:
        record = self.record(oid)
        return None if record is None else rec.record_time(record)

    def count(self) -> int:
        return int(self._t.stat(self._dbs[rec.OBJECTS])["entries"])

    def values(self) -> Iterator[tuple[ObjectId, bytes]]:
        """Every object's id and stored value, in key order."""
        for key, record in self._t.cursor(db=self._dbs[rec.OBJECTS]):
            yield rec.record_id(key, record), rec.record_value(record)

    def stored_size(self, oid: ObjectId) -> int | None:
        value = self.find(oid)
        if value is None:
            return None
        pack = self.read_pack(rec.object_key(oid), oid) if packs.is_pack(value) else None
        return len(value) + (len(pack) if pack is not None else 0)

    def holds_any(self, keys: Iterable[bytes]) -> bool:
        """Whether ``objs`` holds a record under any of these keys."""
        get, objs = self._t.get, self._dbs[rec.OBJECTS]
        return any(get(key, db=objs) is not None for key in keys)

    # -- leaf packs -------------------------------------------------------------------------------------

    def read_pack(self, key: bytes, leaf: ObjectId | None = None) -> bytes | None:
        """The record of the pack under a leaf's record key (its pieces joined: `records.pack_pieces`), or
        None if there is none; `DamagedData` naming the leaf (`leaf`, if the caller knows its id) if the
        keys under `key` are not its pieces 0 to n-1 (`records.pieces_problem`)."""
        cursor = self._t.cursor(db=self._dbs[rec.PACKS])
        if not cursor.set_range(key):
            return None
        found, record = cursor.item()
        if found[:rec.KEY_SIZE] != key:
            return None
        keys, pieces = [found], [record]
        while cursor.next() and (found := cursor.key())[:rec.KEY_SIZE] == key:
            keys.append(found)
            pieces.append(cursor.value())
        problem = rec.pieces_problem(keys)
        if problem is not None:
            raise self._damaged_pack(key, problem, leaf)
        return record if len(pieces) == 1 else b"".join(pieces)

    def write_pack(self, key: bytes, record: bytes) -> None:
        """Store a pack's record under a leaf's record key, in pieces (`records.pack_pieces`), in place of
        whatever was there (a pack rewritten shorter leaves no piece of the old one)."""
        self.delete_pack(key)
        put, db = self._t.put, self._dbs[rec.PACKS]
        for index, piece in enumerate(rec.pack_pieces(record, self._e.page_size)):
            # Put as the last key when it is (a bulk import writes its packs in key order): LMDB then leaves
            # a full page full and starts the next, where a plain put splits it in half (a new store's
            # ``packs`` takes a tenth fewer pages).
            if not put(rec.piece_key(key, index), piece, db=db, append=True):
                put(rec.piece_key(key, index), piece, db=db)

    def delete_pack(self, key: bytes) -> None:
        """Delete the pack under a leaf's record key: every key in ``packs`` that starts with it."""
        cursor = self._t.cursor(db=self._dbs[rec.PACKS])
        cursor.set_range(key)
        while cursor.key().startswith(key) and cursor.delete():
            pass

    def pack_records(self) -> Iterator[tuple[bytes, bytes]]:
        """Every pack's leaf record key and record, in key order; `DamagedData` at one whose keys are not
        its pieces 0 to n-1."""
        for key, keys, pieces in self._pack_groups():
            problem = rec.pieces_problem(keys)
            if problem is not None:
                raise self._damaged_pack(key, problem, None)
            yield key, b"".join(pieces)

    def _pack_groups(self) -> Iterator[tuple[bytes, list[bytes], list[bytes]]]:
        """Every key and value in ``packs``, in key order, grouped by the leaf record key they start with."""
        cursor = self._t.cursor(db=self._dbs[rec.PACKS])
        for key, group in itertools.groupby(cursor, lambda item: bytes(item[0][:rec.KEY_SIZE])):
            keys, pieces = zip(*group, strict=True)
            yield key, list(keys), list(pieces)

    def _damaged_pack(self, key: bytes, why: str, leaf: ObjectId | None) -> DamagedData:
        """The error for a pack read under `key` that is damaged, naming its leaf by id where it is known
        (`leaf`, or the record under `key` in ``objs``), else by `key`."""
        if leaf is None:
            held = self._t.get(key, db=self._dbs[rec.OBJECTS]) if len(key) == rec.KEY_SIZE else None
            name = bytes(key).hex() if held is None else to_hex(rec.record_id(key, held))
        else:
            name = to_hex(leaf)
        return DamagedData(f"stored leaf pack {name} is corrupt ({why}); run `ctxstore fsck`")

    def packs_bytes(self) -> int:
        """Bytes the packs of packed leaves occupy (their records in ``packs``)."""
        return sum(len(piece) for _key, _keys, pieces in self._pack_groups() for piece in pieces)

    def orphan_packs(self) -> list[str]:
        """One line for each pack in ``packs`` whose keys are not its pieces 0 to n-1, and for each whose
        key holds no leaf-pack marker in ``objs`` (no record there, or one whose stored value is not
        `packs.LEAF_PACK`). One lookup in ``objs`` per pack; the object under a pack's key is read only
        when it is not a marker.

        Nothing the store writes leaves either (it writes a pack's pieces together, and gc deletes a pack
        with its marker), so it is damage. A read of a pack whose keys are wrong refuses it. Objects whose
        pointers still name an orphaned pack read from it (each checked against its id), and a read of
        whole views (`get_leaves`) finds a leaf's pack by its key alone, so one under a leaf stored whole
        is taken for that leaf's pack and refused unless it is sealed for that leaf. The line says which."""
        get, objs = self._t.get, self._dbs[rec.OBJECTS]
        found: list[str] = []
        for key, keys, _pieces in self._pack_groups():
            problem = rec.pieces_problem(keys)
            if problem is not None:
                found.append(f"leaf pack {key.hex()} is damaged: {problem} (its leaf and the objects in it do not "
                             "read)")
                if len(key) != rec.KEY_SIZE:
                    continue
            held = get(key, db=objs)
            if held is None:
                found.append(f"leaf pack {key.hex()} is orphaned: no object has a record under its key in "
                             "`objs` (objects that still point into it read from it)")
                continue
            value = rec.record_value(held)
            if value[:1] == _PACK_CODEC:
                continue
            oid = rec.record_id(key, held)
            what = f"object {to_hex(oid)} under its key is not stored packed (" + (
                f"codec byte 0x{value[0]:02x}, not 0x{packs.LEAF_PACK:02x})" if value else "an empty value)")
            try:
                leaf = seq.is_leaf_bytes(self.canonical(oid, value))
            except CtxStoreError:
                leaf = False  # the object is damaged: reading it reports that
            found.append(f"leaf pack {key.hex()} is orphaned: {what}" + (
                "; reading a whole view that holds that leaf refuses the pack unless it is sealed for it"
                if leaf else " (objects that still point into it read from it)"))
        return found

    def ids_after(self, after: bytes, limit: int) -> list[ObjectId]:
        """Up to `limit` object ids whose keys come after key `after` (b"": from the first), in key order."""
        cursor = self._t.cursor(db=self._dbs[rec.OBJECTS])
        found = cursor.set_range(after)
        if found and after and cursor.key() == after:
            found = cursor.next()
        out: list[ObjectId] = []
        while found and len(out) < limit:
            out.append(rec.record_id(cursor.key(), cursor.value()))
            found = cursor.next()
        return out

    def decode(self, oid: ObjectId, value: bytes) -> bytes:
        """An object's canonical bytes from its stored value."""
        if value[0] in (packs.LEAF_PACK, packs.PACKED):
            return self.canonical(oid, value)
        try:
            return self.unframe(value, codec.MAX_OBJECT_SIZE)
        except EncodingError as exc:
            raise DamagedData(f"stored object {to_hex(oid)} is corrupt ({exc}); run `ctxstore fsck`") from None

    # -- dictionaries -------------------------------------------------------------------------------------

    def load_dicts(self) -> None:
        """Read into the environment's cache every dictionary it does not hold yet."""
        for key, value in self._t.cursor(db=self._dbs[rec.DICTS]):
            dict_id = rec.dict_id(key)
            if dict_id not in self._e.dicts:
                self._e.dicts[dict_id] = zstandard.ZstdCompressionDict(bytes(value))

    def current_dict(self) -> int:
        """The id of the newest dictionary (0: none), loaded into the cache."""
        # Another process may have trained a newer dictionary; one cursor step per commit finds it.
        cursor = self._t.cursor(db=self._dbs[rec.DICTS])
        if not cursor.last():
            return 0
        dict_id = rec.dict_id(cursor.key())
        if dict_id not in self._e.dicts:
            self.load_dicts()
        return dict_id

    # -- refs, reflogs, config ----------------------------------------------------------------------------

    def get_ref(self, name: str) -> ObjectId | None:
        value = self._t.get(rec.name_key(name), db=self._dbs[rec.REFS])
        return None if value is None else ObjectId(bytes(value))

    def refs(self, prefix: str) -> dict[str, ObjectId]:
        start = rec.name_key(prefix)
        cursor = self._t.cursor(db=self._dbs[rec.REFS])
        found: dict[str, ObjectId] = {}
        if cursor.set_range(start):
            for key, value in cursor:
                if not key.startswith(start):
                    break
                found[key.decode()] = ObjectId(bytes(value))
        return found

    def _newest_reflog_key(self, cursor: Any, name: str) -> bool:
        """Put `cursor` on the newest record key at or before `name`'s (False: there is none)."""
        return bool(cursor.prev() if cursor.set_range(rec.reflog_end(name)) else cursor.last())

    def reflog(self, name: str) -> list[bytes]:
        prefix = rec.reflog_prefix(name)
        cursor = self._t.cursor(db=self._dbs[rec.REFLOG])
        found = self._newest_reflog_key(cursor, name)
        records: list[bytes] = []
        while found and cursor.key().startswith(prefix):
            if rec.reflog_seq(cursor.key(), prefix) is not None:
                records.append(bytes(cursor.value()))
            found = cursor.prev()
        return records

    def next_reflog_seq(self, name: str) -> int:
        cursor = self._t.cursor(db=self._dbs[rec.REFLOG])
        if self._newest_reflog_key(cursor, name):
            seq = rec.reflog_seq(cursor.key(), rec.reflog_prefix(name))
            if seq is not None:
                return seq + 1
        return 0

    def reflog_names(self) -> list[str]:
        cursor = self._t.cursor(db=self._dbs[rec.REFLOG])
        names: list[str] = []
        found = cursor.first()
        while found:
            name = rec.reflog_name(cursor.key())
            names.append(name.decode())
            found = cursor.set_range(name + b"\x01")
        return names

    def get_config(self, key: str) -> bytes | None:
        value = self._t.get(rec.name_key(key), db=self._dbs[rec.CONFIG])
        return None if value is None else bytes(value)

    # -- writing ------------------------------------------------------------------------------------------

    def prepare(self, w: WriteSet, now_ms: int, dict_id: int,
                dictionary: zstandard.ZstdCompressionDict | None) -> _Prepared:
        """The record of each object a transaction writes (its value compressed, a delta, a leaf pack or a
        pointer into one), made once: a commit retried after the map grew writes the same records again."""
        time = now_ms.to_bytes(rec.TIME_SIZE, "big")
        depths: dict[ObjectId, int] = {}
        small, large = rec.packer(dictionary, dict_id), rec.packer(None, 0)
        # A pack's payload is mostly its entries, which compress: framed without `small`'s guess, all of a
        # commit's at once (a bulk import's thousands on every core).
        packed, pointers = self.leaf_packs(
            w, lambda payloads: codec.compress_many(payloads, dictionary=dictionary, dict_id=dict_id))
        out: list[tuple[ObjectId, bytes, bytes | None]] = []
        record, may_be_delta = rec.object_record, revisions.may_be_delta
        for oid, data in w.objects.items():
            value = packed[oid][0] if oid in packed else None
            if value is None:
                if oid in pointers:
                    continue  # its record is the pointer, below
                value = self.delta_value(oid, data, w, depths) if may_be_delta(data) else None
                if value is None:
                    value = small(data) if len(data) <= DICT_MAX_OBJECT else large(data)
            out.append((oid, record(oid, time, value), None))
        written = w.objects
        out.extend((oid, record(oid, time, pointer) if oid in written else b"", pointer)
                   for oid, pointer in pointers.items())
        out.sort(key=itemgetter(0))
        return _Prepared(out, sorted((rec.object_key(oid), pack) for oid, (_, pack) in packed.items()))

    def leaf_packs(self, w: WriteSet, frame: Callable[[list[bytes]], list[bytes]]
                   ) -> tuple[dict[ObjectId, tuple[bytes, bytes]], dict[ObjectId, bytes]]:
        """The packed leaves of the closed leaves a transaction writes (`store.packs`): by leaf id, its
        value in ``objs`` and its pack; and the pointer value of each object they hold, by its id.

        A leaf is packed only when the store does not hold it yet and every entry it names is at hand
        (written by this transaction, checked here against its id, or already stored) and they fit
        `packs.MAX_PAYLOAD`; otherwise its entries keep a record each. The blobs its entries name go in
        with them while they fit, unless another pack holds them already. An object held by two packs
        points to the first.
        """
        packed: dict[ObjectId, tuple[bytes, bytes]] = {}
        payloads: list[tuple[ObjectId, bytes, bytes]] = []  # leaf id, its marker, its pack's payload: to frame
        pointers: dict[ObjectId, bytes] = {}
        written = w.objects
        unframed = 0  # bytes of `payloads`

        def seal() -> None:  # framed a batch at a time: a bulk import holds at most 8 MiB of payloads unframed
            nonlocal unframed
            for (leaf, marker, payload), value in zip(payloads, frame([p for _, _, p in payloads]), strict=True):
                packed[leaf] = (marker, packs.pack_record(leaf, payload, value))
            payloads.clear()
            unframed = 0

        node_start, said, chat_message_at = seq.NODE_START, w.hashed.get, packs.chat_message_at
        for oid, data in written.items():
            if not data.startswith(node_start):
                continue
            items = seq.leaf_items_of(data)  # None: not a leaf, stored as it is (a read says what is wrong)
            if items is None:
                continue
            order = seq.packed_order(items)
            if not order or len(order) > packs.MAX_ENTRIES or self.record(oid) is not None:
                continue  # held already, packed or not: its objects keep what they point at
            entries = self._pack_entries(order, w, packs.MAX_PAYLOAD - len(data))
            if entries is None:
                continue
            # Where each message starts: as the writer that laid the entry out said, or read from its layout.
            cuts = [chat_message_at(entry) if (cut := said(part)) is None else cut
                    for part, entry in zip(order, entries, strict=True)]
            blobs = self._pack_blobs([e for e, cut in zip(entries, cuts, strict=True) if cut is None], w,
                                     pointers, packs.MAX_PAYLOAD - len(data) - sum(map(len, entries)),
                                     packs.MAX_ENTRIES - len(entries))
            laid_out = list(zip(entries, cuts, strict=True))
            # A leaf that is its chat entries (a chat's) is left out of its pack, and rebuilt from them on read.
            leaf = None if packs.names_its_entries(items, laid_out) else data
            payload = packs.pack_payload(leaf, laid_out, [b for _, b in blobs])
            payloads.append((oid, packs.leaf_marker(data), payload))
            unframed += len(payload)
            if len(payloads) >= _FRAME_BATCH or unframed >= _FRAME_BYTES:
                seal()
            held = [*order, *(blob for blob, _ in blobs)]
            sizes = [*map(len, entries), *(len(data) for _, data in blobs)]
            for part, pointer in zip(held, packs.pointer_values(oid, sizes), strict=True):
                pointers.setdefault(part, pointer)
        seal()
        for oid in packed:
            pointers.pop(oid, None)  # a leaf named as an entry of another keeps its own marker
        return packed, pointers

    def _pack_entries(self, order: list[ObjectId], w: WriteSet, room: int) -> list[bytes] | None:
        """The canonical bytes of the entries a leaf packs, each checked against its id, or None if one
        is missing, damaged, or they are more than `room` bytes together."""
        if w.hashed.keys() >= set(order):  # all written here, and vouched for (a bulk import's): no check
            written = list(map(w.objects.__getitem__, order))
            return written if sum(map(len, written)) <= room else None
        entries: list[bytes] = []
        total = 0
        for entry in order:
            data = self._at_hand(entry, w)
            if data is None:
                return None
            total += len(data)
            if total > room:
                return None
            entries.append(data)
        return entries

    def _pack_blobs(self, entries: list[bytes], w: WriteSet, chosen: Mapping[ObjectId, bytes],
                    room: int, count: int) -> list[tuple[ObjectId, bytes]]:
        """The blobs a leaf's entries (those that are not chat entries, which name none) name that go in
        its pack: each at hand and checked against its id, not held in a pack already (or chosen by another
        pack of this transaction), in the order they are named, while they fit in `room` bytes and `count`
        parts."""
        out: dict[ObjectId, bytes] = {}
        for data in entries:
            try:
                entry = parse_object(data, trusted=True)
            except CtxStoreError:  # bytes that hash to their id need not be an entry's
                continue
            if not isinstance(entry, Entry):
                continue
            for blob in entry.blob_ids():
                if blob in chosen or blob in out or len(out) >= count:
                    continue
                found = self._at_hand(blob, w, loose_only=True)
                if found is not None and len(found) <= min(room, packs.MAX_BLOB):
                    room -= len(found)
                    out[blob] = found
        return list(out.items())

    def _at_hand(self, oid: ObjectId, w: WriteSet, *, loose_only: bool = False) -> bytes | None:
        """An object's canonical bytes, checked against its id, from a transaction's writes (unless their
        writer vouched for the id: `WriteSet.hashed`) or the store; None if it is in neither, or damaged
        (or, with `loose_only`, held in a pack already)."""
        data = w.objects.get(oid)
        if data is None:
            value = self.find(oid)
            if value is None or (loose_only and value[0] in (packs.PACKED, packs.LEAF_PACK)):
                return None
            try:
                return self.canonical(oid, value)
            except CtxStoreError:
                return None
        return data if oid in w.hashed or object_id(data) == oid else None

    def apply(self, w: WriteSet, now_ms: int, prepared: _Prepared) -> None:
        """Write a transaction's buffered writes, its objects as `prepare` made them (the caller commits)."""
        txn, dbs = self._t, self._dbs
        objs = dbs[rec.OBJECTS]
        time = now_ms.to_bytes(rec.TIME_SIZE, "big")
        for oid in w.deleted:
            value = self.find(oid)
            if value is not None:
                if packs.is_pack(value):
                    self._unpack_survivors(oid, w.deleted)
                    self.delete_pack(rec.object_key(oid))
                txn.delete(rec.object_key(oid), db=objs)
        for pack_key, pack in prepared.packs:
            self.write_pack(pack_key, pack)
        put, size = txn.put, rec.KEY_SIZE
        for oid, record, pointer in prepared.writes:
            if pointer is None:
                if not put(oid[:size], record, db=objs, overwrite=False):
                    self._restamp(oid, time)
            elif not record:
                self._point(oid, pointer, None)  # held, not written here: its record may become the pointer
            elif not put(oid[:size], record, db=objs, overwrite=False):
                self._point(oid, pointer, time)  # held already: as it is, or a record of its own
        _set_or_delete(txn, dbs[rec.REFS], w.refs)
        reflog = dbs[rec.REFLOG]
        for name in w.reflog_cleared:
            prefix = rec.reflog_prefix(name)
            cursor = txn.cursor(db=reflog)
            if cursor.set_range(prefix):
                while cursor.key().startswith(prefix):
                    if not cursor.delete():
                        break
        for name, records in w.reflog_appends.items():
            seq = self.next_reflog_seq(name)
            for record in records:
                txn.put(rec.reflog_key(name, seq), record, db=reflog)
                seq += 1
        _set_or_delete(txn, dbs[rec.CONFIG], w.config)

    def _point(self, oid: ObjectId, pointer: bytes, time: bytes | None) -> None:
        """Make an object's record the pointer into the pack that now holds it, written at `time` (None: an
        object this transaction does not write keeps its write time). Only a record holding the object's
        own bytes becomes a pointer: one kept in a pack already stays pointing there (written again, its
        time is refreshed), and a delta or a packed leaf's marker stays as it is (a crafted leaf may name
        either as an entry), its bytes readable from the new pack too."""
        key = rec.object_key(oid)
        held = self._t.get(key, db=self._dbs[rec.OBJECTS])
        if held is None:
            if time is None:
                return  # deleted by this transaction: nothing left to point
            stamp = time
        else:
            if not rec.record_holds(held, oid):
                raise _collision(oid, key, held)
            if held[rec.HEAD_SIZE] > codec.ZSTD_DICT:
                if time is not None:
                    self._restamp(oid, time)
                return
            stamp = time or bytes(held[:rec.TIME_SIZE])
        self._t.put(key, rec.object_record(oid, stamp, pointer), db=self._dbs[rec.OBJECTS])

    def _unpack_survivors(self, leaf: ObjectId, deleted: Iterable[ObjectId]) -> None:
        """Before the packed leaf `leaf` is deleted: every object that points into its pack and is not
        deleted too gets a record of its own again (with its write time), so nothing reachable is lost.
        A pack that cannot be read has nothing to give back: it is deleted as it is (what pointed into it
        was unreadable already, and fsck says so)."""
        try:
            parts = self.pack_parts(leaf)
        except DamagedData:
            return
        doomed = set(deleted)
        dict_id = self.current_dict()
        frame = rec.packer(self._e.dicts.get(dict_id), dict_id)
        objs = self._dbs[rec.OBJECTS]
        into = bytes([packs.PACKED]) + rec.object_key(leaf)
        for data in parts.objects:
            oid = object_id(data)
            held = None if oid in doomed else self.record(oid)
            if held is None or rec.record_value(held)[:len(into)] != into:
                continue
            self._t.put(rec.object_key(oid), rec.object_record(oid, bytes(held[:rec.TIME_SIZE]), frame(data)),
                        db=objs)

    def _restamp(self, oid: ObjectId, time: bytes) -> None:
        """Refresh the write time of an object already held (gc's grace then protects it again)."""
        key = rec.object_key(oid)
        held = self._t.get(key, db=self._dbs[rec.OBJECTS])
        if held is None:
            raise StoreError(f"object {to_hex(oid)} vanished while it was written; run `ctxstore fsck`")
        if not rec.record_holds(held, oid):
            raise _collision(oid, key, held)
        if held[:rec.TIME_SIZE] != time:
            self._t.put(key, rec.restamped(held, time), db=self._dbs[rec.OBJECTS])

    def recompress(self, dict_id: int, dictionary: zstandard.ZstdCompressionDict) -> None:
        """Rewrite every small stored value (and pack payload) that `dictionary` shrinks with it (write
        times kept); a pack is rewritten whole, in new pieces."""
        objs = self._dbs[rec.OBJECTS]
        rewritten = [(key, better) for key, record in self._t.cursor(db=objs)
                     if (better := self._recompressed(key, record, rec.HEAD_SIZE, dict_id, dictionary))]
        for key, record in rewritten:
            self._t.put(key, record, db=objs)
        repacked = [(key, better) for key, record in self.pack_records()
                    if (better := self._recompressed(key, record, packs.FRAMED_AT, dict_id, dictionary))]
        for key, record in repacked:
            self.write_pack(key, record)

    def _recompressed(self, key: bytes, record: bytes, head: int, dict_id: int,
                      dictionary: zstandard.ZstdCompressionDict) -> bytes | None:
        """`record` with the value framed after its first `head` bytes compressed with `dictionary`, or
        None if that would not shrink it (or it is not a small raw or zstd value)."""
        framed = bytes(record[head:])
        if framed[:1] not in _RECOMPRESSIBLE or rec.canonical_size(framed) > DICT_MAX_OBJECT:
            return None
        try:
            data = self.unframe(framed, DICT_MAX_OBJECT)
        except EncodingError as exc:
            raise DamagedData(f"stored record {bytes(key).hex()} is corrupt ({exc}); run `ctxstore fsck`") from None
        better = rec.stored_value(data, dictionary, dict_id)
        return bytes(record[:head]) + better if len(better) < len(framed) else None

    def put_dict(self, data: bytes) -> int:
        """Store a new zstd dictionary under the next id, which is returned."""
        dict_id = self.current_dict() + 1
        self._t.put(rec.dict_key(dict_id), data, db=self._dbs[rec.DICTS])
        return dict_id


@dataclass(frozen=True)
class _Prepared:
    """What `_Records.prepare` made of a transaction's objects, in key order (B-tree pages filled in
    order are filled full; a large commit into a new store takes about a third fewer pages): each
    object's id and record, with, for an object a leaf pack it writes holds, the pointer value that
    record holds (empty for an object this transaction does not write: `apply` writes the pointer seeing
    what its record is)."""

    writes: list[tuple[ObjectId, bytes, bytes | None]]
    packs: list[tuple[bytes, bytes]]
    """The packs of the leaves it packs, by record key, for the ``packs`` database."""


def _write_samples(w: WriteSet) -> list[bytes]:
    """A random sample of the objects a write set holds that a dictionary could compress."""
    values = [d for d in w.objects.values() if len(d) <= DICT_MAX_OBJECT]
    if len(values) > WRITE_SET_SAMPLES:
        values = random.Random(len(values)).sample(values, WRITE_SET_SAMPLES)
    return values


def _trained(picked: list[bytes], dict_size: int, min_gain: float) -> bytes | None:
    """A zstd dictionary trained on four fifths of `picked` if it shrinks the other fifth by `min_gain`
    more than plain zstd does, else None."""
    if len(picked) < 64:
        return None
    picked = list(picked)
    random.Random(len(picked)).shuffle(picked)
    held_out = picked[: max(len(picked) // 5, 16)]
    try:
        trained = zstandard.train_dictionary(dict_size, list[bytes | bytearray | memoryview](picked[len(held_out):]))
    except zstandard.ZstdError:
        return None  # too few or too uniform samples: nothing to gain
    data = trained.as_bytes()
    plain = sum(len(codec.compress(d)) for d in held_out)
    candidate = zstandard.ZstdCompressionDict(data)
    with_dict = sum(len(codec.compress(d, dictionary=candidate, dict_id=1)) for d in held_out)
    return None if with_dict > plain * (1 - min_gain) else data


def _set_or_delete(txn: lmdb.Transaction[bytes], db: lmdb._Database,
                   values: Mapping[str, bytes | None]) -> None:
    """Write text-keyed values into `db`; None deletes the key (a ref or a setting removed)."""
    for key, value in values.items():
        if value is None:
            txn.delete(rec.name_key(key), db=db)
        else:
            txn.put(rec.name_key(key), value, db=db)


@dataclass(frozen=True, slots=True)
class _Options:
    map_size: int
    durable: bool
    readonly: bool
    auto_dictionary: bool


class LmdbStore(BatchWrites):
    """A durable, multi-process object store with refs, reflogs and config, on LMDB.

    `path` is a directory (created unless `readonly`). A small commit is one record appended to the
    store's commit log, which LMDB takes in at checkpoints (`lmdb_log`; docs/storage.md, *Commit log*).
    With `durable=True` (the default) a write transaction is on disk when it returns (one flush of the
    log); `durable=False` skips the flush per commit for bulk work: a
    crash of the process loses nothing committed, a crash of the machine may lose the latest commits
    (and, on file systems that reorder writes, damage the store), and `sync()` flushes. One process
    shares one LMDB environment per path between all its stores; the first store opened decides the
    environment's sync mode, and a durable store on an environment opened non-durable flushes after
    each of its commits. A store in an older record layout is refused with `NotARepository`. With
    `auto_dictionary` (the default) a commit that finds the store holding `AUTO_DICT_OBJECTS` objects
    and no compression dictionary trains one (`train_dictionary(recompress=True)`).
    """

    def __init__(self, path: str | os.PathLike[str], *, map_size: int = DEFAULT_MAP_SIZE,
                 durable: bool = True, readonly: bool = False,
                 clock: Callable[[], int] | None = None, auto_dictionary: bool = True) -> None:
        path = os.fspath(path)
        if readonly and not os.path.isdir(path):
            raise NotARepository(f"no store at {path}; create it by opening it without readonly=True")
        if not readonly:
            try:
                os.makedirs(path, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"cannot create the store directory {path}: {exc}") from None
        if map_size < 1 << 12:
            map_size = 1 << 12
        self.path = os.path.realpath(path)
        self._opts = _Options(map_size, durable, readonly, auto_dictionary)
        self._clock = clock or _now_ms
        self._env: Environment | None = acquire(self.path, map_size, durable, readonly)

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def durable(self) -> bool:
        """Whether each write transaction is flushed to disk before it returns."""
        return self._opts.durable

    @property
    def readonly(self) -> bool:
        """Whether writes are refused."""
        return self._opts.readonly

    @property
    def environment(self) -> Environment:
        """This process's LMDB environment under the store, shared with every store on its path.

        For diagnostics and tests (its reader table, its sync); `StoreError` once the store is closed.
        """
        env = self._env
        if env is None:
            raise StoreError(f"the store at {self.path} is closed; open it again")
        if env.pid != os.getpid():
            # A forked child: the parent's environment must not be used here; open our own.
            opts = self._opts
            self._env = env = acquire(self.path, opts.map_size, opts.durable, opts.readonly)
        return env

    def close(self) -> None:
        """Release this store's hold on the environment (closed when its last store closes)."""
        env, self._env = self._env, None
        if env is not None and env.pid == os.getpid():
            release(env)

    def __enter__(self) -> LmdbStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def sync(self) -> None:
        """Flush every commit so far to disk (what `durable=False` skips per commit)."""
        self.environment.sync()

    def files(self) -> list[str]:
        """The files on disk that hold the store's data (LMDB's data file, the commit log): what its
        size on disk is counted over."""
        return self.environment.files()

    def checkpoint(self) -> None:
        """Apply the commit log to LMDB now and start an empty log (docs/storage.md, *Commit log*).

        Commits do it themselves when the log passes `lmdb_log.CHECKPOINT_BYTES`; this is for a tool that
        reads or copies LMDB's file directly, or to leave the store with no log to read on open."""
        if self._opts.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only; open it without "
                             "readonly=True to checkpoint it")
        self.environment.checkpoint()

    # -- transactions ----------------------------------------------------------------------------------

    @contextmanager
    def transaction(self, *, write: bool = False) -> Iterator[Transaction]:
        """A transaction; with write=True its writes apply atomically when the block exits normally.

        Only one write transaction runs at a time across all processes; keep them short. A thread may
        not open a write transaction inside another one on the same store.
        """
        env = self.environment
        if write:
            if self._opts.readonly:
                raise StoreError(f"the store at {self.path} was opened read-only; open it without "
                                 "readonly=True to write")
            if getattr(env.writing, "active", False):
                raise StoreError("a write transaction is already open in this thread; LMDB allows one "
                                 "writer at a time, so do this work inside that transaction")
        ltxn, view = env.begin_view(write)
        txn = Transaction(_Records(env, view), write=write)
        if write:
            env.writing.active = True
        try:
            try:
                yield txn
            except BaseException:
                env.end(ltxn, commit=False)
                raise
            if write:
                self._commit(env, txn, (ltxn, view))
            else:
                env.end(ltxn, commit=False)
        finally:
            txn.end()
            if write:
                env.writing.active = False

    def _commit(self, env: Environment, txn: Transaction, first: tuple[lmdb.Transaction[bytes], Any]) -> None:
        w = txn.pending_writes()
        now = check_time_ms(self._clock(), "the store's clock")
        auto = self._opts.auto_dictionary and bool(w.objects)
        # Made by the first attempt and kept for a retry after the map grew: the records, and a dictionary
        # trained on the write set (stored again by the retry, under the id the records name).
        prepared: list[_Prepared] = []
        trained: list[tuple[int, zstandard.ZstdCompressionDict | None]] = []
        due: list[int] = []

        def body(t: Any) -> None:
            if not w:
                return
            records = _Records(env, t)
            dict_id = records.current_dict()
            dictionary = env.dicts.get(dict_id)
            if auto and dict_id == 0 and len(w.objects) >= AUTO_DICT_OBJECTS:
                if not trained:
                    data = _trained(_write_samples(w), DICT_SIZE, DICT_MIN_GAIN)
                    trained.append((0, None if data is None else zstandard.ZstdCompressionDict(data)))
                made_id, made = trained[0]
                if made is not None:
                    dict_id, dictionary = records.put_dict(made.as_bytes()), made
                    if dict_id != made_id:  # first attempt, or another process trained one meanwhile
                        trained[0] = (dict_id, made)
                        prepared.clear()
                    if records.count() <= RECOMPRESS_OBJECTS:
                        records.recompress(dict_id, made)
            if prepared and records.holds_any(key for key, _ in prepared[0].packs):
                prepared.clear()  # a retry: another writer stored a leaf this commit would pack meanwhile
            if not prepared:
                prepared.append(records.prepare(w, now, dict_id, dictionary))
            records.apply(w, now, prepared[0])
            if auto and not trained:
                held = records.count()
                if held >= _TRAIN_AT.get(self.path, AUTO_DICT_OBJECTS) and records.current_dict() == 0:
                    due[:] = [held]

        # A commit that may train a dictionary (and rewrite what the store holds with it) goes straight
        # into LMDB, as a large one does: the commit log is for the small commits of a conversation.
        env.run_write(body, need=w.size_hint(), sync=self._opts.durable and bool(w), first=first,
                      still_valid=lambda t: txn.rebind(_Records(env, t)),
                      direct=auto and len(w.objects) >= AUTO_DICT_OBJECTS)
        if trained:
            dict_id, made = trained[0]
            if made is None:
                _TRAIN_AT[self.path] = len(w.objects) * 8
            else:
                # Only now: a dictionary cached under an id that never committed could shadow another's.
                env.dicts.setdefault(dict_id, made)
        if due:
            # Small objects (chat messages) compress 1.1-1.6x alone and several times better with a
            # dictionary trained on their like; the attempt is repeated as the store grows eightfold.
            # A commit that brings enough objects trains on them before writing them (above); one that
            # does not trains here on what the store holds, rewriting it while the store is small.
            _TRAIN_AT[self.path] = due[0] * 8
            self.train_dictionary(recompress=due[0] <= RECOMPRESS_OBJECTS)

    @contextmanager
    def _reading(self) -> Iterator[_Records]:
        env = self.environment
        ltxn, view = env.begin_view(False)
        try:
            yield _Records(env, view)
        finally:
            env.end(ltxn, commit=False)

    def _required(self, oid: ObjectId, read: Callable[[_Records, ObjectId], _R | None]) -> _R:
        """`read` of a held object under one read transaction; `MissingObject` if it is not held."""
        check_oid(oid)
        with self._reading() as records:
            found = read(records, oid)
        if found is None:
            raise MissingObject(f"object {to_hex(oid)} is not in the store")
        return found

    # -- the ObjectStore protocol ----------------------------------------------------------------------

    def get(self, oid: ObjectId) -> bytes:
        """The canonical bytes of an object; `MissingObject` if absent."""
        return self._required(oid, _Records.get)

    def cached_revision(self, oid: ObjectId) -> tuple[Revision, seq.SpineBytes] | None:
        """A held revision this process wrote or rebuilt lately, with its spine's encoded levels, from the
        revision cache (`RevisionSource`): what the cache keeps was checked against its id when it went
        in, so only whether this store holds it is looked up."""
        found = _REVISIONS.with_levels(oid)
        return found if found is not None and self.has(oid) else None

    def revision_without_operation(self, oid: ObjectId, placeholder: dict[str, Any]
                                   ) -> tuple[Revision, seq.SpineBytes | None] | None:
        """A revision stored without its lists, without its operation (`placeholder` instead), with its
        spine's encoded levels, its lists not rebuilt (`LightRevisionSource`); None if it is absent or
        stored otherwise (read it with `get`)."""
        check_oid(oid)
        with self._reading() as records:
            return records.revision_without_operation(oid, placeholder)

    def get_many(self, oids: Iterable[ObjectId]) -> list[bytes]:
        """The canonical bytes of objects, in order, all read under one read transaction (one hold of
        the environment's lock, not one per object); `MissingObject` names the first one absent."""
        with self._reading() as records:
            return records.get_many(oids)

    def get_leaves(self, oids: list[ObjectId]) -> list[tuple[bytes | None, list[Any]]]:
        """Closed leaves with the entries they are packed with (`LeafSource`), under one read transaction."""
        with self._reading() as records:
            return records.get_leaves(oids)

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        check_oid(oid)
        with self._reading() as records:
            return records.has(oid)

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int]:
        """A revision's parent and `createdAt`, read from its record without rebuilding it (`HeaderSource`;
        what is checked: docs/storage.md, *Header reads*). `MissingObject` if absent, `InvalidObject` if
        it is not a revision, `DamagedData` if its record is damaged where the read can see it."""
        return self._required(oid, _Records.revision_header)

    def __contains__(self, oid: object) -> bool:
        return type(oid) is bytes and len(oid) == OID_SIZE and self.has(ObjectId(oid))

    def __iter__(self) -> Iterator[ObjectId]:
        """Every object id, read in batches so no read transaction stays open between them."""
        after = b""
        while True:
            with self._reading() as records:
                batch = records.ids_after(after, _ITER_BATCH)
            yield from batch
            if len(batch) < _ITER_BATCH:
                break
            after = rec.object_key(batch[-1])

    def __len__(self) -> int:
        with self._reading() as records:
            return records.count()

    # -- the rest of TransactionalStore ----------------------------------------------------------------

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        check_oid(oid)
        with self._reading() as records:
            return records.written_at(oid)

    def stored_size(self, oid: ObjectId) -> int:
        """Bytes the object's value occupies (codec byte plus compressed bytes; a packed leaf's, its pack's
        too)."""
        return self._required(oid, _Records.stored_size)

    def stats(self) -> StoreStats:
        """Object count, canonical and stored bytes, and the pages in use in the data file."""
        objects = object_bytes = stored_bytes = 0
        with self._reading() as records:
            for _oid, value in records.values():
                objects += 1
                stored_bytes += len(value)
                object_bytes += rec.canonical_size(value)
            stored_bytes += records.packs_bytes()
            file_bytes = self.environment.file_bytes()
        return StoreStats(objects=objects, object_bytes=object_bytes, stored_bytes=stored_bytes,
                          file_bytes=file_bytes)

    def layout_problems(self) -> list[str]:
        """Problems in how the store keeps its objects that reading each object cannot see (`LayoutSource`),
        under one read transaction: each leaf pack in ``packs`` whose key holds no leaf-pack marker in
        ``objs``, and each whose pieces are not under the keys of pieces 0 to n-1 (docs/storage.md, *Leaf
        packs*). A marker without its pack, or a pointer into a missing pack, fails the read of its object
        and is reported there."""
        with self._reading() as records:
            return records.orphan_packs()

    def map_size(self) -> int:
        """The current size of this process's map of the store, in bytes."""
        return self.environment.map_size()

    # -- compression dictionary ------------------------------------------------------------------------

    def dictionary_id(self) -> int:
        """The id of the dictionary new writes are compressed with (0: none)."""
        with self._reading() as records:
            return records.current_dict()

    def train_dictionary(self, *, samples: int = 4000, dict_size: int = DICT_SIZE,
                         min_gain: float = DICT_MIN_GAIN, recompress: bool = False) -> int | None:
        """Train a zstd dictionary on stored objects and compress new writes with it if it helps.

        Samples up to `samples` objects of at most 64 KiB (object ids are hashes, so the first ones in
        key order are a random sample), trains on four fifths and measures the rest. If the dictionary
        saves less than `min_gain` of the compressed size it is not kept and None is returned;
        otherwise it is stored under a new id, which is returned. Values already stored keep their
        encoding and keep decoding; with `recompress`, those the dictionary shrinks are rewritten with it
        in the same transaction (keeping their write times), as the automatic training does.
        """
        if self._opts.readonly:
            raise StoreError(f"the store at {self.path} was opened read-only; open it without "
                             "readonly=True to train a dictionary")
        picked: list[bytes] = []
        with self._reading() as records:
            for oid, value in records.values():
                if value[0] not in (DELTA, BULK, packs.LEAF_PACK) and rec.canonical_size(value) <= DICT_MAX_OBJECT:
                    picked.append(records.decode(oid, value))
                    if len(picked) >= samples:
                        break
        data = _trained(picked, dict_size, min_gain)
        if data is None:
            return None
        env = self.environment
        stored: list[int] = []

        def store(ltxn: Any) -> None:
            records = _Records(env, ltxn)
            stored[:] = [records.put_dict(data)]
            if recompress:
                records.recompress(stored[0], zstandard.ZstdCompressionDict(data))

        env.run_write(store, need=len(data), sync=self._opts.durable, direct=recompress)
        env.dicts.setdefault(stored[0], zstandard.ZstdCompressionDict(data))
        return stored[0]
