"""The sequence tree: a revision's ordered (entry id, entry oid) list as a content-defined chunked tree.

The list is cut into leaves after every item whose boundary hash falls under 1/`LEAF_TARGET` of the
hash space (or when a chunk reaches 4 x that many items); the leaves are cut the same way, by their own
object ids and with 1/`INNER_TARGET`, into level-1 nodes, and so on up until one node is left: the root.
The cut points depend only on content, so the same list always gives the same tree, a local edit
rewrites O(log n) nodes around it, and two trees are diffed by skipping equal subtrees.

The last node of each level (the right-hand spine, from the last leaf up to the root) changes on every
append, so it is not stored as nodes: the revision holds it, as a `Spine`, and only chunks that the
rule has closed are stored. An append then writes no node until a chunk closes (about one append in
`LEAF_TARGET`), and reads none: the spine is all it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import takewhile
from operator import is_, truth
from typing import Any

import blake3
import cbor2

from ..errors import InvalidInput, InvalidObject
from ..ids import ObjectId, is_oid, object_id
from .codec import SMALL_HEADS, array_head_at, cbor_head, encode
from .objects import SPINE_KEY, Object, Revision, SeqNode, encode_object

__all__ = [
    "INNER_TARGET",
    "LEAF_TARGET",
    "NODE_START",
    "SeqDiff",
    "append",
    "build",
    "chunking_fault",
    "diff",
    "encode_node",
    "SpineBytes",
    "encode_revision",
    "spine_bytes",
    "Spine",
    "count",
    "items_batched",
    "items_from",
    "iter_items",
    "leaf_hash",
    "node_fault",
    "is_leaf_bytes",
    "leaf_items_of",
    "leaf_length",
    "leaf_refs",
    "node_id",
    "packed_order",
    "spine_fault",
    "splice",
    "subtrees",
    "unfold",
]

LEAF_TARGET = 32
"""Average items per leaf: an item ends its leaf with probability 1/LEAF_TARGET."""
INNER_TARGET = 16
"""Average children per inner node."""
_LIMITS = {0: (2**32 // LEAF_TARGET, 4 * LEAF_TARGET)}
_INNER_LIMITS = (2**32 // INNER_TARGET, 4 * INNER_TARGET)

Item = list[Any]  # [entry id, entry oid | None] in a leaf; [child oid, count] above
Spine = list[list[Item]]
"""A tree as a revision holds it: for each level from the leaves up, the items of that level's last node,
without (above the leaves) its last item, which is the ref to the spine node below."""
GetNode = Callable[[ObjectId], SeqNode]
PutNode = Callable[[SeqNode], ObjectId]


NODE_START = b"\xa3dtypecseqeitems"
"""How every seq node's canonical bytes start ({"type": "seq", "items": ...} in canonical key order)."""
_LEVEL_KEY = b"elevel"
_LEAF_END = _LEVEL_KEY + b"\x00"
_OID_HEAD = b"\x58\x20"


def _text(value: Any) -> bytes | None:
    """The canonical bytes of a text string (head and UTF-8), or None for a non-string or a lone surrogate
    (the general encoder then says what is wrong)."""
    if type(value) is not str:
        return None
    try:
        text = value.encode()
    except UnicodeEncodeError:
        return None
    size = len(text)
    return (SMALL_HEADS[3][size] if size < 256 else cbor_head(3, size)) + text


def _encode_items(items: list[Any], level: int) -> list[bytes] | None:
    """The canonical bytes of each item of a node, or None if one is not of the usual shape."""
    ints = SMALL_HEADS[0]
    parts: list[bytes] = []
    append = parts.append
    if level == 0:
        for item in items:
            if type(item) is not list or len(item) != 2:
                return None
            first, second = item
            text = _text(first)
            if text is None:
                return None
            if second is None:
                tail = b"\xf6"
            elif type(second) is bytes and len(second) == 32:
                tail = _OID_HEAD + second
            else:
                return None
            append(b"\x82" + text + tail)
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
                count = cbor_head(0, second)
            append(b"\x82" + _OID_HEAD + first + count)
    return parts


