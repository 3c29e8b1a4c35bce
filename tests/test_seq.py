"""The sequence tree: one list, one tree held as its spine; appends write only closed chunks, local edits
write few nodes, diffs skip equal parts."""

from __future__ import annotations

import itertools
import math
from typing import Any

import blake3
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore.format import seq
from ctxstore.format.objects import Blob, Revision, SeqNode, encode_object
from ctxstore.ids import ObjectId

Items = list[list[Any]]


class Nodes:
    """A dict of seq nodes that checks every node put and counts the new ones."""

    def __init__(self) -> None:
        self.nodes: dict[ObjectId, SeqNode] = {}
        self.new = 0
        self.puts = 0
        self.new_bytes = 0

    def put(self, node: SeqNode) -> ObjectId:
        node.check()  # a stored node has items
        fault = seq.node_fault(node)
        assert fault is None, f"a node put breaks the chunking rule: {fault}"
        oid, data = encode_object(node)
        assert seq.node_id(node) == oid
        self.puts += 1
        if oid not in self.nodes:
            self.nodes[oid] = node
            self.new += 1
            self.new_bytes += len(data)
        return oid

    def get(self, oid: ObjectId) -> SeqNode:
        return self.nodes[oid]

    def reset(self) -> None:
        self.new = 0
        self.puts = 0
        self.new_bytes = 0


def no_reads(oid: ObjectId) -> SeqNode:
    raise AssertionError(f"read node {oid.hex()} where no read was expected")


def item(n: int, with_oid: bool = True) -> list[Any]:
    entry_id = f"e{n}"
    return [entry_id, blake3.blake3(entry_id.encode()).digest() if with_oid else None]


def items(count: int, start: int = 0) -> Items:
    return [item(n) for n in range(start, start + count)]


def listed(spine: seq.Spine, nodes: Nodes) -> Items:
    return [[i, o] for i, o in seq.iter_items(spine, nodes.get)]


def checked(spine: seq.Spine, values: Items, nodes: Nodes) -> seq.Spine:
    """`spine` after asserting it is a well-formed spine of `values` whose stored nodes are all in `nodes`."""
    assert seq.spine_fault(spine) is None, seq.spine_fault(spine)
    assert seq.count(spine) == len(values)
    assert listed(spine, nodes) == values
    return spine


# -- a reference: the whole prolly tree, built level by level in one go -------------------------------


def _limits(level: int) -> tuple[int, int]:
    # Read at call time, so the deep-tree tests' small chunk targets apply here too.
    return seq._LIMITS.get(level, seq._INNER_LIMITS)


def _is_cut(entry: list[Any], level: int) -> bool:
    if level == 0:
        h = entry[1] if entry[1] is not None else blake3.blake3(entry[0].encode()).digest()
    else:
        h = entry[0]
    return int.from_bytes(h[:4], "big") < _limits(level)[0]


def reference_tree(values: Items) -> list[list[SeqNode]]:
    """Every level of the tree of `values`, leaves first, each level's nodes in order; the last is the root.

    Written independently of `seq`: cut each level after an item whose boundary hash is under the threshold
    or when the chunk reaches the limit, and go up until a level has one node.
    """
    level, row = 0, values
    levels: list[list[SeqNode]] = []
    while True:
        chunks: list[Items] = []
        current: Items = []
        for entry in row:
            current.append(entry)
            if _is_cut(entry, level) or len(current) >= _limits(level)[1]:
                chunks.append(current)
                current = []
        if current or not chunks:
            chunks.append(current)
        levels.append([SeqNode(level, chunk) for chunk in chunks])
        if len(chunks) == 1:
            return levels
        row = [[encode_object(node)[0], node.count] for node in levels[-1]]
        level += 1


def reference_spine(levels: list[list[SeqNode]]) -> seq.Spine:
    return [row[-1].items if k == 0 else row[-1].items[:-1] for k, row in enumerate(levels)]


def oid_of(node: SeqNode) -> ObjectId:
    return encode_object(node)[0]


