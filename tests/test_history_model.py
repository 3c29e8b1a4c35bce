"""MessageHistory against a plain-list model: random appends, extends, patches, forks and views.

The model is a list of entry ids (the active view) and a dict of the entries its graph knows: each
history has its own graph (what it and its ancestors made), so an entry or revision made on a sibling
branch is unknown to it. Explicit ids are fresh, re-append a known entry identically, or reuse an id
only a sibling branch knows with other content (no conflict: it is not in this graph); ghost ids (in
views and patch targets) are never created. The model follows docs/format.md and docs/api.md: a view
keeps unknown ids; a patch whose target is absent is skipped and creates no entry; entry lists may be
empty (`replace` with [] removes its target).
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ctxstore.errors import DuplicateEntryId, UnknownRevision
from ctxstore.history.message_history import MessageHistory

GHOSTS = ["ghost-1", "ghost-2"]


@dataclass
class Model:
    """What a history should show: its view, and every entry its graph knows (id -> record)."""

    view: list[str] = field(default_factory=list)
    known: dict[str, dict[str, Any]] = field(default_factory=dict)
    revisions: list[tuple[str, list[str]]] = field(default_factory=list)
    """(revision id, view) in the order made; a list, as two revisions can share an id."""

    def copy(self) -> Model:
        return Model(list(self.view), dict(self.known), list(self.revisions))

    def render(self, ids: list[str] | None = None) -> list[dict[str, Any]]:
        return [self.known[i]["message"] for i in (self.view if ids is None else ids) if i in self.known]

    def restore(self, ids: list[str] | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []

        def expand(ids: list[str], open_: set[str]) -> None:
            for i in ids:
                record = self.known.get(i)
                if record is None or i in open_:
                    continue
                if record["kind"] == "summary" and record.get("sources"):
                    expand(record["sources"], open_ | {i})
                else:
                    out.append(record["message"])

        expand(self.view if ids is None else ids, set())
        return out


class HistoryMachine(RuleBasedStateMachine):
    """Drives one current history (and the ones it forked from) next to its model."""

    def __init__(self) -> None:
        super().__init__()
        self.counter = itertools.count()
        self.history = MessageHistory()
        self.model = Model()
        self.model.revisions.append((self.history.revision_id, []))
        # Earlier (history, model) pairs: bases for changes_since and targets of with_view.
        self.past: list[tuple[MessageHistory, Model]] = []
        self.drawn: set[str] = set()

    # -- inputs ----------------------------------------------------------------------------------
    def _message(self, data: st.DataObject) -> dict[str, Any]:
        n = next(self.counter)
        role = data.draw(st.sampled_from(["user", "assistant"]))
        if data.draw(st.booleans()):
            return {"role": role, "content": f"m{n}"}
        blocks = [{"type": "text", "text": f"m{n}"}, {"type": "text", "text": "x" * n}]
        return {"role": role, "content": blocks}

    def _entry_input(self, data: st.DataObject) -> tuple[Any, str | None, dict[str, Any]]:
        """An entry input, its explicit id (None when generated), and its model record."""
        kinds = ["bare", "fresh", "again"] if self.model.known else ["bare", "fresh"]
        foreign = self._sibling_ids()
        if foreign:
            kinds.append("sibling")
        how = data.draw(st.sampled_from(kinds))
        if how == "sibling":
            # An id another branch made, with other content: unknown here, so free to use.
            entry_id = data.draw(st.sampled_from(foreign))
            self.drawn.add(entry_id)  # once per operation: two in one would conflict with each other
            message = self._message(data)
            return {"id": entry_id, "message": message}, entry_id, {"message": message, "kind": "turn", "meta": None}
        if how == "again":
            entry_id = data.draw(st.sampled_from(list(self.model.known)))
            record = self.model.known[entry_id]
            value = {"id": entry_id, **{k: v for k, v in record.items() if v is not None}}
            return value, entry_id, record
        message = self._message(data)
        if how == "bare":
            return message, None, {"message": message, "kind": "turn"}
        entry_id = f"id-{next(self.counter)}"
        meta = data.draw(st.sampled_from([None, {"labels": ["x"], "turn": 1}]))
        record = {"message": message, "kind": "turn", "meta": meta}
        value: dict[str, Any] = {"id": entry_id, "message": message}
        if meta is not None:
            value["meta"] = meta
        return value, entry_id, record

    def _sibling_ids(self) -> list[str]:
        """Entry ids that only other branches' graphs know."""
        return sorted({i for _, model in self.past for i in model.known} - set(self.model.known) - self.drawn)

    def _target(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from([*self.model.view, *GHOSTS]))

    def _step(self, history: MessageHistory, model: Model) -> None:
        self.past.append((self.history, self.model))
        self.past = self.past[-8:]
        self.drawn = set()
        self.history, self.model = history, model
        model.revisions.append((history.revision_id, list(model.view)))

    # -- rules -----------------------------------------------------------------------------------
    @initialize()
    def start(self) -> None:
        assert self.history.size == 0

    @rule(data=st.data())
    def append(self, data: st.DataObject) -> None:
        value, entry_id, record = self._entry_input(data)
        history = self.history.append(value)
        new = self.model.copy()
        if entry_id is None:
            entry_id = history.refs()[-1].id
            assert entry_id not in self.model.known
        new.known[entry_id] = record
        new.view.append(entry_id)
        self._step(history, new)

    @rule(data=st.data(), count=st.integers(min_value=0, max_value=4))
    def extend(self, data: st.DataObject, count: int) -> None:
        inputs = [self._entry_input(data) for _ in range(count)]
        history = self.history.extend([v for v, _, _ in inputs])
        new = self.model.copy()
        added = [e.id for e in history.refs()[len(history.refs()) - count:]] if count else []
        for (_, explicit, record), entry_id in zip(inputs, added, strict=True):
            assert explicit is None or explicit == entry_id
            new.known[entry_id] = record
            new.view.append(entry_id)
        self._step(history, new)

    @staticmethod
    def _made(inputs: list[tuple[Any, str | None, dict[str, Any]]], new: Model, applies: bool) -> list[str]:
        """Registers the entries an edit made from `inputs` (explicit ids) in the model, when the patch
        applies (a skipped one makes nothing); their ids."""
        out = []
        for _, explicit, record in inputs:
            assert explicit is not None
            if applies:
                new.known[explicit] = record
            out.append(explicit)
        return out

    def _explicit_inputs(self, data: st.DataObject,
                         least: int) -> list[tuple[Any, str | None, dict[str, Any]]]:
        """Entry inputs with explicit ids, so the model knows the ids an edit makes."""
        out = []
        for _ in range(data.draw(st.integers(min_value=least, max_value=3))):
            value, entry_id, record = self._entry_input(data)
            if entry_id is None:
                entry_id = f"id-{next(self.counter)}"
                value = {"id": entry_id, "message": value}
            out.append((value, entry_id, record))
        return out

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        target = self._target(data)
        history = self.history.edit({"op": "remove", "id": target})
        new = self.model.copy()
        new.view = [i for i in new.view if i != target]
        self._step(history, new)

    @rule(data=st.data(), op=st.sampled_from(["replace", "split", "insertBefore", "insertAfter"]))
    def swap_or_insert(self, data: st.DataObject, op: str) -> None:
        target = self._target(data)
        inputs = self._explicit_inputs(data, 0)
        history = self.history.edit({"op": op, "id": target, "entries": [v for v, _, _ in inputs]})
        new = self.model.copy()
        made = self._made(inputs, new, target in new.view)
        if target in new.view:
            at = new.view.index(target)
            if op == "insertBefore":
                new.view[at:at] = made
            elif op == "insertAfter":
                new.view[at + 1:at + 1] = made
            else:
                new.view[at:at + 1] = made
        self._step(history, new)

    @rule(data=st.data())
    def move(self, data: st.DataObject) -> None:
        pool = [*self.model.view, *GHOSTS]
        ids = data.draw(st.lists(st.sampled_from(pool), max_size=4))
        patch: dict[str, Any] = {"op": "move", "ids": ids}
        if data.draw(st.booleans()):
            patch["before"] = self._target(data)
        if data.draw(st.booleans()):
            patch["after"] = self._target(data)
        history = self.history.edit(patch)
        new = self.model.copy()
        moving = set(ids)
        moved = [i for i in new.view if i in moving]
        if moved:
            rest = [i for i in new.view if i not in moving]
            if "before" in patch:
                at = rest.index(patch["before"]) if patch["before"] in rest else len(rest)
            elif "after" in patch:
                at = rest.index(patch["after"]) + 1 if patch["after"] in rest else len(rest)
            else:
                at = len(rest)
            new.view = rest[:at] + moved + rest[at:]
        self._step(history, new)

    @rule(data=st.data(), replace=st.sampled_from([None, True, False]))
    def summary(self, data: st.DataObject, replace: bool | None) -> None:
        sources = data.draw(st.lists(st.sampled_from([*self.model.view, *GHOSTS]), max_size=4))
        entry_id = f"sum-{next(self.counter)}"
        message = self._message(data)
        patch: dict[str, Any] = {"op": "summary", "sourceIds": sources,
                                 "entry": {"id": entry_id, "message": message}}
        if replace is not None:
            patch["replace"] = replace
        history = self.history.edit(patch)
        new = self.model.copy()
        new.known[entry_id] = {"message": message, "kind": "summary", "sources": list(sources)}
        present = [n for n, i in enumerate(new.view) if i in set(sources)]
        if replace and present:
            first = present[0]
            new.view = ([i for i in new.view[:first] if i not in sources] + [entry_id]
                        + [i for i in new.view[first:] if i not in sources])
        else:
            new.view.append(entry_id)
        self._step(history, new)

    @rule(data=st.data())
    def edit_several(self, data: st.DataObject) -> None:
        """Two patches in one edit apply in order."""
        first, second = self._target(data), self._target(data)
        inputs = self._explicit_inputs(data, 1)
        history = self.history.edit([
            {"op": "insertAfter", "id": first, "entries": [v for v, _, _ in inputs]},
            {"op": "remove", "id": second},
        ])
        new = self.model.copy()
        made = self._made(inputs, new, first in new.view)
        if first in new.view:
            at = new.view.index(first)
            new.view[at + 1:at + 1] = made
        new.view = [i for i in new.view if i != second]
        self._step(history, new)

    @rule()
    def fork(self) -> None:
        history = self.history.fork()
        self._step(history, self.model.copy())

    @rule(data=st.data())
    def with_view_ids(self, data: st.DataObject) -> None:
        ids = data.draw(st.lists(st.sampled_from([*self.model.known, *GHOSTS]), max_size=6))
        history = self.history.with_view(ids)
        new = self.model.copy()
        new.view = list(ids)
        self._step(history, new)

    @precondition(lambda self: len(self.model.revisions) > 1)
    @rule(data=st.data())
    def with_view_revision(self, data: st.DataObject) -> None:
        revision, view = data.draw(st.sampled_from(self.model.revisions))
        history = self.history.with_view(revision)
        assert history.revision_id == revision
        new = self.model.copy()
        new.view = list(view)
        self._step(history, new)

    @precondition(lambda self: bool(self.past))
    @rule(data=st.data())
    def go_back(self, data: st.DataObject) -> None:
        """Continue from an earlier history (its sibling branches stay in the past list)."""
        self.history, self.model = data.draw(st.sampled_from(self.past))

    # -- checks ----------------------------------------------------------------------------------
    @invariant()
    def matches_the_model(self) -> None:
        history, model = self.history, self.model
        assert history.render() == model.render()
        assert [e.id for e in history.refs()] == [i for i in model.view if i in model.known]
        assert history.size == len(model.view)
        assert history.restore() == model.restore()
        for entry in history.refs():
            record = model.known[entry.id]
            assert entry.kind == record["kind"]
            assert entry.meta == record.get("meta")
            assert entry.sources == record.get("sources")

    @invariant()
    def reads_of_ids_and_revisions(self) -> None:
        ids = [*list(self.model.known)[-5:], *GHOSTS, *self.model.view[:3], *self._sibling_ids()[-3:]]
        assert self.history.render(ids) == self.model.render(ids)
        assert [e.id for e in self.history.refs(ids)] == [i for i in ids if i in self.model.known]
        assert self.history.restore(ids) == self.model.restore(ids)
        for revision, view in self.model.revisions[-3:]:
            assert self.history.render(revision) == self.model.render(view)
        mine = {r for r, _ in self.model.revisions}
        for revision in {r for _, model in self.past for r, _ in model.revisions} - mine:
            # A sibling's (or a later history's) revision is not in this graph.
            assert self.history.render(revision) == []
            with pytest.raises(UnknownRevision):
                self.history.with_view(revision)

    @invariant()
    def snapshot_round_trip(self) -> None:
        snapshot = self.history.to_snapshot()
        loaded = MessageHistory.from_snapshot(json.loads(json.dumps(snapshot)))
        assert loaded.revision_id == self.history.revision_id
        assert loaded.render() == self.history.render()
        assert loaded.restore() == self.history.restore()
        assert loaded.size == self.history.size
        again = loaded.to_snapshot()
        # The same graph; the order of revisions and entries may follow other tips.
        for key in ("revisions", "entries"):
            assert sorted(again[key], key=lambda r: r["id"]) == sorted(snapshot[key], key=lambda r: r["id"])
        assert again["head"] == snapshot["head"]

    @invariant()
    def changes_since_reproduces_the_head(self) -> None:
        mine = {r for r, _ in self.model.revisions}
        for base_history, base_model in self.past[-3:]:
            if base_history.revision_id not in mine:
                # A base this graph does not hold (a sibling's, or a later history's) is unknown here.
                with pytest.raises(UnknownRevision):
                    self.history.changes_since(base_history.revision_id)
                continue
            delta = json.loads(json.dumps(self.history.changes_since(base_history.revision_id)))
            assert delta["base"] == base_history.revision_id
            assert delta["head"] == self.history.revision_id
            at_base = MessageHistory.from_snapshot(json.loads(json.dumps(base_history.to_snapshot())))
            try:
                caught_up = at_base.apply_changes(delta)
            except DuplicateEntryId:
                # The base's graph (which may know a branch this one never saw) holds an id that
                # names other content here: one graph cannot hold both.
                assert any(record != self.model.known.get(i, record) for i, record in base_model.known.items())
                continue
            assert caught_up.revision_id == self.history.revision_id
            assert caught_up.render() == self.history.render()
            assert caught_up.restore() == self.history.restore()
        whole = json.loads(json.dumps(self.history.changes_since()))
        assert "base" not in whole
        assert [r["id"] for r in whole["revisions"]] == list(self.history.lineage())
        rebuilt = MessageHistory.from_snapshot({**whole, "revisions": list(reversed(whole["revisions"]))})
        assert rebuilt.revision_id == self.history.revision_id
        assert rebuilt.render() == self.history.render()


HistoryMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
test_history_model = HistoryMachine.TestCase
