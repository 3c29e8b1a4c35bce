"""The sequence tree: a revision's ordered (entry id, entry oid) list as a content-defined chunked tree.

The list is cut into leaves after every item whose boundary hash falls under 1/`LEAF_TARGET` of the
hash space (or when a chunk reaches 4 x that many items); the leaves are cut the same way, by their own
object ids and with 1/`INNER_TARGET`, into level-1 nodes, and so on up until one node is left: the root.
Inner items are smaller than leaf items, and a smaller fan-out there makes the spine an append rewrites
cheaper. The cut points depend only on content, so the same list always gives the same root, an append
rewrites only the right-hand spine, a local edit rewrites O(log n) nodes around it, and two trees are
diffed by skipping equal subtrees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3

from .codec import ObjectId
from .objects import SeqNode

__all__ = [
    "INNER_TARGET",
    "LEAF_TARGET",
    "SeqDiff",
    "append",
    "build",
    "diff",
    "iter_items",
    "leaf_hash",
    "splice",
]

LEAF_TARGET = 32
"""Average items per leaf: an item ends its leaf with probability 1/LEAF_TARGET."""
INNER_TARGET = 16
"""Average children per inner node."""
_LIMITS = {0: (2**32 // LEAF_TARGET, 4 * LEAF_TARGET)}
_INNER_LIMITS = (2**32 // INNER_TARGET, 4 * INNER_TARGET)

Item = list[Any]  # [entry id, entry oid | None] in a leaf; [child oid, count] above
GetNode = Callable[[ObjectId], SeqNode]
PutNode = Callable[[SeqNode], ObjectId]


def leaf_hash(entry_id: str, oid: bytes | None) -> bytes:
    """The boundary hash of a leaf item: the entry's oid, or blake3 of the id where it has no entry."""
    return oid if oid is not None else blake3.blake3(entry_id.encode()).digest()


def _ends_chunk(item: Item, level: int, length: int) -> bool:
    """Whether a chunk of `length` items that ends with `item` is cut after it."""
    threshold, most = _LIMITS.get(level, _INNER_LIMITS)
    h = leaf_hash(item[0], item[1]) if level == 0 else item[0]
    return length >= most or int.from_bytes(h[:4], "big") < threshold


def _chunks(items: Sequence[Item], level: int) -> list[list[Item]]:
    out: list[list[Item]] = []
    current: list[Item] = []
    for item in items:
        current.append(item)
        if _ends_chunk(item, level, len(current)):
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def _write_level(items: Sequence[Item], level: int, put: PutNode) -> list[Item]:
    refs: list[Item] = []
    for chunk in _chunks(items, level):
        count = len(chunk) if level == 0 else sum(c[1] for c in chunk)
        refs.append([put(SeqNode(level, chunk)), count])
    return refs


def _close(refs: list[Item], level: int, put: PutNode) -> ObjectId:
    while len(refs) > 1:
        level += 1
        refs = _write_level(refs, level, put)
    return ObjectId(refs[0][0])


def build(items: Iterable[Item], put: PutNode) -> ObjectId:
    """Write the tree of a whole list; returns its root id."""
    leaf_items = [[i, o] for i, o in items]
    if not leaf_items:
        return put(SeqNode(0, []))
    return _close(_write_level(leaf_items, 0, put), 0, put)


def append(root: ObjectId, items: Iterable[Item], get: GetNode, put: PutNode) -> ObjectId:
    """Append items to a tree, rewriting only its right-hand spine; returns the new root id.

    Every chunk left of the spine ends at a cut that appending cannot move, so re-cutting the last node
    of each level gives the same tree as `build` of the whole list.
    """
    new = [[i, o] for i, o in items]
    if not new:
        return root
    spine = [get(root)]
    while spine[-1].level > 0:
        spine.append(get(ObjectId(spine[-1].items[-1][0])))
    refs = _write_level(spine[-1].items + new, 0, put)
    for node in reversed(spine[:-1]):
        refs = _write_level(node.items[:-1] + refs, node.level, put)
    return _close(refs, spine[0].level, put)


