"""Repository: a store, its refs and its config, with fast-forward commits, rebase, fsck, gc and diff.

A repository directory holds a ``format`` file (what makes it a repository) and the LMDB store in
``db/``. Conversations are `MessageHistory` values read lazily from the store; `commit` writes the
objects a history made that the store lacks and moves a ref, in one write transaction, only when the
move is a fast-forward. See docs/repository.md for the semantics and the concurrency guarantees.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from ..errors import (
    CtxStoreError,
    InvalidInput,
    MissingObject,
    NonFastForward,
    NotARepository,
    RepositoryExists,
    StoreError,
    UnknownRef,
    UnknownRevision,
)
from ..format import seq
from ..format.codec import now_ms as _now_ms
from ..format.objects import Entry, Object, Revision, SeqNode, parse_object, references, revision_header
from ..history.message_history import MessageHistory
from ..ids import ObjectId, from_hex, object_id, to_hex
from ..ids import short_hex as _short
from ..pack import plan
from ..refs import ANY, HEADS, ReflogEntry, Refs, apply_updates, default_ref_name, ref_candidates
from ..store.base import Transaction, TransactionalStore
from ..store.memory import MemoryStore
from . import receive
from .reports import Config, FsckReport, GcReport, RepoStats, RevisionDiff

__all__ = [
    "FORMAT",
    "Config",
    "FsckReport",
    "GcReport",
    "RepoStats",
    "Repository",
    "RevisionDiff",
]

FORMAT: Final = "ctxstore repository 2\n"
"""The contents of a repository's ``format`` file; a different first word or version is refused."""
_FORMAT_FILE = "format"
_DB_DIR = "db"
_CAS_RETRIES = 8
_KNOWN_WALK = 256
_REMOTE_NAMES = "remote.names"


class _Moved(Exception):
    """A ref's head is not known to be an ancestor: (ref, full name, head); walk the lineage and retry."""


