"""Landing an import: one commit for every ref it moves, and the `ImportResult` that says what moved."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..history.message_history import MessageHistory
from ..ids import HexId
from ..repo.repository import Repository
from ..report import json_fields

__all__ = ["ImportResult", "land"]


@dataclass(frozen=True)
class ImportResult:
    """What an import did.

    `ref` is the full name of the ref imported into, `revision` its new head and `size` the entries in
    its view; `refs` is every ref the import moved (for a transcript, its forks too), full name to
    revision; `entries` is how many messages, entries or transcript steps the file held.
    """

    format: str
    ref: str
    revision: HexId
    size: int
    entries: int
    refs: dict[str, HexId]

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return json_fields(self)


def land(repo: Repository, updates: Mapping[str, MessageHistory], *, format: str, entries: int,
         message: str, force: bool = False, rebase: bool = False) -> ImportResult:
    """Commit `updates` (ref to history) in one transaction; the first ref is the one imported into.

    With `rebase`, an import into one ref that another writer moved meanwhile is replayed onto the
    ref's new head and committed again, as appending does; otherwise it raises `NonFastForward`.
    """
    if rebase and len(updates) == 1:
        [(ref, history)] = updates.items()
        moves = [repo.commit(ref, history, force=force, rebase=True, message=message)]
    else:
        moves = repo.commit_many(updates, force=force, message=message)
    first = moves[0]
    return ImportResult(format, first.ref, first.new, repo.history(first.new).size, entries,
                        {move.ref: move.new for move in moves})
