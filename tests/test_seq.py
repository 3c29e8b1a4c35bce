"""The sequence tree: one list, one root; appends and local edits write few nodes; diffs skip equal parts."""

from __future__ import annotations

import math
from typing import Any

import blake3
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore import seq
from ctxstore.codec import ObjectId
from ctxstore.objects import SeqNode, encode_object


class Nodes:
    """A dict of seq nodes that counts the new ones written."""

    def __init__(self) -> None:
        self.nodes: dict[ObjectId, SeqNode] = {}
        self.new = 0
        self.new_bytes = 0

    def put(self, node: SeqNode) -> ObjectId:
        node.check()
        assert seq.misplaced_cut(node) is None  # every node written follows the chunking rule
        oid, data = encode_object(node)
        if oid not in self.nodes:
            self.nodes[oid] = node
            self.new += 1
            self.new_bytes += len(data)
        return oid

    def get(self, oid: ObjectId) -> SeqNode:
        return self.nodes[oid]

    def reset(self) -> None:
        self.new = 0
        self.new_bytes = 0


def item(n: int, with_oid: bool = True) -> list[Any]:
    entry_id = f"e{n}"
    return [entry_id, blake3.blake3(entry_id.encode()).digest() if with_oid else None]


def items(count: int, start: int = 0) -> list[list[Any]]:
    return [item(n) for n in range(start, start + count)]


def listed(root: ObjectId, nodes: Nodes) -> list[list[Any]]:
    return [[i, o] for i, o in seq.iter_items(root, nodes.get)]


def depth(root: ObjectId, nodes: Nodes) -> int:
    return nodes.get(root).level + 1


def test_empty_list_is_an_empty_leaf() -> None:
    nodes = Nodes()
    root = seq.build([], nodes.put)
    assert nodes.get(root) == SeqNode(0, [])
    assert listed(root, nodes) == []
    assert seq.append(root, [], nodes.get, nodes.put) == root


def test_build_round_trips_and_counts() -> None:
    nodes = Nodes()
    values = items(5000)
    root = seq.build(values, nodes.put)
    assert listed(root, nodes) == values
    assert nodes.get(root).count == 5000
    assert nodes.get(root).level >= 1


def test_entries_without_oid_are_kept() -> None:
    nodes = Nodes()
    values = [item(n, with_oid=n % 3 != 0) for n in range(300)]
    root = seq.build(values, nodes.put)
    assert listed(root, nodes) == values


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=1500),
       st.lists(st.integers(min_value=1, max_value=300), max_size=12),
       st.randoms(use_true_random=False))
def test_same_list_same_root_however_it_was_built(count: int, batches: list[int], rnd: Any) -> None:
    """Building at once and appending in random batches give one root."""
    values = items(count)
    nodes = Nodes()
    whole = seq.build(values, nodes.put)
    root = seq.build([], nodes.put)
    at = 0
    for size in [*batches, count]:
        root = seq.append(root, values[at: at + size], nodes.get, nodes.put)
        at = min(count, at + size)
        if at == count:
            break
    assert root == whole
    # A build in another store gives the same ids.
    other = Nodes()
    assert seq.build(values, other.put) == whole
    # Any split point: build of a prefix and append of the rest.
    cut = rnd.randint(0, count)
    assert seq.append(seq.build(values[:cut], other.put), values[cut:], other.get, other.put) == whole


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2000), min_size=1, max_size=600))
def test_root_depends_only_on_the_list(ids: list[int]) -> None:
    """Repeated and out-of-order ids too; different lists give different roots."""
    values = [item(n) for n in ids]
    nodes = Nodes()
    root = seq.build(values, nodes.put)
    assert listed(root, nodes) == values
    assert seq.build([*values, item(99999)], nodes.put) != root
    assert seq.build(values[1:], nodes.put) != root


