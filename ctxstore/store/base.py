"""The object store protocols and the transaction that both backends share.

A store holds four kinds of record: objects (id -> canonical bytes, with the time each was written),
refs (name -> object id), reflogs (name -> append-only list of records) and config (key -> bytes).
`ObjectSource`/`ObjectStore` are what a history needs; `TransactionalStore` adds the transaction through
which the repository moves refs and writes objects atomically.

A write transaction reads the backend live (inside the backend's own write transaction, so it sees a
consistent state and holds the single writer slot) and buffers its writes in a `WriteSet`. On success the
backend applies the buffer in one atomic commit; on an exception the buffer is dropped and nothing
changes. Buffering is what lets the LMDB store grow a full map and retry the commit without re-running
the caller's code: the reads the caller made are re-checked first, and if another writer changed any of
them the commit fails with `StoreError` instead of applying decisions made on stale values.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import InvalidInput, MissingObject, StoreError
from ..format import objects, seq
from ..ids import OID_SIZE, ObjectId, to_hex

__all__ = [
    "MAX_KEY_BYTES",
    "BatchWrites",
    "HeaderSource",
    "LayoutSource",
    "LeafSource",
    "LightRevisionSource",
    "ObjectSource",
    "ObjectStore",
    "RevisionSource",
    "Snapshot",
    "StoreStats",
    "Transaction",
    "TransactionalStore",
    "WriteSet",
    "check_name",
    "check_oid",
    "check_repository_name",
    "maintenance_lock",
    "read_cached_revision",
    "read_layout_problems",
    "read_leaves",
    "read_revision_header",
    "read_revision_without_operation",
    "read_stored_append",
]

_T = TypeVar("_T")

MAX_KEY_BYTES = 480
"""Longest ref name or config key, in UTF-8 bytes (LMDB keys are at most 511 bytes; reflog keys add 9)."""


@runtime_checkable
class ObjectSource(Protocol):
    """Read access to objects by id: all that a history needs to read."""

    def get(self, oid: ObjectId) -> bytes:
        """The canonical (uncompressed) bytes of an object; `MissingObject` if absent."""
        ...

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        ...


@runtime_checkable
class HeaderSource(Protocol):
    """The optional cheap read of a revision's header: what walks over many revisions need.

    A source that has it (`MemoryStore`, `LmdbStore` and their transactions) answers from the stored
    record without rebuilding the revision: a revision stored as a delta holds its parent and time, so
    neither its spine is rebuilt nor its bytes hashed. What a header read checks and what only a full
    `get` checks is in docs/storage.md (*Header reads*). Callers go through `read_revision_header`,
    which falls back to `get` for a source without it.
    """

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int]:
        """A revision's parent and `createdAt`; `MissingObject` if absent, `InvalidObject` if the object
        is not a revision, `DamagedData` if its record is damaged in a way the read can see."""
        ...


def read_revision_header(source: ObjectSource, oid: ObjectId) -> tuple[ObjectId | None, int]:
    """A revision's parent and `createdAt`, read cheaply where the source can (`HeaderSource`), else from
    its canonical bytes (`get`) without decoding the spine. Errors as `HeaderSource.revision_header`."""
    header: Callable[[ObjectId], tuple[ObjectId | None, int]] | None = getattr(source, "revision_header", None)
    if header is not None:
        return header(oid)
    return objects.revision_header(source.get(oid))


@runtime_checkable
class LayoutSource(Protocol):
    """The optional check of how the store keeps its objects: what fsck needs beyond reading each object.

    A source that has it (`LmdbStore`) looks at the records it keeps besides each object's own and
    reports what reading every object cannot see: no object's `get` goes through a leaf pack whose leaf
    is not stored packed (docs/storage.md, *Leaf packs*), so none fails for it. Callers go through
    `read_layout_problems`, which gives no problems for a source without it.
    """

    def layout_problems(self) -> list[str]:
        """Problems in how the store keeps its objects that reading each object cannot see, one line
        each; empty when there are none."""
        ...


def read_layout_problems(store: ObjectSource) -> list[str]:
    """The store's layout problems, where it can check its layout (`LayoutSource`), else none: a store
    that keeps each object in one record of its own has nothing beyond them to check."""
    problems: Callable[[], list[str]] | None = getattr(store, "layout_problems", None)
    return problems() if problems is not None else []


class RevisionSource(Protocol):
    """The optional read of a revision the source holds decoded already: what loading a history at a
    head this process just wrote needs.

    A source that has it (`LmdbStore`, whose revision cache keeps the newest revisions it wrote or
    rebuilt, each checked against its id, with its spine's encoded levels) answers with the revision
    and those levels (`seq.spine_bytes` of its canonical bytes), or None if it does not hold the object
    or has it in no such form; the caller then reads it with `get` as ever. Callers go through
    `read_cached_revision`.
    """

    def cached_revision(self, oid: ObjectId) -> tuple[objects.Revision, seq.SpineBytes] | None:
        """A held revision with its spine's encoded levels, if the source has them at hand; else None."""
        ...


def read_cached_revision(source: ObjectSource, oid: ObjectId) -> tuple[objects.Revision, seq.SpineBytes] | None:
    """`RevisionSource.cached_revision` where the source has it; else None."""
    cached: Callable[[ObjectId], tuple[objects.Revision, seq.SpineBytes] | None] | None = getattr(
        source, "cached_revision", None)
    return None if cached is None else cached(oid)


class LightRevisionSource(Protocol):
    """The optional read of a revision without its operation, where the source keeps it so: what
    opening a history at a bulk import's head and rendering it need (its spine, size, parent, time).

    A store that keeps a bulk append revision without its lists (`LmdbStore`, docs/storage.md, *Bulk
    revisions*) answers from the record's prefix and suffix, its check holding, without rebuilding the
    lists from the tree (which a full `get` does, reading the whole view); with the revision, its
    spine's encoded levels (`seq.spine_bytes`), or None. It answers None for anything stored otherwise,
    and the caller reads that with `get` as ever. Callers go through `read_revision_without_operation`.
    """

    def revision_without_operation(self, oid: ObjectId, placeholder: dict[str, Any]
                                   ) -> tuple[objects.Revision, seq.SpineBytes | None] | None:
        """The revision with `placeholder` for its operation and its spine's encoded levels, if the source
        keeps it without its lists; else None. `DamagedData` if its record is damaged."""
        ...


def read_revision_without_operation(source: ObjectSource, oid: ObjectId, placeholder: dict[str, Any]
                                    ) -> tuple[objects.Revision, seq.SpineBytes | None] | None:
    """`LightRevisionSource.revision_without_operation` where the source has it; else None."""
    light: Callable[[ObjectId, dict[str, Any]], tuple[objects.Revision, seq.SpineBytes | None] | None] | None = (
        getattr(source, "revision_without_operation", None))
    return None if light is None else light(oid, placeholder)


class LeafSource(Protocol):
    """The optional read of closed leaves with their entries' messages: what reading a whole view needs.

    A store that keeps a closed leaf packed with its entries (`LmdbStore`, docs/storage.md, *Leaf
    packs*) answers with the leaf's canonical bytes (checked against its id) and, for each entry it
    names (once each, in the order they first appear: `seq.packed_order`), the entry's message if the
    entry is a chat entry (four fields; the message exactly a text role and a text content, as the
    writer checked), else None; the pack's seal stands for the entries' ids. In place of the bytes,
    None says that the leaf names exactly those entries, each once, in that order, and that every one
    is a chat entry (a leaf the pack keeps as its entries: the seal stands for the leaf too). An empty
    list where it does not hold the leaf packed. A caller reads whatever it is not given as ever.
    Callers go through `read_leaves`.
    """

    def get_leaves(self, oids: list[ObjectId]) -> list[tuple[bytes | None, list[Any]]]:
        """Each leaf with its packed entries' messages, in order; `MissingObject` names the first absent."""
        ...


def read_leaves(source: ObjectSource, oids: list[ObjectId]) -> list[tuple[bytes | None, list[Any]]]:
    """`LeafSource.get_leaves` where the source has it; else each leaf's bytes with no entries."""
    leaves: Callable[[list[ObjectId]], list[tuple[bytes | None, list[Any]]]] | None = getattr(
        source, "get_leaves", None)
    if leaves is not None:
        return leaves(oids)
    many: Callable[[list[ObjectId]], list[bytes]] | None = getattr(source, "get_many", None)
    return [(data, []) for data in (many(oids) if many is not None else [source.get(oid) for oid in oids])]


StoredAppend = tuple[ObjectId, int, list[str], list[ObjectId]]
"""An append revision as a store keeps it: parent, `createdAt`, the appended entry ids and entry oids."""


def read_stored_append(source: ObjectSource, oid: ObjectId) -> StoredAppend | None:
    """The append a revision is stored as, where the source stores append revisions as deltas
    (`stored_append`, docs/storage.md): the source checked on write that it rebuilds the revision's
    exact bytes, and checks on this read that its record is intact, so a pack can send it rebuildable
    without rebuilding it. None where the revision is stored whole, is absent, or the source keeps no
    deltas (the default: `get` it)."""
    found: Callable[[ObjectId], StoredAppend | None] | None = getattr(source, "stored_append", None)
    return None if found is None else found(oid)


def maintenance_lock(store: object) -> AbstractContextManager[None]:
    """The store's maintenance lock, which gc holds around its deleting transaction, where the store has
    one: an optional ``store.maintenance()`` context manager (`PostgresStore`: the repository's gc lock,
    held exclusive, which every write transaction takes shared, so no writer is between writing a blob to
    the bucket and committing while gc deletes bucket keys). Otherwise there is nothing to hold:
    `MemoryStore` and `LmdbStore` run one write transaction at a time, so gc's deleting transaction
    already excludes every writer."""
    held: Callable[[], AbstractContextManager[None]] | None = getattr(store, "maintenance", None)
    return held() if held is not None else nullcontext()


@runtime_checkable
class ObjectStore(ObjectSource, Protocol):
    """A content-addressed object database: ids are blake3 digests of the canonical bytes."""

    def put_many(self, objects: Iterable[tuple[ObjectId, bytes]]) -> int:
        """Store objects (id, canonical bytes) in one batch; returns how many were new."""
        ...

    def get_many(self, oids: Iterable[ObjectId]) -> list[bytes]:
        """The canonical bytes of objects, in the order given, read as one batch under one consistent
        view (no per-object transaction or lock); `MissingObject` if one is absent."""
        ...

    def delete_many(self, oids: Iterable[ObjectId]) -> int:
        """Delete objects; returns how many were there."""
        ...

    def __iter__(self) -> Iterator[ObjectId]:
        """Every object id held, in no particular order."""
        ...

    def __contains__(self, oid: object) -> bool:
        """Whether `oid` is a raw object id the store holds (False for anything else)."""
        ...

    def __len__(self) -> int:
        """How many objects are held."""
        ...


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What a store holds and what it costs: for `ctxstore stats` and benchmarks."""

    objects: int
    """How many objects are held."""
    object_bytes: int
    """Sum of the objects' canonical (uncompressed) sizes."""
    stored_bytes: int
    """Sum of the objects' stored sizes (codec byte and compressed bytes)."""
    file_bytes: int
    """Bytes the backend occupies for everything (LMDB: pages in use in the data file)."""


def check_oid(oid: object) -> ObjectId:
    """Check that a value is a raw 32-byte object id, so bad input cannot reach the database."""
    if type(oid) is not bytes or len(oid) != OID_SIZE:
        raise InvalidInput(f"not an object id: {oid!r} (expected {OID_SIZE} raw bytes; "
                           "use ctxstore.ids.from_hex for hex text)")
    return ObjectId(oid)


def check_name(name: object, what: str = "ref name") -> bytes:
    """The UTF-8 key for a ref name or config key; rejects what the key layout cannot hold."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{what} must be a non-empty string, not {name!r}")
    if "\x00" in name:
        raise InvalidInput(f"{what} {name!r} contains a NUL character")
    try:
        key = name.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInput(f"{what} {name!r} is not valid Unicode text") from None
    if len(key) > MAX_KEY_BYTES:
        raise InvalidInput(f"{what} {name[:40]!r}... is {len(key)} bytes long; the limit is {MAX_KEY_BYTES}")
    return key


_REPOSITORY_NAME_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_MAX_REPOSITORY_NAME = 200


def check_repository_name(name: object) -> str:
    """A repository name a hub or a database may hold: ``/``-separated parts of letters, digits, ``.``,
    ``_`` and ``-``, each starting with a letter or digit (so no ``..`` and no hidden name), at most 200
    characters; `InvalidInput` otherwise."""
    if not isinstance(name, str) or not name or len(name) > _MAX_REPOSITORY_NAME or \
            not all(_REPOSITORY_NAME_PART.fullmatch(part) for part in name.split("/")):
        raise InvalidInput(f"invalid repository name {name!r}: use parts of letters, digits, '.', '_' and '-' "
                           f"separated by '/', each starting with a letter or digit, at most "
                           f"{_MAX_REPOSITORY_NAME} characters (like team/support)")
    return name


class Snapshot(Protocol):
    """A backend's consistent view inside one transaction: what `Transaction` reads through."""

    def get(self, oid: ObjectId) -> bytes | None:
        """The canonical bytes of an object, or None."""
        ...

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held."""
        ...

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written, in ms since the epoch, or None if absent."""
        ...

    def get_ref(self, name: str) -> ObjectId | None:
        """The object a ref points at, or None."""
        ...

    def refs(self, prefix: str) -> dict[str, ObjectId]:
        """Every ref whose name starts with `prefix`."""
        ...

    def reflog(self, name: str) -> list[bytes]:
        """A ref's reflog records, newest first."""
        ...

    def reflog_names(self) -> list[str]:
        """Every name that has a reflog (deleted refs too), sorted."""
        ...

    def get_config(self, key: str) -> bytes | None:
        """A config value, or None."""
        ...

    # A snapshot may also have `revision_header(oid) -> (parent, createdAt) | None` (the cheap header read
    # of `HeaderSource`, None if absent); `Transaction.revision_header` uses it where there is one.
    # It may also have `has_many(oids) -> set of those held`, which `Transaction.put_objects` then uses
    # for its lookups instead of one `has` per object.


@dataclass(slots=True)
class WriteSet:
    """The writes of one transaction, applied by the backend in one atomic commit."""

    objects: dict[ObjectId, bytes] = field(default_factory=dict)
    deleted: set[ObjectId] = field(default_factory=set)
    hashed: dict[ObjectId, int | None] = field(default_factory=dict)
    """Objects of `objects` whose writer made their id by hashing exactly those bytes (`write_objects`):
    a backend that stands a check of its own in for the read's (a leaf pack's seal) need not hash them.
    Each with where its message starts if the writer laid it out as a chat entry and said so
    (`packs.chat_message_at`'s answer, which a backend packing it need not read from its layout)."""
    refs: dict[str, ObjectId | None] = field(default_factory=dict)
    reflog_cleared: set[str] = field(default_factory=set)
    """Reflogs deleted before this transaction's appends (which `reflog_appends` then holds)."""
    reflog_appends: dict[str, list[bytes]] = field(default_factory=dict)
    config: dict[str, bytes | None] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.objects or self.deleted or self.refs or self.reflog_cleared
                    or self.reflog_appends or self.config)

    def size_hint(self) -> int:
        """Roughly how many bytes applying this will write before compression."""
        return (sum(map(len, self.objects.values())) + 64 * len(self.objects) + 48 * len(self.deleted)
                + sum(len(r) + 64 for rs in self.reflog_appends.values() for r in rs)
                + 96 * len(self.refs) + sum(len(v or b"") + 64 for v in self.config.values()))


