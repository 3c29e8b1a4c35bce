"""The bulk import's fast path for chat turns makes exactly the objects the general path makes.

A message of a text role and a short text content (`intake.intake_turn`, its bytes laid out by
`objects.encode_turn`) skips the general intake's copy, checks and CBOR encoder. Object ids are content
hashes, so the two paths must agree byte for byte, and refuse alike what cannot be stored.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxstore.history.intake as intake
from ctxstore import MessageHistory
from ctxstore.errors import CtxStoreError, EncodingError, InvalidInput
from ctxstore.format.objects import BLOB_THRESHOLD, Entry, encode_entry, encode_object, encode_turn
from ctxstore.history.intake import intake_entry, intake_turn
from ctxstore.store.packs import chat_message_at

# Every code point, lone surrogates among them (which UTF-8 refuses), and long enough for each text head.
_TEXT = st.text(st.characters(exclude_categories=()), max_size=40)
# Text of any length up to past the blob threshold, drawn evenly (so every CBOR length form comes up).
_LONG_TEXT = st.integers(0, 1100).flatmap(
    lambda size: st.text(st.characters(exclude_categories=()), min_size=size, max_size=size))
_SCALAR = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | _TEXT
_VALUE = st.recursive(_SCALAR, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(_TEXT, inner, max_size=3), max_leaves=6)


def _messages() -> st.SearchStrategy[Any]:
    """Arbitrary inputs, mostly near a chat turn: the fast path's shape, and everything just outside it."""
    turn = st.fixed_dictionaries({"role": _TEXT, "content": _LONG_TEXT})
    swapped = st.fixed_dictionaries({"content": _LONG_TEXT, "role": _TEXT})
    near = st.fixed_dictionaries({"role": _TEXT | _SCALAR, "content": _VALUE})
    extra = st.fixed_dictionaries({"role": _TEXT, "content": _TEXT}, optional={"name": _VALUE, "x": _TEXT})
    return turn | swapped | near | extra | st.dictionaries(_TEXT, _VALUE, max_size=3) | _VALUE


@settings(max_examples=400, deadline=None)
@given(st.text(st.characters(exclude_categories=()), max_size=70), st.sampled_from(["turn", "summary"]),
       _TEXT, _LONG_TEXT)
def test_a_turn_laid_out_directly_has_the_codecs_bytes_or_is_left_to_it(
        entry_id: str, kind: str, role: str, content: str) -> None:
    """`encode_turn` gives `encode_object`'s id and bytes, and None exactly where the codec refuses."""
    entry = Entry(entry_id, kind, {"role": role, "content": content})
    try:
        expected = encode_object(entry)
    except EncodingError:
        assert encode_turn(entry_id, kind, role, content) is None
        with pytest.raises(EncodingError):
            encode_entry(entry)
        return
    turn = encode_turn(entry_id, kind, role, content)
    assert turn is not None and turn[:2] == expected
    # Where the message starts, as a leaf pack's writer would read it from the bytes (or None with it).
    assert turn[2] == chat_message_at(expected[1])
    assert encode_entry(entry) == expected