def test_chunks_are_bounded() -> None:
    """Every node holds at most 4 x its target items, and the tree is shallow."""
    nodes = Nodes()
    root = seq.build(items(20_000), nodes.put)
    for node in nodes.nodes.values():
        limit = 4 * (seq.LEAF_TARGET if node.level == 0 else seq.INNER_TARGET)
        assert 1 <= len(node.items) <= limit
    assert depth(root, nodes) <= 2 + math.ceil(math.log(20_000, seq.INNER_TARGET))


def test_identical_ids_and_no_boundaries_still_chunk() -> None:
    """A run of items that never hits a boundary is cut at the maximum size."""
    nodes = Nodes()
    # Find an item whose leaf hash is not a boundary, and repeat it.
    threshold = 2**32 // seq.LEAF_TARGET
    n = next(n for n in range(1000) if int.from_bytes(item(n)[1][:4], "big") >= threshold)
    values = [item(n)] * 1000
    root = seq.build(values, nodes.put)
    assert listed(root, nodes) == values
    assert max(len(node.items) for node in nodes.nodes.values() if node.level == 0) == 4 * seq.LEAF_TARGET
    assert seq.append(seq.build(values[:500], nodes.put), values[500:], nodes.get, nodes.put) == root


def test_append_writes_log_n_nodes() -> None:
    """Appending one item to 10,000 writes one node per level, and few bytes."""
    nodes = Nodes()
    root = seq.build(items(10_000), nodes.put)
    levels = depth(root, nodes)
    written = []
    written_bytes = []
    for n in range(10_000, 10_050):
        nodes.reset()
        root = seq.append(root, [item(n)], nodes.get, nodes.put)
        written.append(nodes.new)
        written_bytes.append(nodes.new_bytes)
    assert max(written) <= levels + 1
    assert sum(written) / len(written) <= levels
    # Bytes follow the spine, not the list: far below one leaf per 100 items.
    spine_bytes = 4 * seq.LEAF_TARGET * 60 + levels * 4 * seq.INNER_TARGET * 60
    assert sum(written_bytes) / len(written_bytes) < spine_bytes
    assert listed(root, nodes) == items(10_050)


def test_append_cost_does_not_grow_with_size() -> None:
    small, large = Nodes(), Nodes()
    root_s = seq.build(items(1_000), small.put)
    root_l = seq.build(items(100_000), large.put)
    small.reset()
    large.reset()
    for n in range(200):
        root_s = seq.append(root_s, [item(10**6 + n)], small.get, small.put)
        root_l = seq.append(root_l, [item(10**6 + n)], large.get, large.put)
    # 100x the items: a couple more levels at most, never 100x the nodes.
    assert large.new <= small.new + 2 * 200 + 200
    assert large.new_bytes <= 2 * small.new_bytes + 200 * 2000


def test_local_edit_in_the_middle_writes_few_nodes() -> None:
    nodes = Nodes()
    values = items(10_000)
    root = seq.build(values, nodes.put)
    levels = depth(root, nodes)
    for at in (10, 5000, 9990):
        for edited in ([*values[:at], item(99999), *values[at + 1:]],   # replace
                       values[:at] + values[at + 1:],                     # remove
                       [*values[:at], item(88888), item(77777), *values[at:]]):  # insert
            nodes.reset()
            new_root = seq.build(edited, nodes.put)
            # A changed leaf can merge with its neighbour or split: a few nodes per level.
            assert nodes.new <= 3 * levels
            assert listed(new_root, nodes) == edited


def test_diff_of_equal_trees_is_empty() -> None:
    nodes = Nodes()
    root = seq.build(items(3000), nodes.put)
    result = seq.diff([root], [root], nodes.get)
    assert result.a_nodes == [] and result.b_nodes == [] and result.a_leaves == [] and result.b_leaves == []


