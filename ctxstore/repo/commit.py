"""Committing histories to refs: fast-forward moves with their objects in one transaction, and the one
rebase-and-retry loop every writer (append, recording, import) shares.

The common case costs one write transaction: the ref is unborn, or its head is reached by walking
revisions this process already knows (pending objects, cached parents), so nothing is read while the
writer's lock is held. Otherwise the transaction is abandoned, the lineage is walked outside it, and the
commit tried again; a history that does not descend from the ref's head is a `NonFastForward`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

from ..errors import InvalidInput, MissingObject, NonFastForward, RefMoved, shown
from ..format.objects import Revision, references
from ..history.entry import collector_paused
from ..history.message_history import MessageHistory
from ..ids import ObjectId, from_hex, hex_or_none, to_hex
from ..ids import short_hex as _short
from ..refs import ANY, TAGS, Expected, apply_updates, resolve_ref_name
from ..store.base import Transaction, TransactionalStore
from .lineage import Lineage, read_object
from .reports import CommitResult

__all__ = ["CAS_RETRIES", "REBASES", "WriterQueue", "commit_many", "commit_rebasing", "turn_of"]

CAS_RETRIES: Final = 8
"""Transactions a commit tries while other writers move its refs forward (each try re-walks only news)."""
REBASES: Final = 100
"""Rebases `commit_rebasing` makes before it gives up with `RefMoved`."""


class WriterQueue:
    """Rebasing writers take turns: an advisory lock on a file (``flock``), shared by every process and
    thread that opens the repository.

    A rebasing commit (`Repository.append`, `commit(rebase=True)`) holds its turn from its first try
    until it lands, so rebasing writers never race each other: a lost race can only come from a writer
    outside the queue (a plain commit, a received pack), and each commit is retried a bounded number of
    times instead of losing race after race. The turn covers only the commit and its rebases, not the
    work that built the history, so writers still prepare in parallel. If the lock file cannot be made
    (a read-only or full disk), writers go without a queue and back off with jitter.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.gate = self.path.with_name(self.path.name + ".gate")

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the queue: blocks until every writer ahead has committed (or given up).

        Two locks make the turns fair: a writer queues on the gate, then, alone at the gate, waits for
        the turn itself and lets the gate go once it has it. A writer that just finished its turn and
        comes straight back finds the gate held by the one next in line, so it cannot take the turn
        again ahead of writers that were already waiting (flock alone favours whoever asks last).
        """
        try:
            gate = os.open(self.gate, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            yield  # no queue on a read-only or full disk: back off with jitter only
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError:
            os.close(gate)
            yield
            return
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)  # locks are released by close, also if the process dies
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            finally:
                os.close(gate)
            yield
        finally:
            os.close(fd)


def turn_of(queue: WriterQueue | None) -> contextlib.AbstractContextManager[None]:
    """The writer's turn in `queue`, or nothing to wait for without one."""
    return queue.turn() if queue is not None else contextlib.nullcontext()


_BACKOFF_BASE = 0.001
_BACKOFF_CAP = 0.05


def _backoff(attempt: int) -> None:
    """Sleep a random time up to an exponentially growing cap, so racing writers stop colliding."""
    time.sleep(random.uniform(0, min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)))


class _Moved(Exception):
    """Leaves the write transaction (aborting it): a ref's head is not known to be in the lineage."""

    def __init__(self, ref: str, full: str, current: ObjectId) -> None:
        super().__init__(ref, full, current)
        self.ref, self.full, self.current = ref, full, current


def commit_many(store: TransactionalStore, lineage: Lineage, updates: Mapping[str, MessageHistory], *,
                force: bool = False, message: str = "",
                set_refs: Mapping[str, ObjectId] | None = None) -> list[CommitResult]:
    """Write what the histories made that the store lacks and move every ref to its history's head, or none.

    Fast-forward only unless `force`: a ref's head must be in its history's lineage (an unborn ref takes
    any). Otherwise `NonFastForward` names both heads and nothing is written. Results come in the order
    of `updates`. A ref that names a tag is refused (`InvalidInput`): tags do not move. `set_refs` (full
    names to ids the store holds or the histories made) are pointed there in the same transaction
    whatever they held, as `Repository.set_ref` does (a tag too); they get no result.
    """
    if not updates:
        raise InvalidInput("no refs to commit")
    for ref, h in updates.items():
        if not isinstance(h, MessageHistory):
            raise InvalidInput(f"commit takes a MessageHistory for {shown(ref)}, not {type(h).__name__}")
    # A large commit makes a few long-lived objects per record and no cyclic garbage (as an import does):
    # the collector would scan them all as they accumulate.
    with collector_paused():
        return _commit_many(store, lineage, updates, force, message, set_refs)


