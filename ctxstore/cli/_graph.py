"""The revision graph of several refs, laid out newest first with the forks drawn, as `git log --graph`."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..report import json_fields

__all__ = ["LogRevision", "collect", "draw", "iso_date", "operation_summary"]


@dataclass(frozen=True)
class LogRevision:
    """One revision as the log shows it."""

    id: str
    parent: str | None
    created_at: int
    operation: Mapping[str, Any] | None
    size: int
    refs: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**json_fields(self), "date": iso_date(self.created_at), "operation": operation_summary(self.operation)}


def iso_date(ms: int) -> str:
    """A time in ms since the epoch as ISO 8601 in UTC, to the second: ``2026-01-01T09:30:00Z``."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def operation_summary(op: Mapping[str, Any] | None) -> str:
    """One line saying what a revision's operation did."""
    if op is None:
        return "root"
    kind = op.get("type")
    if kind == "append":
        ids = list(op.get("entryIds", []))
        shown = ", ".join(ids[:3]) + (", ..." if len(ids) > 3 else "")
        return f"append {len(ids)} ({shown})"
    if kind == "edit":
        ops = [str(p.get("op")) for p in op.get("patches", [])]
        return "edit: " + ", ".join(ops)
    if kind == "view":
        return f"view of {len(op.get('entryIds', []))} entries"
    return str(kind)


def collect(heads: Mapping[str, str], load: Callable[[str], LogRevision],
            limit: int | None = None) -> list[LogRevision]:
    """The revisions reachable from `heads` (ref name to revision), children before parents.

    Among revisions whose children are all listed, the newest comes first, so unrelated lines
    interleave by time while a fork point always follows every branch that grew from it.
    """
    labels: dict[str, list[str]] = {}
    for name, head in heads.items():
        labels.setdefault(head, []).append(name)
    found: dict[str, LogRevision] = {}
    children: dict[str, int] = {}
    stack = list(dict.fromkeys(heads.values()))
    while stack:
        rid = stack.pop()
        if rid in found:
            continue
        rev = load(rid)
        found[rid] = LogRevision(rev.id, rev.parent, rev.created_at, rev.operation, rev.size,
                                 sorted(labels.get(rid, [])))
        if rev.parent is not None:
            children[rev.parent] = children.get(rev.parent, 0) + 1
            stack.append(rev.parent)
    ready = [(-r.created_at, r.id) for r in found.values() if children.get(r.id, 0) == 0]
    heapq.heapify(ready)
    out: list[LogRevision] = []
    while ready and (limit is None or len(out) < limit):
        _, rid = heapq.heappop(ready)
        rev = found[rid]
        out.append(rev)
        if rev.parent is not None and rev.parent in found:
            children[rev.parent] -= 1
            if children[rev.parent] == 0:
                heapq.heappush(ready, (-found[rev.parent].created_at, rev.parent))
    return out


def _label(rev: LogRevision, short: int) -> str:
    refs = f" ({', '.join(rev.refs)})" if rev.refs else ""
    when = datetime.fromtimestamp(rev.created_at / 1000, UTC).strftime("%Y-%m-%d %H:%M")
    return f"{rev.id[:short]} {when}{refs} {operation_summary(rev.operation)} [{rev.size}]"


def draw(revisions: Sequence[LogRevision], *, graph: bool = True, short: int = 12) -> Iterable[str]:
    """Text lines for `revisions` (from `collect`): one per revision, with fork lines when `graph`."""
    if not graph:
        for rev in revisions:
            yield _label(rev, short)
        return
    columns: list[str | None] = []  # the revision each column waits for
    for rev in revisions:
        waiting = [i for i, c in enumerate(columns) if c == rev.id]
        if not waiting:
            columns.append(rev.id)
            waiting = [len(columns) - 1]
        col, merged = waiting[0], waiting[1:]
        if merged:
            # Branches that grew from this revision close into its column: "|/".
            line = []
            for i in range(len(columns)):
                if i in merged or (i > merged[0]):
                    line.append("/" if i in merged or columns[i] is not None else " ")
                else:
                    line.append("|")
            yield _join_collapse(line, merged[0])
            columns = [c for i, c in enumerate(columns) if i not in merged]
        cells = ["*" if i == col else "|" for i in range(len(columns))]
        yield " ".join(cells) + " " + _label(rev, short)
        if rev.parent is None:
            del columns[col]
        else:
            columns[col] = rev.parent


def _join_collapse(cells: list[str], first: int) -> str:
    # Columns from `first` on move one place left, so their marks sit between the old columns.
    left = " ".join(cells[:first])
    right = " ".join(cells[first:])
    return (left + right) if left else right
