"""Landing an import: one commit for every ref it moves, and the `ImportResult` that says what moved."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..history.message_history import MessageHistory
from ..ids import HexId
from ..repo.repository import Repository
from ..report import json_fields

__all__ = ["ImportProgress", "ImportResult", "land"]

ImportProgress = Callable[[int, int], None]
"""Called as an import builds its histories: (messages or transcript steps done, of how many)."""


@dataclass(frozen=True)
class ImportResult:
    """What an import did.

    `ref` is the full name of the ref imported into, `revision` its new head and `size` the entries in
    its view; `refs` is every ref the import moved (for a transcript, its forks too), full name to
    revision, and `unchanged` the refs it would have moved that already held what it brought (importing
    a file again); `entries` is how many messages, entries or transcript steps the file held, and
    `skipped` the line numbers of malformed records left out (Claude Code transcripts).
    """

    format: str
    ref: str
    revision: HexId
    size: int
    entries: int
    refs: dict[str, HexId]
    unchanged: list[str] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return json_fields(self)


def land(repo: Repository, updates: Mapping[str, MessageHistory], *, format: str, entries: int,
         message: str, force: bool = False, rebase: bool = False, skipped: Sequence[int] = ()) -> ImportResult:
    """Commit `updates` (ref to history) in one transaction; the first ref is the one imported into.

    A ref that already points at its history's head is left alone (listed in `unchanged`). With
    `rebase`, an import into one ref that another writer moved meanwhile is replayed onto the ref's new
    head and committed again, as appending does; otherwise it raises `NonFastForward`.
    """
    names = {ref: repo.ref_name(ref) for ref in updates}
    current = repo.refs()
    moving = {ref: h for ref, h in updates.items() if current.get(names[ref]) != h.revision_id}
    unchanged = [names[ref] for ref in updates if ref not in moving]
    if rebase and len(moving) == 1:
        [(ref, history)] = moving.items()
        moves = [repo.commit(ref, history, force=force, rebase=True, message=message)]
    elif moving:
        moves = repo.commit_many(moving, force=force, message=message)
    else:
        moves = []
    moved = {move.ref: move.new for move in moves}
    first_ref, first_history = next(iter(updates.items()))
    first = names[first_ref]
    head = moved.get(first, HexId(first_history.revision_id))
    return ImportResult(format, first, head, repo.history(head).size, entries, moved, unchanged, list(skipped))