def _as_bytes(oid: ObjectId, data: Any) -> bytes:
    """An object's data as bytes (from a bytearray or a memoryview too), its id checked; `InvalidInput`
    says what is wrong with either."""
    if type(oid) is not bytes or len(oid) != OID_SIZE:
        check_oid(oid)  # raises, saying what is wrong
    if type(data) is bytes:
        return data
    if not isinstance(data, bytearray | memoryview):
        raise InvalidInput(f"object {to_hex(oid)}: data must be bytes, not {type(data).__name__}")
    return bytes(data)


class Transaction:
    """One transaction on a store: consistent reads and, when writable, all-or-nothing writes.

    Get one from `store.transaction(write=True)` and use it only inside the ``with`` block, in the thread
    that opened it. Reads see this transaction's own writes. Nothing is visible to anyone else until the
    block exits normally; if it raises, every write is discarded.
    """

    __slots__ = ("_closed", "_reads", "_snap", "_writes")

    def __init__(self, snapshot: Snapshot, *, write: bool) -> None:
        self._snap = snapshot
        self._writes: WriteSet | None = WriteSet() if write else None
        # What was read from the backend, so a retried commit can check nothing it depended on moved.
        self._reads: list[tuple[str, object, object]] = []
        self._closed = False

    # -- plumbing for the backends: a backend builds, commits and ends its transactions with these -------

    @property
    def writable(self) -> bool:
        """Whether this transaction may write."""
        return self._writes is not None

    def pending_writes(self) -> WriteSet:
        """For the backend committing this transaction: the writes buffered so far, to apply atomically.

        `StoreError` if the transaction is read-only or has ended.
        """
        return self._writeset()

    def rebind(self, snapshot: Snapshot) -> bool:
        """For a backend retrying a commit: read through a fresh snapshot from now on.

        Returns True if everything this transaction read so far still reads the same through it, so
        the buffered writes (decided on those reads) may still be applied.
        """
        self._snap = snapshot
        readers: dict[str, Callable[[Any], object]] = {
            "has": snapshot.has, "written_at": snapshot.written_at, "ref": snapshot.get_ref,
            "refs": snapshot.refs, "reflog": snapshot.reflog, "config": snapshot.get_config,
            "reflog_names": lambda _key: snapshot.reflog_names(),
        }
        return all(readers[kind](key) == value for kind, key, value in self._reads)

    def end(self) -> None:
        """For the backend, when the ``with`` block is over: any further use raises `StoreError`."""
        self._closed = True

    def _writeset(self) -> WriteSet:
        if self._closed:
            raise StoreError("transaction already ended; open a new one with store.transaction()")
        if self._writes is None:
            raise StoreError("this transaction is read-only; open it with store.transaction(write=True)")
        return self._writes

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError("transaction already ended; open a new one with store.transaction()")

    def _track(self, kind: str, key: object, value: _T) -> _T:
        if self._writes is not None:
            self._reads.append((kind, key, value))
        return value

    # -- objects -------------------------------------------------------------------------------------------

    def get(self, oid: ObjectId) -> bytes:
        """The canonical bytes of an object; `MissingObject` if absent."""
        self._check_open()
        check_oid(oid)
        w = self._writes
        if w is not None:
            if oid in w.objects:
                return w.objects[oid]
            if oid in w.deleted:
                raise MissingObject(f"object {to_hex(oid)} was deleted in this transaction")
        data = self._snap.get(oid)
        self._track("has", oid, data is not None)
        if data is None:
            raise MissingObject(f"object {to_hex(oid)} is not in the store")
        return data

    def has(self, oid: ObjectId) -> bool:
        """Whether the object is held (counting this transaction's writes)."""
        self._check_open()
        check_oid(oid)
        w = self._writes
        if w is not None:
            if oid in w.objects:
                return True
            if oid in w.deleted:
                return False
        return self._track("has", oid, self._snap.has(oid))

    def has_many(self, oids: Iterable[ObjectId]) -> set[ObjectId]:
        """Those of `oids` that are held (counting this transaction's writes): one lookup for all of them
        where the backend's snapshot has one (`has_many`), else one `has` each."""
        self._check_open()
        w = self._writes
        held: set[ObjectId] = set()
        ask: list[ObjectId] = []
        for oid in dict.fromkeys(oids):
            check_oid(oid)
            if w is not None and oid in w.objects:
                held.add(oid)
            elif w is None or oid not in w.deleted:
                ask.append(oid)
        many: Callable[[list[ObjectId]], set[ObjectId]] | None = getattr(self._snap, "has_many", None)
        if many is None or len(ask) <= 1:
            held.update(oid for oid in ask if self._track("has", oid, self._snap.has(oid)))
            return held
        found = many(ask)
        held.update(oid for oid in ask if self._track("has", oid, oid in found))
        return held

    def revision_header(self, oid: ObjectId) -> tuple[ObjectId | None, int]:
        """A revision's parent and `createdAt` (`HeaderSource`): from this transaction's own writes, or
        from the backend's cheap header read where its snapshot has one, else from the canonical bytes."""
        self._check_open()
        check_oid(oid)
        w = self._writes
        if w is not None and (oid in w.objects or oid in w.deleted):
            return objects.revision_header(self.get(oid))
        header: Callable[[ObjectId], tuple[ObjectId | None, int] | None] | None = getattr(
            self._snap, "revision_header", None)
        if header is None:
            return objects.revision_header(self.get(oid))
        found = header(oid)
        self._track("has", oid, found is not None)
        if found is None:
            raise MissingObject(f"object {to_hex(oid)} is not in the store")
        return found

    def stored_append(self, oid: ObjectId) -> StoredAppend | None:
        """The append revision `oid` is stored as, where the backend's snapshot stores deltas
        (`read_stored_append`); None for this transaction's own writes and anything stored whole."""
        self._check_open()
        check_oid(oid)
        w = self._writes
        if w is not None and (oid in w.objects or oid in w.deleted):
            return None
        found: Callable[[ObjectId], StoredAppend | None] | None = getattr(self._snap, "stored_append", None)
        return None if found is None else found(oid)

    def revision_without_operation(self, oid: ObjectId, placeholder: dict[str, Any]
                                   ) -> tuple[objects.Revision, seq.SpineBytes | None] | None:
        """A revision the backend keeps without its lists, without its operation
        (`read_revision_without_operation`); None for this transaction's own writes and anything else."""
        self._check_open()
        check_oid(oid)
        w = self._writes
        if w is not None and (oid in w.objects or oid in w.deleted):
            return None
        light: Callable[[ObjectId, dict[str, Any]], tuple[objects.Revision, seq.SpineBytes | None] | None] | None = (
            getattr(self._snap, "revision_without_operation", None))
        found = None if light is None else light(oid, placeholder)
        if found is not None:
            self._track("has", oid, True)
        return found

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        self._check_open()
        check_oid(oid)
        if self._writes is not None and oid in self._writes.deleted:
            return None
        return self._track("written_at", oid, self._snap.written_at(oid))

    def put_objects(self, objects: Iterable[tuple[ObjectId, bytes]]) -> int:
        """Write objects (id, canonical bytes); returns how many the store did not already hold.

        Writing an object the store holds refreshes its write time, so gc's grace period protects it
        for the writer that is about to point a ref at it.
        """
        w = self._writeset()
        items: list[tuple[ObjectId, bytes]] = []
        for oid, data in objects:
            items.append((oid, _as_bytes(oid, data)))
        # One lookup for the batch where the snapshot has one (a database server's store: a round trip
        # per object would hold its writer lock for as many round trips as a pack has objects).
        known: dict[ObjectId, bool] = {}
        has_many: Callable[[list[ObjectId]], set[ObjectId]] | None = getattr(self._snap, "has_many", None)
        if has_many is not None:
            ask = list(dict.fromkeys(oid for oid, _ in items if oid not in w.objects and oid not in w.deleted))
            if len(ask) > 1:
                found = has_many(ask)
                known = {oid: self._track("has", oid, oid in found) for oid in ask}
        new = 0
        for oid, data in items:
            if not (known.pop(oid) if oid in known else self.has(oid)):
                new += 1
            w.deleted.discard(oid)
            w.hashed.pop(oid, None)
            w.objects[oid] = data
        return new

    def write_objects(self, objects: Iterable[tuple[ObjectId, bytes]], *, hashed: bool = False,
                      message_at: Mapping[ObjectId, int] | None = None) -> None:
        """Write objects (id, canonical bytes) without first looking up which the store holds.

        The same effect as `put_objects` (a held object keeps its bytes and gets a fresh write time),
        without a lookup per object: for a commit, whose objects are nearly all new, the backend's own
        insert is the only search of the index it needs.

        `hashed` vouches that the caller made each id by hashing exactly the bytes given (as a history
        does for the objects it encodes), so a backend need not hash them again where it checks ids
        when writing; a wrong vouch stores bytes under an id they do not have. Without it, any check
        the backend makes is made. With it, `message_at` may say, for entries the caller laid out as chat
        entries, where their message starts (exactly what `packs.chat_message_at` reads from the bytes);
        a wrong one stores a leaf pack that does not read back.
        """
        w = self._writeset()
        held, deleted, vouched = w.objects, w.deleted, w.hashed
        said = (message_at or {}).get
        for oid, data in objects:
            if type(oid) is not bytes or len(oid) != OID_SIZE or type(data) is not bytes:
                data = _as_bytes(oid, data)  # a bytearray or memoryview copied; a bad id or data refused
            if deleted:
                deleted.discard(oid)
            if hashed:
                vouched[oid] = said(oid)
            elif vouched:
                vouched.pop(oid, None)
            held[oid] = data

    def delete_objects(self, oids: Iterable[ObjectId]) -> int:
        """Delete objects; returns how many were held."""
        w = self._writeset()
        gone = 0
        for oid in oids:
            check_oid(oid)
            if self.has(oid):
                gone += 1
            w.objects.pop(oid, None)
            w.hashed.pop(oid, None)
            w.deleted.add(oid)
        return gone

    # -- refs ---------------------------------------------------------------------------------------------

    def get_ref(self, name: str) -> ObjectId | None:
        """The object a ref points at, or None if the ref does not exist. Names are taken as given."""
        self._check_open()
        check_name(name)
        if self._writes is not None and name in self._writes.refs:
            return self._writes.refs[name]
        return self._track("ref", name, self._snap.get_ref(name))

    def set_ref(self, name: str, oid: ObjectId | None) -> None:
        """Point a ref at an object, or delete it with None. Validating names is the refs layer's job."""
        w = self._writeset()
        check_name(name)
        if oid is not None:
            check_oid(oid)
        w.refs[name] = oid

    def refs(self, prefix: str = "") -> dict[str, ObjectId]:
        """Every ref whose name starts with `prefix`, sorted by name."""
        self._check_open()
        found = dict(self._track("refs", prefix, self._snap.refs(prefix)))
        if self._writes is not None:
            for name, oid in self._writes.refs.items():
                if name.startswith(prefix):
                    if oid is None:
                        found.pop(name, None)
                    else:
                        found[name] = oid
        return dict(sorted(found.items()))

    # -- reflogs ------------------------------------------------------------------------------------------

    def append_reflog(self, name: str, record: bytes) -> None:
        """Append a record to a ref's reflog (the refs layer decides what a record holds)."""
        w = self._writeset()
        check_name(name)
        if not isinstance(record, bytes):
            raise InvalidInput(f"reflog record must be bytes, not {type(record).__name__}")
        w.reflog_appends.setdefault(name, []).append(record)

    def reflog(self, name: str, limit: int | None = None) -> list[bytes]:
        """A ref's reflog records, newest first (at most `limit` of them)."""
        self._check_open()
        check_name(name)
        mine: list[bytes] = []
        stored: list[bytes] = []
        w = self._writes
        if w is not None:
            mine = list(reversed(w.reflog_appends.get(name, [])))
        if w is None or name not in w.reflog_cleared:
            stored = self._track("reflog", name, self._snap.reflog(name))
        records = mine + stored
        return records if limit is None else records[:limit]

    def delete_reflog(self, name: str) -> None:
        """Drop a ref's whole reflog (for rename and reflog expiry; deleting a ref keeps its log)."""
        w = self._writeset()
        check_name(name)
        w.reflog_cleared.add(name)
        w.reflog_appends.pop(name, None)

    def reflog_names(self) -> list[str]:
        """Every name that has a reflog, deleted refs included, sorted."""
        self._check_open()
        names = set(self._track("reflog_names", None, self._snap.reflog_names()))
        w = self._writes
        if w is not None:
            names -= w.reflog_cleared
            names |= {n for n, rs in w.reflog_appends.items() if rs}
        return sorted(names)

    # -- config -------------------------------------------------------------------------------------------

    def get_config(self, key: str) -> bytes | None:
        """A config value, or None."""
        self._check_open()
        check_name(key, "config key")
        if self._writes is not None and key in self._writes.config:
            return self._writes.config[key]
        return self._track("config", key, self._snap.get_config(key))

    def set_config(self, key: str, value: bytes | None) -> None:
        """Set a config value, or delete it with None."""
        w = self._writeset()
        check_name(key, "config key")
        if value is not None and not isinstance(value, bytes):
            raise InvalidInput(f"config value for {key!r} must be bytes or None, not {type(value).__name__}")
        w.config[key] = value


