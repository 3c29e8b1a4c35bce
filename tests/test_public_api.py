"""The public API speaks hex ids: no public call returns a raw-bytes id, and the facade takes hex."""

from __future__ import annotations

import dataclasses
import inspect
import io
import subprocess
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import ctxstore
from ctxstore import (
    CommitResult,
    InvalidInput,
    ReflogEntry,
    RefMoved,
    Repository,
    RevisionInfo,
    UnpackResult,
)
from ctxstore.ids import ObjectId

# Pack streams are data, not ids: `Repository.pack` and `changes_since` yield the bytes chunks of a pack
# (what `unpack`, a file or a socket takes). They are the one place `bytes` may be returned.
PACK_STREAMS = {("Repository", "pack"), ("Repository", "changes_since")}
# The storage layer speaks raw ids by design (that is where they belong): `MemoryStore` is exported as the
# in-memory twin of the store protocol, whose `get` returns an object's canonical bytes by raw id.
STORAGE = {"MemoryStore"}


def _public_callables() -> Iterator[tuple[str, str, Any]]:
    """(owner, name, callable) for every exported function, class and public method of an exported class."""
    for name in ctxstore.__all__:
        obj = getattr(ctxstore, name)
        if inspect.isfunction(obj):
            yield "", name, obj
        elif inspect.isclass(obj) and not issubclass(obj, BaseException):
            yield "", name, obj
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, classmethod | staticmethod):
                    member = member.__func__
                if isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    yield name, attr, member


def _raw_id_paths(hint: Any, where: str, seen: set[Any]) -> list[str]:
    """Where inside a type a raw id (`bytes` or `ObjectId`) appears: through containers, unions and the
    fields of dataclasses."""
    if hint is ObjectId or hint is bytes:
        return [where]
    origin = typing.get_origin(hint)
    if origin is not None:
        out = []
        for arg in typing.get_args(hint):
            if arg is not Ellipsis:
                out += _raw_id_paths(arg, f"{where}[{getattr(arg, '__name__', arg)}]", seen)
        return out
    if isinstance(hint, types.UnionType):
        return [p for arg in hint.__args__ for p in _raw_id_paths(arg, where, seen)]
    if inspect.isclass(hint) and dataclasses.is_dataclass(hint) and hint not in seen:
        seen.add(hint)
        fields = typing.get_type_hints(hint)
        return [p for f in dataclasses.fields(hint) for p in _raw_id_paths(fields[f.name], f"{where}.{f.name}", seen)]
    return []


def test_no_public_call_returns_a_raw_id() -> None:
    """Every return type of the public API (and every field of a returned dataclass) is free of raw ids."""
    bad = []
    checked = 0
    for owner, name, fn in _public_callables():
        if name in STORAGE or owner in STORAGE:
            continue
        target = fn.__init__ if inspect.isclass(fn) else fn
        hints = typing.get_type_hints(target)
        returned = hints.get("return")
        if inspect.isclass(fn):
            returned = fn  # a constructor returns the class: its fields count
        if returned is None:
            continue
        checked += 1
        paths = _raw_id_paths(returned, f"{owner + '.' if owner else ''}{name}", set())
        if (owner, name) in PACK_STREAMS and returned == Iterator[bytes]:
            continue
        bad += paths
    assert checked > 50  # the walk found the API
    assert not bad, "raw ids in the public API:\n" + "\n".join(bad)


@dataclasses.dataclass
class _Inner:
    ids: dict[str, list[ObjectId | None]]


@dataclasses.dataclass
class _Outer:
    inner: _Inner | None


def test_the_walk_finds_a_raw_id_in_a_nested_dataclass_field() -> None:
    """The checker itself: a raw id two containers deep in a returned dataclass is reported."""
    found = _raw_id_paths(Iterator[tuple[str, _Outer]], "f", set())
    assert found == ["f[tuple][_Outer].inner[_Inner].ids[list][Optional][ObjectId]"]


def test_facade_result_types_are_exported() -> None:
    """Every result type the repository facade hands out is importable from ctxstore."""
    for name in ("CommitResult", "ReflogEntry", "FsckReport", "GcReport", "RepoStats", "RevisionDiff",
                 "RevisionInfo", "UnpackResult", "FetchResult", "PullResult", "PushResult", "ImportResult",
                 "HexId"):
        assert name in ctxstore.__all__


def _hex(text: object) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def test_reflog_entries_are_hex() -> None:
    """reflog() gives hex old/new ids, matching what head() and commit() report."""
    repo = Repository.memory()
    first = repo.append("main", [{"role": "user", "content": "one"}])
    second = repo.append("main", [{"role": "user", "content": "two"}])
    log = repo.reflog("main")
    assert all(isinstance(e, ReflogEntry) for e in log)
    assert [(e.old, e.new) for e in log] == [(first.new, second.new), (None, first.new)]
    assert _hex(log[0].old) and _hex(log[0].new) and log[0].new == repo.head("main")
    assert log[0].to_dict()["timeMs"] == log[0].time_ms