def assert_is_the_tree(spine: seq.Spine, values: Items, nodes: Nodes) -> None:
    """The spine and the stored nodes are exactly the prolly tree a whole build of `values` gives."""
    levels = reference_tree(values)
    assert spine == reference_spine(levels)
    root, unfolded = seq.unfold(spine)
    assert root == oid_of(levels[-1][0])
    assert set(unfolded) == {oid_of(row[-1]) for row in levels}
    assert all(oid == oid_of(node) for oid, node in unfolded.items())
    # Every node left of the spine is stored; nothing outside the tree is reachable from the spine.
    tree = {oid_of(node) for row in levels for node in row[:-1]}
    assert tree <= set(nodes.nodes)
    # The spine points to closed nodes of the tree, each on the level `subtrees` names.
    for oid, level in seq.subtrees(spine):
        assert oid in {oid_of(node) for node in levels[level][:-1]}


# -- build, append, iterate ---------------------------------------------------------------------------


def test_empty_list_is_one_empty_level() -> None:
    nodes = Nodes()
    spine = seq.build([], nodes.put)
    assert spine == [[]]
    assert nodes.puts == 0  # the empty leaf is not an object
    assert seq.count(spine) == 0 and listed(spine, nodes) == [] and seq.subtrees(spine) == []
    assert seq.spine_fault(spine) is None
    assert seq.append(spine, [], nodes.put) == [[]]
    root, unfolded = seq.unfold(spine)
    assert unfolded == {root: SeqNode(0, [])} and root == oid_of(SeqNode(0, []))


def test_build_round_trips_and_counts() -> None:
    nodes = Nodes()
    values = items(5000)
    spine = checked(seq.build(values, nodes.put), values, nodes)
    assert len(spine) >= 3
    assert_is_the_tree(spine, values, nodes)
    # The spine's counts add up: its stored subtrees, then its own leaf.
    assert sum(nodes.get(oid).count for oid, _ in seq.subtrees(spine)) + len(spine[0]) == 5000
    assert all(nodes.get(oid).level == level for oid, level in seq.subtrees(spine))


def test_a_short_list_is_one_leaf_and_stores_nothing() -> None:
    nodes = Nodes()
    values = items(3)
    spine = seq.build(values, nodes.put)
    if len(spine) == 1:  # unless one of the three items is a cut
        assert spine == [values] and nodes.puts == 0
    assert_is_the_tree(spine, values, nodes)


def test_entries_without_oid_are_kept() -> None:
    nodes = Nodes()
    values = [item(n, with_oid=n % 3 != 0) for n in range(300)]
    spine = checked(seq.build(values, nodes.put), values, nodes)
    assert_is_the_tree(spine, values, nodes)


def test_the_chunking_rule_is_the_documented_one() -> None:
    assert seq._LIMITS[0] == (2**32 // seq.LEAF_TARGET, 4 * seq.LEAF_TARGET)
    assert seq._INNER_LIMITS == (2**32 // seq.INNER_TARGET, 4 * seq.INNER_TARGET)
    assert seq.leaf_hash("x", None) == blake3.blake3(b"x").digest()
    assert seq.leaf_hash("x", b"o" * 32) == b"o" * 32


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=1500),
       st.lists(st.integers(min_value=1, max_value=300), max_size=12),
       st.randoms(use_true_random=False))
def test_same_list_same_spine_however_it_was_built(count: int, batches: list[int], rnd: Any) -> None:
    """Building at once and appending in any batches give one spine, and the tree a whole build gives."""
    values = items(count)
    nodes = Nodes()
    whole = seq.build(values, nodes.put)
    assert_is_the_tree(whole, values, nodes)
    appended = Nodes()
    spine = seq.build([], appended.put)
    at = 0
    for size in [*batches, count]:
        spine = seq.append(spine, values[at: at + size], appended.put)
        at = min(count, at + size)
        checked(spine, values[:at], appended)
        if at == count:
            break
    assert spine == whole
    assert set(appended.nodes) == set(nodes.nodes)  # the same stored nodes, no more
    # Any split point: build of a prefix and append of the rest; appending nothing changes nothing.
    cut = rnd.randint(0, count)
    other = Nodes()
    prefix = seq.build(values[:cut], other.put)
    assert seq.append(prefix, [], other.put) == prefix
    assert seq.append(prefix, values[cut:], other.put) == whole
    # An append at the end through splice reads nothing either.
    assert seq.splice(prefix, cut, cut, values[cut:], no_reads, other.put) == whole


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2000), max_size=1200),
       st.lists(st.integers(min_value=0, max_value=40), max_size=60))
