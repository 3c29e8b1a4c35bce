"""Edits: patches applied in order to a view, as `MessageHistory.edit` and snapshot loading both do.

A view here is a list of items `(entry id, entry oid or None)`; a stored patch names its entries by
object id (see `format.objects`). `edit_items` turns checked input patches into stored ones while it
applies them, so that only a patch that takes effect makes entries: a `replace`, `split`,
`insertBefore` or `insertAfter` whose target is absent is skipped, creates nothing and is left out of
the recorded operation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..format import seq
from ..ids import ObjectId
from .intake import MakeEntries, intake_entry, stored_patch
from .workspace import Workspace

__all__ = ["TARGETED", "Item", "apply_patch", "edit_items", "respliced"]

Item = tuple[str, ObjectId | None]

TARGETED = ("replace", "split", "insertBefore", "insertAfter")
"""Patch ops that put entries around a target: skipped, making nothing, when the target is absent."""


def apply_patch(items: list[Item], patch: Mapping[str, Any], entry_id: Callable[[ObjectId], str]) -> list[Item]:
    """One stored patch applied to a view; `entry_id` names the entry of a patch's entry oid."""
    op = patch["op"]
    ids = [i for i, _ in items]
    if op == "remove":
        return [it for it in items if it[0] != patch["id"]]
    if op in TARGETED:
        if patch["id"] not in ids:
            return items
        at = ids.index(patch["id"])
        new: list[Item] = [(entry_id(o), o) for o in patch["entries"]]
        if op == "insertBefore":
            return items[:at] + new + items[at:]
        if op == "insertAfter":
            return items[: at + 1] + new + items[at + 1:]
        return items[:at] + new + items[at + 1:]
    if op == "move":
        moving = set(patch["ids"])
        moved = [it for it in items if it[0] in moving]
        if not moved:
            return items
        rest = [it for it in items if it[0] not in moving]
        rest_ids = [i for i, _ in rest]
        # An empty anchor is no anchor: stored patches never hold one, input patches may.
        if patch.get("before"):
            at = rest_ids.index(patch["before"]) if patch["before"] in rest_ids else len(rest)
        elif patch.get("after"):
            at = rest_ids.index(patch["after"]) + 1 if patch["after"] in rest_ids else len(rest)
        else:
            at = len(rest)
        return rest[:at] + moved + rest[at:]
    # summary
    summary: Item = (entry_id(patch["entry"]), patch["entry"])
    sources = set(patch["sourceIds"])
    if patch.get("replace"):
        positions = [n for n, i in enumerate(ids) if i in sources]
        if positions:
            first = positions[0]
            return [it for it in items[:first] if it[0] not in sources] + [summary] + [
                it for it in items[first:] if it[0] not in sources]
    return [*items, summary]


def edit_items(items: list[Item], patches: Sequence[Mapping[str, Any]], make: MakeEntries,
               entry_id: Callable[[ObjectId], str]) -> tuple[list[dict[str, Any]], list[Item]]:
    """Checked input patches applied in order: the stored patches that took effect, and the view.

    `make(inputs, kind=..., sources=...)` makes (or finds) the entries of a patch that applies; it is
    never called for a skipped one.
    """
    stored: list[dict[str, Any]] = []
    for patch in patches:
        if patch["op"] in TARGETED and all(i != patch["id"] for i, _ in items):
            for value in patch["entries"]:
                intake_entry(value)  # refused when malformed, though it makes nothing
            continue
        out = stored_patch(patch, make)
        items = apply_patch(items, out, entry_id)
        stored.append(out)
    return stored, items


def respliced(root: seq.Spine, before: list[Item], after: list[Item], ws: Workspace) -> seq.Spine:
    """The tree of `after`, made from `before`'s tree by rewriting only the span where they differ.

    An edit usually touches a few entries, so this writes the nodes around that span (O(log n)) where a
    rebuild would hash every node of the view again.
    """
    def same(a: Item, b: Item) -> bool:
        return a[0] == b[0] and a[1] == b[1]

    limit = min(len(before), len(after))
    start = 0
    while start < limit and same(before[start], after[start]):
        start += 1
    end = 0
    while end < limit - start and same(before[-1 - end], after[-1 - end]):
        end += 1
    changed = [[i, o] for i, o in after[start: len(after) - end]]
    return seq.splice(root, start, len(before) - end, changed, ws.node, ws.put)
