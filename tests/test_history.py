"""MessageHistory: the seed's examples in Python, and each fine point of the reference semantics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import assistant, user
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore.errors import CtxStoreError, DuplicateEntryId, InvalidInput, UnknownRevision
from ctxstore.format.objects import BLOB_THRESHOLD, Blob, Entry
from ctxstore.history.message_history import MessageHistory, MessageHistoryEntry


def oid_of(history: MessageHistory, entry_id: str) -> Any:
    """The object id of the entry `entry_id` that `history`'s graph knows."""
    return history.workspace.introductions(entry_id)[0][1]

def with_ids(*pairs: tuple[str, str]) -> MessageHistory:
    """A history of user turns with the given (id, text) pairs, one append each."""
    history = MessageHistory()
    for entry_id, text in pairs:
        history = history.append({"id": entry_id, "message": user(text)})
    return history


def ids(history: MessageHistory) -> list[str]:
    return [e.id for e in history.refs()]


def texts(history: MessageHistory, view: Any = None) -> list[str]:
    return [m["content"] for m in history.render(view)]


def json_round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value))


# -- the seed's examples ----------------------------------------------------------------------------


def test_seed_message_meta_labels_select_entries() -> None:
    """MessageMeta example: meta is stored verbatim and filters refs by label."""
    history = MessageHistory().append({
        "message": user("the deploy window is Friday"),
        "meta": {"turn": 3, "labels": ["decision"], "links": [{"rel": "run", "to": "run-42"}]},
    })
    history = history.append(user("unrelated"))
    decisions = [e for e in history.refs() if "decision" in ((e.meta or {}).get("labels") or [])]
    assert [e.message["content"] for e in decisions] == ["the deploy window is Friday"]
    assert decisions[0].meta == {"turn": 3, "labels": ["decision"], "links": [{"rel": "run", "to": "run-42"}]}


def test_seed_last_ten_strategy_renders_recent_ids() -> None:
    """HistoryStrategy example: render(ids of the last ten refs) gives the last ten messages."""
    history = MessageHistory()
    for n in range(15):
        history = history.append(user(f"m{n}"))
    recent = [e.id for e in history.refs()[-10:]]
    assert texts(history, recent) == [f"m{n}" for n in range(5, 15)]


def test_seed_entry_is_a_turn_with_a_generated_id() -> None:
    """MessageHistoryEntry example: a bare message becomes a 'turn' entry with an id."""
    history = MessageHistory().append(user("hi"))
    [entry] = history.refs()
    assert isinstance(entry, MessageHistoryEntry)
    assert entry.kind == "turn"
    assert isinstance(entry.id, str) and entry.id


def test_seed_revision_operation_records_append() -> None:
    """MessageHistoryRevision example: the head revision's operation is {type: append, entryIds}."""
    history = MessageHistory().append(user("hi"))
    snapshot = history.to_snapshot()
    current = next(r for r in snapshot["revisions"] if r["id"] == snapshot["head"])
    assert current["operation"] == {"type": "append", "entryIds": [history.refs()[0].id]}


def test_seed_snapshot_survives_json() -> None:
    """MessageHistorySnapshot example: fromSnapshot(JSON round trip of toSnapshot) is the same history."""
    history = MessageHistory().append(user("persist me"))
    loaded = MessageHistory.from_snapshot(json_round_trip(history.to_snapshot()))
    assert loaded.render() == [user("persist me")]
    assert loaded.revision_id == history.revision_id
    assert loaded.to_snapshot() == history.to_snapshot()


def test_seed_changes_since_checkpoint() -> None:
    """MessageHistoryDelta example: delta.base == checkpoint and one entry."""
    history = MessageHistory().append(user("committed"))
    checkpoint = history.revision_id
    history = history.append(assistant("new since checkpoint"))
    delta = history.changes_since(checkpoint)
    assert delta["base"] == checkpoint
    assert len(delta["entries"]) == 1
    assert delta["entries"][0]["message"] == assistant("new since checkpoint")
    assert [r["id"] for r in delta["revisions"]] == [history.revision_id]


def test_seed_remove_patch() -> None:
    """MessageHistoryPatch example: remove the second entry."""
    history = MessageHistory().append(user("keep")).append(user("drop"))
    _, drop = history.refs()
    history = history.edit({"op": "remove", "id": drop.id})
    assert texts(history) == ["keep"]


def test_seed_fork_leaves_original() -> None:
    """MessageHistory example: the original has 2 entries, the branch 3."""
    history = MessageHistory().append(user("question")).append(assistant("answer"))
    branch = history.fork().append(user("what if?"))
    assert history.size == 2
    assert branch.size == 3
    assert texts(history) == ["question", "answer"]


def test_seed_edit_insert_after_then_remove() -> None:
    """edit example: insertAfter a, then remove a, gives [a2, b]."""
    history = MessageHistory().append(user("a")).append(assistant("b"))
    [a, _] = history.refs()
    history = history.edit([
        {"op": "insertAfter", "id": a.id, "entries": [user("a2")]},
        {"op": "remove", "id": a.id},
    ])
    assert texts(history) == ["a2", "b"]


def test_seed_with_view_checkpoint() -> None:
    """withView example: the checkpoint's view renders one message."""
    history = MessageHistory().append(user("first"))
    checkpoint = history.revision_id
    history = history.append(assistant("second"))
    past = history.with_view(checkpoint)
    assert len(past.render()) == 1
    assert past.revision_id == checkpoint


# -- basic shape -------------------------------------------------------------------------------------