class Repository:
    """A local repository of conversations: an object store, refs naming their heads, and config.

    Open one with `Repository.init(path)` / `Repository.open(path)` (an LMDB store in the directory), or
    wrap any `TransactionalStore` (`Repository(MemoryStore())` for tests). Any number of processes may
    open one path at once: every ref move is a compare-and-swap in one write transaction with its objects.
    """

    def __init__(self, store: TransactionalStore, *, path: str | os.PathLike[str] | None = None,
                 clock: Callable[[], int] = _now_ms) -> None:
        self.store = store
        self._clock = clock
        self.path = None if path is None else Path(path)
        self._refs = Refs(store)
        self.config = Config(store)
        # Revision id -> parent, filled as lineages are walked: revisions are immutable, so this never
        # goes stale, and fast-forward checks after the first one cost dictionary lookups.
        self._parents: dict[ObjectId, ObjectId | None] = {}
        self._candidates: dict[str, list[str]] = {}

    # -- lifecycle -----------------------------------------------------------------------------------
    @classmethod
    def init(cls, path: str | os.PathLike[str], *, durable: bool = True, **store_options: Any) -> Repository:
        """Create a repository in directory `path` (created if needed); `RepositoryExists` if one is there."""
        root = Path(path)
        if (root / _FORMAT_FILE).exists():
            raise RepositoryExists(f"a repository already exists at {root}; open it with Repository.open")
        if root.exists() and not root.is_dir():
            raise RepositoryExists(f"{root} exists and is not a directory; choose another path")
        from ..store.lmdb import LmdbStore

        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the repository directory {root}: {exc}") from None
        store = LmdbStore(root / _DB_DIR, durable=durable, **store_options)
        try:
            # The format file comes last and by rename: a directory without it is not a repository yet,
            # so a crash during init leaves something `init` can simply redo.
            tmp = root / f".{_FORMAT_FILE}.{os.getpid()}.tmp"
            tmp.write_text(FORMAT, encoding="utf-8")
            try:
                os.link(tmp, root / _FORMAT_FILE)  # fails if another process created it meanwhile
            except FileExistsError:
                raise RepositoryExists(f"a repository was created at {root} at the same time; "
                                       "open it with Repository.open") from None
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(root)
        except BaseException:
            store.close()
            raise
        return cls(store, path=root)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, durable: bool = True, readonly: bool = False,
             **store_options: Any) -> Repository:
        """Open the repository in directory `path`; `NotARepository` if there is none."""
        root = Path(path)
        try:
            text = (root / _FORMAT_FILE).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            raise NotARepository(f"no ctxstore repository at {root}; create one with Repository.init "
                                 "(or `ctxstore init`)") from None
        except OSError as exc:
            raise StoreError(f"cannot read {root / _FORMAT_FILE}: {exc}") from None
        if text == "ctxstore repository 1\n":
            raise NotARepository(f"{root} holds repository format 1, whose revisions store their sequence "
                                 "tree's spine as nodes; this ctxstore reads format 2: export the history "
                                 "with the ctxstore that made it and import it here")
        if text != FORMAT:
            raise NotARepository(f"{root} holds an unknown repository format {text.strip()!r}; "
                                 "use a ctxstore version that knows it")
        from ..store.lmdb import LmdbStore

        return cls(LmdbStore(root / _DB_DIR, durable=durable, readonly=readonly, **store_options), path=root)

    @classmethod
    def memory(cls) -> Repository:
        """A repository held in memory (for tests and examples)."""
        return cls(MemoryStore())

    def close(self) -> None:
        """Release the store; the repository cannot be used afterwards."""
        self.store.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Repository {self.path or 'in memory'}>"

    # -- refs ----------------------------------------------------------------------------------------
    def ref_name(self, ref: str) -> str:
        """The full name `ref` stands for (an existing ref if one matches, else a head); validates it."""
        return self._refs.resolve(ref)

    def head(self, ref: str) -> str | None:
        """The revision a ref points at (hex), or None for an unborn ref."""
        oid = self._refs.get(ref)
        return None if oid is None else to_hex(oid)

    def refs(self, prefix: str | None = None) -> dict[str, str]:
        """Full ref names to revision ids (hex), sorted; only names starting with `prefix` when given.

        A short prefix such as ``support/`` is taken under ``refs/heads/``.
        """
        if prefix is not None and not prefix.startswith("refs/"):
            prefix = HEADS + prefix
        return {name: to_hex(oid) for name, oid in self._refs.items(prefix).items()}

    def delete_ref(self, ref: str, *, message: str = "") -> str:
        """Delete a ref (its reflog stays, so gc keeps what it reached); returns its full name."""
        return self._refs.delete(ref, message=message)

    def rename_ref(self, old: str, new: str) -> str:
        """Rename a ref with its reflog; the new name must be free. Returns the new full name."""
        return self._refs.rename(old, new)

    def set_ref(self, ref: str, revision: str, *, create_only: bool = False, message: str = "") -> str:
        """Point a ref at a stored revision (a fork, or a reset); `create_only` refuses an existing ref."""
        oid = from_hex(self.resolve(revision))
        old = None if create_only else ANY
        return self._refs.set_if_equals(ref, old, oid, message=message or "set")

    def reflog(self, ref: str, limit: int | None = None) -> list[ReflogEntry]:
        """A ref's moves, newest first; also for a deleted ref."""
        return self._refs.reflog(ref, limit)

    def resolve(self, spec: str) -> str:
        """The revision id (hex) a ref name, full revision id or unique id prefix names.

        A ``~N`` suffix walks N parents back (``main~2``). Unknown: `UnknownRevision`.
        """
        if not isinstance(spec, str) or not spec:
            raise InvalidInput(f"not a ref or revision: {spec!r}")
        base, sep, back = spec.partition("~")
        steps = 0
        if sep:
            if back and not back.isdigit():
                raise InvalidInput(f"{spec!r}: what follows '~' must be a number of parents")
            steps = int(back or 1)
        oid = self._resolve_base(base)
        for _step in range(steps):
            parent = self._parent(oid)
            if parent is None:
                raise UnknownRevision(f"{spec!r}: {base} has fewer than {steps} ancestors")
            oid = parent
        return to_hex(oid)

    def _resolve_base(self, spec: str) -> ObjectId:
        if _is_hex(spec) and len(spec) == 64:
            oid = from_hex(spec)
            if self.store.has(oid):
                self._revision(oid)
                return oid
        try:
            found = self._refs.get(spec)
        except CtxStoreError:
            found = None
        if found is not None:
            return found
        if _is_hex(spec) and 4 <= len(spec) < 64:
            matches = [oid for oid in self.store if to_hex(oid).startswith(spec.lower())]
            revisions = [oid for oid in matches if isinstance(self._object(oid), Revision)]
            if len(revisions) == 1:
                return revisions[0]
            if len(revisions) > 1:
                raise UnknownRevision(f"revision prefix {spec!r} is ambiguous ({len(revisions)} revisions "
                                      "match); give more characters")
        raise UnknownRevision(f"no ref or revision named {spec!r}; list refs with `ctxstore refs`")

    # -- histories -----------------------------------------------------------------------------------
    def history(self, ref_or_revision: str) -> MessageHistory:
        """The conversation at a ref (or revision), read lazily; an unborn ref gives an empty history."""
        try:
            oid = self._refs.get(ref_or_revision)
        except CtxStoreError:
            oid = None  # not a valid ref name: maybe a revision id
        if oid is None:
            if _is_hex(ref_or_revision) and len(ref_or_revision) >= 4:
                try:
                    oid = from_hex(self.resolve(ref_or_revision))
                except UnknownRevision:
                    oid = None
            if oid is None:
                self._refs.resolve(ref_or_revision)  # an invalid name raises InvalidRefName here
                return MessageHistory(source=self.store)
        return MessageHistory(source=self.store, head=to_hex(oid))

    def commit(self, ref: str, history: MessageHistory, *, force: bool = False, message: str = "") -> str:
        """Write the objects `history` made that the store lacks and move `ref` to its head, atomically.

        Fast-forward only: the ref's current head must be in the history's lineage (an unborn ref takes
        any history). Otherwise `NonFastForward` names both heads and nothing is written; `rebase` onto
        the ref and commit again, or pass ``force=True`` (the old head stays in the reflog).
        Returns the full ref name.
        """
        return self.commit_many({ref: history}, force=force, message=message)[0]

    def commit_many(self, updates: Mapping[str, MessageHistory], *, force: bool = False,
                    message: str = "") -> list[str]:
        """`commit` several refs in one transaction: every ref moves, or none does. Returns full names."""
        if not updates:
            raise InvalidInput("no refs to commit")
        heads = {ref: from_hex(h.revision_id) for ref, h in updates.items()}
        pending: dict[ObjectId, bytes] = {}
        foreign: set[ObjectId] = set()
        for h, head in zip(updates.values(), heads.values(), strict=True):
            made = h.workspace.pending()
            pending.update(made)
            rev = h.workspace.cached(head)
            if isinstance(rev, Revision):
                self._parents.setdefault(head, rev.parent)  # spares the fast-forward check a parse
            if h.workspace.source is not self.store:
                # Built over another source: what its new objects point at may be missing here.
                foreign.update(oid for oid, _ in made)
        moves: dict[str, tuple[ObjectId | None, ObjectId]] = {}
        walked: dict[str, ObjectId] = {}  # ref -> a head the lineage walk found in that ref's history
        for _attempt in range(_CAS_RETRIES):
            try:
                # The common case costs one write transaction: the ref is unborn, or its head is
                # reached by walking revisions this process already knows, so nothing is read meanwhile.
                with self.store.transaction(write=True) as txn:
                    moves = {}
                    for ref, head in heads.items():
                        full = self._resolve_in(txn, ref)
                        if full in moves:
                            raise InvalidInput(f"ref {full} is committed twice in one batch ({ref!r})")
                        current = txn.get_ref(full)
                        if not (force or current is None or current == head or walked.get(ref) == current
                                or self._known_descent(head, current, pending)):
                            raise _Moved(ref, full, current)
                        moves[full] = (current, head)
                    self._write_objects(txn, pending, foreign)
                    apply_updates(txn, moves, message=message or "commit")
            except _Moved as moved:
                ref, full, current = moved.args
                # Walk the lineage outside the writer's lock, reading the store as needed.
                if not self._descends(updates[ref], current):
                    base = self._base_of(updates[ref])
                    raise NonFastForward(
                        f"ref {full} moved to {_short(current)} since you loaded it at {_short(base)}; "
                        "rebase onto it or commit with force",
                        ref=full, current=to_hex(current), expected=None if base is None else to_hex(base),
                    ) from None
                walked[ref] = current  # the next try accepts this head without walking again
                continue
            break
        else:
            raise StoreError(f"refs {', '.join(heads)} kept moving while committing ({_CAS_RETRIES} tries); "
                             "try again")
        for h in updates.values():
            if h.workspace.source is self.store:
                h.workspace.forget(pending)
        return list(moves)

    def _resolve_in(self, txn: Transaction, ref: str) -> str:
        """The full name of `ref` inside a transaction (candidate lists are cached: validating is costly)."""
        candidates = self._candidates.get(ref)
        if candidates is None:
            candidates = ref_candidates(ref)
            if not candidates:
                default_ref_name(ref)  # raises InvalidRefName with the reason
            if len(self._candidates) > 4096:
                self._candidates.clear()
            self._candidates[ref] = candidates
        for name in candidates:
            if txn.get_ref(name) is not None:
                return name
        return candidates[0]

    def _known_descent(self, head: ObjectId, ancestor: ObjectId, pending: Mapping[ObjectId, bytes]) -> bool:
        """Whether `ancestor` is in head's lineage, judged only from pending objects and cached parents.

        False means "not known", not "no": the caller then walks the lineage outside the transaction.
        """
        oid: ObjectId | None = head
        for _step in range(_KNOWN_WALK):
            if oid is None:
                return False
            if oid == ancestor:
                return True
            if oid in self._parents:
                oid = self._parents[oid]
                continue
            data = pending.get(oid)
            if data is None:
                return False
            rev = parse_object(data, trusted=True)
            if not isinstance(rev, Revision):
                return False
            self._parents[oid] = rev.parent
            oid = rev.parent
        return False

    def _write_objects(self, txn: Transaction, pending: dict[ObjectId, bytes],
                       foreign: set[ObjectId]) -> None:
        """Write the pending objects; one made over another source must not point at an absent object.

        A history loaded from this store only points at objects it read here or made itself, so only
        objects made over another source need their references checked (and those the store holds are
        not rewritten). The store skips, and re-stamps, any other object it already holds, so nothing
        made here is looked up beforehand: the insert is the only search.
        """
        held: set[ObjectId] = set()
        for oid in foreign:
            data = pending.get(oid)
            if data is None:
                continue
            if txn.has(oid):
                held.add(oid)  # a foreign history may carry much the store has: leave those alone
                continue
            for ref in references(parse_object(data, trusted=True)):
                if ref not in pending and not txn.has(ref):
                    raise MissingObject(
                        f"object {to_hex(oid)} refers to {to_hex(ref)}, which neither the history nor the "
                        "store holds; load the history from this repository (or import it whole) and retry")
        txn.write_objects((oid, data) for oid, data in pending.items() if oid not in held)

    def rebase(self, history: MessageHistory, onto: str) -> MessageHistory:
        """Replay `history`'s own revisions (their recorded operations) on top of ref `onto`'s head."""
        target = self.history(onto)
        return history.rebase_onto(target)

    def append(self, ref: str, entries: Iterable[Any], *, message: str = "", retries: int = 100) -> str:
        """Append entries to a ref as one revision and commit, rebasing when another writer got there first.

        Returns the new head revision id.
        """
        listed = list(entries)
        history = self.history(ref).extend(listed)
        for _attempt in range(retries):
            try:
                self.commit(ref, history, message=message or "append")
                return history.revision_id
            except NonFastForward:
                history = self.rebase(history, onto=ref)
        raise StoreError(f"ref {ref} kept moving; gave up after {retries} rebases")

    # -- lineage -------------------------------------------------------------------------------------
    def _object(self, oid: ObjectId) -> Object:
        return parse_object(self.store.get(oid), trusted=True)

    def _revision(self, oid: ObjectId) -> Revision:
        obj = self._object(oid)
        if not isinstance(obj, Revision):
            raise UnknownRevision(f"object {to_hex(oid)} is a {type(obj).__name__.lower()}, not a revision")
        return obj

    def _parent(self, oid: ObjectId, history: MessageHistory | None = None) -> ObjectId | None:
        if oid in self._parents:
            return self._parents[oid]
        parent = history.workspace.parent(oid) if history is not None else revision_header(self.store.get(oid))[0]
        self._parents[oid] = parent
        return parent

    def _descends(self, history: MessageHistory, ancestor: ObjectId) -> bool:
        """Whether `ancestor` is in the history's lineage (the history's head included)."""
        oid: ObjectId | None = from_hex(history.revision_id)
        while oid is not None:
            if oid == ancestor:
                return True
            oid = self._parent(oid, history)
        return False

    def _base_of(self, history: MessageHistory) -> ObjectId | None:
        """The newest revision of the lineage that the store already holds: where the history was loaded."""
        made = {oid for oid, _ in history.workspace.pending()}
        oid: ObjectId | None = from_hex(history.revision_id)
        while oid is not None:
            if oid not in made and self.store.has(oid):
                return oid
            oid = self._parent(oid, history)
        return None

    # -- remotes -------------------------------------------------------------------------------------
    def remote_add(self, name: str, url: str) -> None:
        """Record a remote (`InvalidInput` if the name is taken or unusable)."""
        _check_remote_name(name)
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"remote {name!r} needs a non-empty URL")
        with self.store.transaction(write=True) as txn:
            names = _names(txn.get_config(_REMOTE_NAMES))
            if name in names:
                raise InvalidInput(f"remote {name!r} already exists; remove it first or choose another name")
            txn.set_config(_REMOTE_NAMES, json.dumps(sorted([*names, name])).encode())
            txn.set_config(f"remote.{name}.url", url.encode("utf-8"))

    def remote_remove(self, name: str) -> None:
        """Forget a remote (its remote-tracking refs stay until deleted)."""
        with self.store.transaction(write=True) as txn:
            names = _names(txn.get_config(_REMOTE_NAMES))
            if name not in names:
                raise UnknownRef(f"no remote named {name!r}; list them with `ctxstore remote`")
            txn.set_config(_REMOTE_NAMES, json.dumps([n for n in names if n != name]).encode())
            txn.set_config(f"remote.{name}.url", None)

    def remotes(self) -> dict[str, str]:
        """Remote names to URLs, sorted by name."""
        with self.store.transaction() as txn:
            out = {}
            for name in _names(txn.get_config(_REMOTE_NAMES)):
                url = txn.get_config(f"remote.{name}.url")
                if url is not None:
                    out[name] = url.decode("utf-8")
            return out

    # -- diff ----------------------------------------------------------------------------------------
    # -- packs: what `ctxstore.sync` moves between repositories ----------------------------------------
    def _revisions(self, specs: Iterable[str] | str) -> list[ObjectId]:
        listed = [specs] if isinstance(specs, str) else list(specs)
        return [from_hex(self.resolve(spec)) for spec in listed]

    def pack(self, wants: Iterable[str] | str, haves: Iterable[str] | str = ()) -> Iterator[bytes]:
        """The pack of every object reachable from `wants` and not from `haves` (refs or revision ids)."""
        return plan.pack(self.store, self._revisions(wants), self._revisions(haves))

    def changes_since(self, ref_or_revision: str, base: str | None = None) -> Iterator[bytes]:
        """What `ref_or_revision` adds to `base`, as a pack (the whole lineage when base is None)."""
        return self.pack(ref_or_revision, () if base is None else base)

    def unpack(self, stream: Any, ref_updates: Mapping[str, Any] | None = None) -> Any:
        """Receive a pack (a binary file object or an iterable of bytes chunks): all of it or nothing."""
        return receive.unpack(self.store, stream, ref_updates)

    def diff(self, a: str, b: str) -> RevisionDiff:
        """Entries added, removed and moved from `a` to `b` (refs or revisions), skipping equal subtrees."""
        ra, rb = from_hex(self.resolve(a)), from_hex(self.resolve(b))
        root_a, root_b = self._revision(ra).seq, self._revision(rb).seq
        nodes: dict[ObjectId, SeqNode] = {}

        def get(oid: ObjectId) -> SeqNode:
            node = nodes.get(oid)
            if node is None:
                obj = self._object(oid)
                if not isinstance(obj, SeqNode):
                    raise StoreError(f"object {to_hex(oid)} should be a seq node; run `ctxstore fsck`")
                node = nodes[oid] = obj
            return node

        out = RevisionDiff(to_hex(ra), to_hex(rb))
        if root_a == root_b:
            return out
        d = seq.diff([root_a], [root_b], get)
        ids_a = _ordered_ids(root_a, set(d.a_nodes), root_a[0] != root_b[0], get)
        ids_b = _ordered_ids(root_b, set(d.b_nodes), root_a[0] != root_b[0], get)
        set_a, set_b = set(ids_a), set(ids_b)
        out.added = [i for i in ids_b if i not in set_a]
        out.removed = [i for i in ids_a if i not in set_b]
        common_a = [i for i in ids_a if i in set_b]
        common_b = [i for i in ids_b if i in set_a]
        kept: set[str] = set()
        matcher = difflib.SequenceMatcher(None, common_a, common_b, autojunk=False)
        for block in matcher.get_matching_blocks():
            kept.update(common_b[block.b:block.b + block.size])
        out.moved = [i for i in common_b if i not in kept]
        return out

    # -- integrity -----------------------------------------------------------------------------------
    def _roots(self, txn: Transaction) -> tuple[dict[str, ObjectId], set[ObjectId], int]:
        """Ref heads, every object a ref or reflog entry names, and the number of reflog entries."""
        heads = txn.refs("refs/")
        roots = set(heads.values())
        count = 0
        for name in txn.reflog_names():
            for record in txn.reflog(name):
                entry = ReflogEntry.decode(record)
                count += 1
                roots.update(o for o in (entry.old, entry.new) if o is not None)
        return heads, roots, count

    def _mark(self, roots: Iterable[ObjectId], marked: set[ObjectId], get: Any,
              missing: dict[ObjectId, ObjectId | None] | None = None) -> None:
        """Add everything reachable from `roots` to `marked`; absent ones go to `missing` with a referrer."""
        stack: list[tuple[ObjectId, ObjectId | None]] = [(r, None) for r in roots if r not in marked]
        while stack:
            oid, referrer = stack.pop()
            if oid in marked:
                continue
            try:
                data = get(oid)
            except MissingObject:
                data = None
            except CtxStoreError:
                marked.add(oid)  # present but unreadable: fsck's object pass reports it
                continue
            if data is None:
                if missing is not None:
                    missing.setdefault(oid, referrer)
                continue
            marked.add(oid)
            try:
                obj = parse_object(data, trusted=True)
            except CtxStoreError:
                continue  # fsck's own pass reports the damage
            stack.extend((ref, oid) for ref in references(obj) if ref not in marked)

    def fsck(self) -> FsckReport:
        """Check every object (hash, canonical form, shape) and that refs and reflogs reach only held ones."""
        report = FsckReport()
        for oid in self.store:
            report.objects += 1
            try:
                data = self.store.get(oid)
            except CtxStoreError as exc:
                report.problems.append(f"object {to_hex(oid)} cannot be read: {exc}")
                continue
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
        with self.store.transaction() as txn:
            heads, roots, report.reflog_entries = self._roots(txn)
            report.refs = len(heads)
            marked: set[ObjectId] = set()
            missing: dict[ObjectId, ObjectId | None] = {}
            head_set = set(heads.values())
            self._mark(roots, marked, lambda o: txn.get(o) if txn.has(o) else None, missing)
        for name, oid in heads.items():
            if oid in missing:
                report.problems.append(f"ref {name} points at {to_hex(oid)}, which is missing")
        for oid, referrer in missing.items():
            if referrer is not None:
                report.problems.append(f"object {to_hex(oid)} is missing (referenced by {to_hex(referrer)})")
            elif oid not in head_set:
                report.problems.append(f"object {to_hex(oid)} named by a reflog entry is missing")
        report.reachable = len(marked)
        report.unreachable = max(0, report.objects - report.reachable)
        return report

    def gc(self, grace: float = 14 * 24 * 3600.0) -> GcReport:
        """Delete objects unreachable from every ref and reflog entry and written more than `grace` s ago.

        Reachability is marked from a read snapshot, then re-checked inside the deleting write
        transaction from the refs and reflogs as they are then, so a ref moved meanwhile keeps its objects.
        """
        if grace < 0:
            raise InvalidInput(f"grace must be zero or more seconds, not {grace}")
        cutoff = self._clock() - int(grace * 1000)
        marked: set[ObjectId] = set()
        with self.store.transaction() as txn:
            _heads, roots, _count = self._roots(txn)
            self._mark(roots, marked, lambda o: txn.get(o) if txn.has(o) else None)
        report = GcReport()
        sizes: dict[ObjectId, int] = {}
        for oid in self.store:
            if oid not in marked:
                written = self.store.written_at(oid)
                if written is not None and written <= cutoff:
                    sizes[oid] = _stored_size(self.store, oid)
                else:
                    report.kept_young += 1
        candidates = list(sizes)
        with self.store.transaction(write=True) as txn:
            _heads, roots, _count = self._roots(txn)
            self._mark(roots, marked, lambda o: txn.get(o) if txn.has(o) else None)
            doomed = []
            for oid in candidates:
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

    def stats(self) -> RepoStats:
        """Object counts and sizes, bytes on disk, and what every ref's view would cost without sharing."""
        base = self.store.stats()
        heads = self._refs.items()
        entry_sizes: dict[ObjectId, int] = {}
        node_sizes: dict[ObjectId, int] = {}

        def leaf_size(items: list[list[Any]]) -> int:
            total = 0
            for _entry_id, entry_oid in items:
                if entry_oid is None:
                    continue
                size = entry_sizes.get(entry_oid)
                if size is None:
                    size = entry_sizes[entry_oid] = _entry_size(self.store, ObjectId(entry_oid))
                total += size
            return total

        def tree_size(oid: ObjectId) -> int:
            known = node_sizes.get(oid)
            if known is not None:
                return known
            node = self._object(oid)
            assert isinstance(node, SeqNode)
            if node.level == 0:
                total = leaf_size(node.items)
            else:
                total = sum(tree_size(ObjectId(child)) for child, _ in node.items)
            node_sizes[oid] = total
            return total

        def spine_size(spine: seq.Spine) -> int:
            return sum(tree_size(oid) for oid, _ in seq.subtrees(spine)) + leaf_size(spine[0])

        logical = 0
        for oid in heads.values():
            try:
                logical += spine_size(self._revision(oid).seq)
            except CtxStoreError:
                continue
        return RepoStats(objects=base.objects, object_bytes=base.object_bytes, stored_bytes=base.stored_bytes,
                         disk_bytes=_disk_bytes(self.path, base.file_bytes), refs=len(heads),
                         logical_bytes=logical)

    def iter_revisions(self, ref_or_revision: str,
                       limit: int | None = None) -> Iterator[tuple[str, Revision]]:
        """The revisions from a ref's head back to the root, newest first: (id, revision)."""
        oid: ObjectId | None = from_hex(self.resolve(ref_or_revision))
        n = 0
        while oid is not None and (limit is None or n < limit):
            rev = self._revision(oid)
            self._parents[oid] = rev.parent
            yield to_hex(oid), rev
            oid = rev.parent
            n += 1