def test_spine_is_the_whole_tree_for_any_list(ids: list[int], more: list[int]) -> None:
    """Repeated and out-of-order ids too; single-item appends keep the tree; different lists differ."""
    values = [item(n) for n in ids]
    nodes = Nodes()
    spine = checked(seq.build(values, nodes.put), values, nodes)
    assert_is_the_tree(spine, values, nodes)
    for n in more:
        spine = seq.append(spine, [item(n)], nodes.put)
        values = [*values, item(n)]
    checked(spine, values, nodes)
    assert_is_the_tree(spine, values, nodes)
    assert seq.build([*values, item(99999)], Nodes().put) != spine
    if values:
        assert seq.unfold(seq.build(values[1:], Nodes().put))[0] != seq.unfold(spine)[0]


def test_chunks_are_bounded() -> None:
    """Every node holds at most 4 x its target items, and the tree is shallow."""
    nodes = Nodes()
    values = items(20_000)
    spine = checked(seq.build(values, nodes.put), values, nodes)
    _, unfolded = seq.unfold(spine)
    for node in [*nodes.nodes.values(), *unfolded.values()]:
        limit = 4 * (seq.LEAF_TARGET if node.level == 0 else seq.INNER_TARGET)
        assert 1 <= len(node.items) <= limit
    assert len(spine) <= 2 + math.ceil(math.log(20_000, seq.INNER_TARGET))


def _plain_item() -> list[Any]:
    """An item whose leaf hash is not a boundary."""
    threshold = 2**32 // seq.LEAF_TARGET
    return next(item(n) for n in range(1000) if int.from_bytes(item(n)[1][:4], "big") >= threshold)


def test_identical_ids_and_no_boundaries_still_chunk() -> None:
    """A run of items that never hits a boundary is cut at the maximum size."""
    nodes = Nodes()
    values = [_plain_item()] * 1000
    spine = checked(seq.build(values, nodes.put), values, nodes)
    assert max(len(node.items) for node in nodes.nodes.values() if node.level == 0) == 4 * seq.LEAF_TARGET
    assert seq.append(seq.build(values[:500], nodes.put), values[500:], nodes.put) == spine
    assert_is_the_tree(spine, values, nodes)


def test_append_puts_only_closed_chunks() -> None:
    """A single-item append puts at most one node per level, and on average far fewer than one."""
    nodes = Nodes()
    spine = seq.build(items(100_000), nodes.put)
    puts = []
    for n in range(100_000, 102_000):
        nodes.reset()
        spine = seq.append(spine, [item(n)], nodes.put)
        puts.append(nodes.puts)
        # One new item closes at most one chunk per level below the new top.
        assert nodes.puts <= len(spine) - 1
    assert max(puts) <= 4
    # A leaf closes about once per LEAF_TARGET items; the levels above close still more rarely.
    assert sum(puts) / len(puts) < 1 / 8
    assert sum(puts) > 0
    checked(spine, items(102_000), nodes)


def test_append_cost_does_not_grow_with_size() -> None:
    small, large = Nodes(), Nodes()
    spine_s = seq.build(items(1_000), small.put)
    spine_l = seq.build(items(50_000), large.put)
    small.reset()
    large.reset()
    for n in range(300):
        spine_s = seq.append(spine_s, [item(10**6 + n)], small.put)
        spine_l = seq.append(spine_l, [item(10**6 + n)], large.put)
    # 50x the items: the same leaves close, and a few more levels above, never 50x the nodes.
    assert large.puts <= small.puts + 2 * 300 // seq.INNER_TARGET + 4
    assert large.new_bytes <= 2 * small.new_bytes + 4 * 2000


def test_local_edit_in_the_middle_writes_few_nodes() -> None:
    nodes = Nodes()
    values = items(10_000)
    spine = seq.build(values, nodes.put)
    levels = len(spine)
    for at in (10, 5000, 9990):
        for edited in ([*values[:at], item(99999), *values[at + 1:]],   # replace
                       values[:at] + values[at + 1:],                     # remove
                       [*values[:at], item(88888), item(77777), *values[at:]]):  # insert
            nodes.reset()
            new_spine = seq.build(edited, nodes.put)
            # A changed leaf can merge with its neighbour or split: a few nodes per level.
            assert nodes.new <= 3 * levels
            checked(new_spine, edited, nodes)