def splice(root: ObjectId, start: int, stop: int, items: Iterable[Item], get: GetNode,
           put: PutNode) -> ObjectId:
    """Replace the items at positions [start, stop) with `items`; returns the new root id.

    The result is the tree `build` gives for the edited list. Chunks left of the change end at cuts the
    change cannot move, so each level is re-cut from the start of the first node the change touches
    until a new cut falls on an old node's end past the change; from there the old nodes are kept, and
    the nodes replaced at one level are the change to splice into the level above. The cost is the
    nodes around the change on each level, not the length of the list.
    """
    new = [[i, o] for i, o in items]
    top = get(root)
    if not 0 <= start <= stop <= top.count:
        raise ValueError(f"splice range [{start}, {stop}) is outside a list of {top.count} items")
    if start == stop and not new:
        return root
    height = top.level
    # path[level] = [node, index]: the node on that level holding the change's start, and the index of
    # the first changed item in it (at level 0 an entry, above it the child the path descends into).
    path: list[list[Any]] = [[top, 0]] * (height + 1)
    node, pos = top, start
    for level in range(height, 0, -1):
        index = 0
        while index < len(node.items) - 1 and pos >= node.items[index][1]:
            pos -= node.items[index][1]
            index += 1
        path[level] = [node, index]
        node = get(ObjectId(node.items[index][0]))
    path[0] = [node, pos]
    change, removed = new, stop - start
    for level in range(height + 1):
        refs, replaced, at_end = _recut(path, level, change, removed, get, put)
        # Nothing left of the change on this level and nothing after it: these nodes are the whole level.
        alone = at_end and all(path[up][1] == 0 for up in range(level + 1, height + 1))
        if alone or level == height:
            if not refs:
                return put(SeqNode(0, []))
            if len(refs) > 1:
                return _close(refs, level, put)
            # Removals can leave a root with one child, which `build` would not make: step down to it.
            root = ObjectId(refs[0][0])
            node = get(root)
            while node.level > 0 and len(node.items) == 1:
                root = ObjectId(node.items[0][0])
                node = get(root)
            return root
        change, removed = refs, replaced
    raise AssertionError("unreachable: the root level always ends the splice")


def _recut(path: list[list[Any]], level: int, change: list[Item], removed: int, get: GetNode,
           put: PutNode) -> tuple[list[Item], int, bool]:
    """Re-cut one level around a change: new node refs, how many old nodes they replace, whether the
    re-cut ran to the end of the level."""
    height = len(path) - 1
    node, index = path[level]
    cursor = [list(step) for step in path]
    refs: list[Item] = []
    current: list[Item] = []

    def feed(item: Item) -> None:
        current.append(item)
        if _ends_chunk(item, level, len(current)):
            count = len(current) if level == 0 else sum(c[1] for c in current)
            refs.append([put(SeqNode(level, list(current))), count])
            current.clear()

    for item in node.items[:index]:
        feed(item)
    for item in change:
        feed(item)
    old = node.items[index:]
    replaced = 1
    while True:
        for item in old:
            if removed:
                removed -= 1
            else:
                feed(item)
        if not removed and not current:
            return refs, replaced, False
        following = _next_node(cursor, level, height, get)
        if following is None:
            break
        old = following.items
        replaced += 1
    if current:
        count = len(current) if level == 0 else sum(c[1] for c in current)
        refs.append([put(SeqNode(level, list(current))), count])
    return refs, replaced, True


def _next_node(cursor: list[list[Any]], level: int, height: int, get: GetNode) -> SeqNode | None:
    """Move `cursor` to the next node on `level`; None at the end of the level."""
    up = level + 1
    while up <= height and cursor[up][1] + 1 >= len(cursor[up][0].items):
        up += 1
    if up > height:
        return None
    cursor[up][1] += 1
    while up > level:
        child = get(ObjectId(cursor[up][0].items[cursor[up][1]][0]))
        up -= 1
        cursor[up] = [child, 0]
    return cursor[level][0]


def iter_items(root: ObjectId, get: GetNode) -> Iterator[tuple[str, ObjectId | None]]:
    """Every (entry id, entry oid or None) pair of a tree, in order."""
    node = get(root)
    if node.level == 0:
        yield from ((entry_id, oid) for entry_id, oid in node.items)
        return
    for child, _ in node.items:
        yield from iter_items(ObjectId(child), get)


@dataclass
class SeqDiff:
    """What two trees do not share: node ids on each side and the leaves under them."""

    a_nodes: list[ObjectId] = field(default_factory=list)
    b_nodes: list[ObjectId] = field(default_factory=list)
    a_leaves: list[SeqNode] = field(default_factory=list)
    b_leaves: list[SeqNode] = field(default_factory=list)


def diff(a: Iterable[ObjectId], b: Iterable[ObjectId], get: GetNode) -> SeqDiff:
    """Compare the trees under roots `a` and those under roots `b`, skipping equal subtrees.

    Both frontiers are expanded from the highest level down; a node present on both sides is dropped
    without being read, so the cost follows the size of the difference, not of the trees.
    """
    out = SeqDiff()
    side_a = {oid: get(oid).level for oid in a}
    side_b = {oid: get(oid).level for oid in b}
    while True:
        for oid in side_a.keys() & side_b.keys():
            del side_a[oid], side_b[oid]
        top = max([*side_a.values(), *side_b.values()], default=0)
        if top == 0:
            break
        for side, nodes in ((side_a, out.a_nodes), (side_b, out.b_nodes)):
            for oid in [o for o, level in side.items() if level == top]:
                del side[oid]
                nodes.append(oid)
                for child, _ in get(oid).items:
                    side[ObjectId(child)] = top - 1
    out.a_nodes.extend(side_a)
    out.b_nodes.extend(side_b)
    out.a_leaves.extend(get(oid) for oid in side_a)
    out.b_leaves.extend(get(oid) for oid in side_b)
    return out