def test_iter_revisions_gives_hex_ids_and_a_hex_operation() -> None:
    """iter_revisions() yields RevisionInfo: hex id and parent, and the operation's object ids in hex."""
    repo = Repository.memory()
    repo.append("main", [{"role": "user", "content": "one"}])
    head = repo.append("main", [{"role": "user", "content": "two"}]).new
    revisions = list(repo.iter_revisions("main"))
    assert [type(r) for r in revisions] == [RevisionInfo] * 3
    assert revisions[0].id == head and revisions[0].parent == revisions[1].id
    assert revisions[-1].parent is None and revisions[-1].operation is None
    op = revisions[0].operation
    assert op is not None and op["type"] == "append"
    assert all(_hex(oid) for oid in op["entries"]) and len(op["entries"]) == len(op["entryIds"]) == 1
    assert repo.history(head).render()[-1] == {"role": "user", "content": "two"}


def test_commit_commit_many_and_append_return_commit_results() -> None:
    """commit, commit_many and append all answer with CommitResult(ref, old, new) in hex."""
    repo = Repository.memory()
    history = repo.history("a").append({"role": "user", "content": "x"})
    one = repo.commit("a", history)
    assert one == CommitResult("refs/heads/a", None, history.revision_id)
    more = history.append({"role": "user", "content": "y"})
    fork = history.fork()
    many = repo.commit_many({"b": fork, "a": more})
    assert many == [CommitResult("refs/heads/b", None, fork.revision_id),
                    CommitResult("refs/heads/a", history.revision_id, more.revision_id)]
    appended = repo.append("a", [{"role": "user", "content": "z"}])
    assert appended.old == more.revision_id and appended.new == repo.head("a")
    assert one.to_dict() == {"ref": "refs/heads/a", "old": None, "new": history.revision_id}


def test_commit_with_rebase_replays_onto_a_moved_ref() -> None:
    """commit(rebase=True) rebases a stale history onto the ref's new head instead of refusing it."""
    repo = Repository.memory()
    repo.append("main", [{"role": "user", "content": "base"}])
    stale = repo.history("main").append({"role": "user", "content": "mine"})
    theirs = repo.append("main", [{"role": "user", "content": "theirs"}])
    moved = repo.commit("main", stale, rebase=True)
    assert moved.old == theirs.new and moved.new == repo.head("main")
    assert [m["content"] for m in repo.history("main").render()] == ["base", "theirs", "mine"]


def test_unpack_takes_hex_ids_and_reports_hex() -> None:
    """A hex id in unpack's ref updates works (it used to crash), and the result reports hex."""
    src = Repository.memory()
    base = src.append("main", [{"role": "user", "content": "one"}]).new
    head = src.append("main", [{"role": "user", "content": "two"}]).new
    dst = Repository.memory()
    first = dst.unpack(io.BytesIO(b"".join(src.pack(base))), {"refs/heads/main": (None, base)})
    assert isinstance(first, UnpackResult) and first.refs == {"refs/heads/main": base}
    second = dst.unpack(src.changes_since("main", base), {"refs/heads/main": (base, head)})
    assert second.refs == {"refs/heads/main": head} and 0 < second.new_objects <= second.objects
    assert dst.head("main") == head and dst.history("main").render() == src.history("main").render()


def test_unpack_refuses_raw_ids_and_a_lost_race_is_ref_moved() -> None:
    """Raw bytes where a hex id belongs are InvalidInput; a ref that moved meanwhile is RefMoved."""
    src = Repository.memory()
    head = src.append("main", [{"role": "user", "content": "one"}]).new
    dst = Repository.memory()
    pack = b"".join(src.pack("main"))
    with pytest.raises(InvalidInput):
        dst.unpack(pack, {"refs/heads/main": (None, bytes.fromhex(head))})  # type: ignore[dict-item]
    dst.unpack(pack, {"refs/heads/main": (None, head)})
    with pytest.raises(RefMoved) as info:
        dst.unpack(pack, {"refs/heads/main": (None, head)})
    assert info.value.ref == "refs/heads/main" and info.value.current == head
    assert dst.reflog("main")[0].new == head and len(dst.reflog("main")) == 1


def test_lazy_names_and_their_type_checking_imports_agree() -> None:
    """The upper layers' names load on first use; the static imports type checkers read say the same."""
    import ast
    import importlib

    source = Path(ctxstore.__file__).read_text(encoding="utf-8")
    static: dict[str, str] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom) and statement.level == 1
                for alias in statement.names:
                    static[alias.name] = f"ctxstore.{statement.module}"
    assert static == ctxstore._LAZY
    for name, module in static.items():
        assert name in ctxstore.__all__
        assert getattr(ctxstore, name) is getattr(importlib.import_module(module), name)


def test_importing_ctxstore_does_not_load_the_agent_sync_or_model_layers() -> None:
    """`import ctxstore` leaves asyncio-heavy agents, HTTP sync and the model SDK unloaded until used."""
    code = ("import sys, ctxstore; print(sorted(m for m in sys.modules if m.startswith(("
            "'ctxstore.agents', 'ctxstore.sync', 'ctxstore.interop', 'anthropic', 'httpx2', 'starlette'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"
