"""Receiving a pack: verify all of it, then write its objects and move refs in one store transaction."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BadPack
from ..format.codec import MAX_OBJECT_SIZE
from ..format.objects import Revision, parse_object
from ..ids import ObjectId, to_hex
from ..pack.stream import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_TOTAL_SIZE, PackSource, missing_references, verify_pack
from ..refs import apply_updates
from ..store.base import TransactionalStore

__all__ = ["RefUpdates", "UnpackResult", "unpack"]

RefUpdates = Mapping[str, tuple[ObjectId | Any | None, ObjectId | None]]
"""Ref moves that come with a pack: ``full name: (old, new)``, compare-and-swap as in `refs.apply_updates`."""


@dataclass(frozen=True)
class UnpackResult:
    """What an `unpack` did: objects received and new to the store, and the refs it moved."""

    objects: int
    new_objects: int
    refs: dict[str, ObjectId | None] = field(default_factory=dict)


def unpack(store: TransactionalStore, stream: PackSource, ref_updates: RefUpdates | None = None, *,
           message: str = "unpack", check: Callable[[Any], None] | None = None,
           max_object_size: int = MAX_OBJECT_SIZE, max_total_size: int = DEFAULT_MAX_TOTAL_SIZE,
           max_objects: int = DEFAULT_MAX_OBJECTS) -> UnpackResult:
    """Receive a pack: verify all of it, then write its objects and move refs in one transaction.

    The whole pack is read and checked first (format, limits, every object re-hashed and re-parsed, the
    trailer), staged aside, never visible. Then, inside one write transaction: everything the pack's
    objects and the new ref targets reach must be in the pack or the store, each new ref target must be a
    revision, `check(txn)` (if given) may veto, and `ref_updates` are applied as compare-and-swaps
    (``full name: (old, new)``; `refs.ANY` as old skips the check). A bad pack raises `BadPack`, a moved
    ref `NonFastForward`; either way the store is exactly as it was.
    """
    updates = dict(ref_updates or {})
    staged = verify_pack(stream, max_object_size=max_object_size, max_total_size=max_total_size,
                         max_objects=max_objects, base=store)
    with staged:
        targets = [new for _, new in updates.values() if new is not None]
        with store.transaction(write=True) as txn:
            missing = missing_references(staged.links, [*staged.ids, *targets], txn)
            if missing:
                some = ", ".join(sorted(to_hex(m)[:12] for m in missing)[:5])
                raise BadPack(f"bad pack: it leaves {len(missing)} referenced object(s) missing ({some}); "
                              "the sender must include everything the new revisions reach; fetch again")
            new = txn.put_objects(staged)
            for name, new_oid in ((n, t) for n, (_, t) in updates.items() if t is not None):
                obj = parse_object(txn.get(new_oid), trusted=True)
                if not isinstance(obj, Revision):
                    raise BadPack(f"bad pack: ref {name} would point at {to_hex(new_oid)[:12]}, a "
                                  f"{type(obj).__name__.lower()}, not a revision")
            if check is not None:
                check(txn)
            if updates:
                apply_updates(txn, updates, message=message)
        return UnpackResult(len(staged), new, {n: t for n, (_, t) in updates.items()})

