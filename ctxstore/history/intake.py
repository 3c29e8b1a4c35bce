"""Turning user input (messages, entry inputs, patches) into stored form, and stored form back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ..errors import EncodingError, InvalidInput, shown
from ..format.codec import MAX_DEPTH, encode
from ..format.objects import (
    BLOB_THRESHOLD,
    ENTRY_KINDS,
    PATCH_OPS,
    Blob,
    Entry,
    Object,
    encode_entry,
    encode_object,
    encode_turn,
)
from ..ids import ObjectId
from .entry_ids import new_entry_id

__all__ = [
    "Encoded",
    "Intake",
    "MakeEntries",
    "check_patch",
    "expand_message",
    "intake_copy",
    "intake_entry",
    "intake_turn",
    "plain_copy",
    "stored_patch",
]


def plain_copy(value: Any) -> Any:
    """A deep copy of stored data (dicts, lists and immutable scalars)."""
    t = type(value)
    if t is dict:
        return {k: plain_copy(v) for k, v in value.items()}
    if t is list:
        return [plain_copy(v) for v in value]
    return value


def intake_copy(value: Any, path: str = "", depth: int = 0) -> Any:
    """A deep copy of JSON-like input (dicts, lists, str, numbers, bool, None); tuples become lists.

    Objects with `model_dump` (the anthropic SDK's pydantic types) are dumped to plain data first.
    Nesting deeper than the codec's `MAX_DEPTH` (a list that contains itself among them) is refused.
    """
    t = type(value)
    if t is str or t is int or t is float or t is bool or value is None:
        return value
    if depth >= MAX_DEPTH and (t is dict or t is list or t is tuple or isinstance(value, Mapping)):
        raise InvalidInput(f"message nested deeper than {MAX_DEPTH} levels at {path[:200] or '/'}…; "
                           "a list or dict may contain itself")
    if t is dict and all(type(k) is str and (type(v) is str or v is None or type(v) is int or type(v) is bool)
                         for k, v in value.items()):
        return dict(value)  # a flat message (a chat turn): nothing to check on the way down
    if t is dict or isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"message key {shown(key)} at {path or '/'} is not a string")
            out[key] = intake_copy(item, f"{path}/{key}", depth + 1)
        return out
    if t is list or t is tuple:
        return [intake_copy(item, f"{path}/{n}", depth + 1) for n, item in enumerate(value)]
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return intake_copy(dump(mode="json", exclude_none=True), path, depth)
    if isinstance(value, bool | int | float | str):
        return value
    raise InvalidInput(f"cannot store a {t.__name__} at {path or '/'} in a message; use JSON-like data")


Encoded = tuple[ObjectId, bytes, Object]
"""An object with its id and canonical bytes, ready for `Workspace.put_encoded`."""


def _blob_out(value: Any, blobs: list[Encoded]) -> Any:
    # Text of fewer than 4,092 UTF-8 bytes (at most 4 per character) encodes under the threshold.
    if isinstance(value, str) and 4 * len(value) + 5 < BLOB_THRESHOLD:
        return value
    if isinstance(value, str | dict):
        try:
            size = len(encode(value))
        except EncodingError as exc:
            raise InvalidInput(f"message cannot be stored: {exc}") from None
        if size >= BLOB_THRESHOLD:
            blob = Blob(value)
            oid, data = encode_object(blob)
            blobs.append((oid, data, blob))
            return oid
    return value


class Intake(NamedTuple):
    """An entry input in stored form: the entry encoded, its blobs, and whether its id was given."""

    entry: Entry
    encoded: Encoded
    blobs: list[Encoded]
    explicit: bool


def intake_turn(value: Any) -> tuple[str, ObjectId, bytes, int | None] | None:
    """A chat turn given as its message (a text role and a text content under the blob threshold: most
    of an import) as a new entry id with the entry's oid, bytes and where its message starts in them
    (`encode_turn`), or None for any other input.

    What `intake_entry` makes of such a message, without its general work: there is nothing to copy
    deeply, check or take out as a blob, and the entry's bytes are laid out directly (`encode_turn`).
    No `Entry` is made: an import's entries are written, not read back, and a reader of one decodes it
    from its bytes. Text the codec refuses is None too, so that the general path says where it goes wrong.
    """
    if type(value) is not dict or len(value) != 2:
        return None
    role, content = value.get("role"), value.get("content")
    if type(role) is not str or type(content) is not str or 4 * len(content) + 5 >= BLOB_THRESHOLD:
        return None
    entry_id = new_entry_id()
    encoded = encode_turn(entry_id, "turn", role, content)
    if encoded is None:
        return None
    return entry_id, *encoded


def intake_entry(value: Any, *, kind: str | None = None, sources: list[str] | None = None) -> Intake:
    """An entry input as a stored, encoded entry (deep-copied and checked), with its blobs."""
    if sources is None and kind in (None, "turn"):
        turn = intake_turn(value)
        if turn is not None:
            made_id, oid, data, _ = turn
            entry = Entry(made_id, "turn", dict(value))
            return Intake(entry, (oid, data, entry), [], False)
    value = intake_copy(value)
    if not isinstance(value, dict):
        raise InvalidInput(f"an entry is a message dict or {{'message': ...}}, not {type(value).__name__}")
    if "message" in value:
        extra = set(value) - {"id", "message", "kind", "meta", "sources"}
        if extra:
            raise InvalidInput(f"unknown entry fields {sorted(extra)}; allowed: id, message, kind, meta, sources")
        message = value["message"]
        entry_id = value.get("id")
        kind = kind or value.get("kind") or "turn"
        meta = value.get("meta")
        meta_null = "meta" in value and meta is None  # the seed keeps `meta: null` as given
        sources = sources if sources is not None else value.get("sources")
    else:
        message, entry_id, meta, meta_null = value, None, None, False
        kind = kind or "turn"
    explicit = entry_id is not None
    if entry_id is None:
        entry_id = new_entry_id()
    elif not isinstance(entry_id, str) or not entry_id:
        raise InvalidInput(f"entry id must be a non-empty string, not {shown(entry_id)}")
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise InvalidInput("a message is a dict with a string 'role' (and usually 'content')")
    if kind not in ENTRY_KINDS:
        raise InvalidInput(f"entry kind must be one of {ENTRY_KINDS}, not {shown(kind)}")
    if meta is not None and not isinstance(meta, dict):
        raise InvalidInput("entry meta must be a dict")
    if sources is not None and (not isinstance(sources, list) or not all(isinstance(s, str) for s in sources)):
        raise InvalidInput("entry sources must be a list of entry ids")
    blobs: list[Encoded] = []
    content = message.get("content")
    if isinstance(content, str):
        message["content"] = _blob_out(content, blobs)
    elif isinstance(content, list):
        message["content"] = [_blob_out(block, blobs) for block in content]
    entry = Entry(entry_id, kind, message, meta, sources, meta_null)
    try:
        oid, data = encode_entry(entry)
    except EncodingError as exc:
        raise InvalidInput(f"entry cannot be stored: {exc}") from None
    return Intake(entry, (oid, data, entry), blobs, explicit)


def expand_message(message: dict[str, Any], blob: Callable[[ObjectId], Any]) -> dict[str, Any]:
    """A copy of a stored message with blob references replaced by their content."""
    out: dict[str, Any] = plain_copy(message)
    content = message.get("content")
    if type(content) is bytes:
        out["content"] = plain_copy(blob(ObjectId(content)))
    elif type(content) is list:
        out["content"] = [plain_copy(blob(ObjectId(b))) if type(b) is bytes else plain_copy(b) for b in content]
    return out


def _need(patch: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = patch.get(key)
    if not isinstance(value, kind):
        raise InvalidInput(f"{patch.get('op')} patch needs {what} in {shown(key)}")
    return value


def _id_list(patch: Mapping[str, Any], key: str) -> list[str]:
    ids = _need(patch, key, list, "a list of entry ids")
    if not all(isinstance(i, str) for i in ids):
        raise InvalidInput(f"{patch.get('op')} patch: {shown(key)} must hold entry ids (strings)")
    return list(ids)


def check_patch(patch: Any) -> None:
    """Refuse a malformed patch before anything is made from it."""
    if not isinstance(patch, Mapping):
        raise InvalidInput(f"a patch is a dict with 'op', not {type(patch).__name__}")
    op = patch.get("op")
    if op not in PATCH_OPS:
        raise InvalidInput(f"unknown patch op {shown(op)}; expected one of {', '.join(PATCH_OPS)}")
    if op == "move":
        _id_list(patch, "ids")
        for anchor in ("before", "after"):
            if anchor in patch and patch[anchor] is not None and not isinstance(patch[anchor], str):
                raise InvalidInput(f"move patch: {shown(anchor)} must be an entry id")
    elif op == "summary":
        _id_list(patch, "sourceIds")
        _need(patch, "entry", dict, "an entry input")
        if "replace" in patch and not isinstance(patch["replace"], bool | None):
            raise InvalidInput("summary patch: 'replace' must be true or false")
    else:
        _need(patch, "id", str, "a target entry id")
        if op != "remove":
            # An empty list is valid: `replace` with [] removes its target, an insert of [] adds nothing.
            _need(patch, "entries", list, "a list of entry inputs")


MakeEntries = Callable[..., list[tuple[str, ObjectId]]]
"""Makes (or finds) the entries of a patch's inputs: `make(inputs, kind=..., sources=...)` -> (id, oid)s."""


def stored_patch(patch: Mapping[str, Any], make: MakeEntries) -> dict[str, Any]:
    """A checked patch in stored form: entry inputs become entry object ids."""
    op = patch["op"]
    if op == "remove":
        return {"op": op, "id": patch["id"]}
    if op == "move":
        out: dict[str, Any] = {"op": op, "ids": list(patch["ids"])}
        for anchor in ("before", "after"):
            # An empty string is no anchor (as in the reference): `before: ""` leaves `after` to decide.
            if patch.get(anchor):
                out[anchor] = patch[anchor]
        return out
    if op == "summary":
        sources = list(patch["sourceIds"])
        [(_, oid)] = make([patch["entry"]], kind="summary", sources=sources)
        out = {"op": op, "sourceIds": sources, "entry": oid}
        if patch.get("replace") is not None:
            out["replace"] = bool(patch["replace"])
        return out
    return {"op": op, "id": patch["id"], "entries": [oid for _, oid in make(patch["entries"])]}