def encode_node(node: SeqNode) -> bytes | None:
    """The canonical bytes of a seq node, or None if an item is not of the usual shape.

    The same bytes as `objects.encode_object` (a test checks it on arbitrary nodes), written directly:
    a bulk import writes a node per few dozen entries, and the general encoder's checks and key sorting
    cost more than the node's own bytes. Anything unusual returns None, for the general encoder.
    """
    level, items = node.level, node.items
    if type(level) is not int or not 0 <= level < 24 or type(items) is not list:
        return None
    parts = _encode_items(items, level)
    if parts is None:
        return None
    return b"".join([NODE_START, cbor_head(4, len(items)), *parts, _LEVEL_KEY + SMALL_HEADS[0][level]])


_SPINE_MARK = bytes.fromhex("9b1f3c5e7a2d4f6081a3c5e7092b4d6f8da1c3e5f7092b4d6f81a3c5e70d2f4b")
"""Stands in for a revision's seq while the rest is encoded; random, so no other field holds it."""
_SPINE_MARK_BYTES = _OID_HEAD + _SPINE_MARK


SpineBytes = list[tuple[list[Item], bytes]]
"""A spine's levels with the encoded items of each: what `encode_revision` reuses from the last one."""


def encode_revision(rev: Revision, base: SpineBytes | None = None) -> tuple[bytes, SpineBytes] | None:
    """The canonical bytes of a revision and its levels' encoded items, or None if its spine has an
    item of an unusual shape.

    The same bytes as `objects.encode_object` (a test checks it): the fields other than the spine go
    through the general encoder with a marker for the spine, whose items are then encoded directly,
    since the spine is most of the revision. `base` is the result for an earlier revision: an append
    keeps most levels as they were and extends the leaf level, so their encoded items are reused.
    """
    spine = rev.seq
    if type(spine) is not list or not 0 < len(spine) < 24:
        return None
    levels: SpineBytes = []
    parts = [cbor_head(4, len(spine))]
    for level, items in enumerate(spine):
        if type(items) is not list:
            return None
        encoded = _level_bytes(items, level, base[level] if base is not None and level < len(base) else None)
        if encoded is None:
            return None
        levels.append((items, encoded))
        parts += (cbor_head(4, len(items)), encoded)
    fields = _append_fields(rev)
    if fields is not None:
        return b"".join([fields, *parts]), levels
    value = rev.to_value()
    value[SPINE_KEY] = _SPINE_MARK
    head, mark, tail = encode(value).partition(_SPINE_MARK_BYTES)
    if not mark or _SPINE_MARK_BYTES in tail:
        return None
    return b"".join([head, *parts, tail]), levels


def _head_size(n: int) -> int:
    """Bytes of the shortest CBOR head for `n` (0 <= n < 2**64)."""
    return 1 if n < 24 else 2 if n < 0x100 else 3 if n < 0x10000 else 5 if n < 0x100000000 else 9


def spine_bytes(rev: Revision, data: bytes) -> SpineBytes | None:
    """The encoded levels of a revision's spine cut out of its canonical bytes `data` (which `rev` was
    parsed from), for `encode_revision` to reuse when the revision gets a child; None if the spine is not
    of the usual shape or `data` does not end with its canonical encoding.

    Each item of the usual shape has one canonical length, and any other encoding of it is longer, so
    bytes whose spine has exactly the lengths computed here hold the canonical encoding at those places.
    """
    spine = rev.seq
    if type(spine) is not list or not 0 < len(spine) < 24:
        return None
    sizes: list[int] = []
    for level, items in enumerate(spine):
        if type(items) is not list:
            return None
        n = _head_size(len(items))
        try:
            if level == 0:
                for first, second in items:
                    if type(first) is not str or not (second is None or (type(second) is bytes and len(second) == 32)):
                        return None
                    k = len(first) if first.isascii() else len(first.encode())
                    n += (2 if k < 24 else 1 + _head_size(k)) + k + (1 if second is None else 34)
            else:
                for oid, c in items:
                    if type(oid) is not bytes or len(oid) != 32 or type(c) is not int or not 0 <= c < 2**64:
                        return None
                    n += 36 if c < 24 else 37 if c < 0x100 else 35 + _head_size(c)
        except (TypeError, ValueError, UnicodeEncodeError):
            return None  # an item that is not a pair, or a lone surrogate
        sizes.append(n)
    outer = cbor_head(4, len(spine))
    at = len(data) - sum(sizes) - len(outer)
    if at < 10 or data[at - 10:at] != b"\x69treeSpine" or data[at:at + len(outer)] != outer:
        return None
    at += len(outer)
    levels: SpineBytes = []
    for items, size in zip(spine, sizes, strict=True):
        head = cbor_head(4, len(items))
        if data[at:at + len(head)] != head:
            return None
        levels.append((items, data[at + len(head):at + size]))
        at += size
    return levels


