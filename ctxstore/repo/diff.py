"""Revision diff: entries added, removed and moved between two revisions, reading only unequal subtrees."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from ..format import seq
from ..format.objects import SeqNode
from ..ids import ObjectId, to_hex
from .lineage import Lineage
from .reports import RevisionDiff

__all__ = ["diff"]


def diff(lineage: Lineage, a: ObjectId, b: ObjectId) -> RevisionDiff:
    """Entries added, removed and moved from revision `a` to revision `b`, skipping equal subtrees."""
    root_a, root_b = lineage.revision(a).seq, lineage.revision(b).seq
    nodes: dict[ObjectId, SeqNode] = {}

    def get(oid: ObjectId) -> SeqNode:
        node = nodes.get(oid)
        if node is None:
            node = nodes[oid] = lineage.node(oid)
        return node

    out = RevisionDiff(to_hex(a), to_hex(b))
    if root_a == root_b:
        return out
    d = seq.diff([root_a], [root_b], get)
    leaf_changed = root_a[0] != root_b[0]
    ids_a = _ordered_ids(root_a, set(d.a_nodes), leaf_changed, get)
    ids_b = _ordered_ids(root_b, set(d.b_nodes), leaf_changed, get)
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


def _ordered_ids(spine: seq.Spine, changed: set[ObjectId], leaf: bool,
                 get: Callable[[ObjectId], SeqNode]) -> list[str]:
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
