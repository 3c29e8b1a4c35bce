"""Repository: a store, its refs and its config, with fast-forward commits, rebase, fsck, gc and diff.

A repository directory holds a ``format`` file (what makes it a repository) and the LMDB store in
``db/``. Conversations are `MessageHistory` values read lazily from the store; `commit` writes the
objects a history made that the store lacks and moves a ref, in one write transaction, only when the
move is a fast-forward. See docs/repository.md for the semantics and the concurrency guarantees.

`Repository` is the facade: every id it takes or hands out is hex (`HexId`); the modules beside it
(commit, lineage, maintenance, diff, config, receive) work on raw ids below it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Final

from ..errors import CtxStoreError, InvalidInput, NotARepository, RepositoryExists, StoreError, UnknownRevision, shown
from ..format.codec import now_ms as _now_ms
from ..history.entry import MessageHistoryEntry, read_entries
from ..history.message_history import MessageHistory
from ..history.workspace import Workspace
from ..ids import HexId, ObjectId, from_hex, hex_or_none, to_hex
from ..pack.stream import PackSource
from ..refs import ANY, HEADS, Expected, Refs
from ..store.base import TransactionalStore
from ..store.lmdb import DEFAULT_MAP_SIZE, LmdbStore
from ..store.memory import MemoryStore
from . import commit as _commit
from .config import Config
from .lineage import Lineage, revision_info
from .reports import (
    CommitResult,
    FsckReport,
    GcReport,
    ReflogEntry,
    RepoStats,
    RevisionDiff,
    RevisionInfo,
    UnpackResult,
)

# Pack planning and receiving, revision specs, diff and maintenance are imported by the methods that use
# them, so a command that needs none of them (a `fetch` with nothing new) starts without them. What the
# signatures name stays imported here: `typing.get_type_hints` resolves the annotations from this module.

__all__ = ["FORMAT", "Repository"]

FORMAT: Final = "ctxstore repository 7\n"
"""The contents of a repository's ``format`` file; a different first word or version is refused."""
_FORMAT_FILE = "format"
_DB_DIR = "db"
_WRITERS_FILE = "writers.lock"


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
        self._lineage = Lineage(store)
        # Writers that lost a race queue on a lock file beside the store (repo/commit.py).
        self._writers = None if self.path is None else _commit.WriterQueue(self.path / _WRITERS_FILE)

    # -- lifecycle -----------------------------------------------------------------------------------
    @classmethod
    def init(cls, path: str | os.PathLike[str], *, durable: bool = True,
             map_size: int = DEFAULT_MAP_SIZE) -> Repository:
        """Create a repository in directory `path` (created if needed); `RepositoryExists` if one is there."""
        root = Path(path)
        if (root / _FORMAT_FILE).exists():
            raise RepositoryExists(f"a repository already exists at {root}; open it with Repository.open")
        if root.exists() and not root.is_dir():
            raise RepositoryExists(f"{root} exists and is not a directory; choose another path")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the repository directory {root}: {exc}") from None
        store = LmdbStore(root / _DB_DIR, durable=durable, map_size=map_size)
        try:
            # The format file comes last and by rename: a directory without it is not a repository yet,
            # so a crash during init leaves something `init` can simply redo.
            tmp = root / f".{_FORMAT_FILE}.{os.getpid()}.tmp"
            try:
                tmp.write_text(FORMAT, encoding="utf-8")
                os.link(tmp, root / _FORMAT_FILE)  # fails if another process created it meanwhile
            except FileExistsError:
                raise RepositoryExists(f"a repository was created at {root} at the same time; "
                                       "open it with Repository.open") from None
            except OSError as exc:
                raise StoreError(f"cannot write {root / _FORMAT_FILE}: {exc}") from None
            finally:
                tmp.unlink(missing_ok=True)
            _fsync_dir(root)
        except BaseException:
            store.close()
            raise
        return cls(store, path=root)

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, durable: bool = True, readonly: bool = False,
             map_size: int = DEFAULT_MAP_SIZE, create: bool = False) -> Repository:
        """Open the repository in directory `path`; `NotARepository` if there is none, unless `create`:
        then one is made there (and one made by another process at the same moment is opened)."""
        if create and not readonly:
            try:
                return cls.open(path, durable=durable, map_size=map_size)
            except NotARepository:
                try:
                    return cls.init(path, durable=durable, map_size=map_size)
                except RepositoryExists:
                    pass  # another process made it between our look and our init: open theirs
        root = Path(path)
        try:
            text = (root / _FORMAT_FILE).read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            raise NotARepository(f"no ctxstore repository at {root}; create one with Repository.init "
                                 "(or `ctxstore init`)") from None
        except UnicodeDecodeError:
            text = "?"
        except OSError as exc:
            raise StoreError(f"cannot read {root / _FORMAT_FILE}: {exc}") from None
        if text != FORMAT:
            raise NotARepository(f"{root} holds an unknown repository format {shown(text.strip())}; "
                                 "use a ctxstore version that knows it")
        store = LmdbStore(root / _DB_DIR, durable=durable, readonly=readonly, map_size=map_size)
        return cls(store, path=root)

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

    def head(self, ref: str) -> HexId | None:
        """The revision a ref points at (hex), or None for an unborn ref."""
        return hex_or_none(self._refs.get(ref))

    def refs(self, prefix: str | None = None) -> dict[str, HexId]:
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
        old: Expected = None if create_only else ANY
        return self._refs.set_if_equals(ref, old, oid, message=message or "set")

    def reflog(self, ref: str, limit: int | None = None) -> list[ReflogEntry]:
        """A ref's moves, newest first, with hex ids; also for a deleted ref."""
        return [ReflogEntry(hex_or_none(r.old), hex_or_none(r.new), r.time_ms, r.message)
                for r in self._refs.reflog(ref, limit)]

    def resolve(self, spec: str) -> HexId:
        """The revision id (hex) a revision spec names: a ref, a revision id or unique prefix, then steps.

        ``main~2`` (two parents back), ``main^`` (one), ``main@{1}`` (where main pointed one move ago);
        the syntax is in `ctxstore.repo.revspec`. Unknown: `UnknownRevision`; malformed: `InvalidInput`.
        """
        from . import revspec

        return to_hex(revspec.resolve(self.store, self._refs, self._lineage, spec))

    # -- histories -----------------------------------------------------------------------------------
    def history(self, ref_or_revision: str) -> MessageHistory:
        """The conversation at a ref (or revision), read lazily; an unborn ref gives an empty history."""
        try:
            oid = self._refs.get(ref_or_revision)
        except CtxStoreError:
            oid = None  # not a valid ref name: maybe a revision id
        if oid is None:
            from . import revspec

            if revspec.is_expression(ref_or_revision):
                return MessageHistory(source=self.store, head=self.resolve(ref_or_revision))
            if _is_hex(ref_or_revision) and len(ref_or_revision) >= revspec.MIN_PREFIX:
                try:
                    oid = from_hex(self.resolve(ref_or_revision))
                except UnknownRevision:
                    oid = None
            if oid is None:
                self._refs.resolve(ref_or_revision)  # an invalid name raises InvalidRefName here
                return MessageHistory(source=self.store)
        return MessageHistory(source=self.store, head=to_hex(oid))

    def appended(self, ref_or_revision: str) -> list[MessageHistoryEntry]:
        """The entries a revision's own append added, in order (empty for any other operation).

        Reads the one revision and those entries, not its view: as cheap on a conversation of a million
        entries as on one of ten, for a writer that keeps what it needs in each revision's last entries.
        """
        oid = from_hex(self.resolve(ref_or_revision))
        operation = self._lineage.revision(oid).operation
        if operation is None or operation.get("type") != "append":
            return []
        return read_entries(Workspace(self.store), [ObjectId(bytes(o)) for o in operation["entries"]])

    def commit(self, ref: str, history: MessageHistory, *, force: bool = False, rebase: bool = False,
               message: str = "", retries: int = _commit.REBASES) -> CommitResult:
        """Write the objects `history` made that the store lacks and move `ref` to its head, atomically.

        Fast-forward only: the ref's current head must be in the history's lineage (an unborn ref takes
        any history). Otherwise `NonFastForward` names both heads and nothing is written; `rebase` onto
        the ref and commit again, pass ``rebase=True`` to have that done here until it lands, or pass
        ``force=True`` (the old head stays in the reflog). With `rebase`, `RefMoved` after `retries`
        rebases. Returns the move: ref, old head, new head (not the history's head after a rebase).
        """
        if rebase and not force:
            return _commit.commit_rebasing(self.store, self._lineage, ref, history, message=message,
                                           retries=retries, queue=self._writers)
        with _commit.turn_of(self._writers):  # plain commits take turns with rebasing ones, so none starves
            return _commit.commit_many(self.store, self._lineage, {ref: history}, force=force,
                                       message=message)[0]

    def commit_many(self, updates: Mapping[str, MessageHistory], *, force: bool = False,
                    message: str = "", set_refs: Mapping[str, str] | None = None) -> list[CommitResult]:
        """`commit` several refs in one transaction: every ref moves, or none does. Moves in the order given.

        `set_refs` points more refs, by full name, at revision ids (hex) in the same transaction, whatever
        they held, as `set_ref` does (a tag naming one of the new revisions, say); they get no result.
        """
        also: dict[str, ObjectId] = {}
        for name, revision in (set_refs or {}).items():
            if not name.startswith("refs/"):
                raise InvalidInput(f"set_refs takes full ref names (refs/...), not {shown(name)}")
            also[name] = from_hex(revision)
        with _commit.turn_of(self._writers):
            return _commit.commit_many(self.store, self._lineage, updates, force=force, message=message,
                                       set_refs=also)

    def rebase(self, history: MessageHistory, onto: str) -> MessageHistory:
        """Replay `history`'s own revisions (their recorded operations) on top of ref `onto`'s head."""
        return history.rebase_onto(self.history(onto))

    def append(self, ref: str, entries: Iterable[object], *, message: str = "",
               retries: int = _commit.REBASES) -> CommitResult:
        """Append entries (messages or entry inputs) to a ref as one revision and commit it, rebasing
        when another writer got there first (`RefMoved` after `retries` rebases)."""
        history = self.history(ref).extend(list(entries))
        return _commit.commit_rebasing(self.store, self._lineage, ref, history,
                                       message=message or "append", retries=retries, queue=self._writers)

    def iter_revisions(self, ref_or_revision: str, limit: int | None = None) -> Iterator[RevisionInfo]:
        """The revisions from a ref's head back to the root, newest first, with hex ids."""
        oid: ObjectId | None = from_hex(self.resolve(ref_or_revision))
        n = 0
        while oid is not None and (limit is None or n < limit):
            rev = self._lineage.revision(oid)
            yield revision_info(oid, rev)
            oid = rev.parent
            n += 1

    def diff(self, a: str, b: str) -> RevisionDiff:
        """Entries added, removed and moved from `a` to `b` (refs or revisions), skipping equal subtrees."""
        from .diff import diff as _diff

        return _diff(self._lineage, from_hex(self.resolve(a)), from_hex(self.resolve(b)))

    # -- remotes -------------------------------------------------------------------------------------
    def remote_add(self, name: str, url: str) -> None:
        """Record a remote (`InvalidInput` if the name is taken or unusable)."""
        self.config.remote_add(name, url)

    def remote_remove(self, name: str) -> None:
        """Forget a remote (its remote-tracking refs stay until deleted)."""
        self.config.remote_remove(name)

    def remotes(self) -> dict[str, str]:
        """Remote names to URLs, sorted by name."""
        return self.config.remotes()

    # -- packs: what `ctxstore.sync` moves between repositories ----------------------------------------
    def _revisions(self, specs: Iterable[str] | str) -> list[ObjectId]:
        listed = [specs] if isinstance(specs, str) else list(specs)
        return [from_hex(self.resolve(spec)) for spec in listed]

    def pack(self, wants: Iterable[str] | str, haves: Iterable[str] | str = ()) -> Iterator[bytes]:
        """The pack (bytes chunks) of every object reachable from `wants` and not from `haves`."""
        from ..pack import plan

        return plan.pack(self.store, self._revisions(wants), self._revisions(haves))

    def changes_since(self, ref_or_revision: str, base: str | None = None) -> Iterator[bytes]:
        """What `ref_or_revision` adds to `base`, as a pack (the whole lineage when base is None).

        `MessageHistory.changes_since` answers the same question as a dict delta inside one process;
        this is the form that travels: `unpack` it into another repository that holds `base`.
        """
        return self.pack(ref_or_revision, () if base is None else base)

    def unpack(self, stream: PackSource,
               ref_updates: Mapping[str, tuple[str | None, str | None]] | None = None) -> UnpackResult:
        """Receive a pack (a binary file object or an iterable of bytes chunks): all of it or nothing.

        `ref_updates` moves full-named refs with it, each a compare-and-swap ``name: (old, new)`` of hex
        ids (old None: the ref must not exist; new None: delete it), e.g.
        ``{"refs/heads/main": (None, "ab12...")}``. A ref that holds something else is `RefMoved`.
        """
        from . import receive

        raw: dict[str, tuple[Expected, ObjectId | None]] = {}
        for name, change in (ref_updates or {}).items():
            if not (isinstance(change, tuple) and len(change) == 2):
                raise InvalidInput(f"the update of ref {shown(name)} must be (old, new) hex ids or None, "
                                   f"not {shown(change)}")
            old, new = change
            raw[name] = (None if old is None else from_hex(old), None if new is None else from_hex(new))
        return receive.unpack(self.store, stream, raw)

    # -- integrity -----------------------------------------------------------------------------------
    def fsck(self, progress: Callable[[int, int], None] | None = None, *, repair: bool = False) -> FsckReport:
        """Check every object (hash, canonical form, shape) and that refs and reflogs reach only held ones.

        `progress(done, total)`, when given, is called as objects are checked. With `repair`, reflog
        records that cannot be read are dropped first (the rest kept); `report.repaired` says what went.
        """
        from . import maintenance

        return maintenance.fsck(self.store, progress, repair=repair)

    def expire_reflogs(self, ref: str | None = None, *, older_than: float | None = None) -> dict[str, int]:
        """Drop reflog records older than `older_than` seconds (None: all of them) and damaged ones, of
        `ref` (a deleted ref's too, by full name) or of every ref; returns the records dropped by ref.

        What only those records reached is then unreachable: ``gc(grace=0)`` deletes it for good.
        """
        if older_than is not None and (not isinstance(older_than, int | float) or not older_than >= 0):
            raise InvalidInput(f"older_than must be zero or more seconds, not {shown(older_than)}")
        before = None if older_than is None else self._clock() - int(older_than * 1000)
        return self._refs.expire_reflogs(ref, before_ms=None if before is None else max(before, 0))

    def gc(self, grace: float = 14 * 24 * 3600.0) -> GcReport:
        """Delete objects unreachable from every ref and reflog entry and written more than `grace` s ago.

        Reachability is marked from a read snapshot, then re-checked inside the deleting write
        transaction from the refs and reflogs as they are then, so a ref moved meanwhile keeps its objects.
        """
        from . import maintenance

        return maintenance.gc(self.store, grace, self._clock())

    def stats(self, progress: Callable[[int, int], None] | None = None) -> RepoStats:
        """Object counts and sizes, bytes on disk, and what every ref's view would cost without sharing.

        `progress(done, total)`, when given, is called as refs are measured.
        """
        from . import maintenance

        files = [Path(f) for f in self.store.files()] if isinstance(self.store, LmdbStore) else None
        return maintenance.stats(self.store, self._lineage, files, progress)


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


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