@pytest.mark.parametrize("size", [0, 23, 24, 255, 256, 65535, 65536, 70000])
def test_every_text_head_length_is_laid_out_canonically(size: int) -> None:
    """Text lengths at each boundary of CBOR's length forms (in the id, role and content)."""
    text = "é" * (size // 2) + "x" * (size % 2)  # `size` UTF-8 bytes in fewer characters
    for entry_id, role, content in [(text or "i", "user", "c"), ("i", text, "c"), ("i", "user", text)]:
        expected = encode_object(Entry(entry_id, "turn", {"role": role, "content": content}))
        turn = encode_turn(entry_id, "turn", role, content)
        assert turn is not None and turn[:2] == expected and turn[2] == chat_message_at(expected[1])


@settings(max_examples=400, deadline=None)
@given(_messages())
def test_a_turn_takes_the_fast_intake_to_what_the_general_path_makes(message: Any) -> None:
    """`intake_turn` takes exactly the chat turns under the blob threshold, to the entry and bytes the
    general path makes of the same message under the same id; anything else it leaves to that path."""
    try:
        general = intake_entry({"id": "given", "message": message})
    except InvalidInput:
        general = None
    turn = intake_turn(message)
    is_turn = (type(message) is dict and set(message) == {"role", "content"} and type(message["role"]) is str
               and type(message["content"]) is str and 4 * len(message["content"]) + 5 < BLOB_THRESHOLD)
    if turn is None:
        assert not is_turn or general is None  # not a turn, or one that cannot be stored
        return
    assert is_turn and general is not None and not general.blobs
    entry_id, oid, data, message_at = turn
    same = intake_entry({"id": entry_id, "message": message})
    assert (oid, data) == same.encoded[:2] and message_at == chat_message_at(data)
    fast = intake_entry(message)  # the turn path of the general entry point, under a new id
    assert fast.encoded[:2] == intake_entry({"id": fast.entry.id, "message": message}).encoded[:2]
    entry = fast.entry
    assert entry.message == message and entry.message is not message  # a copy, in the caller's key order
    assert list(entry.message) == list(message)


def _count_ids(patch: pytest.MonkeyPatch) -> list[str]:
    """Generated entry ids made deterministic (a counter); the list they are added to as they are drawn."""
    drawn: list[str] = []
    counter = itertools.count()

    def new_entry_id() -> str:
        drawn.append(f"id{next(counter):024d}")
        return drawn[-1]

    patch.setattr(intake, "new_entry_id", new_entry_id)
    return drawn


@pytest.fixture
def counted_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """`_count_ids` for one test."""
    yield _count_ids(monkeypatch)


def _bare(message: Any) -> bool:
    return not (type(message) is dict and "message" in message)  # not the object form of an entry input


@settings(max_examples=60, deadline=None)
@given(st.lists(_messages().filter(_bare), max_size=25))
def test_an_import_is_byte_identical_to_the_general_path(messages: list[Any]) -> None:
    """Extending by messages gives the revision id and every object the general path (each message
    given with the id it was generated) gives; what one refuses, so does the other."""
    with pytest.MonkeyPatch.context() as patch:
        drawn = _count_ids(patch)
        try:
            fast = MessageHistory(created_at=1).extend(messages, created_at=2)
        except CtxStoreError:
            with pytest.raises(InvalidInput):
                MessageHistory(created_at=1).extend([{"id": "given", "message": m} for m in messages])
            return
    assert [entry.id for entry in fast.refs()] == drawn
    general = MessageHistory(created_at=1).extend(
        [{"id": i, "message": m} for i, m in zip(drawn, messages, strict=True)], created_at=2)
    assert general.revision_id == fast.revision_id
    assert sorted(general.workspace.pending()) == sorted(fast.workspace.pending())
    assert fast.render() == messages


def test_a_bulk_import_of_chat_turns_matches_the_general_path(counted_ids: list[str]) -> None:
    """2,000 chat turns (several sequence-tree leaves) make the objects the general path makes."""
    messages = [{"role": "user" if n % 2 else "assistant", "content": f"turn {n} " * (n % 40)}
                for n in range(2000)]
    fast = MessageHistory(created_at=1).extend(messages, created_at=2)
    assert counted_ids == [entry.id for entry in fast.refs()]
    general = MessageHistory(created_at=1).extend(
        [{"id": i, "message": m} for i, m in zip(counted_ids, messages, strict=True)], created_at=2)
    assert general.revision_id == fast.revision_id
    assert sorted(general.workspace.pending()) == sorted(fast.workspace.pending())


@pytest.mark.parametrize(("message", "error"), [
    ({"role": "user", "content": "\ud800"}, r"entry cannot be stored: text at /message/content holds the lone "
                                            r"surrogate U\+D800"),
    ({"role": "\udfff", "content": "hi"}, r"lone surrogate U\+DFFF"),
    ({"role": 3, "content": "hi"}, "a message is a dict with a string 'role'"),
    ({"role": "user", "content": "hi", "bad": float("nan")}, "not allowed"),
    ("hello", "an entry is a message dict"),
])
def test_a_message_that_cannot_be_stored_is_refused_as_before(message: Any, error: str) -> None:
    """Messages near a chat turn's shape that cannot be stored get the general path's clear error."""
    with pytest.raises(InvalidInput, match=error):
        MessageHistory().extend([{"role": "user", "content": "fine"}, message])


def test_the_collector_is_back_as_it_was_after_an_import() -> None:
    """An import pauses the garbage collector and restores it, on success and on a refused input, and
    leaves it off for a caller that had turned it off."""
    assert gc.isenabled()
    MessageHistory().extend([{"role": "user", "content": "a"}])
    assert gc.isenabled()
    with pytest.raises(InvalidInput):
        MessageHistory().extend([{"role": "user", "content": "a"}, 7])
    assert gc.isenabled()
    gc.disable()
    try:
        MessageHistory().extend([{"role": "user", "content": "a"}])
        assert not gc.isenabled()
    finally:
        gc.enable()
