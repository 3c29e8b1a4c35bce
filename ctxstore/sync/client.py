"""fetch, pull, push and clone: moving revisions between a repository and its remotes.

Each function opens one connection to the remote (see `sync.transport`), reads its advertisement, and
sends or asks for only what the other side lacks. Refs move by compare-and-swap in the same
transaction as the objects they need, so an interrupted or refused sync leaves both sides as they were.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InvalidInput, NonFastForward, RemoteError, UnknownRef, shown
from ..history.message_history import MessageHistory
from ..ids import HexId, ObjectId, from_hex, to_hex
from ..pack.stream import HEADER_MAX, PackSource, declared_count
from ..refs import ANY, HEADS, REMOTES, TAGS, Refs, check_ref_name
from ..repo.config import check_remote_name
from ..repo.reports import UnpackResult
from ..repo.repository import Repository
from ..report import json_fields
from .protocol import ByteReader, RefUpdate
from .transport import Transport, open_transport

# Pack planning and receiving (a pull's or push's ancestry checks and packs) and shutil are imported
# where they are used: a fetch with nothing new needs none of them.

__all__ = [
    "WORKDIR_REPOSITORY",
    "FetchResult",
    "Progress",
    "PullResult",
    "PushResult",
    "clone",
    "fetch",
    "pull",
    "pull_all",
    "push",
    "remote_url",
]

Progress = Callable[[str, int, int], None]
"""Called as ``progress(stage, objects, bytes)`` while a pack moves (for a terminal's progress line).

`stage` is ``receiving`` or ``sending`` while the pack moves (every 64 KiB), then ``received`` or
``sent`` once; `objects` is the pack's object count (its header says it: the total to expect, 0 until
the header has passed) and `bytes` the pack bytes moved so far.
"""

WORKDIR_REPOSITORY = ".ctxstore"
"""The repository directory inside a working directory: a remote path naming the working directory
(one holding it) stands for it."""

_PROGRESS_STEP = 1 << 16


@dataclass(frozen=True)
class FetchResult:
    """What a fetch did: the refs it moved (full name: new revision, None: deleted) and what it received."""

    remote: str
    updated: dict[str, HexId | None] = field(default_factory=dict)
    objects: int = 0
    new_objects: int = 0
    bytes: int = 0
    round_trips: int = 1

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self)


@dataclass(frozen=True)
class PullResult:
    """What a pull did to the local ref: created, fast-forward, rebase or up-to-date (heads before, after)."""

    ref: str
    old: HexId | None
    new: HexId | None
    how: str
    fetch: FetchResult

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self)


@dataclass(frozen=True)
class PushResult:
    """What a push moved on the remote (full ref name to new revision) and how much it sent."""

    remote: str
    updated: dict[str, HexId | None] = field(default_factory=dict)
    objects: int = 0
    bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        return json_fields(self)


class _Meter:
    """Counts the bytes of a pack as they pass, reporting progress every 64 KiB with the pack's object
    count once its header has passed."""

    def __init__(self, progress: Progress | None, stage: str) -> None:
        self.bytes = 0
        self.objects = 0
        self._progress = progress
        self._stage = stage
        self._head = b""

    def count(self, data: bytes) -> bytes:
        before = self.bytes // _PROGRESS_STEP
        self.bytes += len(data)
        if self._progress is not None:
            if len(self._head) < HEADER_MAX:
                self._head += data[:HEADER_MAX]
                self.objects = declared_count(self._head)
            if self.bytes // _PROGRESS_STEP != before or self.bytes == len(data):
                self._progress(self._stage, self.objects, self.bytes)
        return data

    def chunks(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            yield self.count(chunk)

    def source(self, source: PackSource) -> PackSource:
        """`source`, counted as it is read; a file stays a file, so the pack is read from it in place."""
        if isinstance(source, bytes | bytearray | memoryview):
            return self.chunks([bytes(source)])
        if isinstance(source, ByteReader):
            return _MeteredFile(source, self)
        return self.chunks(source)


class _MeteredFile:
    """A binary file whose reads a `_Meter` counts."""

    def __init__(self, file: ByteReader, meter: _Meter) -> None:
        self._file = file
        self._meter = meter

    def read(self, size: int = -1, /) -> bytes:
        return self._meter.count(self._file.read(size))


@contextlib.contextmanager
def _connect(repo: Repository, remote: str, token: str | None,
             transport: Transport | None) -> Iterator[Transport]:
    if transport is not None:
        yield transport
        return
    urls = repo.remotes()
    if remote not in urls:
        raise UnknownRef(f"no remote named {shown(remote)}; add it with `ctxstore remote add {remote} URL`")
    opened = open_transport(urls[remote], token=token)
    try:
        yield opened
    finally:
        opened.close()


def _raw_refs(refs: Mapping[str, HexId]) -> dict[str, ObjectId]:
    return {name: from_hex(oid) for name, oid in refs.items()}


def _short(oid: HexId | None) -> str:
    return "nothing" if oid is None else oid[:12]


def fetch(repo: Repository, remote: str = "origin", *, token: str | None = None,
          transport: Transport | None = None, progress: Progress | None = None) -> FetchResult:
    """Bring the remote's heads into ``refs/remotes/<remote>/*``, receiving only what is new.

    The remote's tags that this repository lacks are created under ``refs/tags/`` (a local tag of the
    same name is left as it is). With nothing new this is one round trip and no pack. Tracking refs of
    heads the remote no longer has are deleted. `transport` overrides the remote's URL (for tests and
    embedding). A concurrent fetch that moved a tracking ref first raises `RefMoved`: fetch again.
    """
    check_remote_name(remote)
    store = repo.store
    with _connect(repo, remote, token, transport) as conn:
        theirs = _raw_refs(conn.advertise().refs)
        prefix = f"{REMOTES}{remote}/"
        wanted = {prefix + name[len(HEADS):]: oid for name, oid in theirs.items() if name.startswith(HEADS)}
        with store.transaction() as txn:
            current = txn.refs(prefix)
            haves = sorted({oid for name, oid in txn.refs("refs/").items()
                            if name.startswith((HEADS, REMOTES))})
            local_tags = txn.refs(TAGS)
        updates: dict[str, tuple[ObjectId | None, ObjectId | None]] = {
            name: (current.get(name), oid) for name, oid in wanted.items() if current.get(name) != oid}
        updates.update({name: (oid, None) for name, oid in current.items() if name not in wanted})
        # Tags are shared names: the remote's tags this repository lacks are created, as git's fetch
        # does; a local tag of the same name is never moved (delete it to take the remote's).
        updates.update({name: (None, oid) for name, oid in theirs.items()
                        if name.startswith(TAGS) and name not in local_tags})
        wants = sorted({new for _, new in updates.values() if new is not None and not store.has(new)})
        message = f"fetch {remote}"
        if wants:
            from ..repo.receive import unpack

            meter = _Meter(progress, "receiving")

            def receive(source: PackSource) -> UnpackResult:
                return unpack(store, meter.source(source), updates, message=message)

            result = conn.fetch([to_hex(w) for w in wants], [to_hex(h) for h in haves], receive)
            if result is None:
                raise RemoteError(f"{conn.url} advertised revisions it then did not send; fetch again")
            if progress is not None:
                progress("received", meter.objects or result.objects, meter.bytes)
            return FetchResult(remote, _hexes(updates), result.objects, result.new_objects, meter.bytes, 2)
        if updates:
            Refs(store).set_many_if_equals(updates, message=message)
        return FetchResult(remote, _hexes(updates))


def _hexes(updates: Mapping[str, tuple[object, ObjectId | None]]) -> dict[str, HexId | None]:
    return {name: None if new is None else to_hex(new) for name, (_, new) in updates.items()}


def pull(repo: Repository, remote: str = "origin", ref: str = "main", *, rebase: bool = False,
         token: str | None = None, transport: Transport | None = None,
         progress: Progress | None = None) -> PullResult:
    """Fetch, then bring local head `ref` up to the remote's: fast-forward, or replay local revisions.

    Without `rebase`, diverged histories raise `NonFastForward`; with it, the local revisions the remote
    lacks are replayed (their recorded operations) on top of the remote's head, so nothing is lost.
    """
    fetched = fetch(repo, remote, token=token, transport=transport, progress=progress)
    full = repo.ref_name(ref)
    if not full.startswith(HEADS):
        raise InvalidInput(f"pull updates a head (refs/heads/...), not {full}")
    return _integrate(repo, remote, full, rebase, fetched)


def pull_all(repo: Repository, remote: str = "origin", *, rebase: bool = False, token: str | None = None,
             transport: Transport | None = None, progress: Progress | None = None) -> list[PullResult]:
    """Fetch once, then bring every tracked head up to the remote's, in name order.

    A tracked head is a local ``refs/heads/x`` with a remote-tracking ``refs/remotes/<remote>/x``. Each
    is pulled as `pull` would; a head that diverged (without `rebase`) is left as it is and reported
    with ``how == "diverged"`` instead of stopping the others, so look for those in the result.
    """
    fetched = fetch(repo, remote, token=token, transport=transport, progress=progress)
    prefix = f"{REMOTES}{remote}/"
    tracking = {name[len(prefix):] for name in repo.refs(prefix)}
    results = []
    for full, head in repo.refs(HEADS).items():
        if full[len(HEADS):] not in tracking:
            continue
        try:
            results.append(_integrate(repo, remote, full, rebase, fetched))
        except NonFastForward as diverged:
            theirs = None if diverged.current is None else HexId(diverged.current)
            results.append(PullResult(full, head, theirs, "diverged", fetched))
    return results


def _integrate(repo: Repository, remote: str, full: str, rebase: bool, fetched: FetchResult) -> PullResult:
    """Bring local head `full` up to its remote-tracking ref (just fetched): create, fast-forward or rebase."""
    from ..pack.plan import is_ancestor

    refs = Refs(repo.store)
    tracking = f"{REMOTES}{remote}/{full[len(HEADS):]}"
    theirs = refs.get(tracking)
    if theirs is None:
        raise UnknownRef(f"remote {remote} has no head {full[len(HEADS):]}; "
                         f"see `ctxstore refs {REMOTES}{remote}/`")
    new = to_hex(theirs)
    mine = refs.get(full)
    if mine is None:
        refs.set_if_equals(full, None, theirs, message=f"pull {remote}: created")
        return PullResult(full, None, new, "created", fetched)
    old = to_hex(mine)
    if mine == theirs or is_ancestor(repo.store, theirs, mine):
        return PullResult(full, old, old, "up-to-date", fetched)
    if is_ancestor(repo.store, mine, theirs):
        refs.set_if_equals(full, mine, theirs, message=f"pull {remote}: fast-forward")
        return PullResult(full, old, new, "fast-forward", fetched)
    if not rebase:
        raise NonFastForward(f"{full} and {tracking} have diverged ({old[:12]} vs {new[:12]}); "
                             "pull with rebase to replay your revisions on top of theirs",
                             ref=full, current=new, expected=old)
    onto = MessageHistory(source=repo.store, head=new)
    replayed = MessageHistory(source=repo.store, head=old).rebase_onto(onto)
    rebased = HexId(replayed.revision_id)
    refs.set_if_equals(full, mine, from_hex(rebased), objects=replayed.workspace.pending(),
                       message=f"pull {remote}: rebase onto {new[:12]}")
    return PullResult(full, old, rebased, "rebase", fetched)


def _lease(ref: str, value: str | None) -> HexId | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"the lease on {ref} must be a hex revision id or None, not {shown(value)}")
    return to_hex(from_hex(value))


def push(repo: Repository, remote: str = "origin", refs: Sequence[str] | None = None, *, force: bool = False,
         expect: Mapping[str, str | None] | None = None, delete: bool = False, token: str | None = None,
         transport: Transport | None = None, progress: Progress | None = None) -> PushResult:
    """Move the remote's refs to the local ones, sending only what it lacks; all refs move or none.

    Fast-forward only: a remote ref that holds revisions the local one does not descend from raises
    `NonFastForward` (pull with rebase, then push again). `force` overrides that. `expect` maps refs to
    the revision (hex, or None for "absent") the remote must still hold, as git's --force-with-lease:
    the push replaces whatever that is, and fails if the remote ref moved. `refs` defaults to every head.
    A remote ref that another push moved between this push's look and its write raises `RefMoved` (a
    `NonFastForward`): pull, then push again.

    With `delete`, the named `refs` are deleted on the remote instead (heads by default, ``refs/tags/x``
    for a tag), each only if it still holds what the remote advertised; the remote-tracking refs go too.
    """
    from ..pack.plan import is_ancestor, pack

    check_remote_name(remote)
    store = repo.store
    local_refs = Refs(store)
    if delete:
        return _push_delete(repo, remote, refs, token, transport)
    names = list(local_refs.items(HEADS)) if refs is None else [repo.ref_name(r) for r in refs]
    leases = {repo.ref_name(k): _lease(k, v) for k, v in (expect or {}).items()}
    with _connect(repo, remote, token, transport) as conn:
        theirs = conn.advertise().refs
        updates: list[RefUpdate] = []
        for full in names:
            if not full.startswith((HEADS, TAGS)):
                raise InvalidInput(f"push moves heads and tags, not {full}")
            local_oid = local_refs.get(full)
            if local_oid is None:
                raise UnknownRef(f"no local ref {full} to push")
            local = to_hex(local_oid)
            current = theirs.get(full)
            if full in leases:
                if leases[full] != current:
                    raise NonFastForward(
                        f"lease on {full} broken: the remote holds {_short(current)}, not the expected "
                        f"{_short(leases[full])}; fetch and look before overwriting",
                        ref=full, current=current, expected=leases[full])
                updates.append(RefUpdate(full, leases[full], local, "lease"))
            elif force:
                if current != local:
                    updates.append(RefUpdate(full, current, local, "force"))
            elif current != local:
                if current is not None and not (store.has(from_hex(current)) and
                                                is_ancestor(store, from_hex(current), local_oid)):
                    raise NonFastForward(
                        f"push to {full} rejected: the remote has revisions ({_short(current)}) that your "
                        f"{_short(local)} does not include; pull with rebase first, or push with force",
                        ref=full, current=current, expected=local)
                updates.append(RefUpdate(full, current, local, "ff"))
        if not updates:
            return PushResult(remote)
        haves = sorted({oid for oid in _raw_refs(theirs).values() if store.has(oid)})
        meter = _Meter(progress, "sending")
        chunks = pack(store, [from_hex(u.new) for u in updates if u.new is not None], haves)
        answer = conn.push(updates, meter.chunks(chunks))
    if transport is None or remote in repo.remotes():
        tracking = {f"{REMOTES}{remote}/{u.ref[len(HEADS):]}": (ANY, None if u.new is None else from_hex(u.new))
                    for u in updates if u.ref.startswith(HEADS)}
        if tracking:
            local_refs.set_many_if_equals(tracking, message=f"push {remote}")
    objects = answer.get("objects", 0)
    if type(objects) is not int:
        raise RemoteError(f"{conn.url} answered the push with a malformed result: objects {shown(objects)}")
    if progress is not None:
        progress("sent", meter.objects or objects, meter.bytes)
    return PushResult(remote, {u.ref: u.new for u in updates}, objects, meter.bytes)


def _push_delete(repo: Repository, remote: str, refs: Sequence[str] | None, token: str | None,
                 transport: Transport | None) -> PushResult:
    from ..pack.plan import pack

    if not refs:
        raise InvalidInput("name the remote refs to delete (`ctxstore push --delete origin NAME`)")
    names = [r if r.startswith("refs/") else HEADS + r for r in refs]
    for name in names:
        check_ref_name(name)
    with _connect(repo, remote, token, transport) as conn:
        theirs = conn.advertise().refs
        missing = [n for n in names if n not in theirs]
        if missing:
            raise UnknownRef(f"remote {remote} has no ref {missing[0]} to delete; "
                             f"see `ctxstore refs {REMOTES}{remote}/` after `ctxstore fetch {remote}`")
        updates = [RefUpdate(name, theirs[name], None, "lease") for name in names]
        conn.push(updates, pack(repo.store, [], []))
    tracking = {f"{REMOTES}{remote}/{n[len(HEADS):]}": (ANY, None) for n in names if n.startswith(HEADS)}
    if tracking and (transport is None or remote in repo.remotes()):
        Refs(repo.store).set_many_if_equals(tracking, message=f"push --delete {remote}")
    return PushResult(remote, dict.fromkeys(names))


def remote_url(url: str, *, base: str | os.PathLike[str] | None = None) -> str:
    """The URL to record for a remote: a local path made absolute (against `base`, default the current
    directory), and a working directory's path turned into its repository's (``DIR/.ctxstore``).

    URLs with a scheme (``http://``, ``ssh://``, ``file://``) are kept as they are.
    """
    if not isinstance(url, str) or not url:
        raise InvalidInput(f"a remote URL must be a non-empty string, not {shown(url)}")
    if "://" in url:
        return url
    path = Path(base or os.getcwd(), os.path.expanduser(url)).absolute()
    path = Path(os.path.normpath(path))
    inner = path / WORKDIR_REPOSITORY
    if not (path / "format").is_file() and (inner / "format").is_file():
        path = inner
    return str(path)


def clone(url: str, path: str | os.PathLike[str], *, token: str | None = None,
          transport: Transport | None = None, progress: Progress | None = None) -> Repository:
    """Create a repository at `path` from the one at `url`: remote origin, every head fetched and checked out.

    Each remote head ``refs/heads/x`` lands as ``refs/remotes/origin/x`` and as a local ``refs/heads/x``.
    A local path is recorded absolute (`remote_url`), so the clone keeps reaching it from anywhere, and
    may name a working directory (one holding ``.ctxstore/``). If the clone fails, the new directory is
    removed.
    """
    url = remote_url(url)
    target = Path(path)
    existed = target.exists()
    repo = Repository.init(target)
    try:
        repo.remote_add("origin", url)
        fetch(repo, "origin", token=token, transport=transport, progress=progress)
        prefix = f"{REMOTES}origin/"
        refs = Refs(repo.store)
        heads = {HEADS + name[len(prefix):]: (None, oid) for name, oid in refs.items(prefix).items()}
        if heads:
            refs.set_many_if_equals(heads, message=f"clone from {url}")
    except BaseException:
        repo.close()
        if not existed:
            import shutil

            shutil.rmtree(target, ignore_errors=True)
        raise
    return repo