def test_empty_history() -> None:
    history = MessageHistory()
    assert history.size == 0
    assert history.render() == [] and history.refs() == [] and history.restore() == []
    assert isinstance(history.revision_id, str) and len(history.revision_id) == 64


def test_operations_return_new_histories_and_leave_the_original() -> None:
    base = with_ids(("a", "A"), ("b", "B"))
    before = (base.revision_id, base.render())
    for derived in (base.append(user("c")), base.extend([user("c"), user("d")]), base.fork(),
                    base.edit({"op": "remove", "id": "a"}), base.with_view(["b"])):
        assert derived is not base
        assert (base.revision_id, base.render()) == before


def test_extend_is_one_revision_with_all_ids() -> None:
    history = MessageHistory().extend([{"id": "x", "message": user("X")}, {"id": "y", "message": user("Y")}])
    assert ids(history) == ["x", "y"]
    head = history.to_snapshot()["revisions"][-1]
    assert head["operation"] == {"type": "append", "entryIds": ["x", "y"]}
    assert len(list(history.lineage())) == 2


def test_object_form_sets_id_kind_meta_sources() -> None:
    history = MessageHistory().append(
        {"id": "s1", "message": user("sum"), "kind": "summary", "meta": {"k": 1}, "sources": ["q"]})
    [entry] = history.refs()
    assert (entry.id, entry.kind, entry.meta, entry.sources) == ("s1", "summary", {"k": 1}, ["q"])


def test_created_at_is_integer_milliseconds() -> None:
    import time

    before = time.time_ns() // 1_000_000
    history = MessageHistory().append(user("x"))
    after = time.time_ns() // 1_000_000
    for record in history.to_snapshot()["revisions"]:
        assert type(record["createdAt"]) is int
        assert before - 1000 <= record["createdAt"] <= after


def test_estimate_tokens_of_active_view() -> None:
    history = MessageHistory().append(user("12345678"))
    assert history.estimate_tokens() == 2


# -- copies ------------------------------------------------------------------------------------------


def test_inputs_are_deep_copied_on_intake() -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "original"}]}
    meta = {"labels": ["a"]}
    history = MessageHistory().append({"message": message, "meta": meta})
    message["content"][0]["text"] = "changed"
    meta["labels"].append("b")
    [entry] = history.refs()
    assert entry.message["content"][0]["text"] == "original"
    assert entry.meta == {"labels": ["a"]}


def test_patch_inputs_are_deep_copied_on_intake() -> None:
    new = user("inserted")
    history = with_ids(("a", "A")).edit({"op": "insertAfter", "id": "a", "entries": [new]})
    new["content"] = "changed"
    assert texts(history) == ["A", "inserted"]


def test_outputs_are_copies() -> None:
    history = MessageHistory().append({"id": "a", "message": {"role": "user", "content": [{"type": "text",
                                                                                           "text": "t"}]},
                                       "meta": {"labels": ["x"]}, "sources": ["z"]})
    rendered = history.render()
    rendered[0]["content"][0]["text"] = "mutated"
    [entry] = history.refs()
    entry.message["content"].append("junk")
    assert entry.meta is not None and entry.sources is not None
    entry.meta["labels"].append("y")
    entry.sources.append("w")
    history.restore()[0]["role"] = "assistant"
    history.to_snapshot()["entries"][0]["message"]["role"] = "assistant"
    [again] = history.refs()
    assert again.message == {"role": "user", "content": [{"type": "text", "text": "t"}]}
    assert again.meta == {"labels": ["x"]} and again.sources == ["z"]


def test_entry_is_frozen() -> None:
    [entry] = MessageHistory().append(user("x")).refs()
    with pytest.raises(AttributeError):
        entry.id = "other"  # type: ignore[misc]


# -- entry ids ---------------------------------------------------------------------------------------


def test_explicit_duplicate_id_with_other_content_is_refused() -> None:
    history = with_ids(("a", "A"))
    with pytest.raises(DuplicateEntryId) as caught:
        history.append({"id": "a", "message": user("different")})
    assert isinstance(caught.value, CtxStoreError) and isinstance(caught.value, ValueError)
    assert "'a'" in str(caught.value)
    assert texts(history) == ["A"]


def test_duplicate_id_in_one_extend_is_refused_and_nothing_changes() -> None:
    history = with_ids(("a", "A"))
    with pytest.raises(DuplicateEntryId):
        history.extend([{"id": "n", "message": user("1")}, {"id": "n", "message": user("2")}])
    with pytest.raises(DuplicateEntryId):
        history.edit({"op": "replace", "id": "a", "entries": [{"id": "a", "message": user("other")}]})
    assert texts(history) == ["A"] and history.size == 1


def test_duplicate_id_of_a_removed_entry_is_still_refused() -> None:
    """The id stays taken in the graph after the entry leaves the view."""
    history = with_ids(("a", "A"), ("b", "B")).edit({"op": "remove", "id": "a"})
    with pytest.raises(DuplicateEntryId):
        history.append({"id": "a", "message": user("new A")})


def test_identical_re_append_is_not_a_conflict() -> None:
    history = with_ids(("a", "A"))
    again = history.append({"id": "a", "message": user("A")})
    assert ids(again) == ["a", "a"]
    assert texts(again) == ["A", "A"]


