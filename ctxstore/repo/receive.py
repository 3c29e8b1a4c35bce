"""Receiving a pack: verify all of it, then write its objects and move refs in one store transaction.

`unpack` here takes raw ids (`refs.RefUpdates`), as the sync service and client do, which work on
stores; `Repository.unpack` is the public spelling, taking hex ids.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import BadPack
from ..format.codec import MAX_OBJECT_SIZE
from ..format.objects import Revision
from ..ids import hex_or_none, to_hex
from ..pack.staging import missing_references, verify_pack
from ..pack.stream import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_TOTAL_SIZE, PackSource
from ..refs import RefUpdates, apply_updates
from ..store.base import Transaction, TransactionalStore
from .lineage import read_object
from .reports import UnpackResult

__all__ = ["UnpackResult", "unpack"]


def unpack(store: TransactionalStore, stream: PackSource, ref_updates: RefUpdates | None = None, *,
           message: str = "unpack", check: Callable[[Transaction], None] | None = None,
           max_object_size: int = MAX_OBJECT_SIZE, max_total_size: int = DEFAULT_MAX_TOTAL_SIZE,
           max_objects: int = DEFAULT_MAX_OBJECTS) -> UnpackResult:
    """Receive a pack: verify all of it, then write its objects and move refs in one transaction.

    The whole pack is read and checked first (format, limits, every object re-hashed and re-parsed, the
    trailer), staged aside, never visible. Then, inside one write transaction: everything the pack's
    objects and the new ref targets reach must be in the pack or the store, each new ref target must be a
    revision, `check(txn)` (if given) may veto, and `ref_updates` are applied as compare-and-swaps
    (``full name: (old, new)``; `refs.ANY` as old skips the check). A bad pack raises `BadPack`, a ref
    that moved meanwhile `RefMoved`; either way the store is exactly as it was.
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
                obj = read_object(new_oid, txn.get(new_oid))
                if not isinstance(obj, Revision):
                    raise BadPack(f"bad pack: ref {name} would point at {to_hex(new_oid)[:12]}, a "
                                  f"{type(obj).__name__.lower()}, not a revision")
            if check is not None:
                check(txn)
            if updates:
                apply_updates(txn, updates, message=message)
        return UnpackResult(len(staged), new, {n: hex_or_none(t) for n, (_, t) in updates.items()})