_APPEND_OP = b"\x69operation\xa3\x64type\x66append\x67entries"


def _append_fields(rev: Revision) -> bytes | None:
    """The canonical bytes of an append revision's fields up to its spine (`treeSpine` sorts last), or
    None if the revision is not of that shape: every append writes one, and the general encoder's checks
    and key sorting cost as much as its spine."""
    parent, created, op, size = rev.parent, rev.created_at, rev.operation, rev.size
    if (type(parent) is not bytes or len(parent) != 32 or type(created) is not int or type(size) is not int
            or not 0 <= created < 2**64 or not 0 <= size < 2**64 or type(op) is not dict or len(op) != 3
            or op.get("type") != "append"):
        return None
    ids, oids = op.get("entryIds"), op.get("entries")
    if type(ids) is not list or type(oids) is not list:
        return None
    parts = [b"\xa6\x64size", cbor_head(0, size), b"\x64type\x68revision\x66parent\x58\x20", parent,
             b"\x69createdAt", cbor_head(0, created), _APPEND_OP, cbor_head(4, len(oids))]
    for oid in oids:
        if type(oid) is not bytes or len(oid) != 32:
            return None
        parts += (_OID_HEAD, oid)
    parts += (b"\x68entryIds", cbor_head(4, len(ids)))
    for entry_id in ids:
        text = _text(entry_id)
        if text is None:
            return None
        parts.append(text)
    parts.append(b"\x69treeSpine")
    return b"".join(parts)


def _level_bytes(items: list[Item], level: int, old: tuple[list[Item], bytes] | None) -> bytes | None:
    """The encoded items of a spine level, reusing those of `old` where `items` starts with its items."""
    kept = 0
    if old is not None:
        old_items, old_bytes = old
        if items is old_items:
            return old_bytes
        n = len(old_items)
        # The same item objects, not just equal ones (1 == True), so the same bytes.
        if n and len(items) >= n and sum(1 for _ in takewhile(truth, map(is_, items, old_items))) == n:
            kept = n
    parts = _encode_items(items[kept:] if kept else items, level)
    if parts is None:
        return None
    return b"".join([old[1], *parts]) if kept and old is not None else b"".join(parts)


def leaf_hash(entry_id: str, oid: bytes | None) -> bytes:
    """The boundary hash of a leaf item: the entry's oid, or blake3 of the id where it has no entry."""
    # surrogatepass: an id with a lone surrogate cannot be stored, and the canonical encoder refuses it
    # with a clear error when the node or revision is encoded; the cut must not fail before that.
    return oid if oid is not None else blake3.blake3(entry_id.encode("utf-8", "surrogatepass")).digest()


def _ends_chunk(item: Item, level: int, length: int) -> bool:
    """Whether a chunk of `length` items that ends with `item` is cut after it."""
    threshold, most = _LIMITS.get(level, _INNER_LIMITS)
    h = leaf_hash(item[0], item[1]) if level == 0 else item[0]
    return length >= most or int.from_bytes(h[:4], "big") < threshold


def _first_cut(items: Sequence[Item], level: int) -> int | None:
    under = _LIMITS.get(level, _INNER_LIMITS)[0].to_bytes(4, "big")
    for at, item in enumerate(items):
        h = (item[1] if item[1] is not None else leaf_hash(item[0], None)) if level == 0 else item[0]
        if h[:4] < under:
            return at
    return None


def node_fault(node: SeqNode) -> str | None:
    """Why a stored node cannot be one of a tree built by the chunking rule, or None if it can.

    Every stored node is a chunk that the rule closed: it ends at its first content-defined cut, or at
    the size limit. (The last node of each level is the spine, held by the revision, not stored.) A node
    failing this came from elsewhere, and appending to or editing a tree that holds it would not give
    the tree `build` gives.
    """
    most = _LIMITS.get(node.level, _INNER_LIMITS)[1]
    items = node.items
    if len(items) > most:
        return f"it holds {len(items)} items, over the limit of {most}"
    cut = _first_cut(items, node.level)
    if cut is not None and cut < len(items) - 1:
        return f"item {cut} is a cut and should have ended it"
    if cut is None and len(items) < most:
        return "it does not end at a cut, so only a spine could end there"
    return None