def test_explicit_id_append_reads_only_recent_revisions() -> None:
    """Checking a new explicit id does not walk the whole lineage (n appends would cost O(n^2))."""
    history = MessageHistory()
    for n in range(300):
        history = history.append({"id": f"e{n}", "message": user(str(n))})
    ws = history.workspace
    reads: list[bytes] = []
    original = ws.revision

    def counting(oid: Any, **options: Any) -> Any:
        reads.append(oid)
        return original(oid, **options)

    ws.revision = counting  # type: ignore[method-assign]
    try:
        history = history.append({"id": "new", "message": user("new")})
    finally:
        del ws.revision
    assert len(reads) < 20
    assert ids(history)[-1] == "new"


def test_edit_in_a_long_history_writes_few_tree_nodes() -> None:
    """An edit re-cuts only the tree around the change, and gives the tree a rebuild would."""
    from ctxstore.format import seq
    from ctxstore.format.objects import SeqNode

    history = MessageHistory().extend([{"id": f"e{n}", "message": user(str(n))} for n in range(10_000)])
    ws = history.workspace
    before = {oid for oid, _ in ws.pending()}
    edited = history.edit([{"op": "replace", "id": "e5000", "entries": [user("new")]},
                           {"op": "remove", "id": "e7000"}])
    new_nodes = [oid for oid, _ in ws.pending() if oid not in before and isinstance(ws.get(oid), SeqNode)]
    assert 0 < len(new_nodes) <= 16
    root = ws.revision(bytes.fromhex(edited.revision_id)).seq  # type: ignore[arg-type]
    rebuilt = seq.build([[e.id, oid_of(history, e.id)] for e in edited.refs()], ws.put)
    assert root == rebuilt
    assert edited.size == 9_999


def test_generated_ids_are_distinct() -> None:
    history = MessageHistory().extend([user(str(n)) for n in range(200)])
    assert len(set(ids(history))) == 200


# -- patches -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("patch", [
    {"op": "remove", "id": "zz"},
    {"op": "replace", "id": "zz", "entries": [user("n")]},
    {"op": "split", "id": "zz", "entries": [user("n")]},
    {"op": "insertBefore", "id": "zz", "entries": [user("n")]},
    {"op": "insertAfter", "id": "zz", "entries": [user("n")]},
    {"op": "move", "ids": ["zz"], "before": "a"},
    {"op": "summary", "sourceIds": ["zz"], "entry": user("s"), "replace": True},
])
def test_patch_with_absent_target_is_skipped(patch: dict[str, Any]) -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    edited = history.edit(patch)
    if patch["op"] == "summary":
        # No source is present: the summary is appended, nothing is removed.
        assert texts(edited) == ["A", "B", "s"]
    else:
        assert texts(edited) == ["A", "B"]
    assert edited.revision_id != history.revision_id


def test_replace_and_split_swap_one_entry_for_several() -> None:
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"))
    assert texts(history.edit({"op": "replace", "id": "b", "entries": [user("B1"), user("B2")]})) == [
        "A", "B1", "B2", "C"]
    assert texts(history.edit({"op": "split", "id": "b", "entries": [user("x"), user("y"), user("z")]})) == [
        "A", "x", "y", "z", "C"]


def test_insert_before_and_after() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    assert texts(history.edit({"op": "insertBefore", "id": "b", "entries": [user("n1"), user("n2")]})) == [
        "A", "n1", "n2", "B"]
    assert texts(history.edit({"op": "insertAfter", "id": "b", "entries": [user("n")]})) == ["A", "B", "n"]
    assert texts(history.edit({"op": "insertBefore", "id": "a", "entries": [user("n")]})) == ["n", "A", "B"]


def test_patches_apply_in_order_to_the_evolving_sequence() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    edited = history.edit([
        {"op": "insertAfter", "id": "a", "entries": [{"id": "n", "message": user("N")}]},
        {"op": "move", "ids": ["a"], "after": "n"},
        {"op": "remove", "id": "b"},
    ])
    assert ids(edited) == ["n", "a"]
    assert edited.to_snapshot()["revisions"][-1]["operation"]["type"] == "edit"


def test_move_takes_ids_in_current_order() -> None:
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"), ("d", "D"))
    assert ids(history.edit({"op": "move", "ids": ["d", "b"], "before": "a"})) == ["b", "d", "a", "c"]
    assert ids(history.edit({"op": "move", "ids": ["c", "a"], "after": "d"})) == ["b", "d", "a", "c"]
    assert ids(history.edit({"op": "move", "ids": ["a"]})) == ["b", "c", "d", "a"]


def test_move_before_alone_decides() -> None:
    """A missing `before` anchor sends the ids to the end even when `after` is present."""
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"))
    assert ids(history.edit({"op": "move", "ids": ["c"], "before": "zz", "after": "a"})) == ["a", "b", "c"]
    assert ids(history.edit({"op": "move", "ids": ["a"], "before": "zz", "after": "b"})) == ["b", "c", "a"]
    assert ids(history.edit({"op": "move", "ids": ["c"], "before": "a", "after": "b"})) == ["c", "a", "b"]


def test_move_with_missing_after_goes_to_the_end() -> None:
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"))
    assert ids(history.edit({"op": "move", "ids": ["a"], "after": "zz"})) == ["b", "c", "a"]
    # An anchor that is itself moved is not in the remaining sequence: also the end.
    assert ids(history.edit({"op": "move", "ids": ["a", "b"], "before": "b"})) == ["c", "a", "b"]


def test_summary_replace_goes_where_the_first_source_stands_in_sequence_order() -> None:
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"), ("d", "D"))
    edited = history.edit({"op": "summary", "sourceIds": ["d", "b"],
                           "entry": {"id": "s", "message": user("S")},
                           "replace": True})
    assert ids(edited) == ["a", "s", "c"]
    [summary] = [e for e in edited.refs() if e.id == "s"]
    assert summary.kind == "summary" and summary.sources == ["d", "b"]