# -- diff ---------------------------------------------------------------------------------------------


def test_diff_of_equal_spines_is_empty() -> None:
    nodes = Nodes()
    spine = seq.build(items(3000), nodes.put)
    result = seq.diff([spine], [spine], no_reads)
    assert result == seq.SeqDiff()
    assert seq.diff([[[]]], [[[]]], no_reads) == seq.SeqDiff()


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
    assert "e9999" not in a_ids | b_ids  # the shared spine leaf is not reported
    assert len(result.a_leaves) <= 3 and len(result.b_leaves) <= 3
    assert len(a_ids) <= 3 * 4 * seq.LEAF_TARGET
    # Only nodes along the changed paths are read, not the 300-odd leaves.
    assert len(set(reads)) <= 6 * len(a)
    # The node lists hold stored nodes only.
    assert set(result.a_nodes) | set(result.b_nodes) <= set(nodes.nodes)
    every_leaf = {oid for oid, node in nodes.nodes.items() if node.level == 0}
    assert {oid_of(leaf) for leaf in result.a_leaves} <= every_leaf


def test_diff_reports_a_spine_leaf_the_other_side_lacks() -> None:
    nodes = Nodes()
    values = items(2000)
    a = seq.build(values, nodes.put)
    b = seq.append(a, [item(10**6)], nodes.put)
    result = seq.diff([a], [b], nodes.get)
    assert result.b_leaves and result.b_leaves[-1].items[-1] == item(10**6)
    assert all(leaf.level == 0 and leaf.items for leaf in [*result.a_leaves, *result.b_leaves])
    # The spine nodes themselves are not stored, so never listed as nodes.
    assert set(result.a_nodes) | set(result.b_nodes) <= set(nodes.nodes)
    # Against an empty list: every leaf of the other side.
    every = seq.diff([[[]]], [b], nodes.get)
    assert every.a_leaves == [] and every.a_nodes == []
    assert sorted(i for leaf in every.b_leaves for i, _ in leaf.items) == sorted(i for i, _ in [*values,
                                                                                              item(10**6)])


def test_diff_does_not_report_a_spine_leaf_the_other_side_stores() -> None:
    """A list that ends at a cut, and the same list with one more item: its spine leaf is the longer
    list's stored leaf, so the only leaf that differs is the longer list's new spine leaf."""
    cut = _cut_item(40, True)
    shorter = [*items(int(cut[0][1:])), cut]
    nodes = Nodes()
    b = seq.build(shorter, nodes.put)
    a = seq.append(b, [item(10**6)], nodes.put)
    assert a[0] == [item(10**6)] and oid_of(SeqNode(0, b[0])) in nodes.nodes
    result = seq.diff([a], [b], nodes.get)
    assert [leaf.items for leaf in result.a_leaves] == [[item(10**6)]]
    assert result.b_leaves == []


def _all_leaves(spine: seq.Spine, nodes: Nodes) -> set[ObjectId]:
    """The ids of every leaf of a spine's tree, its own leaf included (when it has items)."""
    def under(oid: ObjectId) -> set[ObjectId]:
        node = nodes.get(oid)
        if node.level == 0:
            return {oid}
        return set().union(*(under(ObjectId(child)) for child, _ in node.items))

    found = set().union(*(under(oid) for oid, _ in seq.subtrees(spine)))
    return found | {oid_of(SeqNode(0, spine[0]))} if spine[0] else found


def _assert_diff_leaves_cover(a: seq.Spine, b: seq.Spine, nodes: Nodes) -> seq.SeqDiff:
    """`diff` reports every leaf one side has and the other lacks, and only leaves of its own side."""
    result = seq.diff([a], [b], nodes.get)
    a_leaves, b_leaves = _all_leaves(a, nodes), _all_leaves(b, nodes)
    got_a = {oid_of(leaf) for leaf in result.a_leaves}
    got_b = {oid_of(leaf) for leaf in result.b_leaves}
    assert a_leaves - b_leaves <= got_a <= a_leaves
    assert b_leaves - a_leaves <= got_b <= b_leaves
    return result


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=400), max_size=600),
       st.lists(st.integers(min_value=0, max_value=400), max_size=600),
       st.booleans())