def test_diff_returns_only_differing_leaves() -> None:
    nodes = Nodes()
    values = items(10_000)
    a = seq.build(values, nodes.put)
    changed = [*values[:4000], item(55555), *values[4001:]]
    b = seq.build(changed, nodes.put)
    reads: list[ObjectId] = []

    def get(oid: ObjectId) -> SeqNode:
        reads.append(oid)
        return nodes.get(oid)

    result = seq.diff([b], [a], get)
    a_ids = {i for leaf in result.a_leaves for i, _ in leaf.items}
    b_ids = {i for leaf in result.b_leaves for i, _ in leaf.items}
    assert "e55555" in a_ids and "e55555" not in b_ids
    assert "e4000" in b_ids and "e4000" not in a_ids
    assert len(result.a_leaves) <= 3 and len(result.b_leaves) <= 3
    assert len(a_ids) <= 3 * 4 * seq.LEAF_TARGET
    # Only nodes along the changed paths are read, not the 300-odd leaves.
    assert len(set(reads)) <= 6 * depth(a, nodes)
    every_leaf = {oid for oid, node in nodes.nodes.items() if node.level == 0}
    assert {encode_object(leaf)[0] for leaf in result.a_leaves} <= every_leaf


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=300),
       st.lists(st.integers(min_value=0, max_value=400), max_size=300))
def test_diff_leaves_cover_the_difference(xs: list[int], ys: list[int]) -> None:
    """Every leaf of one tree that the other lacks is reported, and (for distinct items) nothing shared."""
    nodes = Nodes()
    a = seq.build([item(n) for n in xs], nodes.put)
    b = seq.build([item(n) for n in ys], nodes.put)
    result = seq.diff([a], [b], nodes.get)

    def leaves(root: ObjectId) -> set[ObjectId]:
        node = nodes.get(root)
        if node.level == 0:
            return {root}
        return set().union(*(leaves(ObjectId(child)) for child, _ in node.items))

    a_leaves, b_leaves = leaves(a), leaves(b)
    got_a = {encode_object(leaf)[0] for leaf in result.a_leaves}
    got_b = {encode_object(leaf)[0] for leaf in result.b_leaves}
    # Exactly the difference, except that a leaf repeated inside a shared subtree may also be reported.
    assert a_leaves - b_leaves <= got_a <= a_leaves
    assert b_leaves - a_leaves <= got_b <= b_leaves
    if len(set(xs)) == len(xs) and len(set(ys)) == len(ys):
        assert got_a == a_leaves - b_leaves and got_b == b_leaves - a_leaves


def test_diff_of_several_roots() -> None:
    nodes = Nodes()
    r1 = seq.build(items(500), nodes.put)
    r2 = seq.build(items(600), nodes.put)
    r3 = seq.build(items(700), nodes.put)
    result = seq.diff([r3], [r1, r2], nodes.get)
    ids = {i for leaf in result.a_leaves for i, _ in leaf.items}
    assert "e650" in ids and "e100" not in ids


# -- splice ------------------------------------------------------------------------------------------


def spliced(values: list[list[Any]], start: int, stop: int, new: list[list[Any]]) -> list[list[Any]]:
    return [*values[:start], *new, *values[stop:]]


@settings(max_examples=300, deadline=None)
@given(st.data(), st.integers(min_value=0, max_value=3000), st.booleans())
def test_splice_gives_the_tree_build_gives(data: st.DataObject, count: int, repeat: bool) -> None:
    """Any replacement of any range, on any size of tree, gives the root of the edited list."""
    base = 10**6 if repeat else 0
    values = [item(base + (n % 7 if repeat else n)) for n in range(count)]
    nodes = Nodes()
    root = seq.build(values, nodes.put)
    start = data.draw(st.integers(min_value=0, max_value=count))
    stop = data.draw(st.one_of(st.integers(min_value=start, max_value=min(count, start + 5)),
                               st.integers(min_value=start, max_value=count)))
    new = [item(n) for n in data.draw(st.lists(st.integers(min_value=50_000, max_value=60_000), max_size=300))]
    expected = spliced(values, start, stop, new)
    result = seq.splice(root, start, stop, new, nodes.get, nodes.put)
    assert result == seq.build(expected, Nodes().put)
    assert listed(result, nodes) == expected