class BatchWrites:
    """`put`, `put_many` and `delete_many` of a store, each one write transaction of `self.transaction`."""

    transaction: Callable[..., AbstractContextManager[Transaction]]  # the store class's own

    def put(self, oid: ObjectId, data: bytes) -> bool:
        """Store one object; returns whether it was new."""
        return self.put_many([(oid, data)]) == 1

    def put_many(self, objects: Iterable[tuple[ObjectId, bytes]]) -> int:
        """Store objects in one write transaction; returns how many were new."""
        with self.transaction(write=True) as txn:
            return txn.put_objects(objects)

    def delete_many(self, oids: Iterable[ObjectId]) -> int:
        """Delete objects in one write transaction; returns how many were there."""
        with self.transaction(write=True) as txn:
            return txn.delete_objects(oids)


@runtime_checkable
class TransactionalStore(ObjectStore, Protocol):
    """An object store that also holds refs, reflogs and config, changed together in transactions."""

    def transaction(self, *, write: bool = False) -> AbstractContextManager[Transaction]:
        """A transaction; with write=True its writes apply atomically when the block exits normally."""
        ...

    def written_at(self, oid: ObjectId) -> int | None:
        """When the object was last written (ms since the epoch), or None if it is not held."""
        ...

    def stored_size(self, oid: ObjectId) -> int:
        """Bytes the object occupies as stored (after compression); `MissingObject` if absent."""
        ...

    def stats(self) -> StoreStats:
        """Object count and sizes, canonical and as stored."""
        ...

    def close(self) -> None:
        """Release the store's resources; using it afterwards is an error."""
        ...
