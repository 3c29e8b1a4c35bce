"""Limits and hostile input at the edges of the format (issue 12, defects 1, 2, 8 and 12): one object size
limit on write, read, pack and fsck; bad text, deep or looping values and impossible clocks refused
with errors of the tree; pack records with sharing tags refused quickly."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import cbor2
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore import MessageHistory, Repository
from ctxstore.cli import cli
from ctxstore.errors import BadPack, InvalidInput
from ctxstore.format import codec
from ctxstore.ids import object_id
from ctxstore.pack.records import Rebuilder, decode_record


def _user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


@pytest.fixture
def repo_path(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    with Repository.init(path) as repo:
        repo.append("main", [_user("before")])
    return path


def _state(path: Path) -> tuple[str | None, int, list[Any]]:
    with Repository.open(path) as repo:
        return repo.head("main"), len(repo.store), repo.history("main").render()


# -- defect 2: one size limit, refused at write --------------------------------------------------------


def test_a_content_block_over_the_object_limit_is_refused_at_write_and_nothing_changes(repo_path: Path) -> None:
    """A real 64 MiB block: refused naming the limit, where before it committed and then could not be read."""
    before = _state(repo_path)
    huge = "x" * codec.MAX_OBJECT_SIZE
    with Repository.open(repo_path) as repo, pytest.raises(InvalidInput, match="67108864-byte object limit"):
        repo.append("main", [_user(huge)])
    del huge
    assert _state(repo_path) == before
    with Repository.open(repo_path) as repo:
        assert repo.fsck().ok


def test_content_split_into_blocks_under_the_limit_is_stored_and_read_back(
        repo_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large content belongs in several blocks (one blob each): each under the limit, all read back."""
    monkeypatch.setattr(codec, "MAX_OBJECT_SIZE", 64 * 1024)
    blocks = [{"type": "text", "text": f"{n}" + "y" * 60_000} for n in range(3)]
    with Repository.open(repo_path) as repo:
        repo.append("main", [_user(blocks)])
        assert repo.history("main").render()[-1]["content"] == blocks
        assert repo.fsck().ok


def test_ctxstore_append_over_the_limit_exits_2_with_one_line(
        repo_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(codec, "MAX_OBJECT_SIZE", 64 * 1024)
    before = _state(repo_path)
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "append", "main", "z" * 70_000])
    assert result.exit_code == 2
    assert "65536-byte object limit" in result.stderr and "Traceback" not in result.output
    assert _state(repo_path) == before


# -- defect 8: bad input stays in the error tree ------------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def _looping() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(("message", "why"), [
    (_user("\ud800"), r"lone surrogate U\+D800"),
    ({"role": "user", "content": [{"type": "text", "text": "ok", "extra\udfff": 1}]}, r"lone surrogate U\+DFFF"),
    (_user(_nested(1000)), "nested deeper than 200"),
    (_user(_looping()), "nested deeper than 200"),
])
def test_append_refuses_bad_text_deep_and_looping_values_with_invalid_input(message: Any, why: str) -> None:
    with pytest.raises(InvalidInput, match=why):
        MessageHistory().append(message)


@pytest.mark.parametrize(("stdin", "why"), [
    ('{"role": "user", "content": "\\ud800"}', "lone surrogate"),
    ('{"role": "user", "content": ' + "[" * 1000 + "1" + "]" * 1000 + "}", "nest"),
])
def test_ctxstore_append_of_bad_json_exits_2_with_one_line(repo_path: Path, stdin: str, why: str) -> None:
    before = _state(repo_path)
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "append", "main"], input=stdin)
    assert result.exit_code == 2, result.output
    assert why in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert _state(repo_path) == before


def test_ctxstore_import_of_a_transcript_with_a_lone_surrogate_exits_2(repo_path: Path, tmp_path: Path) -> None:
    source = tmp_path / "bad.json"
    source.write_text(json.dumps([_user("fine"), _user("\ud800")]), encoding="utf-8")
    before = _state(repo_path)
    result = CliRunner().invoke(cli, ["--repo", str(repo_path), "import", str(source), "--ref", "main"])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert _state(repo_path) == before


# -- defect 12: clocks outside what ids and stamps hold ------------------------------------------------


@pytest.mark.parametrize("ms", [-1, -5_000_000, codec.MAX_TIME_MS + 1, 2**63])
def test_a_clock_before_1970_or_past_2_to_the_48_ms_is_invalid_input(ms: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time_ns", lambda: ms * 1_000_000)
    with pytest.raises(InvalidInput, match="system clock reads"):
        MessageHistory().append(_user("hi"))


def test_a_store_clock_out_of_range_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    from ctxstore.store.lmdb import LmdbStore

    oid = object_id(b"\xa0")
    store = LmdbStore(tmp_path / "db", clock=lambda: -1)
    try:
        with pytest.raises(InvalidInput, match="store's clock reads -1"), store.transaction(write=True) as txn:
            txn.put_objects([(oid, b"\xa0")])
        assert not store.has(oid)
    finally:
        store.close()


def test_the_last_representable_millisecond_is_accepted() -> None:
    assert codec.check_time_ms(codec.MAX_TIME_MS) == codec.MAX_TIME_MS
    assert codec.check_time_ms(0) == 0


# -- defect 1: pack records -----------------------------------------------------------------------------


def _sharing_bomb(levels: int) -> bytes:
    out = b"\xd8\x1c\x82\x00\x00"
    for i in range(1, levels):
        out = b"\xd8\x1c\x82" + out + b"\xd8\x1d" + (bytes([i - 1]) if i - 1 < 24 else bytes([0x18, i - 1]))
    return out


@pytest.mark.parametrize("levels", [30, 70, 150])
def test_pack_records_with_sharing_tags_are_refused(levels: int) -> None:
    with pytest.raises(BadPack):
        decode_record(_sharing_bomb(levels), Rebuilder())


@pytest.mark.parametrize("tag", sorted(codec.SEMANTIC_TAGS))
def test_pack_records_refuse_every_tag_cbor2_interprets(tag: int) -> None:
    with pytest.raises(BadPack, match=f"CBOR tag {tag}"):
        decode_record(cbor2.dumps({"type": "blob", "data": cbor2.CBORTag(tag, 1)}), Rebuilder())


@given(st.binary(max_size=300))
@settings(max_examples=300)
def test_pack_records_of_random_bytes_with_tag_heads_are_refused_as_bad_packs(tail: bytes) -> None:
    """Random bytes behind sharing, string-reference and indefinite heads: always BadPack, never a hang."""
    for head in (b"\xd8\x1c", b"\xd8\x1d\x00", b"\xd9\x01\x00", b"\xd8\x19\x00", b"\x9f"):
        with pytest.raises(BadPack):
            decode_record(head + tail, Rebuilder())
