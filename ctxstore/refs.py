"""Refs: validated names for heads, compare-and-swap updates with their objects, and reflogs.

A ref is a name under ``refs/heads/`` (conversations and their forks), ``refs/remotes/<remote>/`` (what
was last fetched) or ``refs/tags/``, pointing at an object id. Names follow git's rules. Every update
is a compare-and-swap inside one store write transaction, together with the objects it needs, so the
objects and the ref move together or not at all; every move appends to the ref's reflog, which outlives
the ref so that gc keeps what the log can still reach.
"""

from __future__ import annotations

import builtins
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final, TypeAlias

from .errors import DamagedData, EncodingError, InvalidInput, InvalidRefName, MissingObject, RefMoved, UnknownRef
from .format import codec
from .format.codec import now_ms as _now_ms
from .ids import ObjectId, to_hex
from .ids import hex_or_none as _hex
from .ids import short_hex as _short
from .store.base import Transaction, TransactionalStore, check_oid

__all__ = [
    "ANY",
    "HEADS",
    "MAX_REF_NAME_BYTES",
    "REMOTES",
    "TAGS",
    "Expected",
    "RefUpdates",
    "ReflogRecord",
    "Refs",
    "Unchecked",
    "apply_updates",
    "check_ref_name",
    "default_ref_name",
    "is_valid_ref_name",
    "ref_candidates",
    "ReflogKeep",
    "reflog_records",
    "resolve_ref_name",
    "rewrite_reflogs",
    "scan_reflogs",
]

HEADS: Final = "refs/heads/"
TAGS: Final = "refs/tags/"
REMOTES: Final = "refs/remotes/"
MAX_REF_NAME_BYTES: Final = 255
_FORBIDDEN = frozenset(" ~^:?*[\\")
# Unicode categories that are invisible or spacing: allowing them makes names that look alike but differ.
_BAD_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})


class Unchecked:
    """The type of `ANY`: the `old` value that matches whatever a ref holds (a forced move or delete)."""

    def __repr__(self) -> str:
        return "ANY"


ANY: Final = Unchecked()
"""Pass as an update's `old` to skip the compare (the move is forced; the reflog keeps the old value)."""

Expected: TypeAlias = ObjectId | Unchecked | None
"""What a compare-and-swap expects a ref to hold: an id, None (must not exist) or `ANY` (no check)."""

RefUpdates: TypeAlias = Mapping[str, tuple[Expected, ObjectId | None]]
"""Compare-and-swap moves by full ref name: ``name: (expected, new)``; a None `new` deletes the ref."""


def _why_invalid(name: object) -> str | None:
    if not isinstance(name, str):
        return f"a ref name must be a string, not {type(name).__name__}"
    if not name:
        return "a ref name cannot be empty"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it is not valid Unicode text"
    if size > MAX_REF_NAME_BYTES:
        return f"it is {size} bytes long; the limit is {MAX_REF_NAME_BYTES}"
    for ch in name:
        if ch in _FORBIDDEN:
            return f"it contains {ch!r} (spaces and ~ ^ : ? * [ \\ are not allowed)"
        if unicodedata.category(ch) in _BAD_CATEGORIES:
            return f"it contains the control, invisible or space character U+{ord(ch):04X}"
    if ".." in name:
        return "it contains '..'"
    if "@{" in name:
        return "it contains '@{'"
    if name.endswith("/"):
        return "it ends with '/'"
    if name.endswith("."):
        return "it ends with '.'"
    parts = name.split("/")
    for part in parts:
        if not part:
            return "it has an empty component ('//' or a leading '/')"
        if part.startswith("."):
            return f"its component {part!r} starts with '.'"
        if part.endswith(".lock"):
            return f"its component {part!r} ends with '.lock'"
    if parts[0] != "refs" or len(parts) < 3 or parts[1] not in ("heads", "tags", "remotes"):
        return "full names live under refs/heads/, refs/tags/ or refs/remotes/<remote>/"
    if parts[1] == "remotes" and len(parts) < 4:
        return "remote refs are named refs/remotes/<remote>/<name>"
    if parts[1] in ("heads", "tags") and parts[2] == "HEAD" and len(parts) == 3:
        return "HEAD is what git calls the current branch, so it cannot name a branch or tag"
    return None


_VALID: dict[str, bool] = {}
"""Names already checked, and whether each is valid (checking one costs a Unicode lookup per character,
and resolving a short name checks its invalid candidates too); bounded, cleared when full."""


def _is_valid(name: object) -> bool:
    if type(name) is not str:
        return False
    known = _VALID.get(name)
    if known is not None:
        return known
    valid = _why_invalid(name) is None
    if len(_VALID) >= 4096:
        _VALID.clear()
    _VALID[name] = valid
    return valid