def spine_fault(spine: Spine) -> str | None:
    """Why a spine cannot be one the chunking rule builds, or None if it can.

    The leaf level is the list's last leaf: no cut before its last item and at most the limit. Above it,
    each level is the open rest of that level (no cut, under the limit, since the ref that follows ends
    it), and the top level has at least one item besides that ref (a level of one node is the top).
    """
    if not spine:
        return "it has no levels"
    for level, items in enumerate(spine):
        most = _LIMITS.get(level, _INNER_LIMITS)[1]
        ends = len(items) - 1 if level == 0 else len(items)
        cut = _first_cut(items[:ends], level)
        if cut is not None:
            return f"item {cut} of level {level} is a cut and should have ended a node"
        if len(items) > (most if level == 0 else most - 1):
            return f"level {level} holds {len(items)} items, over the limit"
    if len(spine) > 1 and not spine[-1]:
        return "its top level holds only the ref to the level below"
    if len(spine) > 1 and not spine[0]:
        return "its leaf level is empty under a higher level"
    return None


def chunking_fault(obj: Object) -> str | None:
    """Why a stored node or a revision's spine breaks the chunking rule, or None (and for other objects)."""
    if type(obj) is SeqNode:
        fault = node_fault(obj)
        return None if fault is None else f"sequence node is not chunked by the rule: {fault}"
    if type(obj) is Revision:
        fault = spine_fault(obj.seq)
        return None if fault is None else f"revision seq is not a spine the chunking rule gives: {fault}"
    return None


def _cut(items: Sequence[Item], level: int, open_items: Sequence[Item] = ()) -> tuple[list[list[Item]], list[Item]]:
    """Cut one level's items into the chunks that end at a cut (or at the size limit) and the open rest.

    `open_items` come first and are known not to end a chunk (a spine's open level), so are not hashed.
    """
    threshold, most = _LIMITS.get(level, _INNER_LIMITS)
    # The first 4 bytes of a boundary hash, compared as bytes, order as the big-endian number they spell.
    under = threshold.to_bytes(4, "big")
    out: list[list[Item]] = []
    current: list[Item] = list(open_items)
    length = len(current)
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
    return out, current


def _chunks(items: Sequence[Item], level: int) -> list[list[Item]]:
    closed, rest = _cut(items, level)
    return [*closed, rest] if rest else closed


def _count(items: Sequence[Item], level: int) -> int:
    return len(items) if level == 0 else sum(int(c[1]) for c in items)


def _write_level(items: Sequence[Item], level: int, put: PutNode) -> list[Item]:
    return [[put(SeqNode(level, chunk)), _count(chunk, level)] for chunk in _chunks(items, level)]


def _close(refs: list[Item], level: int, put: PutNode) -> ObjectId:
    while len(refs) > 1:
        level += 1
        refs = _write_level(refs, level, put)
    return ObjectId(refs[0][0])


# -- spines: a tree as its revision stores it ---------------------------------------------------------

def count(spine: Spine) -> int:
    """Entries in the list a spine stands for."""
    above: int = sum(c for level in spine[1:] for _, c in level)
    return len(spine[0]) + above


def subtrees(spine: Spine) -> list[tuple[ObjectId, int]]:
    """The stored nodes a spine points to, as (oid, level), in list order; its leaf items follow them."""
    return [(ObjectId(oid), level - 1) for level in range(len(spine) - 1, 0, -1) for oid, _ in spine[level]]


def build(items: Iterable[Item], put: PutNode) -> Spine:
    """The spine of a whole list, writing the nodes left of it."""
    return append([[]], items, put)


def append(spine: Spine, items: Iterable[Sequence[Any]], put: PutNode) -> Spine:
    """Append leaf items ([entry id, oid or None]) to a list's tree; returns the new spine. Reads nothing.

    The items are cut on the leaf level after the spine's leaf; the chunks that end at a cut are the
    nodes that will never change again, and are written; their refs go up a level and are cut the same
    way after that level's spine items. Levels that get no new ref are unchanged. This gives the tree
    `build` gives of the whole list, since a chunk that ends at a cut ends there whatever follows.
    """
    new = [[i, o] for i, o in items]
    if not new:
        return spine
    out: list[list[Item]] = []
    # A spine level holds no cut (the leaf level none before its last item), so those items are not
    # hashed again: only what follows them is.
    level, known, pushed = 0, spine[0][:-1], spine[0][-1:] + new
    while True:
        closed, rest = _cut(pushed, level, known)
        if level == 0 and not rest and closed:
            rest = closed.pop()  # the last leaf is the spine's even when it ends at a cut
        # Above the leaves the level ends with the ref to the spine node below, not written here: a chunk
        # that ends at a cut is followed by it, so it is closed.
        refs = [[put(SeqNode(level, chunk)), _count(chunk, level)] for chunk in closed]
        out.append(rest)
        level += 1
        if level < len(spine):
            if not refs:
                out.extend(spine[level:])
                return out
            known, pushed = spine[level], refs
        elif refs:
            known, pushed = [], refs
        else:
            return out


