"""Errors quote hostile input boundedly: a value nested thousands deep, or a megabyte of text, handed to a
public call that refuses it gives a short `CtxStoreError`, never a `RecursionError` raised while building the
message, nor a message as large as the input; and nothing is written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import msg

from ctxstore import Repository
from ctxstore.agents.offline import OfflineModel
from ctxstore.errors import CtxStoreError, InvalidInput, UnknownRevision
from ctxstore.sync import Service

LONGEST = 400  # a message quoting hostile input stays this short, whatever the input's size


def _deep(depth: int = 5000) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


HUGE = "x" * 1_000_000


@pytest.fixture
def repo() -> Iterator[Repository]:
    with Repository.memory() as r:
        r.append("main", [msg("hello"), msg("hi", "assistant")])
        yield r


def _written(repo: Repository) -> tuple[dict[str, str], int, int, dict[str, str]]:
    """What a refused call must leave as it was: refs, main's reflog, the objects, the remotes."""
    return repo.refs(), len(repo.reflog("main")), sum(1 for _ in repo.store), repo.remotes()


def _short(exc: pytest.ExceptionInfo[CtxStoreError]) -> None:
    assert len(str(exc.value)) < LONGEST, str(exc.value)[:LONGEST]


def test_unpack_quotes_a_deeply_nested_ref_change_boundedly(repo: Repository) -> None:
    """`Repository.unpack` refuses a ref update that is not an (old, new) pair and quotes it: a pair
    nested 5,000 deep gives `InvalidInput`, not the RecursionError `repr` raised, and moves no ref."""
    before = _written(repo)
    with pytest.raises(InvalidInput, match="must be \\(old, new\\) hex ids or None") as exc:
        repo.unpack([], ref_updates={"refs/heads/main": _deep()})  # type: ignore[dict-item]
    _short(exc)
    assert _written(repo) == before


def test_append_quotes_deeply_nested_retries_boundedly(repo: Repository) -> None:
    """`Repository.append(..., retries=...)` (repo/commit.py) quotes a bad `retries`: nested 5,000 deep
    it is `InvalidInput` with a short message, and the entries are not appended."""
    before = _written(repo)
    with pytest.raises(InvalidInput, match="retries must be a positive whole number") as exc:
        repo.append("main", [msg("more")], retries=_deep())  # type: ignore[arg-type]
    _short(exc)
    assert _written(repo) == before
    assert len(repo.history("main").restore()) == 2


def test_expire_reflogs_quotes_deeply_nested_older_than_boundedly(repo: Repository) -> None:
    """`Repository.expire_reflogs(older_than=...)` quotes a value that is not a number of seconds: nested
    5,000 deep it is `InvalidInput` with a short message, and no reflog record is dropped."""
    before = _written(repo)
    with pytest.raises(InvalidInput, match="older_than must be zero or more seconds") as exc:
        repo.expire_reflogs(older_than=_deep())  # type: ignore[arg-type]
    _short(exc)
    assert _written(repo) == before


def test_commit_many_quotes_a_megabyte_set_refs_name_boundedly(repo: Repository) -> None:
    """`Repository.commit_many(set_refs=...)` quotes a name that is not a full ref name: a megabyte of
    text gives a message of a few hundred characters, not a megabyte, and neither ref moves."""
    before = _written(repo)
    head = repo.head("main")
    assert head is not None
    with pytest.raises(InvalidInput, match="set_refs takes full ref names") as exc:
        repo.commit_many({"main": repo.history("main").extend([msg("more")])}, set_refs={HUGE: head})
    _short(exc)
    assert _written(repo) == before


def test_resolve_quotes_a_megabyte_spec_boundedly(repo: Repository) -> None:
    """The revspec parser and look-up (`Repository.resolve`) quote the spec they could not read or find:
    a megabyte of text, plain or after ``main~``, gives a short error, and resolving writes nothing."""
    before = _written(repo)
    with pytest.raises(UnknownRevision, match="no ref or revision named") as unknown:
        repo.resolve(HUGE)
    _short(unknown)
    with pytest.raises(InvalidInput, match="cannot read") as malformed:
        repo.resolve("main~" + HUGE)
    _short(malformed)
    assert _written(repo) == before


def test_push_quotes_a_deeply_nested_ref_name_boundedly(repo: Repository) -> None:
    """The sync protocol's push parsing (`Service.receive_push`, as every transport's server runs it)
    quotes a ref name that is not text: a peer's name nested 5,000 deep gives `InvalidInput` with a
    short message, before any of the pack is read, and no ref moves on the serving side."""
    before = _written(repo)
    head = repo.head("main")
    request = {"updates": [{"ref": _deep(), "old": None, "new": bytes.fromhex(head or ""), "mode": "ff"}]}
    with pytest.raises(InvalidInput, match="a ref update names its ref as text") as exc:
        Service(repo.store).receive_push(request, [])
    _short(exc)
    assert _written(repo) == before


def test_push_quotes_a_megabyte_mode_boundedly(repo: Repository) -> None:
    """A push whose update mode is a megabyte of text is refused with a short message (the mode is quoted)."""
    before = _written(repo)
    request = {"updates": [{"ref": "refs/heads/other", "old": None, "new": None, "mode": HUGE}]}
    with pytest.raises(InvalidInput, match="ref update mode must be one of") as exc:
        Service(repo.store).receive_push(request, [])
    _short(exc)
    assert _written(repo) == before


def test_config_quotes_a_deeply_nested_remote_name_boundedly(repo: Repository) -> None:
    """`Repository.remote_add` (repo/config.py) quotes a name it cannot use: nested 5,000 deep it is
    `InvalidInput` with a short message, and no remote is recorded."""
    before = _written(repo)
    with pytest.raises(InvalidInput, match="invalid remote name") as exc:
        repo.remote_add(_deep(), "https://hub.example/r")  # type: ignore[arg-type]
    _short(exc)
    with pytest.raises(InvalidInput, match="must be text") as not_text:
        repo.config.set(_deep(), 1)  # type: ignore[arg-type]
    _short(not_text)
    assert _written(repo) == before


def test_offline_model_quotes_a_deeply_nested_script_item_boundedly() -> None:
    """The agents layer quotes a script item it cannot use (`OfflineModel`): nested 5,000 deep it is
    `InvalidInput` with a short message."""
    with pytest.raises(InvalidInput, match="offline script item") as exc:
        OfflineModel(script=[_deep()])  # type: ignore[list-item]
    _short(exc)
