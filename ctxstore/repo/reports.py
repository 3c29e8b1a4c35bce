"""What a repository hands back besides histories: its config, and the reports of fsck, gc, stats and diff."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidInput
from ..report import json_fields
from ..store.base import TransactionalStore

__all__ = ["Config", "FsckReport", "GcReport", "RepoStats", "RevisionDiff"]


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

    a: str
    b: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.moved)

    def to_dict(self) -> dict[str, Any]:
        """The diff as JSON-ready data."""
        return json_fields(self)


class Config:
    """A repository's settings: text values by key, stored in the store with everything else."""

    def __init__(self, store: TransactionalStore) -> None:
        self._store = store

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value of `key`, or `default` when unset."""
        with self._store.transaction() as txn:
            raw = txn.get_config(key)
        return default if raw is None else raw.decode("utf-8")

    def set(self, key: str, value: str | None) -> None:
        """Set `key` to a text value; None unsets it."""
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"config value for {key!r} must be text, not {type(value).__name__}")
        with self._store.transaction(write=True) as txn:
            txn.set_config(key, None if value is None else value.encode("utf-8"))

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: str) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        self.set(key, None)