def unfold(spine: Spine) -> tuple[ObjectId, dict[ObjectId, SeqNode]]:
    """The root id of a spine's tree and its spine nodes by id (nodes that are not stored)."""
    nodes: dict[ObjectId, SeqNode] = {}
    below: Item | None = None
    for level, items in enumerate(spine):
        node = SeqNode(level, [*items, below] if below is not None else list(items))
        oid = node_id(node)
        nodes[oid] = node
        below = [oid, node.count]
    if below is None:
        raise InvalidObject("a spine has at least its leaf level; this one has no levels")
    return ObjectId(below[0]), nodes


def node_id(node: SeqNode) -> ObjectId:
    """The object id of a seq node."""
    return object_id(encode_node(node) or encode_object(node)[1])


def _settle(root: ObjectId, get: GetNode, pending: dict[ObjectId, SeqNode], put: PutNode) -> Spine:
    """The spine of the tree under `root`, writing the nodes in `pending` that are left of it."""
    spine: list[list[Item]] = []
    node = get(root)
    while node.level > 0:
        spine.append(node.items[:-1])
        node = get(ObjectId(node.items[-1][0]))
    spine.append(list(node.items))
    spine.reverse()
    todo = [oid for oid, _ in subtrees(spine)]
    while todo:
        found = pending.pop(todo.pop(), None)
        if found is not None:
            put(found)
            if found.level > 0:
                todo.extend(ObjectId(child) for child, _ in found.items)
    return spine


def splice(spine: Spine, start: int, stop: int, items: Iterable[Item], get: GetNode, put: PutNode) -> Spine:
    """Replace the items at positions [start, stop) with `items`; returns the new spine.

    The result is the spine `build` gives for the edited list. The spine's nodes are made whole (not
    written) for the tree edit, and of the nodes the edit makes only those left of the new spine are
    written.
    """
    new = [[i, o] for i, o in items]
    size = count(spine)
    if not 0 <= start <= stop <= size:
        raise InvalidInput(f"splice range [{start}, {stop}) is outside a list of {size} items")
    if start == stop == size:
        return append(spine, new, put)
    if start == stop and not new:
        return spine
    root, pending = unfold(spine)

    def made(node: SeqNode) -> ObjectId:
        oid = node_id(node)
        pending[oid] = node
        return oid

    def reading(oid: ObjectId) -> SeqNode:
        node = pending.get(oid)
        return node if node is not None else get(oid)

    return _settle(_splice(root, start, stop, new, reading, made), reading, pending, put)


def _splice(root: ObjectId, start: int, stop: int, new: list[Item], get: GetNode, put: PutNode) -> ObjectId:
    """Replace the items at positions [start, stop) of the tree under `root`; returns the new root id.

    The result is the tree `build` gives for the edited list. Chunks left of the change end at cuts the
    change cannot move, so each level is re-cut from the start of the first node the change touches
    until a new cut falls on an old node's end past the change; from there the old nodes are kept, and
    the nodes replaced at one level are the change to splice into the level above. The cost is the
    nodes around the change on each level, not the length of the list.
    """
    top = get(root)
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
            refs.append([put(SeqNode(level, list(current))), _count(current, level)])
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
    node: SeqNode = cursor[level][0]
    return node


def iter_items(spine: Spine, get: GetNode) -> Iterator[tuple[str, ObjectId | None]]:
    """Every (entry id, entry oid or None) pair of a spine's list, in order."""
    for oid, _ in subtrees(spine):
        yield from _node_items(oid, get)
    yield from ((entry_id, oid) for entry_id, oid in spine[0])


_NODE_SLICE = 512