def check_ref_name(name: str) -> str:
    """Check a full ref name against git's rules and our namespaces; returns it, or `InvalidRefName`."""
    if not _is_valid(name):
        raise InvalidRefName(f"invalid ref name {name!r}: {_why_invalid(name)}; use names like "
                             "refs/heads/main or support/42")
    return name


def is_valid_ref_name(name: str) -> bool:
    """Whether `check_ref_name` accepts the name."""
    return _is_valid(name)


def ref_candidates(name: str) -> list[str]:
    """The full names a short name may stand for, in the order they are tried (git's, heads first).

    ``main`` -> refs/heads/main, refs/tags/main, refs/remotes/main; ``tags/v1`` -> refs/tags/v1 first;
    a name starting with ``refs/`` stands only for itself. Only valid names are listed.
    """
    if not isinstance(name, str):
        return []
    if name.startswith("refs/"):
        found = [name]
    else:
        found = [f"refs/{name}", f"{HEADS}{name}", f"{TAGS}{name}", f"{REMOTES}{name}"]
    return [n for n in found if is_valid_ref_name(n)]


def default_ref_name(name: str) -> str:
    """The full name a short name gets when nothing exists yet: a head unless it names its namespace."""
    found = ref_candidates(name)
    if not found:
        raise InvalidRefName(f"invalid ref name {name!r}: {_why_invalid(_plain_full(name))}; "
                             "use names like main, support/42 or refs/heads/main")
    return found[0]


def _plain_full(name: object) -> object:
    if isinstance(name, str) and not name.startswith("refs/"):
        return HEADS + name
    return name


def resolve_ref_name(name: str, exists: Callable[[str], bool]) -> str:
    """The full name a short name resolves to: the first existing candidate, else `default_ref_name`."""
    for candidate in ref_candidates(name):
        if exists(candidate):
            return candidate
    return default_ref_name(name)


@dataclass(frozen=True, slots=True)
class ReflogRecord:
    """One move of a ref as stored: from `old` to `new` (raw ids; None: absent) at `time_ms`, with why.

    The repository facade hands these out as `ctxstore.ReflogEntry`, with hex ids.
    """

    old: ObjectId | None
    new: ObjectId | None
    time_ms: int
    message: str

    def encode(self) -> bytes:
        """The stored form: the canonical CBOR array ``[old, new, time, message]`` (an array, not a map:
        a ref's reflog grows a record per commit, and the keys were a fifth of each)."""
        return codec.encode([self.old, self.new, self.time_ms, self.message])

    @classmethod
    def decode(cls, data: bytes) -> ReflogRecord:
        """Read the stored form back; a damaged record is a `DamagedData`."""
        try:
            value = codec.decode(data)
            if type(value) is not list:
                raise TypeError
            old, new, when, message = value
            if not (isinstance(when, int) and isinstance(message, str)):
                raise TypeError
            return cls(None if old is None else check_oid(old), None if new is None else check_oid(new),
                       when, message)
        except (EncodingError, KeyError, TypeError, ValueError, InvalidInput):
            raise DamagedData("a reflog record is damaged; run `ctxstore fsck`") from None


def reflog_records(txn: Transaction) -> Iterator[tuple[str, ReflogRecord]]:
    """Every reflog record of every ref (deleted refs included), by full ref name; a damaged one raises."""
    for name in txn.reflog_names():
        for record in txn.reflog(name):
            yield name, ReflogRecord.decode(record)


def scan_reflogs(txn: Transaction) -> Iterator[tuple[str, int, ReflogRecord | None]]:
    """Every reflog record of every ref (deleted refs included) with its position (0: newest); a record
    that does not decode comes as None, for fsck to report and `rewrite_reflogs` to drop."""
    for name in txn.reflog_names():
        for n, record in enumerate(txn.reflog(name)):
            yield name, n, _decoded_or_none(record)


def _decoded_or_none(record: bytes) -> ReflogRecord | None:
    try:
        return ReflogRecord.decode(record)
    except DamagedData:
        return None


ReflogKeep: TypeAlias = Callable[[str, "ReflogRecord | None"], bool]
"""Whether a reflog record (None: a damaged one) of the named ref stays, for `rewrite_reflogs`."""


