"""Everywhere input enters ctxstore, any bytes or JSON give a value or a `CtxStoreError`, never another
exception: the codec, the pack reader, snapshots, messages, the importers and the sync protocol's frames.

Sizes are bounded so each example is fast; `tools/attacks/fuzz.py` runs the same entry points for longer.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable
from typing import Any

import cbor2
import pytest
from conftest import claude_code_records
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ctxstore import CtxStoreError, MessageHistory, Repository
from ctxstore.errors import InvalidInput, UnknownRevision, shown
from ctxstore.format import codec
from ctxstore.interop import import_claude_code, import_file, import_messages
from ctxstore.pack.staging import verify_pack
from ctxstore.pack.stream import read_pack
from ctxstore.sync import protocol

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LIMIT = 1 << 20


def refused_or_value(call: Callable[[], Any]) -> None:
    """The one property: a call returns, or refuses with a CtxStoreError."""
    with contextlib.suppress(CtxStoreError):
        call()


# -- values that trouble readers ----------------------------------------------------------------------

# Text with lone surrogates, which no UTF-8 encoder accepts, among ordinary characters.
odd_text = st.lists(st.sampled_from(["a", "é", "\ud800", "\udfff", "\x00", "\u2028", "😀", "\\", '"']),
                    max_size=6).map("".join) | st.text(max_size=8)
json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | odd_text
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(odd_text, inner, max_size=4), max_leaves=12)


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


deep = st.integers(1, 3000).map(nested)
# Bytes built from CBOR heads that readers find hard: value-sharing tags (28/29), other tags, indefinite
# lengths, huge declared lengths, deep arrays.
cbor_pieces = st.sampled_from([b"\xd8\x1c", b"\xd8\x1d", b"\xd8\x18", b"\xc6", b"\xc7", b"\xd9\xd9\xf7", b"\x9f",
                               b"\xbf", b"\xff", b"\x81", b"\xa1", b"\x61a", b"\x5b" + b"\xff" * 8, b"\x01",
                               b"\xf6", b"\xfb\x7f\xf8\x00\x00\x00\x00\x00\x00", b"\x43abc", b"\x81" * 200])
cbor_like = st.lists(cbor_pieces | st.binary(max_size=4), max_size=40).map(b"".join)


def valid_pack() -> bytes:
    repo = Repository.memory()
    repo.append("main", [{"role": "user", "content": f"message {i}"} for i in range(5)])
    repo.append("main", [{"role": "assistant", "content": "reply " * 50}])
    return b"".join(repo.changes_since("main"))


PACK = valid_pack()


def mutated(data: bytes) -> st.SearchStrategy[bytes]:
    """A valid input with a few bytes changed, cut or inserted."""
    edit = st.tuples(st.integers(0, len(data)), st.integers(0, 255), st.sampled_from(["set", "cut", "add"]))

    def apply(edits: list[tuple[int, int, str]]) -> bytes:
        out = bytearray(data)
        for at, byte, how in edits:
            at = min(at, len(out))
            if how == "set" and at < len(out):
                out[at] = byte
            elif how == "cut":
                del out[at:at + 1 + byte % 8]
            else:
                out[at:at] = bytes([byte])
        return bytes(out)

    return st.lists(edit, min_size=1, max_size=4).map(apply)


# -- the codec -----------------------------------------------------------------------------------------

@FAST
@given(st.binary(max_size=300) | cbor_like)
@example(b"\xd8\x1c\x81" * 60)  # value sharing nested: exponential in an unbounded decoder (issue 12)
@example(b"\x81" * 5000 + b"\x01")
def test_codec_decode_returns_or_refuses(data: bytes) -> None:
    refused_or_value(lambda: codec.decode(data))


@FAST
@given(st.binary(max_size=300) | mutated(codec.compress(b"some text " * 60)))
def test_stored_values_decompress_or_refuse(data: bytes) -> None:
    refused_or_value(lambda: codec.decompress(data, max_size=LIMIT))


@FAST
@given(json_values | deep)
def test_encode_takes_any_json_or_refuses(value: Any) -> None:
    refused_or_value(lambda: codec.encode(value))


def test_codec_refuses_a_self_referencing_list() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CtxStoreError):
        codec.encode(loop)


def test_codec_decode_round_trips_what_encode_made() -> None:
    """The fuzzed decoder still reads canonical bytes: the property is not met by refusing everything."""
    value = {"a": [1, -2, 3.5, None, True], "b": b"\0" * 32, "t": "é"}
    assert codec.decode(codec.encode(value)) == value
    assert cbor2.loads(codec.encode(value)) == value


# -- the pack reader -------------------------------------------------------------------------------------

def _verify(data: bytes) -> None:
    staged = verify_pack(io.BytesIO(data), max_object_size=LIMIT, max_total_size=LIMIT, max_objects=1000)
    staged.close()


@FAST
@given(mutated(PACK) | st.binary(max_size=200) | st.binary(max_size=60).map(lambda b: PACK[:9] + b))
def test_pack_reader_verifies_or_refuses(data: bytes) -> None:
    refused_or_value(lambda: _verify(data))


@FAST
@given(mutated(PACK), st.integers(1, 64))
def test_pack_stream_in_chunks_reads_or_refuses(data: bytes, size: int) -> None:
    chunks = [data[i:i + size] for i in range(0, len(data), size)]
    refused_or_value(lambda: list(read_pack(iter(chunks), max_object_size=LIMIT, max_total_size=LIMIT)))


def test_the_unmutated_pack_verifies() -> None:
    _verify(PACK)


# -- snapshots and messages ----------------------------------------------------------------------------

SNAPSHOT = MessageHistory().extend([{"role": "user", "content": f"m{i}"} for i in range(3)]).to_snapshot()


def _replace_somewhere(value: Any, path: list[int], new: Any) -> Any:
    """`value` with the node that `path` picks (indices modulo each container's size) replaced by `new`."""
    if not path or not isinstance(value, dict | list) or not value:
        return new
    if isinstance(value, dict):
        key = sorted(value)[path[0] % len(value)]
        return {**value, key: _replace_somewhere(value[key], path[1:], new)}
    i = path[0] % len(value)
    return [*value[:i], _replace_somewhere(value[i], path[1:], new), *value[i + 1:]]


@FAST
@given(st.lists(st.integers(0, 50), max_size=6), json_values | deep)
def test_snapshot_loader_loads_or_refuses(path: list[int], new: Any) -> None:
    refused_or_value(lambda: MessageHistory.from_snapshot(_replace_somewhere(SNAPSHOT, path, new)))


@FAST
@given(json_values | deep)
def test_any_json_as_a_snapshot_loads_or_refuses(value: Any) -> None:
    refused_or_value(lambda: MessageHistory.from_snapshot(value))


@FAST
@given(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]) | odd_text},
                             optional={"content": json_values | deep, "extra": json_values}) | json_values)
