"""Malformed input to a MessageHistory call raises a ctxstore error that names the problem, never a bare
KeyError, ValueError, AttributeError, TypeError or RecursionError from inside the history package."""

from __future__ import annotations

import ast
import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctxstore.history
from ctxstore.errors import CtxStoreError, InvalidInput, UnknownRevision
from ctxstore.history.message_history import MessageHistory
from ctxstore.store.memory import MemoryStore

HISTORY_PACKAGE = Path(ctxstore.history.__file__).parent



def oid_of(history: MessageHistory, entry_id: str) -> Any:
    """The object id of the entry `entry_id` that `history`'s graph knows."""
    return history.workspace.introductions(entry_id)[0][1]

def _base() -> MessageHistory:
    first = MessageHistory().append({"id": "a", "message": {"role": "user", "content": "hi"}})
    second = first.append({"id": "b", "message": {"role": "assistant", "content": "hello"}})
    summed = second.edit({"op": "summary", "sourceIds": ["a", "b"], "replace": True,
                          "entry": {"role": "user", "content": "greetings"}})
    return summed.fork().with_view(["a", "ghost"])


BASE = _base()
SNAPSHOT = BASE.to_snapshot()

_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats()
            | st.text(max_size=4) | st.binary(max_size=3)
            | st.sampled_from(["a", "b", "ghost", "", BASE.revision_id, "0" * 64]))
_KEYS = st.sampled_from(["id", "op", "role", "content", "message", "kind", "meta", "sources", "entries",
                         "ids", "before", "after", "sourceIds", "entry", "replace", "type", "entryIds",
                         "patches", "revisions", "head", "parent", "createdAt", "operation"])
JSONISH = st.recursive(
    _SCALARS,
    lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner)
                   | st.dictionaries(_KEYS | st.text(max_size=2) | st.integers(), inner, max_size=4)),
    max_leaves=10)
"""Values shaped like JSON (and a few that are not: tuples, bytes, integer keys, huge integers)."""

_ANY = JSONISH
PATCHES = st.fixed_dictionaries(
    {"op": st.sampled_from(["remove", "replace", "insertBefore", "insertAfter", "move", "split", "summary",
                            "bogus"])},
    optional={"id": _ANY, "entries": _ANY, "ids": _ANY, "before": _ANY, "after": _ANY, "sourceIds": _ANY,
              "entry": _ANY, "replace": _ANY})
"""Patches with a real op and arbitrary operands: the likeliest mistake."""

OPERATIONS = st.fixed_dictionaries(
    {"type": st.sampled_from(["append", "edit", "view", "fork", "bogus"])},
    optional={"entryIds": _ANY, "patches": st.lists(PATCHES, max_size=2) | _ANY})

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _only_ctxstore_errors(call: Any, *args: Any) -> None:
    with contextlib.suppress(CtxStoreError):
        call(*args)


@_SETTINGS
@given(JSONISH)
def test_any_value_to_any_call_raises_only_ctxstore_errors(value: Any) -> None:
    """Every public call given any JSON-like value succeeds or raises a CtxStoreError."""
    for call in (BASE.append, BASE.extend, BASE.edit, BASE.with_view, BASE.render, BASE.refs, BASE.restore,
                 BASE.changes_since, BASE.apply_changes, MessageHistory.from_snapshot):
        _only_ctxstore_errors(call, value)


@_SETTINGS
@given(PATCHES)
def test_a_patch_with_bad_operands_is_invalid_input_or_applies(patch: dict[str, Any]) -> None:
    """A patch with a known op and any operands applies or raises InvalidInput, alone or in a list."""
    for patches in (patch, [patch, patch]):
        with contextlib.suppress(InvalidInput):
            BASE.edit(patches)


@_SETTINGS
@given(JSONISH)
def test_an_entry_input_with_bad_fields_is_invalid_input_or_appends(value: Any) -> None:
    """An entry input (object form or message form) with any field values appends or raises InvalidInput."""
    fields = value if isinstance(value, dict) else {"content": value}
    for entry in ({**fields, "role": "user"}, {"message": {**fields, "role": "user"}},
                  {"message": {"role": "user"}, **{k: v for k, v in fields.items() if k != "message"}}):
        with contextlib.suppress(InvalidInput):
            BASE.append(entry)


@_SETTINGS
@given(st.sampled_from(["operation", "entryIds", "parent", "createdAt", "id"]), JSONISH,
       st.integers(min_value=0, max_value=len(SNAPSHOT["revisions"]) - 1))