def test_summary_replace_with_some_sources_absent() -> None:
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"))
    edited = history.edit({"op": "summary", "sourceIds": ["zz", "c"], "entry": user("S"), "replace": True})
    assert texts(edited) == ["A", "B", "S"]
    edited = history.edit({"op": "summary", "sourceIds": ["zz", "b"], "entry": user("S"), "replace": True})
    assert texts(edited) == ["A", "S", "C"]


def test_summary_without_replace_appends_and_keeps_sources() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    for patch in ({"op": "summary", "sourceIds": ["a"], "entry": user("S")},
                  {"op": "summary", "sourceIds": ["a"], "entry": user("S"), "replace": False}):
        edited = history.edit(patch)
        assert texts(edited) == ["A", "B", "S"]
        assert edited.refs()[-1].kind == "summary"


@pytest.mark.parametrize("patch", [
    {"op": "explode", "id": "a"},
    {"id": "a"},
    {"op": "remove"},
    {"op": "replace", "id": "a"},
    {"op": "move", "ids": "a"},
    {"op": "summary", "sourceIds": ["a"]},
    {"op": "replace", "id": "a", "entries": [{"content": "no role"}]},
    "remove a",
])
def test_malformed_patch_is_refused_and_nothing_changes(patch: Any) -> None:
    history = with_ids(("a", "A"))
    with pytest.raises(InvalidInput):
        history.edit(patch)
    assert texts(history) == ["A"]


def test_bad_entry_input_is_refused() -> None:
    history = MessageHistory()
    for bad in ("text", {"content": "no role"}, {"message": user("x"), "bogus": 1},
                {"message": user("x"), "kind": "weird"}, {"id": "", "message": user("x")},
                {"role": "user", "content": float("nan")}, {"role": "user", "content": object()}):
        with pytest.raises(InvalidInput):
            history.append(bad)


# -- views -------------------------------------------------------------------------------------------


def test_with_view_ids_keeps_unknown_ids_and_reading_drops_them() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    view = history.with_view(["b", "ghost", "a"])
    assert view.size == 3
    assert view.to_snapshot()["revisions"][-1]["entryIds"] == ["b", "ghost", "a"]
    assert view.to_snapshot()["revisions"][-1]["operation"] == {"type": "view",
                                                                 "entryIds": ["b", "ghost", "a"]}
    assert texts(view) == ["B", "A"]
    assert [e.id for e in view.refs()] == ["b", "a"]
    assert texts(history) == ["A", "B"]


def test_render_and_refs_of_ids_drop_unknown_ids() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    assert texts(history, ["b", "nope", "a", "b"]) == ["B", "A", "B"]
    assert [e.id for e in history.refs(["nope", "a"])] == ["a"]


def test_render_of_a_revision_id() -> None:
    history = with_ids(("a", "A"))
    first = history.revision_id
    history = history.append(user("B"))
    assert texts(history, first) == ["A"]
    assert [e.id for e in history.refs(first)] == ["a"]


@pytest.mark.parametrize("unknown", ["00" * 32, "not-hex", "3-k2j4h5q", ""])
def test_render_of_an_unknown_revision_is_empty(unknown: str) -> None:
    history = with_ids(("a", "A"))
    assert history.render(unknown) == []
    assert history.refs(unknown) == []


def test_render_of_an_entry_object_id_as_revision_is_empty() -> None:
    history = with_ids(("a", "A"))
    some_entry_oid = oid_of(history, "a").hex()
    assert history.render(some_entry_oid) == []
    with pytest.raises(UnknownRevision):
        history.with_view(some_entry_oid)


@pytest.mark.parametrize("unknown", ["00" * 32, "not-hex", "3-k2j4h5q"])
def test_with_view_of_an_unknown_revision_raises(unknown: str) -> None:
    history = with_ids(("a", "A"))
    with pytest.raises(UnknownRevision) as caught:
        history.with_view(unknown)
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, CtxStoreError)


def test_with_view_of_revision_moves_head_without_a_new_revision() -> None:
    history = with_ids(("a", "A"))
    first = history.revision_id
    later = history.append(user("B"))
    past = later.with_view(first)
    assert past.revision_id == first
    # The later revision is still part of the graph the moved history knows.
    assert later.revision_id in {r["id"] for r in past.to_snapshot()["revisions"]}
    assert past.append(user("C")).size == 2


def test_view_revision_of_unknown_id_resolves_when_the_entry_arrives() -> None:
    view = MessageHistory().with_view(["late"])
    assert view.render() == []
    later = view.append({"id": "late", "message": user("L")})
    assert texts(later, view.revision_id) == ["L"]


# -- restore -----------------------------------------------------------------------------------------


def test_restore_expands_summaries_recursively() -> None:
    history = with_ids(("a", "A"), ("b", "B"), ("c", "C"), ("d", "D"))
    history = history.edit({"op": "summary", "sourceIds": ["a", "b"],
                            "entry": {"id": "s1", "message": user("S1")},
                            "replace": True})
    history = history.edit({"op": "summary", "sourceIds": ["s1", "c"],
                            "entry": {"id": "s2", "message": user("S2")},
                            "replace": True})
    assert texts(history) == ["S2", "D"]
    assert [m["content"] for m in history.restore()] == ["A", "B", "C", "D"]
    assert [m["content"] for m in history.restore(["s1", "d"])] == ["A", "B", "D"]