def items_batched(spine: Spine,
                  get_many: Callable[[list[ObjectId]], list[SeqNode]]) -> list[tuple[str, ObjectId | None]]:
    """`iter_items` as a list, reading the stored nodes a level at a time (one `get_many` per level, not
    one read per node): what reading a whole view needs."""
    return _descend(spine, get_many, 0)  # every node read: items only


def items_from(spine: Spine, start: int, get_many: Callable[[list[ObjectId]], list[SeqNode]]
               ) -> list[tuple[str, ObjectId | None]]:
    """The items of a spine's list from position `start` on, reading only the stored nodes that hold
    them, a level at a time (the counts above the leaves say which): what rebuilding a bulk append's
    lists from the end of its view reads. `InvalidObject` if a node is not at the level its parent
    says, or the counts do not reach `start`."""
    skip = start  # items still to pass over, all before (or in) the first node left to read
    parts: list[Any] = []
    for level in range(len(spine) - 1, 0, -1):
        for oid, c in spine[level]:
            if not parts and skip >= c:
                skip -= c
            else:
                parts.append([ObjectId(oid), level - 1])
    while True:
        refs = [part[0] for part in parts if type(part) is list]
        if not refs:
            break
        nodes = iter([node for at in range(0, len(refs), _NODE_SLICE) for node in get_many(refs[at:at + _NODE_SLICE])])
        out: list[Any] = []
        first = True  # the first node read holds position `start`: `skip` is within it
        for part in parts:
            if type(part) is not list:
                out.append(part)
                continue
            node = next(nodes)
            if node.level != part[1]:
                raise InvalidObject(f"seq node {part[0].hex()} is at level {node.level}, where its parent "
                                    f"puts a node of level {part[1]}")
            items = node.items
            if first and skip:
                if node.level == 0:
                    items, skip = items[skip:], 0
                else:
                    at = 0
                    while at < len(items) and skip >= items[at][1]:
                        skip -= items[at][1]
                        at += 1
                    items = items[at:]
                if not items:
                    raise InvalidObject(f"seq node {part[0].hex()} holds fewer items than its parent counts")
            first = False
            if node.level == 0:
                out.extend([(entry_id, oid) for entry_id, oid in items])
            else:
                out.extend([[ObjectId(child), node.level - 1] for child, _ in items])
        parts = out
    if skip > len(spine[0]):
        raise InvalidObject(f"a list of {count(spine)} items has no position {start}")
    parts.extend([(entry_id, oid) for entry_id, oid in spine[0][skip:]])
    return parts


def leaf_refs(spine: Spine, get_many: Callable[[list[ObjectId]], list[SeqNode]]) -> list[Any]:
    """The leaves of a list in order, reading the stored nodes above them a level at a time: each stored
    leaf as its oid (bytes), then the items of the spine's leaf as (entry id, entry oid) tuples. What a
    reader takes leaves with their entries from (`store.base.read_leaves`) reads."""
    return [part[0] if type(part) is list else part for part in _descend(spine, get_many, 1)]


def _descend(spine: Spine, get_many: Callable[[list[ObjectId]], list[SeqNode]], lowest: int) -> list[Any]:
    """The spine's tree read down to level `lowest`: [oid, level] lists for the nodes left unread (level
    0 when `lowest` is 1), (entry id, oid) tuples for items."""
    # Nodes are read a slice of a level at a time, so a level's decoded nodes are not all held at once.
    parts: list[Any] = [[oid, level] for oid, level in subtrees(spine)]
    while True:
        refs = [part[0] for part in parts if type(part) is list and part[1] >= lowest]
        if not refs:
            break
        out: list[Any] = []
        at = 0
        for start in range(0, len(refs), _NODE_SLICE):
            nodes = get_many(refs[start:start + _NODE_SLICE])
            for node in nodes:
                while type(parts[at]) is not list or parts[at][1] < lowest:
                    out.append(parts[at])
                    at += 1
                part = parts[at]
                at += 1
                if node.level != part[1]:
                    raise InvalidObject(f"seq node {part[0].hex()} is at level {node.level}, where its parent "
                                        f"puts a node of level {part[1]}")
                if node.level == 0:
                    out.extend([(entry_id, oid) for entry_id, oid in node.items])
                else:
                    out.extend([[ObjectId(child), node.level - 1] for child, _ in node.items])
            del nodes
        out.extend(parts[at:])
        parts = out
    parts.extend([(entry_id, oid) for entry_id, oid in spine[0]])
    return parts