def test_any_message_appends_or_refuses(message: Any) -> None:
    refused_or_value(lambda: MessageHistory().append(message))


def test_self_referencing_message_and_snapshot_are_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(CtxStoreError):
        MessageHistory().append({"role": "user", "content": loop})
    with pytest.raises(CtxStoreError):
        MessageHistory.from_snapshot({**SNAPSHOT, "entries": loop})


# -- importers -------------------------------------------------------------------------------------------

def _as_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@FAST
@given(st.lists(json_values, max_size=5), st.booleans())
def test_import_of_any_json_or_jsonl_lands_or_refuses(values: list[Any], lines: bool) -> None:
    text = "\n".join(_as_text(v) for v in values) if lines else _as_text(values)
    repo = Repository.memory()
    refused_or_value(lambda: import_file(repo, io.StringIO(text), ref="imported"))


@FAST
@given(st.binary(max_size=300) | st.sampled_from([b'["\\ud800"]', b"[" * 3000 + b"]" * 3000,
                                                   b'[{"role": "user", "content": "\\udfff"}]']))
def test_import_of_any_bytes_lands_or_refuses(data: bytes) -> None:
    repo = Repository.memory()
    refused_or_value(lambda: import_file(repo, io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"), ref="x"))


@FAST
@given(st.lists(json_values, max_size=5))
def test_import_messages_of_any_values_lands_or_refuses(messages: list[Any]) -> None:
    repo = Repository.memory()
    refused_or_value(lambda: import_messages(repo, "main", messages))


RECORDS = claude_code_records()


@FAST
@given(st.integers(0, len(RECORDS) - 1), st.lists(st.integers(0, 50), max_size=4), json_values | deep)
def test_claude_code_transcript_imports_or_refuses(which: int, path: list[int], new: Any) -> None:
    records = [*RECORDS]
    records[which] = _replace_somewhere(records[which], path, new)
    repo = Repository.memory()
    refused_or_value(lambda: import_claude_code(repo, records, ref="cc"))


# -- sync protocol frames --------------------------------------------------------------------------------

def _serve(data: bytes) -> bytes:
    repo = Repository.memory()
    repo.append("main", [{"role": "user", "content": "hello"}])
    out = io.BytesIO()
    protocol.serve_stream(protocol.Service(repo.store), io.BytesIO(data), out)
    return out.getvalue()


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


ids = st.binary(min_size=32, max_size=32) | st.binary(max_size=40) | json_scalars
requests = st.fixed_dictionaries({"op": st.sampled_from(["refs", "fetch", "push", "nope"]) | json_scalars},
                                 optional={"wants": st.lists(ids, max_size=3), "haves": st.lists(ids, max_size=3),
                                           "updates": st.lists(st.dictionaries(st.sampled_from(
                                               ["ref", "old", "new", "mode"]), ids | odd_text, max_size=4),
                                               max_size=3)})


@FAST
@given(st.binary(max_size=200) | cbor_like.map(_frame) | mutated(protocol.encode_frame({"op": "refs"})))
def test_a_frame_reads_or_refuses(data: bytes) -> None:
    refused_or_value(lambda: protocol.read_frame(io.BytesIO(data)))


@FAST
@given(st.lists(requests, min_size=1, max_size=3), st.binary(max_size=64))
def test_a_server_answers_any_request_stream_or_refuses(messages: list[dict[str, Any]], tail: bytes) -> None:
    frames = []
    for message in messages:
        try:
            frames.append(protocol.encode_frame(message))
        except CtxStoreError:
            try:  # what the canonical encoder would not write, as another implementation might send it
                frames.append(_frame(cbor2.dumps(message)))
            except (ValueError, UnicodeError):
                continue
    refused_or_value(lambda: _serve(b"".join(frames) + tail))


@FAST
@given(st.binary(max_size=200) | cbor_like.map(_frame))
def test_a_server_answers_any_bytes_or_refuses(data: bytes) -> None:
    refused_or_value(lambda: _serve(data))


def test_a_value_quoted_in_an_error_is_cut_short_however_deep_or_long() -> None:
    """An error quoting input back (`errors.shown`) cannot fail on it, nor grow with it."""
    assert len(shown(nested(100_000))) < 200
    assert len(shown("x" * 1_000_000)) < 200
    assert shown("refs/heads/main") == "'refs/heads/main'"
    bad = dict(SNAPSHOT, revisions=[dict(SNAPSHOT["revisions"][0], parent=nested(5_000)), *SNAPSHOT["revisions"][1:]])
    with pytest.raises((InvalidInput, UnknownRevision)) as caught:
        MessageHistory.from_snapshot(bad)
    assert len(str(caught.value)) < 400
