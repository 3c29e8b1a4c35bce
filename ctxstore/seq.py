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
from itertools import takewhile
from operator import is_, truth
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
    "encode_node",
    "iter_items",
    "leaf_hash",
    "misplaced_cut",
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


_NODE_START = b"\xa3dtypecseqeitems"  # {"type": "seq", "items": ...} in canonical key order
_LEVEL_KEY = b"elevel"
_OID_HEAD = b"\x58\x20"


def _head(major: int, n: int) -> bytes:
    """A CBOR item head in its shortest form (n < 2**64)."""
    base = major << 5
    if n < 24:
        return bytes([base | n])
    if n < 0x100:
        return bytes([base | 24, n])
    if n < 0x10000:
        return bytes([base | 25]) + n.to_bytes(2, "big")
    if n < 0x100000000:
        return bytes([base | 26]) + n.to_bytes(4, "big")
    return bytes([base | 27]) + n.to_bytes(8, "big")


_SMALL_HEADS = [[_head(major, n) for n in range(256)] for major in range(8)]


def _encode_items(items: list[Any], level: int) -> list[bytes] | None:
    """The canonical bytes of each item of a node, or None if one is not of the usual shape."""
    texts, ints = _SMALL_HEADS[3], _SMALL_HEADS[0]
    parts: list[bytes] = []
    append = parts.append
    if level == 0:
        for item in items:
            if type(item) is not list or len(item) != 2:
                return None
            first, second = item
            if type(first) is not str:
                return None
            try:
                text = first.encode()
            except UnicodeEncodeError:
                return None  # a lone surrogate: the general encoder says what is wrong
            size = len(text)
            if second is None:
                tail = b"\xf6"
            elif type(second) is bytes and len(second) == 32:
                tail = _OID_HEAD + second
            else:
                return None
            append(b"\x82" + (texts[size] if size < 256 else _head(3, size)) + text + tail)
    else:
        for item in items:
            if type(item) is not list or len(item) != 2:
                return None
            first, second = item
            if (type(first) is not bytes or len(first) != 32 or type(second) is not int
                    or not 0 <= second < 2**64):
                return None
            if second < 256:
                count = ints[second]
            elif second < 0x10000:
                count = b"\x19" + second.to_bytes(2, "big")
            else:
                count = _head(0, second)
            append(b"\x82" + _OID_HEAD + first + count)
    return parts


def _array_head(n: int) -> bytes:
    return _SMALL_HEADS[4][n] if n < 256 else _head(4, n)


def encode_node(node: SeqNode, base: tuple[SeqNode, bytes] | None = None) -> bytes | None:
    """The canonical bytes of a seq node, or None if an item is not of the usual shape.

    The same bytes as `objects.encode_object` (a test checks it on arbitrary nodes), written directly:
    a node is rewritten on every append, and the general encoder's checks and key sorting cost more
    than the node's own bytes. Anything unusual returns None, for the general encoder to handle.

    `base` is an earlier node of the same level with its canonical bytes. An append rewrites the last
    node of each level as that node's items (all, or all but the last) followed by new ones, so when
    `base` starts the same way its encoded items are reused and only the new ones are encoded.
    """
    level, items = node.level, node.items
    if type(level) is not int or not 0 <= level < 24 or type(items) is not list:
        return None
    tail = _LEVEL_KEY + _SMALL_HEADS[0][level]
    if base is not None:
        spliced = _splice_encoded(items, level, tail, *base)
        if spliced is not None:
            return spliced
    parts = _encode_items(items, level)
    if parts is None:
        return None
    return b"".join([_NODE_START, _array_head(len(items)), *parts, tail])


def _splice_encoded(items: list[Any], level: int, tail: bytes, old: SeqNode, data: bytes) -> bytes | None:
    """`items` encoded by reusing the encoded items of `old` that it starts with; None if it does not."""
    kept = old.items
    n = len(kept)
    if old.level != level or type(kept) is not list or not n or len(items) < n - 1:
        return None
    # The same item objects, not just equal ones (1 == True, b"" == bytearray()), so the same bytes.
    same = sum(1 for _ in takewhile(truth, map(is_, items, kept)))
    if same == n:
        keep = n
    elif same == n - 1:
        keep = n - 1
    else:
        return None
    start = len(_NODE_START) + len(_array_head(n))
    if data[:start] != _NODE_START + _array_head(n) or not data.endswith(tail):
        return None
    section = data[start:len(data) - len(tail)]
    if keep < n:
        last = _encode_items(kept[-1:], level)
        if last is None or not section.endswith(last[0]):
            return None
        section = section[:len(section) - len(last[0])]
    parts = _encode_items(items[keep:], level)
    if parts is None:
        return None
    return b"".join([_NODE_START, _array_head(len(items)), section, *parts, tail])


def leaf_hash(entry_id: str, oid: bytes | None) -> bytes:
    """The boundary hash of a leaf item: the entry's oid, or blake3 of the id where it has no entry."""
    return oid if oid is not None else blake3.blake3(entry_id.encode()).digest()


def _ends_chunk(item: Item, level: int, length: int) -> bool:
    """Whether a chunk of `length` items that ends with `item` is cut after it."""
    threshold, most = _LIMITS.get(level, _INNER_LIMITS)
    h = leaf_hash(item[0], item[1]) if level == 0 else item[0]
    return length >= most or int.from_bytes(h[:4], "big") < threshold


def misplaced_cut(node: SeqNode) -> int | None:
    """The position of the first item that should have ended this node, or None if it could be a node
    of a tree built by the chunking rule.

    A node built by the rule ends at its first cut: no item before its last is a content-defined cut,
    and it holds at most the limit. (Whether the last item is a cut depends on the node's place in the
    tree: only the last node of a level may end without one.) A node failing this came from elsewhere,
    and appending to or editing a tree that holds it would not give the tree `build` gives.
    """
    threshold, most = _LIMITS.get(node.level, _INNER_LIMITS)
    under = threshold.to_bytes(4, "big")
    items = node.items
    if len(items) > most:
        return most - 1
    for at, item in enumerate(items[:-1]):
        h = (item[1] if item[1] is not None else leaf_hash(item[0], None)) if node.level == 0 else item[0]
        if h[:4] < under:
            return at
    return None


def _chunks(items: Sequence[Item], level: int) -> list[list[Item]]:
    threshold, most = _LIMITS.get(level, _INNER_LIMITS)
    # The first 4 bytes of a boundary hash, compared as bytes, order as the big-endian number they spell.
    under = threshold.to_bytes(4, "big")
    out: list[list[Item]] = []
    current: list[Item] = []
    length = 0
    for item in items:
        current.append(item)
        length += 1
        if level == 0:
            h = item[1]
            if h is None:
                h = leaf_hash(item[0], None)
        else:
            h = item[0]
        if h[:4] < under or length >= most:
            out.append(current)
            current = []
            length = 0
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