def test_restore_skips_ids_that_do_not_resolve() -> None:
    history = with_ids(("a", "A"))
    history = history.append({"id": "s", "message": user("S"), "kind": "summary", "sources": ["gone", "a"]})
    assert [m["content"] for m in history.restore()] == ["A", "A"]
    assert [m["content"] for m in history.restore(["nope", "s"])] == ["A"]


def test_restore_of_a_summary_without_sources_is_its_own_message() -> None:
    history = MessageHistory().append({"id": "s", "message": user("S"), "kind": "summary"})
    assert [m["content"] for m in history.restore()] == ["S"]


def test_restore_survives_a_summary_cycle() -> None:
    history = MessageHistory().append({"id": "s", "message": user("S"), "kind": "summary", "sources": ["s"]})
    assert history.restore() == []


# -- blobs -------------------------------------------------------------------------------------------


def big_message(size: int = BLOB_THRESHOLD + 100) -> dict[str, Any]:
    return {"role": "user", "content": [
        {"type": "text", "text": "x" * size},
        {"type": "text", "text": "small"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QUJD" * size}},
    ]}


def test_large_blocks_are_stored_as_blobs_and_render_back() -> None:
    message = big_message()
    history = MessageHistory().append({"id": "big", "message": message})
    assert history.render() == [message]
    assert history.restore() == [message]
    stored = history.workspace.entry(oid_of(history, "big"))
    kinds = [type(block) for block in stored.message["content"]]
    assert kinds == [bytes, dict, bytes]
    blobs = [o for o, _ in history.workspace.pending() if isinstance(history.workspace.get(o), Blob)]
    assert len(blobs) == 2


def test_large_string_content_is_a_blob() -> None:
    message = user("y" * (2 * BLOB_THRESHOLD))
    history = MessageHistory().append({"id": "big", "message": message})
    stored = history.workspace.entry(oid_of(history, "big"))
    assert type(stored.message["content"]) is bytes
    assert history.render() == [message]


def test_blob_threshold_boundary() -> None:
    """A text block whose encoding is one byte under the threshold stays inline."""
    from ctxstore.format.codec import encode

    text_len = BLOB_THRESHOLD - 3  # a text string over 255 bytes has a 3-byte head
    assert len(encode("z" * text_len)) == BLOB_THRESHOLD
    small = MessageHistory().append({"id": "s", "message": user("z" * (text_len - 1))})
    large = MessageHistory().append({"id": "l", "message": user("z" * text_len)})
    assert type(small.workspace.entry(oid_of(small, "s")).message["content"]) is str
    assert type(large.workspace.entry(oid_of(large, "l")).message["content"]) is bytes


def test_same_entry_built_twice_has_the_same_oid() -> None:
    one = MessageHistory().append({"id": "big", "message": big_message()})
    two = MessageHistory().append({"id": "big", "message": big_message()})
    assert oid_of(one, "big") == oid_of(two, "big")


def test_blob_entry_hashes_the_same_after_a_snapshot_round_trip() -> None:
    history = MessageHistory().append({"id": "big", "message": big_message()})
    loaded = MessageHistory.from_snapshot(json_round_trip(history.to_snapshot()))
    assert oid_of(loaded, "big") == oid_of(history, "big")
    assert loaded.render() == history.render()
    assert loaded.revision_id == history.revision_id


def test_same_payload_in_two_entries_is_one_blob() -> None:
    history = MessageHistory().extend([{"id": "a", "message": big_message()},
                                       {"id": "b", "message": big_message()}])
    objs = [history.workspace.get(o) for o, _ in history.workspace.pending()]
    assert sum(isinstance(o, Blob) for o in objs) == 2
    assert sum(isinstance(o, Entry) for o in objs) == 2


# -- snapshots ---------------------------------------------------------------------------------------


def test_snapshot_carries_the_whole_graph() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    history = history.edit({"op": "remove", "id": "a"})
    snapshot = history.to_snapshot()
    assert set(snapshot) == {"entries", "revisions", "head"}
    assert {e["id"] for e in snapshot["entries"]} == {"a", "b"}
    assert len(snapshot["revisions"]) == 4
    assert snapshot["revisions"][0].get("parent") is None
    for parent, child in zip(snapshot["revisions"], snapshot["revisions"][1:], strict=False):
        assert child["parent"] == parent["id"]
    loaded = MessageHistory.from_snapshot(json_round_trip(snapshot))
    assert loaded.restore(["a"]) == [user("A")]


def test_snapshot_edit_operation_uses_seed_keys() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    history = history.edit([
        {"op": "insertBefore", "id": "a", "entries": [{"id": "n", "message": user("N")}]},
        {"op": "summary", "sourceIds": ["a"], "entry": {"id": "s", "message": user("S")}, "replace": True},
        {"op": "move", "ids": ["b"], "before": "n"},
    ])
    op = history.to_snapshot()["revisions"][-1]["operation"]
    assert op == {"type": "edit", "patches": [
        {"op": "insertBefore", "id": "a", "entries": [{"id": "n", "kind": "turn", "message": user("N")}]},
        {"op": "summary", "sourceIds": ["a"], "replace": True,
         "entry": {"id": "s", "kind": "summary", "message": user("S"), "sources": ["a"]}},
        {"op": "move", "ids": ["b"], "before": "n"},
    ]}
    loaded = MessageHistory.from_snapshot(json_round_trip(history.to_snapshot()))
    assert loaded.revision_id == history.revision_id


def test_snapshot_with_forks_keeps_both_branches_after_with_view() -> None:
    history = with_ids(("a", "A"))
    branch = history.fork().append({"id": "b", "message": user("B")})
    moved = branch.with_view(history.revision_id)
    loaded = MessageHistory.from_snapshot(json_round_trip(moved.to_snapshot()))
    assert loaded.revision_id == history.revision_id
    assert texts(loaded, branch.revision_id) == ["A", "B"]


TS_SNAPSHOT = {
    "entries": [
        {"id": "1-a8k2m0q", "kind": "turn", "message": {"role": "user", "content": "hello"}},
        {"id": "2-z9x8c7v", "kind": "turn", "message": {"role": "assistant", "content": "hi there"},
         "meta": {"turn": 1, "labels": ["greeting"]}},
        {"id": "3-k2j4h5q", "kind": "summary",
         "message": {"role": "user", "content": "[Conversation summary] hi"},
         "sources": ["1-a8k2m0q", "2-z9x8c7v"]},
        {"id": "4-p0o9i8u", "kind": "turn", "message": {"role": "user", "content": "next"}},
    ],
    "revisions": [
        {"id": "1-r0000aa", "entryIds": [], "createdAt": 1717000000000},
        {"id": "2-r1111bb", "entryIds": ["1-a8k2m0q"], "parent": "1-r0000aa", "createdAt": 1717000000001,
         "operation": {"type": "append", "entryIds": ["1-a8k2m0q"]}},
        {"id": "3-r2222cc", "entryIds": ["1-a8k2m0q", "2-z9x8c7v"], "parent": "2-r1111bb",
         "createdAt": 1717000000002, "operation": {"type": "append", "entryIds": ["2-z9x8c7v"]}},
        {"id": "4-r3333dd", "entryIds": ["3-k2j4h5q"], "parent": "3-r2222cc", "createdAt": 1717000000003,
         "operation": {"type": "edit", "patches": [
             {"op": "summary", "sourceIds": ["1-a8k2m0q", "2-z9x8c7v"], "replace": True,
              "entry": {"id": "3-k2j4h5q", "kind": "summary",
                        "message": {"role": "user", "content": "[Conversation summary] hi"},
                        "sources": ["1-a8k2m0q", "2-z9x8c7v"]}}]}},
        {"id": "5-r4444ee", "entryIds": ["3-k2j4h5q", "4-p0o9i8u"], "parent": "4-r3333dd",
         "createdAt": 1717000000004, "operation": {"type": "append", "entryIds": ["4-p0o9i8u"]}},
        {"id": "6-r5555ff", "entryIds": ["3-k2j4h5q", "4-p0o9i8u"], "parent": "5-r4444ee",
         "createdAt": 1717000000005, "operation": {"type": "fork"}},
        {"id": "7-r6666gg", "entryIds": ["4-p0o9i8u", "nope-123"], "parent": "6-r5555ff",
         "createdAt": 1717000000006, "operation": {"type": "view", "entryIds": ["4-p0o9i8u", "nope-123"]}},
    ],
    "head": "5-r4444ee",
}


def test_typescript_snapshot_with_opaque_ids_loads() -> None:
    loaded = MessageHistory.from_snapshot(json_round_trip(TS_SNAPSHOT))
    assert [e.id for e in loaded.refs()] == ["3-k2j4h5q", "4-p0o9i8u"]
    assert texts(loaded) == ["[Conversation summary] hi", "next"]
    assert [m["content"] for m in loaded.restore()] == ["hello", "hi there", "next"]
    assert loaded.size == 2
    [_, greeting] = loaded.refs(["1-a8k2m0q", "2-z9x8c7v"])
    assert greeting.meta == {"turn": 1, "labels": ["greeting"]}
    # Revision ids become object ids; the lineage and operations are kept.
    snapshot = loaded.to_snapshot()
    assert len(snapshot["revisions"]) == 7
    by_parent = {r.get("parent"): r for r in snapshot["revisions"]}
    assert by_parent[None]["createdAt"] == 1717000000000
    assert [r["operation"]["type"] for r in snapshot["revisions"][1:]] == [
        "append", "append", "edit", "append", "fork", "view"]
    assert [r["entryIds"] for r in snapshot["revisions"]] == [r["entryIds"] for r in TS_SNAPSHOT["revisions"]]
    head = next(r for r in snapshot["revisions"] if r["id"] == snapshot["head"])
    assert head["createdAt"] == 1717000000004
    # The loaded graph reloads to the same ids, and keeps working.
    again = MessageHistory.from_snapshot(json_round_trip(snapshot))
    assert again.revision_id == loaded.revision_id
    assert again.append(user("more")).size == 3


def test_typescript_snapshot_revision_order_does_not_matter() -> None:
    shuffled = dict(TS_SNAPSHOT, revisions=list(reversed(TS_SNAPSHOT["revisions"])))
    expected = MessageHistory.from_snapshot(TS_SNAPSHOT).revision_id
    assert MessageHistory.from_snapshot(shuffled).revision_id == expected


def test_snapshot_float_created_at_loads() -> None:
    snapshot = {"entries": [], "revisions": [{"id": "r", "entryIds": [], "createdAt": 1717000000000.0}],
                "head": "r"}
    loaded = MessageHistory.from_snapshot(snapshot)
    assert loaded.to_snapshot()["revisions"][0]["createdAt"] == 1717000000000


@pytest.mark.parametrize("bad", [
    [],
    {"entries": [], "revisions": []},
    {"entries": [], "revisions": [], "head": "missing"},
    {"entries": [], "revisions": [{"id": "r", "entryIds": [], "createdAt": -1}], "head": "r"},
    {"entries": [], "revisions": [{"id": "r", "entryIds": "x", "createdAt": 1}], "head": "r"},
    {"entries": [], "revisions": [{"id": "r", "entryIds": [], "createdAt": "now"}], "head": "r"},
    {"entries": [], "revisions": [{"id": "r", "entryIds": [], "createdAt": 1, "operation": {"type": "x"}}],
     "head": "r"},
    {"entries": [], "revisions": [{"id": "r", "entryIds": ["e"], "createdAt": 1,
                                   "operation": {"type": "append", "entryIds": ["e"]}}], "head": "r"},
    {"entries": [], "revisions": [{"id": "r", "entryIds": [], "createdAt": 1, "parent": "nowhere"}],
     "head": "r"},
    {"entries": [{"id": "e", "message": {"content": "no role"}}], "revisions": [], "head": "r"},
])
def test_bad_snapshot_is_refused(bad: Any) -> None:
    with pytest.raises((InvalidInput, UnknownRevision)):
        MessageHistory.from_snapshot(bad)


def test_snapshot_with_conflicting_entry_ids_is_refused() -> None:
    bad = {"entries": [{"id": "e", "kind": "turn", "message": user("1")},
                       {"id": "e", "kind": "turn", "message": user("2")}], "revisions": [], "head": "r"}
    with pytest.raises(DuplicateEntryId):
        MessageHistory.from_snapshot(bad)


# -- changes_since -----------------------------------------------------------------------------------


def test_changes_since_without_base_is_the_whole_lineage_newest_first() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    delta = history.changes_since()
    assert "base" not in delta and delta["head"] == history.revision_id
    lineage = list(history.lineage())
    assert [r["id"] for r in delta["revisions"]] == lineage
    assert len(lineage) == 3 and "parent" not in delta["revisions"][-1]
    assert sorted(e["id"] for e in delta["entries"]) == ["a", "b"]


def test_changes_since_lists_only_entries_the_base_lineage_lacks() -> None:
    history = with_ids(("a", "A"), ("b", "B"))
    base = history.revision_id
    history = history.edit({"op": "remove", "id": "a"}).append({"id": "c", "message": user("C")})
    history = history.edit({"op": "insertBefore", "id": "b", "entries": [{"id": "a", "message": user("A")}]})
    delta = history.changes_since(base)
    assert [e["id"] for e in delta["entries"]] == ["c"]
    assert len(delta["revisions"]) == 3
    assert [r["id"] for r in delta["revisions"]] == list(history.lineage())[:3]


def test_changes_since_head_is_empty() -> None:
    history = with_ids(("a", "A"))
    delta = history.changes_since(history.revision_id)
    assert delta["revisions"] == [] and delta["entries"] == []


def test_changes_since_non_ancestor_gives_the_set_difference() -> None:
    root = with_ids(("a", "A"))
    left = root.append({"id": "l", "message": user("L")})
    right = root.fork().append({"id": "r", "message": user("R")})
    joined = right.apply_changes(left.changes_since(root.revision_id))
    assert joined.revision_id == left.revision_id
    back = joined.with_view(right.revision_id)
    delta = back.changes_since(left.revision_id)
    assert [r["id"] for r in delta["revisions"]] == list(right.lineage())[:2]
    assert [e["id"] for e in delta["entries"]] == ["r"]


def test_changes_since_unknown_base_raises() -> None:
    history = with_ids(("a", "A"))
    for unknown in ("00" * 32, "nope"):
        with pytest.raises(UnknownRevision):
            history.changes_since(unknown)


def test_changes_since_survives_json_and_applies_at_base() -> None:
    history = with_ids(("a", "A"))
    base = history
    history = history.append({"message": big_message()}).edit({"op": "move", "ids": ["a"]})
    delta = json_round_trip(history.changes_since(base.revision_id))
    other = MessageHistory.from_snapshot(json_round_trip(base.to_snapshot()))
    caught_up = other.apply_changes(delta)
    assert caught_up.revision_id == history.revision_id
    assert caught_up.render() == history.render()


def test_apply_changes_needs_the_base() -> None:
    history = with_ids(("a", "A"))
    later = history.append(user("B"))
    with pytest.raises(UnknownRevision):
        MessageHistory().apply_changes(later.changes_since(history.revision_id))


def test_view_of_a_later_entry_reloads_under_a_new_id_that_its_old_id_still_names() -> None:
    """A departure (docs/api.md): a view revision naming an id its graph did not know yet leaves it
    unresolved in its tree; a snapshot lists ids only, so the reload resolves it and the revision gets
    another id. It renders the same, and its old id is kept as an alias of the reloaded revision."""
    view = MessageHistory().with_view(["late"])
    history = view.append({"id": "late", "message": user("L")})
    loaded = MessageHistory.from_snapshot(json_round_trip(history.to_snapshot()))
    assert loaded.revision_id != history.revision_id
    assert loaded.render() == history.render() == [user("L"), user("L")]
    assert loaded.with_view(view.revision_id).render() == [user("L")]
    assert loaded.to_snapshot()["head"] == history.revision_id


def test_sibling_branch_entries_are_unknown_here() -> None:
    """An explicit id appended on a sibling branch is unknown here, and free to name other content."""
    base = with_ids(("a", "A"))
    base.append({"id": "x", "message": user("X1")})
    assert base.render(["x"]) == []
    assert texts(base.append({"id": "x", "message": user("X2")})) == ["A", "X2"]


def test_rebase_drops_a_summary_whose_sources_another_writer_summarised_first() -> None:
    """Two writers compact the same span; the one rebased second keeps the first one's summary only."""
    base = MessageHistory().extend([user("a"), assistant("b"), user("c")])
    first, second = (e.id for e in base.refs()[:2])
    patch = {"op": "summary", "sourceIds": [first, second], "replace": True}
    theirs = base.edit({**patch, "entry": user("theirs")})
    mine = base.edit({**patch, "entry": user("mine")}).append(user("d"))
    rebased = mine.rebase_onto(theirs)
    assert [m["content"] for m in rebased.render()] == ["theirs", "c", "d"]


def test_rebase_replays_only_what_the_other_side_lacks_on_long_lineages() -> None:
    """Rebasing one append onto a sibling of a 2,000-revision lineage replays exactly that append."""
    base = MessageHistory()
    for i in range(2000):
        base = base.append(user(f"m{i}"))
    theirs, mine = base.append(user("theirs")), base.append(user("mine"))
    rebased = mine.rebase_onto(theirs)
    assert [m["content"] for m in rebased.render()][-3:] == ["m1999", "theirs", "mine"]
    assert rebased.size == 2002 and list(rebased.lineage())[1] == theirs.revision_id
    assert theirs.rebase_onto(theirs).revision_id == theirs.revision_id


def test_split_at_common_cuts_two_chains_where_they_meet() -> None:
    """Both sides' own revisions and the newest shared one, whichever side reaches it first; chains that
    never meet share nothing."""
    from ctxstore.history.graph import split_at_common

    shared = [b"c3", b"c2", b"c1"]
    mine, theirs = [b"m2", b"m1", *shared], [b"t1", *shared]
    assert split_at_common(iter(mine), iter(theirs)) == ([b"m2", b"m1"], [b"t1"], b"c3")
    assert split_at_common(iter(theirs), iter(mine)) == ([b"t1"], [b"m2", b"m1"], b"c3")
    assert split_at_common(iter(shared), iter(mine)) == ([], [b"m2", b"m1"], b"c3")  # an ancestor
    assert split_at_common(iter([b"a"]), iter([b"b"])) == ([b"a"], [b"b"], None)


def _slow_intake(message: dict[str, Any], entry_id: str) -> Any:
    from ctxstore.history.intake import intake_entry

    return intake_entry({"id": entry_id, "message": message})  # the general path: copy, check, blobs


def test_a_chat_turn_takes_the_fast_intake_to_the_same_entry_and_bytes() -> None:
    """A message of text role and content (an import's usual input) is made into the entry, bytes and id
    the general path makes, and refused alike when it cannot be stored."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from ctxstore.history.intake import intake_entry

    @settings(max_examples=200, deadline=None)
    @given(st.text(st.characters(exclude_categories=()), max_size=10), st.text(max_size=1500), st.booleans())
    def check(role: str, content: str, reversed_keys: bool) -> None:
        message = {"content": content, "role": role} if reversed_keys else {"role": role, "content": content}
        try:
            fast = intake_entry(dict(message))
        except InvalidInput:
            with pytest.raises(InvalidInput):
                _slow_intake(dict(message), "x")
            return
        slow = _slow_intake(dict(message), fast.entry.id)
        assert fast.entry == slow.entry and fast.encoded[:2] == slow.encoded[:2]
        assert fast.blobs == slow.blobs and list(fast.entry.message) == list(message)

    check()


@settings(max_examples=20, deadline=None)
@given(bulk=st.integers(60, 300), appended=st.integers(0, 3))
def test_a_loaded_head_with_a_large_operation_reads_it_again_when_needed(bulk: int, appended: int) -> None:
    """A history loaded at a bulk import does not keep the import's operation (every entry id) with its
    head, yet replays, rebases, snapshots and deltas see the operation as recorded."""
    from ctxstore.ids import from_hex
    from ctxstore.store.memory import MemoryStore

    made = MessageHistory().extend([user(f"m{i}") for i in range(bulk)])
    for i in range(appended):
        made = made.append(user(f"a{i}"))
    store = MemoryStore()
    store.put_many(made.workspace.pending())
    loaded = MessageHistory(source=store, head=made.revision_id)
    bulk_id = list(made.lineage())[appended]
    bulk_oid = from_hex(bulk_id)
    assert loaded.to_snapshot() == made.to_snapshot()
    assert loaded.changes_since() == made.changes_since()
    assert loaded.render() == made.render()
    assert loaded.workspace.revision(bulk_oid).operation == made.workspace.revision(bulk_oid).operation
    if bulk > 64:
        assert loaded.workspace.cached(bulk_oid) is None  # kept without its operation
    replayed = MessageHistory().replay(loaded, bulk_id)
    assert [m["content"] for m in replayed.render()] == [f"m{i}" for i in range(bulk)]
    mine = loaded.append(user("mine"))
    theirs = MessageHistory(source=store, head=made.revision_id).append(user("theirs"))
    assert [m["content"] for m in mine.rebase_onto(theirs).render()][-2:] == ["theirs", "mine"]


def test_collector_pauses_in_many_threads_leave_the_collector_as_it_was() -> None:
    """`collector_paused` nests and overlaps across threads: however their pauses interleave (a switch
    interval of a microsecond), the collector runs again once the last ends, and stays off if it was off."""
    import gc
    import sys
    import threading

    from ctxstore.history.entry import collector_paused

    def pause(n: int) -> None:
        for _ in range(n):
            with collector_paused(), collector_paused():
                pass

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for enabled in (True, False):
            (gc.enable if enabled else gc.disable)()
            threads = [threading.Thread(target=pause, args=(5_000,)) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert gc.isenabled() is enabled
    finally:
        sys.setswitchinterval(interval)
        gc.enable()
