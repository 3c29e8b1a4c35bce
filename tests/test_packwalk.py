"""The object walk and atomic unpack: only what changed is sent, and a bad pack changes nothing."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ctxstore.codec import ObjectId, from_hex
from ctxstore.errors import BadPack, NonFastForward
from ctxstore.history import MessageHistory
from ctxstore.objects import parse_object
from ctxstore.pack import read_pack
from ctxstore.packwalk import is_ancestor, objects_to_send, pack, pack_objects, revisions_to_send, unpack
from ctxstore.store import MemoryStore


def _save(store: MemoryStore, history: MessageHistory) -> ObjectId:
    store.put_many(history.workspace.pending())
    return from_hex(history.revision_id)


def _state(store: MemoryStore) -> tuple[Any, ...]:
    with store.transaction() as txn:
        refs = txn.refs("refs/")
        logs = {n: txn.reflog(n) for n in txn.reflog_names()}
    return refs, len(store), sorted(store), logs


@pytest.fixture(scope="module")
def big() -> tuple[MemoryStore, ObjectId, ObjectId]:
    """A 10,000-message conversation and the same with 10 more messages appended one by one."""
    store = MemoryStore()
    history = MessageHistory().extend([{"role": "user", "content": f"message {i}"} for i in range(10_000)])
    base = _save(store, history)
    history = MessageHistory(source=store, head=history.revision_id)
    for i in range(10):
        history = history.append({"role": "assistant", "content": f"new {i}"})
    return store, base, _save(store, history)


def test_ten_appends_on_ten_thousand_send_o_of_ten_entries_and_log_n_nodes(big):
    store, base, head = big
    kinds = Counter(type(parse_object(store.get(o))).__name__ for o in objects_to_send(store, [head], [base]))
    assert kinds["Entry"] == 10
    assert kinds["Revision"] == 10
    # Each append rewrites the right spine: depth of a 10,000-item tree is about 3 levels.
    assert kinds["SeqNode"] <= 10 * 6
    assert set(kinds) <= {"Entry", "Revision", "SeqNode"}


def test_pack_round_trips_into_an_empty_store_and_then_incrementally(big):
    store, base, head = big
    other = MemoryStore()
    first = unpack(other, b"".join(pack(store, [base])), {"refs/heads/main": (None, base)})
    assert first.new_objects == first.objects
    second = unpack(other, pack(store, [head], [base]), {"refs/heads/main": (base, head)})
    assert second.objects == len(objects_to_send(store, [head], [base]))
    # Every object that head reaches is now in the receiving store.
    assert objects_to_send(other, [head], []) == objects_to_send(store, [head], [])


def test_nothing_to_send_when_haves_include_wants(big):
    store, base, head = big
    assert objects_to_send(store, [base], [head]) == []
    assert objects_to_send(store, [head], [head]) == []
    assert is_ancestor(store, base, head) and not is_ancestor(store, head, base)


def test_divergent_pair_sends_only_one_side_like_git_log_range():
    store = MemoryStore()
    root = MessageHistory().extend([{"role": "user", "content": "shared"}])
    _save(store, root)
    left = root.append({"role": "user", "content": "left"})
    right = root.append({"role": "user", "content": "right"}).append({"role": "user", "content": "right 2"})
    a, b = _save(store, left), _save(store, right)
    revs = revisions_to_send(store, [b], [a])
    assert len(revs) == 2 and from_hex(root.revision_id) not in revs
    sent = [parse_object(store.get(o)) for o in objects_to_send(store, [b], [a])]
    contents = [o.message["content"] for o in sent if type(o).__name__ == "Entry"]
    assert contents == ["right", "right 2"]


@pytest.mark.parametrize("variant", range(12))
def test_revisions_made_in_one_millisecond_are_not_sent_twice(variant: int):
    """With every createdAt equal, the walk still stops at the common revisions, whatever the id order."""
    revisions = [{"id": "r0", "entryIds": [], "createdAt": 1000}]
    entries = []
    for name, parent, ids in (("s", "r0", ["e0"]), ("a", "s", ["e0", "e1"]), ("b1", "s", ["e0", "e2"]),
                              ("b2", "b1", ["e0", "e2", "e3"])):
        new = ids[-1]
        entries.append({"id": new, "kind": "turn", "message": {"role": "user", "content": f"{new} v{variant}"}})
        revisions.append({"id": name, "parent": parent, "entryIds": ids, "createdAt": 1000,
                          "operation": {"type": "append", "entryIds": [new]}})
    store = MemoryStore()
    histories = {}
    for head in ("a", "b2"):
        histories[head] = MessageHistory.from_snapshot({"entries": entries, "revisions": revisions, "head": head})
    a, b = _save(store, histories["a"]), _save(store, histories["b2"])
    assert len(revisions_to_send(store, [b], [a])) == 2


def test_unknown_haves_are_ignored():
    store = MemoryStore()
    head = _save(store, MessageHistory().append({"role": "user", "content": "x"}))
    assert objects_to_send(store, [head], [ObjectId(b"\x01" * 32)]) == objects_to_send(store, [head], [])


# -- bad packs change nothing ------------------------------------------------------------------------------

@pytest.fixture()
def pair() -> tuple[MemoryStore, MemoryStore, ObjectId, ObjectId, bytes]:
    """A sender with two revisions, a receiver with the first, and the pack of the second."""
    sender, receiver = MemoryStore(), MemoryStore()
    one = MessageHistory().append({"role": "user", "content": "one"})
    a = _save(sender, one)
    b = _save(sender, one.append({"role": "assistant", "content": "two"}))
    unpack(receiver, pack(sender, [a]), {"refs/heads/main": (None, a)})
    return sender, receiver, a, b, b"".join(pack(sender, [b], [a]))


def _refused(receiver: MemoryStore, data: bytes, updates: Any) -> None:
    before = _state(receiver)
    with pytest.raises(BadPack):
        unpack(receiver, data, updates)
    assert _state(receiver) == before


def test_flipped_bytes_are_refused_and_change_nothing(pair):
    _, receiver, a, b, data = pair
    for at in range(0, len(data), max(1, len(data) // 40)):
        bad = bytearray(data)
        bad[at] ^= 0x40
        _refused(receiver, bytes(bad), {"refs/heads/main": (a, b)})


def test_truncation_at_every_tenth_byte_is_refused(pair):
    _, receiver, a, b, data = pair
    for cut in range(0, len(data), 10):
        _refused(receiver, data[:cut], {"refs/heads/main": (a, b)})


def test_pack_missing_a_parent_or_entry_is_refused(pair):
    sender, receiver, a, b, _ = pair
    oids = objects_to_send(sender, [b], [a])
    rev = parse_object(sender.get(b))
    entry = next(o for o in oids if type(parse_object(sender.get(o))).__name__ == "Entry")
    for drop in (entry, *[o for o in oids if o == rev.seq]):
        kept = [o for o in oids if o != drop]
        _refused(receiver, b"".join(pack_objects(sender, kept)), {"refs/heads/main": (a, b)})
    # A revision whose parent the receiver lacks: the receiver never saw `a`.
    _refused(MemoryStore(), b"".join(pack(sender, [b], [a])), {"refs/heads/main": (None, b)})


def test_ref_to_an_object_not_in_pack_or_store_is_refused(pair):
    _, receiver, a, _, data = pair
    _refused(receiver, data, {"refs/heads/main": (a, ObjectId(b"\x07" * 32))})


def test_moved_ref_raises_non_fast_forward_and_writes_nothing(pair):
    _, receiver, _, b, data = pair
    before = _state(receiver)
    with pytest.raises(NonFastForward):
        unpack(receiver, data, {"refs/heads/main": (b, b)})
    assert _state(receiver) == before


def test_read_pack_of_walk_output_verifies(big):
    store, base, head = big
    sent = [oid for oid, _ in read_pack(pack(store, [head], [base]))]
    assert sent == objects_to_send(store, [head], [base])