def _commit_many(store: TransactionalStore, lineage: Lineage, updates: Mapping[str, MessageHistory], force: bool,
                 message: str, set_refs: Mapping[str, ObjectId] | None) -> list[CommitResult]:
    heads = {ref: from_hex(h.revision_id) for ref, h in updates.items()}
    pending: dict[ObjectId, bytes] = {}
    foreign: set[ObjectId] = set()
    copied: set[ObjectId] = set()
    message_at: dict[ObjectId, int] = {}
    for h, head in zip(updates.values(), heads.values(), strict=True):
        made = h.workspace.pending()
        pending.update(made)
        copied |= h.workspace.copied()
        message_at.update(h.workspace.message_at())
        rev = h.workspace.cached(head)
        if isinstance(rev, Revision):
            lineage.note(head, rev.parent)  # spares the fast-forward check a parse
        if h.workspace.source is not store:
            # Built over another source: what its new objects point at may be missing here.
            foreign.update(oid for oid, _ in made)
    moves: dict[str, tuple[ObjectId | None, ObjectId]] = {}
    walked: dict[str, ObjectId] = {}  # ref -> a head the lineage walk found in that ref's history
    for _attempt in range(CAS_RETRIES):
        try:
            with store.transaction(write=True) as txn:
                moves = {}
                for ref, head in heads.items():
                    full = resolve_ref_name(ref, lambda n: txn.get_ref(n) is not None)
                    if full.startswith(TAGS):
                        raise InvalidInput(_tag_moves(full))
                    if full in moves:
                        raise InvalidInput(f"ref {full} is committed twice in one batch ({shown(ref)})")
                    current = txn.get_ref(full)
                    if not (force or current is None or current == head or walked.get(ref) == current
                            or lineage.known_descent(head, current, pending)):
                        raise _Moved(ref, full, current)
                    moves[full] = (current, head)
                _write_objects(txn, pending, foreign, copied, message_at)
                forced: dict[str, tuple[Expected, ObjectId | None]] = {}
                for name, oid in (set_refs or {}).items():
                    if name in moves:
                        raise InvalidInput(f"ref {name} is both committed and set in one batch")
                    forced[name] = (ANY, oid)
                apply_updates(txn, {**moves, **forced}, message=message or "commit")
        except RefMoved:
            continue  # the store lost a race while it grew its map: nothing was written; check again
        except _Moved as moved:
            # Walk the lineage outside the writer's lock, reading the store as needed.
            if not lineage.descends(updates[moved.ref], moved.current):
                base = lineage.base_of(updates[moved.ref])
                raise NonFastForward(
                    f"ref {moved.full} moved to {_short(moved.current)} since you loaded it at {_short(base)}; "
                    "rebase onto it, commit with rebase=True, or commit with force",
                    ref=moved.full, current=to_hex(moved.current), expected=hex_or_none(base),
                ) from None
            walked[moved.ref] = moved.current  # the next try accepts this head without walking again
            continue
        break
    else:
        raise RefMoved(f"refs {', '.join(heads)} kept moving while committing ({CAS_RETRIES} tries); "
                       "commit again")
    for h in updates.values():
        if h.workspace.source is store:
            h.workspace.forget(pending.keys())
    return [CommitResult(full, hex_or_none(old), to_hex(new)) for full, (old, new) in moves.items()]


def _tag_moves(full: str) -> str:
    # A tag names one revision for good: commits move heads only (`set_refs` re-points a tag on purpose).
    short = full[len(TAGS):]
    return (f"{full} is a tag, and tags do not move; fork it to continue the conversation "
            f"(`ctxstore fork {short} NEW`) or re-point it with `ctxstore tag -f {short} REV`")


def commit_rebasing(store: TransactionalStore, lineage: Lineage, ref: str, history: MessageHistory, *,
                    message: str = "", retries: int = REBASES, queue: WriterQueue | None = None) -> CommitResult:
    """Commit `history` to `ref`; whenever another writer got there first, rebase onto the ref and retry.

    The history's own revisions (their recorded operations) are replayed on the ref's new head, so
    nobody's entries are lost. With a `queue` the writer waits its turn before its first try and keeps
    it until it commits; without one it backs off with jitter between tries. After `retries` rebases
    the ref is still moving: `RefMoved`.
    """
    if type(retries) is not int or retries < 1:
        raise InvalidInput(f"retries must be a positive whole number, not {shown(retries)}")
    head: ObjectId | None = None
    note = message
    with turn_of(queue):
        for attempt in range(retries):
            try:
                return commit_many(store, lineage, {ref: history}, message=note)[0]
            except NonFastForward:  # RefMoved too: the ref moved on, so build on where it is now
                if queue is None:
                    _backoff(attempt)
                with store.transaction() as txn:
                    full = resolve_ref_name(ref, lambda n: txn.get_ref(n) is not None)
                    head = txn.get_ref(full)
                onto = MessageHistory(source=store, head=hex_or_none(head))
                history = history.rebase_onto(onto)
                note = f"{message or 'commit'} (rebased)"
    raise RefMoved(f"ref {ref} kept moving; gave up after {retries} rebases; commit again",
                   ref=ref, current=hex_or_none(head))


def _write_objects(txn: Transaction, pending: dict[ObjectId, bytes], foreign: set[ObjectId],
                   copied: set[ObjectId], message_at: Mapping[ObjectId, int]) -> None:
    """Write the pending objects; one made over another source must not point at an absent object.

    A history loaded from this store only points at objects it read here or made itself, so only
    objects made over another source need their references checked (and those the store holds are
    not rewritten). The store skips, and re-stamps, any other object it already holds, so nothing
    made here is looked up beforehand: the insert is the only search. A history hashed the bytes of
    every object it made to its id (`Workspace.copied` are the others), and says so to the store, with
    where the message starts in the entries it laid out itself (`Workspace.message_at`).
    """
    held: set[ObjectId] = set()
    for oid in foreign:
        data = pending.get(oid)
        if data is None:
            continue
        if txn.has(oid):
            held.add(oid)  # a foreign history may carry much the store has: leave those alone
            continue
        for ref in references(read_object(oid, data)):
            if ref not in pending and not txn.has(ref):
                raise MissingObject(
                    f"object {to_hex(oid)} refers to {to_hex(ref)}, which neither the history nor the "
                    "store holds; load the history from this repository (or import it whole) and retry")
    apart = held | copied
    made = ((oid, data) for oid, data in pending.items() if oid not in apart) if apart else pending.items()
    txn.write_objects(made, hashed=True, message_at=message_at)
    if copied:
        txn.write_objects((oid, data) for oid, data in pending.items() if oid not in held and oid in copied)