def test_diff_leaves_cover_the_difference(xs: list[int], ys: list[int], share: bool) -> None:
    """Every leaf of one tree that the other lacks is reported, and nothing that is not a leaf of its side."""
    nodes = Nodes()
    if share:  # a common prefix, so that some subtrees are equal
        ys = [*xs[: len(xs) // 2], *ys]
    a = seq.build([item(n) for n in xs], nodes.put)
    b = seq.build([item(n) for n in ys], nodes.put)
    result = _assert_diff_leaves_cover(a, b, nodes)
    assert set(result.a_nodes) | set(result.b_nodes) <= set(nodes.nodes)
    got_a = {oid_of(leaf) for leaf in result.a_leaves}
    got_b = {oid_of(leaf) for leaf in result.b_leaves}
    if len(set(xs)) == len(xs) and len(set(ys)) == len(ys):
        # With distinct items no leaf is on both sides twice, so the report is exactly the difference,
        # a spine leaf that the other side stores included.
        a_leaves, b_leaves = _all_leaves(a, nodes), _all_leaves(b, nodes)
        assert got_a == a_leaves - b_leaves and got_b == b_leaves - a_leaves
    # Sides swapped: the same answer, mirrored.
    swapped = seq.diff([b], [a], nodes.get)
    assert {oid_of(leaf) for leaf in swapped.a_leaves} == got_b
    assert {oid_of(leaf) for leaf in swapped.b_leaves} == got_a


def test_diff_of_several_spines() -> None:
    nodes = Nodes()
    s1 = seq.build(items(500), nodes.put)
    s2 = seq.build(items(600), nodes.put)
    s3 = seq.build(items(700), nodes.put)
    result = seq.diff([s3], [s1, s2], nodes.get)
    ids = {i for leaf in result.a_leaves for i, _ in leaf.items}
    assert "e650" in ids and "e100" not in ids and "e699" in ids


# -- splice ------------------------------------------------------------------------------------------


def spliced(values: Items, start: int, stop: int, new: Items) -> Items:
    return [*values[:start], *new, *values[stop:]]


@settings(max_examples=200, deadline=None)
@given(st.data(), st.integers(min_value=0, max_value=3000), st.booleans())
def test_splice_gives_the_tree_build_gives(data: st.DataObject, count: int, repeat: bool) -> None:
    """Any replacement of any range, on any size of tree, gives the spine of the edited list."""
    base = 10**6 if repeat else 0
    values = [item(base + (n % 7 if repeat else n)) for n in range(count)]
    nodes = Nodes()
    spine = seq.build(values, nodes.put)
    start = data.draw(st.integers(min_value=0, max_value=count))
    stop = data.draw(st.one_of(st.integers(min_value=start, max_value=min(count, start + 5)),
                               st.integers(min_value=start, max_value=count)))
    new = [item(n) for n in data.draw(st.lists(st.integers(min_value=50_000, max_value=60_000), max_size=300))]
    expected = spliced(values, start, stop, new)
    result = seq.splice(spine, start, stop, new, nodes.get, nodes.put)
    assert result == seq.build(expected, Nodes().put)
    checked(result, expected, nodes)  # and every node it points to was put
    assert_is_the_tree(result, expected, nodes)


def test_splice_edge_cases() -> None:
    for count in (0, 1, 31, 32, 33, 500, 5000):
        values = items(count)
        nodes = Nodes()
        spine = seq.build(values, nodes.put)
        cases = [(0, 0, []), (0, count, []), (0, count, items(3, 10**6)), (count, count, items(2, 10**6)),
                 (0, 0, items(1, 10**6)), (count // 2, count // 2, items(700, 10**6)),
                 (0, count // 2, []), (count // 2, count, []), (max(count - 1, 0), count, [])]
        for start, stop, new in cases:
            expected = spliced(values, start, stop, new)
            result = seq.splice(spine, start, stop, new, nodes.get, nodes.put)
            assert result == seq.build(expected, Nodes().put), (count, start, stop, len(new))
            checked(result, expected, nodes)
        assert seq.splice(spine, 0, count, [], nodes.get, nodes.put) == [[]]


def test_splice_refuses_a_range_outside_the_list() -> None:
    nodes = Nodes()
    spine = seq.build(items(10), nodes.put)
    nodes.reset()
    for start, stop in ((-1, 2), (3, 2), (0, 11), (11, 11)):
        with pytest.raises(ValueError):
            seq.splice(spine, start, stop, [], nodes.get, nodes.put)
    assert nodes.puts == 0


def test_splice_in_the_middle_writes_and_reads_few_nodes() -> None:
    nodes = Nodes()
    values = items(10_000)
    spine = seq.build(values, nodes.put)
    levels = len(spine)
    for start, stop, new in ((5000, 5001, [item(99_999)]), (5000, 5001, []), (5000, 5000, items(2, 88_000)),
                             (10, 40, items(5, 77_000)), (9990, 10_000, []), (9999, 10_000, [item(66_666)])):
        reads: list[ObjectId] = []

        def get(oid: ObjectId, reads: list[ObjectId] = reads) -> SeqNode:
            reads.append(oid)
            return nodes.get(oid)

        nodes.reset()
        result = seq.splice(spine, start, stop, new, get, nodes.put)
        expected = spliced(values, start, stop, new)
        assert result == seq.build(expected, Nodes().put)
        assert nodes.new <= 3 * levels
        assert len(reads) <= 4 * levels
        checked(result, expected, nodes)


def test_splice_that_leaves_one_leaf_gives_a_one_level_spine() -> None:
    """Removing all but a few items leaves a spine of their leaf alone, as `build` gives."""
    nodes = Nodes()
    values = items(2000)
    spine = seq.build(values, nodes.put)
    for keep in (1, 2, 40):
        for kept, result in ((values[-keep:], seq.splice(spine, 0, 2000 - keep, [], nodes.get, nodes.put)),
                             (values[:keep], seq.splice(spine, keep, 2000, [], nodes.get, nodes.put))):
            assert result == seq.build(kept, Nodes().put)
            checked(result, kept, nodes)
    one = seq.splice(spine, 1, 2000, [], nodes.get, nodes.put)
    assert one == [values[:1]]


def _small_chunks() -> tuple[Any, Any]:
    """Switch to tiny chunks, so a few hundred items make trees of many levels; returns what to restore."""
    saved = seq._LIMITS, seq._INNER_LIMITS
    seq._LIMITS, seq._INNER_LIMITS = {0: (2**32 // 3, 6)}, (2**32 // 2, 3)
    return saved


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_splice_and_append_on_deep_trees(data: st.DataObject) -> None:
    """With tiny chunks (trees of many levels), chained splices and appends still give `build`'s tree."""
    saved = _small_chunks()
    try:
        count = data.draw(st.integers(min_value=0, max_value=400))
        values = items(count)
        nodes = Nodes()
        spine = checked(seq.build(values, nodes.put), values, nodes)
        assert_is_the_tree(spine, values, nodes)
        for _ in range(3):
            start = data.draw(st.integers(min_value=0, max_value=len(values)))
            stop = data.draw(st.integers(min_value=start, max_value=len(values)))
            new = [item(n) for n in data.draw(st.lists(st.integers(min_value=10**5, max_value=10**6),
                                                       max_size=30))]
            values = spliced(values, start, stop, new)
            spine = seq.splice(spine, start, stop, new, nodes.get, nodes.put)
            assert spine == seq.build(values, Nodes().put)
            checked(spine, values, nodes)
            assert_is_the_tree(spine, values, nodes)
            tail = items(data.draw(st.integers(min_value=0, max_value=20)), 2 * 10**6 + len(values))
            values = [*values, *tail]
            spine = seq.append(spine, tail, nodes.put)
            checked(spine, values, nodes)
            assert_is_the_tree(spine, values, nodes)
    finally:
        seq._LIMITS, seq._INNER_LIMITS = saved


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=300), max_size=300),
       st.lists(st.integers(min_value=0, max_value=300), max_size=300))
def test_diff_on_deep_trees(xs: list[int], ys: list[int]) -> None:
    saved = _small_chunks()
    try:
        nodes = Nodes()
        a = seq.build([item(n) for n in xs], nodes.put)
        b = seq.build([item(n) for n in [*xs[: len(xs) // 2], *ys]], nodes.put)
        _assert_diff_leaves_cover(a, b, nodes)
    finally:
        seq._LIMITS, seq._INNER_LIMITS = saved


# -- the chunking rule on stored nodes and spines -----------------------------------------------------


def _cut_item(start: int, is_cut: bool) -> list[Any]:
    """The first item from `start` on whose boundary hash is (or is not) a cut at the leaf level."""
    n = start
    while True:
        candidate = item(n)
        if (int.from_bytes(candidate[1][:4], "big") < 2**32 // seq.LEAF_TARGET) == is_cut:
            return candidate
        n += 1


def _cut_ref(is_cut: bool, start: int = 0) -> list[Any]:
    """An inner item whose child oid is (or is not) a cut above the leaves."""
    n = start
    while True:
        oid = blake3.blake3(f"child {n}".encode()).digest()
        if (int.from_bytes(oid[:4], "big") < 2**32 // seq.INNER_TARGET) == is_cut:
            return [oid, 3]
        n += 1


PLAIN = [_cut_item(n * 1000, False) for n in range(5)]
CUT = _cut_item(0, True)
MOST = 4 * seq.LEAF_TARGET


def test_node_fault_accepts_closed_chunks() -> None:
    assert seq.node_fault(SeqNode(0, [*PLAIN, CUT])) is None  # ends at its first cut
    assert seq.node_fault(SeqNode(0, [CUT])) is None
    assert seq.node_fault(SeqNode(0, [_cut_item(n * 1000, False) for n in range(MOST)])) is None  # the limit
    assert seq.node_fault(SeqNode(1, [_cut_ref(False), _cut_ref(True)])) is None
    inner = [_cut_ref(False, n * 1000) for n in range(4 * seq.INNER_TARGET)]
    assert seq.node_fault(SeqNode(2, inner)) is None


def test_node_fault_finds_a_cut_before_the_end() -> None:
    fault = seq.node_fault(SeqNode(0, [*PLAIN[:2], CUT, *PLAIN[2:]]))
    assert fault is not None and "item 2" in fault
    fault = seq.node_fault(SeqNode(1, [_cut_ref(True), _cut_ref(False), _cut_ref(True, 10**6)]))
    assert fault is not None and "item 0" in fault


def test_node_fault_finds_an_overfull_node() -> None:
    fault = seq.node_fault(SeqNode(0, [_cut_item(n * 1000, False) for n in range(MOST + 1)]))
    assert fault is not None and "limit" in fault
    fault = seq.node_fault(SeqNode(1, [_cut_ref(False, n * 1000) for n in range(4 * seq.INNER_TARGET + 1)]))
    assert fault is not None and "limit" in fault


def test_node_fault_finds_a_node_that_does_not_end_at_a_cut() -> None:
    """Only a spine node may end short of a cut and the limit, and a spine node is not stored."""
    fault = seq.node_fault(SeqNode(0, PLAIN))
    assert fault is not None and "cut" in fault
    assert seq.node_fault(SeqNode(0, [])) is not None  # the empty leaf is only ever a spine
    assert seq.node_fault(SeqNode(1, [_cut_ref(False)])) is not None


def test_spine_fault_accepts_spines_the_rule_gives() -> None:
    assert seq.spine_fault([[]]) is None
    assert seq.spine_fault([PLAIN]) is None
    assert seq.spine_fault([[*PLAIN, CUT]]) is None  # the last leaf may end at a cut
    assert seq.spine_fault([[_cut_item(n * 1000, False) for n in range(MOST)]]) is None
    assert seq.spine_fault([PLAIN, [], [_cut_ref(False)]]) is None  # a middle level can be only its ref


def test_spine_fault_finds_each_fault() -> None:
    assert "no levels" in (seq.spine_fault([]) or "")
    fault = seq.spine_fault([[*PLAIN[:2], CUT, *PLAIN[2:]]])
    assert fault is not None and "item 2 of level 0" in fault
    fault = seq.spine_fault([PLAIN, [_cut_ref(False), _cut_ref(True)]])
    assert fault is not None and "level 1" in fault  # above the leaves even the last item is no cut
    fault = seq.spine_fault([[_cut_item(n * 1000, False) for n in range(MOST + 1)]])
    assert fault is not None and "over the limit" in fault
    fault = seq.spine_fault([PLAIN, [_cut_ref(False, n * 1000) for n in range(4 * seq.INNER_TARGET)]])
    assert fault is not None and "over the limit" in fault  # the ref below makes one more
    fault = seq.spine_fault([PLAIN, []])
    assert fault is not None and "top level" in fault
    fault = seq.spine_fault([[], [_cut_ref(False)]])
    assert fault is not None and "leaf level is empty" in fault


def test_chunking_fault_checks_nodes_and_revision_spines() -> None:
    assert seq.chunking_fault(SeqNode(0, [*PLAIN, CUT])) is None
    assert "sequence node" in (seq.chunking_fault(SeqNode(0, PLAIN)) or "")
    good = Revision(None, 0, None, [PLAIN], len(PLAIN))
    assert seq.chunking_fault(good) is None
    bad = Revision(None, 0, None, [PLAIN, []], len(PLAIN))
    assert "revision seq" in (seq.chunking_fault(bad) or "")
    assert seq.chunking_fault(Blob("text")) is None


def test_unfold_gives_the_spine_nodes_from_the_leaf_up() -> None:
    nodes = Nodes()
    spine = seq.build(items(3000), nodes.put)
    root, unfolded = seq.unfold(spine)
    chain = list(unfolded.values())
    assert [node.level for node in chain] == list(range(len(spine)))
    assert chain[0] == SeqNode(0, spine[0])
    for below, node in itertools.pairwise(chain):
        assert node.items == [*spine[node.level], [seq.node_id(below), below.count]]
    assert root == seq.node_id(chain[-1]) and chain[-1].count == 3000
    # The unfolded nodes are not stored.
    assert not set(unfolded) & set(nodes.nodes)


# -- the direct node encoder --------------------------------------------------------------------------


_oids = st.binary(min_size=32, max_size=32)
_leaf_items = st.lists(st.tuples(st.text(max_size=300), st.none() | _oids).map(list), max_size=300)
_inner_items = st.lists(st.tuples(_oids, st.integers(0, 2**64 - 1)).map(list), min_size=1, max_size=300)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.tuples(st.just(0), _leaf_items), st.tuples(st.integers(1, 23), _inner_items)))
def test_the_direct_node_encoder_writes_the_canonical_bytes(case: tuple[int, Items]) -> None:
    level, node_items = case
    node = SeqNode(level, node_items)
    assert seq.encode_node(node) == encode_object(node)[1]
    assert seq.node_id(node) == encode_object(node)[0]


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
def test_objects_a_history_encodes_directly_are_canonical_and_build_the_same_tree(
        batches: list[int], salt: int) -> None:
    from ctxstore.format.objects import parse_object
    from ctxstore.history.message_history import MessageHistory

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
    listed_items = [[i, o] for i, o in seq.iter_items(rev.seq, ws.node)]
    assert len(listed_items) == n == rev.size
    assert seq.build(listed_items, Nodes().put) == rev.seq
    assert seq.spine_fault(rev.seq) is None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=12), st.integers(0, 2**32))
def test_the_direct_revision_encoder_reuses_levels_and_writes_the_canonical_bytes(
        batches: list[int], salt: int) -> None:
    nodes = Nodes()
    spine: seq.Spine = [[]]
    base = None
    n = 0
    for size in batches:
        spine = seq.append(spine, items(size, salt + n), nodes.put)
        n += size
        op = {"type": "append", "entryIds": [f"e{n}"], "entries": [blake3.blake3(b"x").digest()]}
        for rev in (Revision(None, n, None, spine, n), Revision(b"\x01" * 32, 2**40 + n, op, spine, n)):
            made = seq.encode_revision(rev, base)
            assert made is not None
            data, base = made
            assert data == encode_object(rev)[1]


def test_the_direct_revision_encoder_leaves_unusual_revisions_to_the_general_encoder() -> None:
    oid = blake3.blake3(b"x").digest()
    assert seq.encode_revision(Revision(None, 1, None, [[["a", oid]]], 1)) is not None
    for spine in ([[["a", b"short"]]], [[[1, oid]]], [[["a", oid]], [[oid, True]]], [[]] * 30, [(("a", oid),)]):
        assert seq.encode_revision(Revision(None, 1, None, spine, 1)) is None  # type: ignore[arg-type]
    # The marker the encoder puts in place of the spine, found in another field, is not trusted.
    op = {"type": "append", "entryIds": ["a"], "entries": [seq._SPINE_MARK]}
    assert seq.encode_revision(Revision(None, 1, op, [[["a", oid]]], 1)) is None


