"""MessageHistory against the reference (`fino:ai/context`): each point where it must agree, with the
reference's expected values, and the TypeScript-shaped fixtures under tests/fixtures/."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import assistant, user

from ctxstore.errors import UnknownRevision
from ctxstore.history.message_history import MessageHistory

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def contents(messages: list[dict[str, Any]]) -> list[Any]:
    return [m["content"] for m in messages]


def round_trip(history: MessageHistory) -> MessageHistory:
    return MessageHistory.from_snapshot(json.loads(json.dumps(history.to_snapshot())))


# -- 1. a history knows only its own graph ---------------------------------------------------------

def test_an_entry_made_only_in_a_descendant_is_unknown_to_the_ancestor() -> None:
    h0 = MessageHistory()
    h1 = h0.append(user("m"))
    i = h1.refs()[0].id
    assert h0.refs([i]) == [] and h0.render([i]) == [] and h0.restore([i]) == []
    assert h0.with_view([i]).render() == []
    assert h0.render(h1.revision_id) == []
    with pytest.raises(UnknownRevision):
        h0.with_view(h1.revision_id)
    with pytest.raises(UnknownRevision):
        h0.changes_since(h1.revision_id)


def test_sibling_branches_may_append_one_explicit_id_with_different_content() -> None:
    base = MessageHistory().append(user("a"))
    left = base.append({"id": "x", "message": user("X1")})
    right = base.append({"id": "x", "message": user("X2")})
    assert contents(left.render()) == ["a", "X1"] and contents(right.render()) == ["a", "X2"]
    assert contents(left.render(["x"])) == ["X1"] and contents(right.render(["x"])) == ["X2"]
    assert [e["id"] for e in right.to_snapshot()["entries"]].count("x") == 1


def test_an_earlier_revision_stays_known_after_moving_the_head_back() -> None:
    """with_view(revision) moves the head; the graph keeps everything it held, as in the reference."""
    h1 = MessageHistory().append({"id": "x", "message": user("X")})
    back = h1.with_view(list(h1.lineage())[-1])
    assert back.size == 0 and contents(back.render(["x"])) == ["X"]
    assert back.with_view(h1.revision_id).revision_id == h1.revision_id


def test_restore_is_the_same_before_and_after_a_snapshot_round_trip() -> None:
    base = MessageHistory().extend([{"id": "a", "message": user("A")}, {"id": "b", "message": assistant("B")}])
    base.append({"id": "s1", "message": user("sibling only")})  # a sibling: not in `summarised`'s graph
    summarised = base.edit({"op": "summary", "sourceIds": ["a", "s1", "b"], "replace": True,
                            "entry": {"id": "s", "message": user("S")}})
    assert summarised.restore() == [user("A"), assistant("B")]
    assert round_trip(summarised).restore() == summarised.restore()


def test_a_long_lineage_of_explicit_ids_appends_without_rescanning() -> None:
    """Each append's duplicate check finds its graph indexed: 3,000 explicit-id appends stay linear."""
    history = MessageHistory()
    for n in range(3000):
        history = history.append({"id": f"e{n}", "message": user(str(n))})
    assert history.size == 3000 and contents(history.render(["e0", "e2999"])) == ["0", "2999"]


# -- 3 and 4. skipped patches create nothing; empty entry lists -----------------------------------

def test_a_skipped_patch_creates_no_entry_anywhere() -> None:
    history = MessageHistory().append({"id": "a", "message": user("A")})
    for op in ("replace", "split", "insertBefore", "insertAfter"):
        edited = history.edit({"op": op, "id": "missing", "entries": [{"id": "n", "message": user("N")}]})
        assert edited.render() == [user("A")] and edited.refs(["n"]) == []
        snapshot = edited.to_snapshot()
        assert [e["id"] for e in snapshot["entries"]] == ["a"]
        assert snapshot["revisions"][-1]["operation"] == {"type": "edit", "patches": []}
        # Nothing holds the id, so it is free for other content.
        assert contents(edited.append({"id": "n", "message": user("other")}).render()) == ["A", "other"]


def test_replace_with_no_entries_removes_its_target() -> None:
    history = MessageHistory().extend([{"id": "a", "message": user("A")}, {"id": "b", "message": user("B")}])
    assert contents(history.edit({"op": "replace", "id": "a", "entries": []}).render()) == ["B"]


def test_inserting_no_entries_changes_nothing() -> None:
    history = MessageHistory().extend([{"id": "a", "message": user("A")}, {"id": "b", "message": user("B")}])
    for op in ("insertBefore", "insertAfter"):
        edited = history.edit({"op": op, "id": "a", "entries": []})
        assert contents(edited.render()) == ["A", "B"]
        loaded = round_trip(edited)
        assert loaded.revision_id == edited.revision_id and contents(loaded.render()) == ["A", "B"]