def _entry_size(store: TransactionalStore, oid: ObjectId) -> int:
    """An entry's canonical bytes plus those of the blobs it references."""
    try:
        data = store.get(oid)
    except MissingObject:
        return 0
    total = len(data)
    obj = parse_object(data, trusted=True)
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


def _ordered_ids(spine: seq.Spine, changed: set[ObjectId], leaf: bool, get: Any) -> list[str]:
    """Entry ids under the changed nodes of a tree, then (if `leaf`) its spine's leaf, in sequence order
    (equal subtrees not read)."""
    out: list[str] = []
    for top, _ in seq.subtrees(spine):
        stack = [top] if top in changed else []
        while stack:
            oid = stack.pop()
            node = get(oid)
            if node.level == 0:
                out.extend(entry_id for entry_id, _ in node.items)
            else:
                stack.extend(ObjectId(c) for c, _ in reversed(node.items) if ObjectId(c) in changed)
    if leaf:
        out.extend(entry_id for entry_id, _ in spine[0])
    return out


def _disk_bytes(path: Path | None, fallback: int) -> int:
    if path is None:
        return fallback
    data = path / _DB_DIR / "data.mdb"
    try:
        # Allocated blocks, not the sparse apparent size of a grown map.
        return min(os.stat(data).st_blocks * 512, os.path.getsize(data))
    except OSError:
        return fallback


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def _names(raw: bytes | None) -> list[str]:
    if raw is None:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        raise StoreError("the remote list in the repository config is damaged; fix it with "
                         "`ctxstore config`") from None
    return [n for n in value if isinstance(n, str)]


def _check_remote_name(name: str) -> None:
    if not isinstance(name, str) or not name or any(c in name for c in "/ \t\n.\\:") or name.startswith("-"):
        raise InvalidInput(f"invalid remote name {name!r}: use letters, digits, '-' and '_'")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
