"""Repository maintenance: fsck, gc and stats, over one reachability walk from refs and reflogs."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..errors import CtxStoreError, InvalidInput, MissingObject
from ..format import seq
from ..format.objects import Entry, Revision, parse_object, references
from ..ids import ObjectId, is_oid, object_id, to_hex
from ..refs import ReflogRecord, reflog_records, rewrite_reflogs, scan_reflogs
from ..store.base import Transaction, TransactionalStore, maintenance_lock, read_layout_problems
from .lineage import Lineage, read_object
from .reports import FsckReport, GcReport, RepoStats

__all__ = ["Progress", "fsck", "gc", "reachable", "roots", "stats"]

Progress = Callable[[int, int], None]
"""Called as `progress(done, total)` while a long pass runs (fsck's objects, stats' refs)."""
_PROGRESS_EVERY = 1024


def roots(txn: Transaction, *, expire_deleted: int | None = None
          ) -> tuple[dict[str, ObjectId], set[ObjectId], int]:
    """Ref heads, every object a ref or reflog entry names, and the number of reflog entries.

    With `expire_deleted`, the records of deleted refs' reflogs written at or before that time (ms) are
    left out: gc drops them. A damaged reflog record raises `DamagedData`.
    """
    heads = txn.refs("refs/")
    found = set(heads.values())
    count = 0
    for name, entry in reflog_records(txn):
        if expire_deleted is not None and entry.time_ms <= expire_deleted and name not in heads:
            continue
        count += 1
        found.update(o for o in (entry.old, entry.new) if o is not None)
    return heads, found, count


def reachable(txn: Transaction, start: Iterable[ObjectId], marked: set[ObjectId],
              missing: dict[ObjectId, ObjectId | None] | None = None,
              kinds: dict[ObjectId, type] | None = None) -> None:
    """The one reachability walk: add everything reachable from `start` to `marked`.

    Objects already in `marked` are not walked again (gc's second pass only walks what moved). Absent
    ones go to `missing` with a referrer; present but unreadable ones are marked and left for fsck's
    object pass to report. With `kinds`, the type of each object of `start` read is recorded there.
    """
    start = list(start)
    want = set(start) if kinds is not None else set()
    stack: list[tuple[ObjectId, ObjectId | None]] = [(r, None) for r in start if r not in marked]
    while stack:
        oid, referrer = stack.pop()
        if oid in marked:
            continue
        try:
            data = txn.get(oid) if txn.has(oid) else None
        except MissingObject:
            data = None
        except CtxStoreError:
            marked.add(oid)
            continue
        if data is None:
            if missing is not None:
                missing.setdefault(oid, referrer)
            continue
        marked.add(oid)
        try:
            obj = read_object(oid, data)
        except CtxStoreError:
            continue
        if kinds is not None and oid in want:
            kinds[oid] = type(obj)
        stack.extend((ref, oid) for ref in references(obj) if ref not in marked)


def _article(kind: type) -> str:
    name = kind.__name__.lower()
    return f"an {name}" if name[0] in "aeiou" else f"a {name}"


def fsck(store: TransactionalStore, progress: Progress | None = None, *, repair: bool = False) -> FsckReport:
    """Check every object (hash, canonical form, shape), how the store keeps them where it can check that
    (`store.base.read_layout_problems`: an orphaned leaf pack), that refs and reflogs reach only held
    objects, that each names a revision, and that every reflog record reads.

    Objects are listed and then read one by one, so one that is gone when read was deleted meanwhile (gc
    deletes only what nothing reaches) and is not damage; everything refs and reflogs reach is read in
    one snapshot. With `repair`, damaged reflog records are dropped first (the rest are kept, in order)
    and the report lists what was dropped. `progress(done, total)` is called as objects are checked.
    """
    report = FsckReport()
    if repair:
        with store.transaction(write=True) as txn:
            # A record that does not read, or that names an object the store lacks, can restore
            # nothing: it goes; every other record stays, in order.
            def sound(_name: str, record: ReflogRecord | None) -> bool:
                return record is not None and all(o is None or (is_oid(o) and txn.has(o))
                                                  for o in (record.old, record.new))

            dropped = rewrite_reflogs(txn, sound)
        report.repaired = [f"dropped {n} damaged or dangling record(s) from the reflog of {name}"
                           for name, n in dropped.items()]
    total = len(store) if progress is not None else 0
    for done, oid in enumerate(store):
        if progress is not None and done % _PROGRESS_EVERY == 0:
            progress(done, total)
        try:
            data = store.get(oid)
        except MissingObject:
            continue  # deleted since it was listed: gc removed an object nothing reached
        except CtxStoreError as exc:
            report.objects += 1
            report.problems.append(f"object {to_hex(oid)} cannot be read: {exc}")
            continue
        report.objects += 1
        report.bytes += len(data)
        actual = object_id(data)
        if actual != oid:
            report.problems.append(f"object {to_hex(oid)} is corrupt: its bytes hash to {to_hex(actual)}")
            continue
        try:
            obj = parse_object(data)
        except CtxStoreError as exc:
            report.problems.append(f"object {to_hex(oid)} is malformed: {exc}")
            continue
        if (fault := seq.chunking_fault(obj)) is not None:
            report.problems.append(f"object {to_hex(oid)}: {fault}")
    if progress is not None:
        progress(total, total)
    report.problems.extend(read_layout_problems(store))
    marked: set[ObjectId] = set()
    missing: dict[ObjectId, ObjectId | None] = {}
    kinds: dict[ObjectId, type] = {}
    named: dict[ObjectId, str] = {}  # a root -> who names it, for the type check
    with store.transaction() as txn:
        heads = {}
        for name, oid in txn.refs("refs/").items():
            if is_oid(oid):
                heads[name] = oid
                named.setdefault(oid, f"ref {name}")
            else:
                report.problems.append(f"ref {name} holds {len(oid)} byte(s) that are not an object id; "
                                       f"point it at a revision (`ctxstore branch -f`) or delete it")
        for name, n, record in scan_reflogs(txn):
            if record is None:
                report.problems.append(f"reflog of {name}: record {n} (0 is the newest) is damaged; "
                                       "`ctxstore fsck --repair` drops it and keeps the rest")
                continue
            report.reflog_entries += 1
            for o in (record.old, record.new):
                if o is not None:
                    named.setdefault(o, f"reflog of {name} (record {n})")
        report.refs = len(heads)
        reachable(txn, named, marked, missing, kinds)
    for oid, who in named.items():
        kind = kinds.get(oid)
        if kind is not None and kind is not Revision:
            report.problems.append(f"{who} names {to_hex(oid)}, which is {_article(kind)}, not a revision")
    head_set = set(heads.values())
    for name, oid in heads.items():
        if oid in missing:
            report.problems.append(f"ref {name} points at {to_hex(oid)}, which is missing")
    for oid, referrer in missing.items():
        if referrer is not None:
            report.problems.append(f"object {to_hex(oid)} is missing (referenced by {to_hex(referrer)})")
        elif oid not in head_set:
            report.problems.append(f"object {to_hex(oid)} named by the {named[oid]} is missing")
    report.reachable = len(marked)
    report.unreachable = max(0, report.objects - report.reachable)
    return report


def gc(store: TransactionalStore, grace: float, now_ms: int) -> GcReport:
    """Delete objects unreachable from every ref and reflog entry and written more than `grace` s ago,
    after dropping the reflog records of deleted refs older than that (so deleting a ref and running gc
    with no grace removes what only that ref reached).

    Reachability is marked from a read snapshot, then re-checked inside the deleting write transaction
    from the refs and reflogs as they are then, so a ref moved (or recreated) meanwhile keeps its objects.
    A damaged reflog record stops gc (`DamagedData`) before anything is deleted: what it named is unknown.
    """
    if not isinstance(grace, int | float) or not grace >= 0:
        raise InvalidInput(f"grace must be zero or more seconds, not {grace}")
    cutoff = now_ms - int(grace * 1000)
    marked: set[ObjectId] = set()
    with store.transaction() as txn:
        reachable(txn, roots(txn, expire_deleted=cutoff)[1], marked)
    report = GcReport()
    sizes: dict[ObjectId, int] = {}
    for oid in store:
        if oid not in marked:
            written = store.written_at(oid)
            if written is not None and written <= cutoff:
                sizes[oid] = _stored_size(store, oid)
            else:
                report.kept_young += 1
    # The store's maintenance lock (store.base.maintenance_lock), if it has one, keeps writers out of the
    # deletion and of what the store deletes after it (a PostgreSQL store's bucket keys).
    with maintenance_lock(store), store.transaction(write=True) as txn:
        live = txn.refs("refs/")
        # Only deleted refs' reflogs can expire here, so only those are read inside the write lock (a live
        # ref's reflog may hold a record per commit ever made).
        deleted = [name for name in txn.reflog_names() if name not in live]
        dropped = rewrite_reflogs(
            txn, lambda name, record: record is None or record.time_ms > cutoff, deleted)
        report.reflog_entries_expired = sum(dropped.values())
        reachable(txn, roots(txn)[1], marked)
        doomed = []
        for oid in sizes:
            written = txn.written_at(oid)
            if oid in marked or written is None:
                continue  # reached again by a ref that moved meanwhile, or already gone
            if written > cutoff:
                report.kept_young += 1  # rewritten by a committer since the scan
                continue
            doomed.append(oid)
            report.bytes += sizes[oid]
        report.deleted = txn.delete_objects(doomed)
    report.reachable = len(marked)
    return report


def stats(store: TransactionalStore, lineage: Lineage, data_files: list[Path] | None,
          progress: Progress | None = None) -> RepoStats:
    """Object counts and sizes, bytes on disk, and what every ref's view would cost without sharing.

    `data_files` are the store's files on disk, if it has any: their allocated blocks are the disk bytes.
    """
    base = store.stats()
    with store.transaction() as txn:
        heads = txn.refs("refs/")
    entry_sizes: dict[ObjectId, int] = {}
    node_sizes: dict[ObjectId, int] = {}

    def leaf_size(items: list[list[Any]]) -> int:
        total = 0
        for _entry_id, entry_oid in items:
            if entry_oid is None:
                continue
            size = entry_sizes.get(entry_oid)
            if size is None:
                size = entry_sizes[entry_oid] = _entry_size(store, ObjectId(entry_oid))
            total += size
        return total

    def tree_size(oid: ObjectId) -> int:
        # Recursion is bounded: a spine has at most 64 levels (objects.Revision.check).
        known = node_sizes.get(oid)
        if known is not None:
            return known
        node = lineage.node(oid)
        if node.level == 0:
            total = leaf_size(node.items)
        else:
            total = sum(tree_size(ObjectId(child)) for child, _ in node.items)
        node_sizes[oid] = total
        return total

    logical = 0
    for done, oid in enumerate(heads.values()):
        if progress is not None:
            progress(done, len(heads))
        try:
            spine = lineage.revision(oid).seq
            logical += sum(tree_size(top) for top, _ in seq.subtrees(spine)) + leaf_size(spine[0])
        except CtxStoreError:
            continue  # a damaged or missing view costs nothing here; fsck reports it
    if progress is not None:
        progress(len(heads), len(heads))
    disk = base.file_bytes if not data_files else _disk_bytes(data_files, base.file_bytes)
    return RepoStats(objects=base.objects, object_bytes=base.object_bytes, stored_bytes=base.stored_bytes,
                     disk_bytes=disk, refs=len(heads), logical_bytes=logical)


def _entry_size(store: TransactionalStore, oid: ObjectId) -> int:
    """An entry's canonical bytes plus those of the blobs it references."""
    try:
        data = store.get(oid)
    except MissingObject:
        return 0
    total = len(data)
    obj = read_object(oid, data)
    if isinstance(obj, Entry):
        for blob in obj.blob_ids():
            with contextlib.suppress(MissingObject):
                total += len(store.get(blob))
    return total


def _stored_size(store: TransactionalStore, oid: ObjectId) -> int:
    try:
        return store.stored_size(oid)
    except MissingObject:
        return 0


def _disk_bytes(files: list[Path], fallback: int) -> int:
    try:
        # Allocated blocks, not the sparse apparent size of a grown map.
        return sum(min(st.st_blocks * 512, st.st_size) for st in (os.stat(f) for f in files))
    except OSError:
        return fallback