# -- 5. TypeScript snapshots and deltas ------------------------------------------------------------

def test_a_typescript_snapshot_renders_restores_and_keeps_its_entries_once() -> None:
    loaded = MessageHistory.from_snapshot(fixture("ts_snapshot.json"))
    assert contents(loaded.render()) == ["[Conversation summary] a greeting"]
    assert contents(loaded.restore()) == ["hi again", "hello"]
    ids = [e["id"] for e in loaded.to_snapshot()["entries"]]
    # The edit's bare messages are the listed entries, not new ones; the skipped patch made nothing.
    assert sorted(ids) == ["1-k2j4h5q", "2-m3n8p0z", "4-q9w8e7r", "5-t6y5u4i"]


def test_two_loads_of_a_typescript_snapshot_give_the_same_revisions() -> None:
    one = MessageHistory.from_snapshot(fixture("ts_snapshot.json"))
    two = MessageHistory.from_snapshot(fixture("ts_snapshot.json"))
    assert one.revision_id == two.revision_id
    assert list(one.lineage()) == list(two.lineage())


def test_foreign_revision_ids_are_kept_for_views_and_snapshots() -> None:
    loaded = MessageHistory.from_snapshot(fixture("ts_snapshot.json"))
    assert contents(loaded.with_view("3-k2j4h5q").render()) == ["hi again", "hello"]
    assert contents(loaded.render("2-c9h5n3y")) == ["hi", "hello"]
    snapshot = loaded.to_snapshot()
    # Written back in the TypeScript shape, with the ids it was loaded with.
    assert snapshot["head"] == "4-d1j6p4z"
    assert [r["id"] for r in snapshot["revisions"]] == [r["id"] for r in fixture("ts_snapshot.json")["revisions"]]
    again = round_trip(loaded)
    assert again.revision_id == loaded.revision_id and again.to_snapshot()["head"] == "4-d1j6p4z"


def test_a_typescript_delta_applies_to_a_history_loaded_from_its_base() -> None:
    loaded = MessageHistory.from_snapshot(fixture("ts_snapshot.json"))
    caught_up = loaded.apply_changes(fixture("ts_delta.json"))
    # The delta's move has before "" (no anchor), so after decides.
    assert contents(caught_up.render()) == ["[Conversation summary] a greeting", "next question", "next answer"]
    assert caught_up.with_view("5-e2k7q5a").size == 2
    delta = caught_up.changes_since("4-d1j6p4z")
    assert [r["id"] for r in delta["revisions"]] == ["6-f3l8r6b", "5-e2k7q5a"] and delta["base"] == "4-d1j6p4z"
    assert sorted(e["id"] for e in delta["entries"]) == ["6-z1x2c3v", "7-w4e5r6t"]


def test_a_ctxstore_snapshot_has_the_typescript_shape() -> None:
    history = MessageHistory().append(user("hi")).edit({"op": "replace", "id": "x", "entries": []})
    snapshot = history.to_snapshot()
    assert set(snapshot) == {"entries", "revisions", "head"}
    for record in snapshot["revisions"]:
        assert set(record) <= {"id", "entryIds", "parent", "createdAt", "operation"}
        assert isinstance(record["id"], str) and isinstance(record["createdAt"], int)
    for entry in snapshot["entries"]:
        assert set(entry) <= {"id", "kind", "message", "meta", "sources"}


# -- 7. small rules ----------------------------------------------------------------------------------

def test_move_with_an_empty_before_consults_after() -> None:
    history = MessageHistory().extend([{"id": i, "message": user(i)} for i in "abc"])
    moved = history.edit({"op": "move", "ids": ["c"], "before": "", "after": "a"})
    assert contents(moved.render()) == ["a", "c", "b"]


def test_changes_since_without_a_base_has_no_base_key() -> None:
    delta = MessageHistory().append(user("a")).changes_since()
    assert "base" not in delta and set(delta) == {"entries", "revisions", "head"}


def test_meta_null_round_trips_as_given() -> None:
    """An entry given `meta: null` keeps it through a snapshot and a JSON round trip, as the reference
    does; an entry without meta still has no `meta` key."""
    given = MessageHistory().append({"id": "a", "message": {"role": "user", "content": "x"}, "meta": None})
    assert given.to_snapshot()["entries"] == [
        {"id": "a", "kind": "turn", "message": {"role": "user", "content": "x"}, "meta": None}]
    loaded = MessageHistory.from_snapshot(json.loads(json.dumps(given.to_snapshot())))
    assert loaded.to_snapshot()["entries"][0]["meta"] is None and "meta" in loaded.to_snapshot()["entries"][0]
    assert loaded.revision_id == given.revision_id
    plain = MessageHistory().append({"id": "a", "message": {"role": "user", "content": "x"}})
    assert "meta" not in plain.to_snapshot()["entries"][0]