def packed_order(items: list[Item]) -> list[ObjectId]:
    """The entry oids a leaf names, once each, in the order they first appear: the order a store keeps a
    closed leaf's entries in when it packs them with it (`store.packs`)."""
    return list(dict.fromkeys([oid for _, oid in items if oid is not None]))


def leaf_items_of(data: bytes) -> list[Item] | None:
    """The items of a leaf given as its canonical bytes, decoded without building the node (what a store
    packing it reads: `packed_order` of them); None if the bytes are not a leaf's with items of the usual
    shape ([text, 32-byte id or null])."""
    if not is_leaf_bytes(data):
        return None
    try:
        value = cbor2.loads(data)
    except (cbor2.CBORDecodeError, ValueError):
        return None
    items = value.get("items") if type(value) is dict and value.get("level") == 0 else None
    if type(items) is not list:
        return None
    for item in items:
        if type(item) is not list or len(item) != 2 or type(item[0]) is not str or not (
                item[1] is None or is_oid(item[1])):
            return None
    return items


def is_leaf_bytes(data: bytes) -> bool:
    """Whether canonical bytes may be a leaf's (a seq node at level 0); `parse_object` tells for sure."""
    return data.startswith(NODE_START) and data.endswith(_LEAF_END)


def leaf_length(data: bytes) -> int | None:
    """How many items a leaf's canonical bytes hold, read from their layout without decoding them; None
    if they are not laid out as a leaf's."""
    head = array_head_at(data, len(NODE_START)) if is_leaf_bytes(data) else None
    return None if head is None else head[0]


def _node_items(oid: ObjectId, get: GetNode) -> Iterator[tuple[str, ObjectId | None]]:
    node = get(oid)
    if node.level == 0:
        yield from ((entry_id, oid) for entry_id, oid in node.items)
        return
    for child, _ in node.items:
        yield from _node_items(ObjectId(child), get)


@dataclass
class SeqDiff:
    """What two sides do not share: stored node ids on each side, and the leaves under them (a spine's
    own leaf among them where the other side lacks it)."""

    a_nodes: list[ObjectId] = field(default_factory=list)
    b_nodes: list[ObjectId] = field(default_factory=list)
    a_leaves: list[SeqNode] = field(default_factory=list)
    b_leaves: list[SeqNode] = field(default_factory=list)


def diff(a: Iterable[Spine], b: Iterable[Spine], get: GetNode) -> SeqDiff:
    """Compare the lists of spines `a` with those of spines `b`, skipping equal subtrees.

    Both frontiers start at the stored nodes the spines point to and are expanded from the highest
    level down; a node present on both sides is dropped without being read, so the cost follows the
    size of the difference, not of the lists.
    """
    out = SeqDiff()
    side_a: dict[ObjectId, int] = {}
    side_b: dict[ObjectId, int] = {}
    leaves_a: list[list[Item]] = []
    leaves_b: list[list[Item]] = []
    for spines, side, leaves in ((a, side_a, leaves_a), (b, side_b, leaves_b)):
        for spine in spines:
            side.update(subtrees(spine))
            if spine[0]:
                leaves.append(spine[0])
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
    # A spine's leaf is the other side's stored leaf (or spine leaf) when it holds the same items: a
    # leaf closed since is stored, and the other side still holds it in its spine.
    stored_a, stored_b = [get(oid) for oid in side_a], [get(oid) for oid in side_b]
    inline_a, inline_b = _keyed(leaves_a), _keyed(leaves_b)
    out.a_leaves.extend(n for n in stored_a if not inline_b or _key(n.items) not in inline_b)
    out.b_leaves.extend(n for n in stored_b if not inline_a or _key(n.items) not in inline_a)
    stored_keys_a, stored_keys_b = _keyed(n.items for n in stored_a), _keyed(n.items for n in stored_b)
    out.a_leaves.extend(SeqNode(0, items) for key, items in inline_a.items()
                        if key not in inline_b and key not in stored_keys_b)
    out.b_leaves.extend(SeqNode(0, items) for key, items in inline_b.items()
                        if key not in inline_a and key not in stored_keys_a)
    return out


def _key(items: list[Item]) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple(item) for item in items)


def _keyed(leaves: Iterable[list[Item]]) -> dict[tuple[tuple[Any, ...], ...], list[Item]]:
    return {_key(items): items for items in leaves}