def test_a_snapshot_with_one_bad_field_raises_only_ctxstore_errors(key: str, value: Any, at: int) -> None:
    """A snapshot or delta with any one revision field replaced loads or raises a CtxStoreError."""
    broken = copy.deepcopy(SNAPSHOT)
    broken["revisions"][at][key] = value
    _only_ctxstore_errors(MessageHistory.from_snapshot, broken)
    delta = BASE.changes_since(list(BASE.lineage())[-2])
    delta["revisions"] = [dict(r, **{key: value}) for r in delta["revisions"]]
    _only_ctxstore_errors(BASE.apply_changes, delta)


@_SETTINGS
@given(OPERATIONS, st.integers(min_value=0, max_value=len(SNAPSHOT["revisions"]) - 1))
def test_a_snapshot_with_a_bad_operation_is_invalid_input_or_loads(operation: Any, at: int) -> None:
    """A revision operation of a known type with any operands loads or raises InvalidInput."""
    broken = copy.deepcopy(SNAPSHOT)
    broken["revisions"][at]["operation"] = operation
    with contextlib.suppress(InvalidInput):
        MessageHistory.from_snapshot(broken)


@_SETTINGS
@given(JSONISH)
def test_a_snapshot_with_a_bad_entry_is_invalid_input(entry: Any) -> None:
    """A snapshot entry that is not an entry input is refused as InvalidInput."""
    broken = copy.deepcopy(SNAPSHOT)
    broken["entries"].append(entry)
    with contextlib.suppress(InvalidInput):
        MessageHistory.from_snapshot(broken)


def test_created_at_beyond_64_bits_is_invalid_input_naming_the_revision() -> None:
    """A createdAt that no revision can hold names the revision, instead of an encoder error."""
    snapshot = {"entries": [], "revisions": [{"id": "r1", "entryIds": [], "createdAt": 2**70}], "head": "r1"}
    with pytest.raises(InvalidInput, match="revision 'r1' cannot be stored"):
        MessageHistory.from_snapshot(snapshot)


def test_replay_of_an_unknown_revision_is_unknown_revision() -> None:
    with pytest.raises(UnknownRevision, match="not in the history to replay from"):
        BASE.replay(BASE, "0" * 64)
    with pytest.raises(UnknownRevision):
        BASE.replay(BASE, "not hex")


def test_replay_and_rebase_need_a_history() -> None:
    """Passing something other than a MessageHistory says so, instead of an AttributeError."""
    with pytest.raises(InvalidInput, match="replay needs a MessageHistory"):
        BASE.replay("history", BASE.revision_id)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="rebase_onto needs a MessageHistory"):
        BASE.rebase_onto(None)  # type: ignore[arg-type]


def test_opening_a_store_at_an_entry_id_is_unknown_revision() -> None:
    """An object id that names an entry, not a revision, is not a revision to open."""
    history = MessageHistory().append({"id": "a", "message": {"role": "user", "content": "hi"}})
    store = MemoryStore()
    with store.transaction(write=True) as txn:
        txn.put_objects(history.workspace.pending())
    entry_oid = oid_of(history, "a").hex()
    with pytest.raises(UnknownRevision, match="is not in the store"):
        MessageHistory(source=store, head=entry_oid)
    assert MessageHistory(source=store, head=history.revision_id).render() == [{"role": "user", "content": "hi"}]


def test_restore_of_a_long_summary_chain_does_not_exhaust_the_stack() -> None:
    """Each summary summarising the previous one, thousands deep, restores to the first message."""
    history = MessageHistory().append({"id": "s0", "message": {"role": "user", "content": "first"}})
    depth = 3000
    made = [{"id": f"s{n}", "kind": "summary", "sources": [f"s{n - 1}"],
             "message": {"role": "user", "content": f"summary {n}"}} for n in range(1, depth + 1)]
    history = history.extend(made)
    assert history.restore([f"s{depth}"]) == [{"role": "user", "content": "first"}]


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module)
    return found


def test_snapshot_works_without_the_history_class() -> None:
    """snapshot.py is below message_history.py: it never imports it, not even for types."""
    assert "message_history" not in _imported(HISTORY_PACKAGE / "snapshot.py")
    assert "snapshot" in _imported(HISTORY_PACKAGE / "message_history.py")


def test_no_history_module_uses_another_objects_private_names() -> None:
    """Outside a class's own methods, no history module reads `x._name` of something it did not define."""
    for path in sorted(HISTORY_PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text())
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            for node in ast.walk(cls):
                node.in_class = True  # type: ignore[attr-defined]
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and not getattr(node, "in_class", False)):
                pytest.fail(f"{path.name}:{node.lineno} reaches into private name {node.attr}")