def rewrite_reflogs(txn: Transaction, keep: ReflogKeep, names: Iterable[str] | None = None) -> dict[str, int]:
    """Drop the records `keep` refuses from the reflogs of `names` (every reflog, deleted refs' included,
    when None), inside a caller's write transaction, keeping the rest in order; a reflog left empty is
    deleted. Returns how many records were dropped, by ref, for the reflogs that changed."""
    dropped: dict[str, int] = {}
    for name in list(txn.reflog_names() if names is None else names):
        stored = txn.reflog(name)  # newest first
        kept = [record for record in stored if keep(name, _decoded_or_none(record))]
        if len(kept) == len(stored):
            continue
        txn.delete_reflog(name)
        for record in reversed(kept):
            txn.append_reflog(name, record)
        dropped[name] = len(stored) - len(kept)
    return dropped


def _mismatch(name: str, expected: ObjectId | None, current: ObjectId | None) -> RefMoved:
    if expected is None:
        text = (f"ref {name} already exists at {_short(current)}; load it and build on it, "
                "or update it with force")
    elif current is None:
        text = (f"ref {name} was deleted since you loaded it at {_short(expected)}; "
                "recreate it with force or choose another name")
    else:
        text = (f"ref {name} moved to {_short(current)} since you loaded it at {_short(expected)}; "
                "rebase onto it or commit with force")
    return RefMoved(text, ref=name, current=_hex(current), expected=_hex(expected))


def apply_updates(txn: Transaction, updates: RefUpdates, *, message: str = "", now_ms: int | None = None) -> None:
    """Compare-and-swap several full-named refs inside a caller's write transaction, all or nothing.

    Each update is ``name: (old, new)``; `old` is what the ref must hold (None: must not exist, `ANY`:
    no check), `new` what it will hold (None: delete). On the first mismatch `RefMoved` is raised
    and the caller's transaction must not commit (leaving its ``with`` block by the exception does that).
    New targets must be in the store or written earlier in the same transaction.
    """
    when = _now_ms() if now_ms is None else codec.check_time_ms(now_ms, "the refs' clock")
    checked: list[tuple[str, ObjectId | None, ObjectId | None]] = []
    for name, (old, new) in updates.items():
        check_ref_name(name)
        if not isinstance(old, Unchecked) and old is not None:
            check_oid(old)
        if new is not None:
            check_oid(new)
            if not txn.has(new):
                raise MissingObject(f"ref {name} would point at {to_hex(new)}, which is not in the store; "
                                    "write the object in the same update (objects=...)")
        current = txn.get_ref(name)
        if not isinstance(old, Unchecked) and current != old:
            raise _mismatch(name, old, current)
        checked.append((name, current, new))
    for name, current, new in checked:
        if current == new:
            continue  # not a move: nothing to log
        txn.set_ref(name, new)
        txn.append_reflog(name, ReflogRecord(current, new, when, message).encode())