def test_splice_edge_cases() -> None:
    for count in (0, 1, 31, 32, 33, 500, 5000):
        values = items(count)
        nodes = Nodes()
        root = seq.build(values, nodes.put)
        cases = [(0, 0, []), (0, count, []), (0, count, items(3, 10**6)), (count, count, items(2, 10**6)),
                 (0, 0, items(1, 10**6)), (count // 2, count // 2, items(700, 10**6)),
                 (0, count // 2, []), (count // 2, count, []), (max(count - 1, 0), count, [])]
        for start, stop, new in cases:
            expected = spliced(values, start, stop, new)
            result = seq.splice(root, start, stop, new, nodes.get, nodes.put)
            assert result == seq.build(expected, Nodes().put), (count, start, stop, len(new))


def test_splice_refuses_a_range_outside_the_list() -> None:
    nodes = Nodes()
    root = seq.build(items(10), nodes.put)
    for start, stop in ((-1, 2), (3, 2), (0, 11), (11, 11)):
        try:
            seq.splice(root, start, stop, [], nodes.get, nodes.put)
        except ValueError:
            continue
        raise AssertionError(f"splice({start}, {stop}) on 10 items was accepted")


def test_splice_in_the_middle_writes_and_reads_few_nodes() -> None:
    nodes = Nodes()
    values = items(10_000)
    root = seq.build(values, nodes.put)
    levels = depth(root, nodes)
    for start, stop, new in ((5000, 5001, [item(99_999)]), (5000, 5001, []), (5000, 5000, items(2, 88_000)),
                             (10, 40, items(5, 77_000)), (9990, 10_000, [])):
        reads: list[ObjectId] = []

        def get(oid: ObjectId, reads: list[ObjectId] = reads) -> SeqNode:
            reads.append(oid)
            return nodes.get(oid)

        nodes.reset()
        result = seq.splice(root, start, stop, new, get, nodes.put)
        assert result == seq.build(spliced(values, start, stop, new), Nodes().put)
        assert nodes.new <= 3 * levels
        assert len(reads) <= 4 * levels


def test_splice_that_leaves_one_leaf_gives_a_leaf_root() -> None:
    """Removing all but the last leaf's items leaves that leaf as the root, as `build` does."""
    nodes = Nodes()
    values = items(2000)
    root = seq.build(values, nodes.put)
    for keep in (1, 2, 40):
        result = seq.splice(root, 0, 2000 - keep, [], nodes.get, nodes.put)
        assert result == seq.build(values[-keep:], Nodes().put)
        result = seq.splice(root, keep, 2000, [], nodes.get, nodes.put)
        assert result == seq.build(values[:keep], Nodes().put)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_splice_on_deep_trees(data: st.DataObject) -> None:
    """With tiny chunks (trees of many levels), chained splices still give `build`'s tree."""
    saved = seq._LIMITS, seq._INNER_LIMITS
    seq._LIMITS, seq._INNER_LIMITS = {0: (2**32 // 3, 6)}, (2**32 // 2, 3)
    try:
        count = data.draw(st.integers(min_value=0, max_value=400))
        values = items(count)
        nodes = Nodes()
        root = seq.build(values, nodes.put)
        for _ in range(3):
            start = data.draw(st.integers(min_value=0, max_value=len(values)))
            stop = data.draw(st.integers(min_value=start, max_value=len(values)))
            new = [item(n) for n in data.draw(st.lists(st.integers(min_value=10**5, max_value=10**6),
                                                       max_size=30))]
            values = spliced(values, start, stop, new)
            root = seq.splice(root, start, stop, new, nodes.get, nodes.put)
            assert root == seq.build(values, Nodes().put)
    finally:
        seq._LIMITS, seq._INNER_LIMITS = saved


_oids = st.binary(min_size=32, max_size=32)
_leaf_items = st.lists(st.tuples(st.text(max_size=300), st.none() | _oids).map(list), max_size=300)
_inner_items = st.lists(st.tuples(_oids, st.integers(0, 2**64 - 1)).map(list), min_size=1, max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(st.just(0), _leaf_items), st.tuples(st.integers(1, 23), _inner_items)))
def test_the_direct_node_encoder_writes_the_canonical_bytes(case: tuple[int, list[list[Any]]]) -> None:
    level, items = case
    node = SeqNode(level, items)
    assert seq.encode_node(node) == encode_object(node)[1]


@given(st.sampled_from([
    SeqNode(0, [["a", b"short"]]), SeqNode(0, [[b"x" * 32, 1]]), SeqNode(1, [["a", b"x" * 32]]),
    SeqNode(1, [[b"x" * 32, True]]), SeqNode(1, [[b"x" * 32, 2**64]]), SeqNode(1, [[b"x" * 32, -1]]),
    SeqNode(0, [["a", None, 1]]), SeqNode(0, [("a", None)]), SeqNode(30, [[b"x" * 32, 1]]),
    SeqNode(0, [["\ud800", None]]),
]))
def test_the_direct_node_encoder_leaves_unusual_nodes_to_the_general_encoder(node: SeqNode) -> None:
    assert seq.encode_node(node) is None


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.integers(0, 2**32))
def test_nodes_encoded_by_reusing_the_last_ones_are_canonical_and_build_the_same_tree(
        batches: list[int], salt: int) -> None:
    from ctxstore.history import MessageHistory
    from ctxstore.objects import parse_object

    history = MessageHistory()
    n = 0
    for size in batches:  # appends of varied sizes, so levels fill, cut and grow
        history = history.extend([{"role": "user", "content": f"{salt} {n + i}"} for i in range(size)])
        n += size
    for oid, data in history.workspace.pending():
        obj = parse_object(data)
        assert encode_object(obj) == (oid, data)
    ws = history.workspace
    rev = ws.revision(bytes.fromhex(history.revision_id))
    items = [[i, o] for i, o in seq.iter_items(rev.seq, ws.node)]
    assert len(items) == n
    assert seq.build(items, Nodes().put) == rev.seq


def test_a_node_that_does_not_extend_the_base_is_encoded_whole() -> None:
    ids = [blake3.blake3(bytes([i])).digest() for i in range(6)]
    old = SeqNode(1, [[ids[0], 5], [ids[1], 7], [ids[2], 9]])
    old_bytes = encode_object(old)[1]
    for items in ([[ids[3], 1]], [old.items[0], [ids[4], 2]], [*old.items[:2], [ids[2], 9]],
                  [*old.items, [ids[5], 3]], old.items[:2]):
        node = SeqNode(1, items)
        assert seq.encode_node(node, (old, old_bytes)) == encode_object(node)[1]
    assert seq.encode_node(SeqNode(0, [["a", None]]), (old, old_bytes)) == encode_object(
        SeqNode(0, [["a", None]]))[1]


def _cut_item(start: int, is_cut: bool) -> list[Any]:
    """The first item from `start` on whose boundary hash is (or is not) a cut at the leaf level."""
    n = start
    while True:
        candidate = item(n)
        if (int.from_bytes(candidate[1][:4], "big") < 2**32 // seq.LEAF_TARGET) == is_cut:
            return candidate
        n += 1


def test_misplaced_cut_finds_a_cut_before_the_end_and_an_overfull_node() -> None:
    plain = [_cut_item(n * 1000, False) for n in range(5)]
    cut = _cut_item(0, True)
    assert seq.misplaced_cut(SeqNode(0, [*plain, cut])) is None  # a cut ends the node: fine
    assert seq.misplaced_cut(SeqNode(0, [*plain[:2], cut, *plain[2:]])) == 2
    assert seq.misplaced_cut(SeqNode(0, [])) is None
    assert seq.misplaced_cut(SeqNode(0, [_cut_item(n * 1000, False) for n in range(4 * seq.LEAF_TARGET + 1)])) \
        == 4 * seq.LEAF_TARGET - 1
