"""What a repository hands back: commit results, reflog entries, revisions, what an unpack did, and the
reports of fsck, gc, stats and diff. Every id in them is hex (`HexId`); raw ids stay below the repository
facade."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ids import HexId
from ..report import json_fields

__all__ = ["CommitResult", "FsckReport", "GcReport", "ReflogEntry", "RepoStats", "RevisionDiff", "RevisionInfo",
           "UnpackResult"]


@dataclass(frozen=True, slots=True)
class CommitResult:
    """A ref move made by `commit`, `commit_many` or `append`: the full ref name, its old and new head."""

    ref: str
    old: HexId | None
    """The head before the move (None: the ref was unborn)."""
    new: HexId
    """The head now: the committed history's revision."""

    def to_dict(self) -> dict[str, Any]:
        """The move as JSON-ready data."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class ReflogEntry:
    """One move of a ref, newest first in `Repository.reflog`: from `old` to `new` (None: absent), and why."""

    old: HexId | None
    new: HexId | None
    time_ms: int
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The move as JSON-ready data."""
        return json_fields(self)


@dataclass(frozen=True, slots=True)
class RevisionInfo:
    """A stored revision as `Repository.iter_revisions` gives it: its id, parent, when, what made it, size.

    `operation` is the recorded operation (``{"type": "append", "entryIds": [...], ...}``, None for a
    root) with the object ids it names spelled in hex.
    """

    id: HexId
    parent: HexId | None
    created_at: int
    operation: dict[str, Any] | None
    size: int

    def to_dict(self) -> dict[str, Any]:
        """The revision as JSON-ready data."""
        return json_fields(self)


@dataclass
class FsckReport:
    """What `Repository.fsck` found: counts, and one line per problem (empty when the repository is sound)."""

    objects: int = 0
    bytes: int = 0
    refs: int = 0
    reflog_entries: int = 0
    reachable: int = 0
    unreachable: int = 0
    problems: list[str] = field(default_factory=list)
    repaired: list[str] = field(default_factory=list)
    """What `fsck(repair=True)` changed, one line each (dropped damaged reflog records)."""

    @property
    def ok(self) -> bool:
        """Whether nothing is wrong."""
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return json_fields(self, before=("ok",))


@dataclass
class GcReport:
    """What `Repository.gc` did: objects deleted and their bytes, and unreachable ones kept as too young."""

    deleted: int = 0
    bytes: int = 0
    kept_young: int = 0
    reachable: int = 0
    reflog_entries_expired: int = 0
    """Reflog records of deleted refs dropped because they were older than the grace period."""

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return json_fields(self)


@dataclass
class RepoStats:
    """What a repository holds and what sharing saves.

    `logical_bytes` is what every ref's view would cost written out on its own (the canonical bytes of
    each entry of each head's view, entries counted once per ref); `saved_bytes` is how much less the
    store's objects take than that.
    """

    objects: int
    object_bytes: int
    stored_bytes: int
    disk_bytes: int
    refs: int
    logical_bytes: int

    @property
    def saved_bytes(self) -> int:
        """Bytes the content-addressed, compressed store saves against writing every view out."""
        return max(0, self.logical_bytes - self.stored_bytes)

    def to_dict(self) -> dict[str, Any]:
        """The figures as JSON-ready data."""
        return json_fields(self, after=("saved_bytes",))


@dataclass
class RevisionDiff:
    """Entry ids added, removed and moved going from revision `a` to revision `b` (in b's order)."""

    a: HexId
    b: HexId
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.moved)

    def to_dict(self) -> dict[str, Any]:
        """The diff as JSON-ready data."""
        return json_fields(self)


@dataclass(frozen=True)
class UnpackResult:
    """What an unpack did: objects received and new to the store, and where the refs it moved now point
    (full name to hex id; None: deleted)."""

    objects: int
    new_objects: int
    refs: dict[str, HexId | None] = field(default_factory=dict)