class Refs:
    """The refs of one store: lookups by short or full name, atomic updates, and reflogs.

    Short names resolve like git's (`ref_candidates`); methods that write resolve inside their own
    transaction, so a name means the same thing for the check and the update.
    """

    def __init__(self, store: TransactionalStore, *, clock: Callable[[], int] = _now_ms) -> None:
        self._store = store
        self._clock = clock

    def resolve(self, name: str) -> str:
        """The full name `name` stands for: an existing ref if one matches, else the default."""
        with self._store.transaction() as txn:
            return resolve_ref_name(name, lambda n: txn.get_ref(n) is not None)

    def get(self, name: str) -> ObjectId | None:
        """What a ref points at, or None if it does not exist (an unborn ref)."""
        with self._store.transaction() as txn:
            return txn.get_ref(resolve_ref_name(name, lambda n: txn.get_ref(n) is not None))

    def __getitem__(self, name: str) -> ObjectId:
        oid = self.get(name)
        if oid is None:
            raise UnknownRef(f"no ref named {name!r}; list refs with `ctxstore refs`")
        return oid

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and bool(ref_candidates(name)) and self.get(name) is not None

    def items(self, prefix: str | None = None) -> dict[str, ObjectId]:
        """Full ref names to object ids, sorted, optionally only those starting with `prefix`."""
        with self._store.transaction() as txn:
            return txn.refs(prefix or "refs/")

    def set_if_equals(self, name: str, old: Expected, new: ObjectId | None, *,
                      objects: Iterable[tuple[ObjectId, bytes]] = (), message: str = "") -> str:
        """Move a ref from `old` to `new` and write `objects`, in one transaction; returns the full name.

        `old` None means the ref must not exist yet (`ANY`: no check). If the ref holds anything else,
        `RefMoved` names both values and nothing (objects included) is written.
        """
        return self.set_many_if_equals({name: (old, new)}, objects=objects, message=message)[0]

    def set_many_if_equals(self, updates: RefUpdates, *, objects: Iterable[tuple[ObjectId, bytes]] = (),
                           message: str = "") -> list[str]:
        """Compare-and-swap several refs and write `objects`, all or nothing; returns the full names."""
        if not updates:
            raise InvalidInput("no ref updates given")
        with self._store.transaction(write=True) as txn:
            full: dict[str, tuple[Expected, ObjectId | None]] = {}
            for name, change in updates.items():
                full_name = resolve_ref_name(name, lambda n: txn.get_ref(n) is not None)
                if full_name in full:
                    raise InvalidInput(f"ref {full_name} is updated twice in one batch ({name!r})")
                full[full_name] = change
            txn.put_objects(objects)
            apply_updates(txn, full, message=message, now_ms=self._clock())
        return list(full)

    def set(self, name: str, new: ObjectId, *, objects: Iterable[tuple[ObjectId, bytes]] = (),
            message: str = "") -> str:
        """Point a ref at `new` whatever it held (a forced update; the old value stays in the reflog)."""
        return self.set_many_if_equals({name: (ANY, new)}, objects=objects, message=message)[0]

    def delete(self, name: str, old: Expected = ANY, *, message: str = "") -> str:
        """Delete a ref (if it holds `old`, when given); its reflog is kept. Returns the full name."""
        with self._store.transaction(write=True) as txn:
            full = resolve_ref_name(name, lambda n: txn.get_ref(n) is not None)
            if txn.get_ref(full) is None:
                raise UnknownRef(f"no ref named {name!r} to delete; list refs with `ctxstore refs`")
            apply_updates(txn, {full: (old, None)}, message=message or "deleted", now_ms=self._clock())
        return full

    def rename(self, old_name: str, new_name: str, *, message: str = "") -> str:
        """Rename a ref, moving its reflog with it; the new name must be free. Returns its full name."""
        with self._store.transaction(write=True) as txn:
            source = resolve_ref_name(old_name, lambda n: txn.get_ref(n) is not None)
            target_oid = txn.get_ref(source)
            if target_oid is None:
                raise UnknownRef(f"no ref named {old_name!r} to rename; list refs with `ctxstore refs`")
            dest = resolve_ref_name(new_name, lambda n: txn.get_ref(n) is not None)
            if dest == source:
                return dest
            existing = txn.get_ref(dest)
            if existing is not None:
                raise _mismatch(dest, None, existing)
            for record in reversed(txn.reflog(source)):
                txn.append_reflog(dest, record)
            txn.delete_reflog(source)
            txn.set_ref(source, None)
            txn.set_ref(dest, target_oid)
            note = message or f"renamed from {source}"
            when = codec.check_time_ms(self._clock(), "the refs' clock")
            txn.append_reflog(dest, ReflogRecord(target_oid, target_oid, when, note).encode())
        return dest

    def reflog(self, name: str, limit: int | None = None) -> list[ReflogRecord]:
        """A ref's moves, newest first; also for a deleted ref (give its full name)."""
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidInput(f"a reflog limit must be a whole number of entries, not {limit!r}")
        with self._store.transaction() as txn:
            full = resolve_ref_name(name, lambda n: bool(txn.reflog(n, limit=1)))
            return [ReflogRecord.decode(r) for r in txn.reflog(full, limit)]

    def expire_reflogs(self, name: str | None = None, *, before_ms: int | None = None) -> dict[str, int]:
        """Drop reflog records written before `before_ms` (None: every record), and every damaged one.

        `name` picks one ref's reflog (a deleted ref's too, by its full name); None expires them all.
        What only the dropped records reached is then unreachable, for gc to delete. Returns the records
        dropped by full ref name.
        """
        if before_ms is not None:
            codec.check_time_ms(before_ms, "the expiry time")
        with self._store.transaction(write=True) as txn:
            names = None
            if name is not None:
                full = resolve_ref_name(name, lambda n: bool(txn.reflog(n, limit=1)))
                if not txn.reflog(full, limit=1):
                    raise UnknownRef(f"no reflog for {name!r}; list refs with `ctxstore refs`")
                names = [full]
            return rewrite_reflogs(
                txn, lambda _n, rec: rec is not None and before_ms is not None and rec.time_ms >= before_ms,
                names)

    def reflog_names(self) -> list[str]:
        """Every ref name with a reflog, deleted refs included (gc keeps what these reach)."""
        with self._store.transaction() as txn:
            return txn.reflog_names()

    def reflog_targets(self) -> builtins.set[ObjectId]:
        """Every object id any reflog entry points at, old or new: roots that gc must keep."""
        with self._store.transaction() as txn:
            return {o for _name, entry in reflog_records(txn) for o in (entry.old, entry.new) if o is not None}
