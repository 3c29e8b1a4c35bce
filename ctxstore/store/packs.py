"""Leaf packs: a closed leaf of the sequence tree stored with its entries, compressed as one frame.

A conversation is read a view at a time, and a view is its tree's leaves in order, each naming a few
dozen entries. Stored one record per entry, reading 100,000 messages is 100,000 lookups, zstd calls and
hashes, and each small message compresses poorly alone. So when a leaf closes (its chunk can never
change again), the store keeps it as a *leaf pack*: one record, in a database of its own under the
leaf's key (in pieces, below), holding the leaf's canonical bytes and the canonical bytes of every
entry it names (and of the blobs they name), compressed together; the leaf's record in ``objs``
becomes a marker, and each of the packed objects' a *pointer* to it. Packs are apart from ``objs`` so
that a reader of a whole view looks leaves up in a small tree, and ``objs`` holds only small records.
Object ids, canonical bytes and everything above the store are unchanged: `get` of the leaf or of an
entry returns the same bytes, checked against the id asked for; a reader of a whole view
(`get_leaves`) takes a leaf's entries from its one record.

Records (in ``objs``, after the record's write time and id tail, `records`; and in ``packs``):

- the leaf's value in ``objs``: ``LEAF_PACK`` (0x04), then the leaf's canonical size (4 bytes
  big-endian);
- the pack, in ``packs`` under the leaf's record key, in pieces (`records.pack_pieces`: each under the
  key and its number, joined in key order they are the record): ``seal`` (16 bytes), then the payload
  framed as any small object is (a codec byte: raw, zstd, or dictionary id and zstd; one frame, nothing
  after it). The payload is a canonical CBOR array: the leaf's canonical bytes as a byte string (or null
  for a leaf that is its chat entries, `names_its_entries`: rebuilt from them, `rebuilt_leaf`); an
  array with a byte string per entry the leaf names (once each, in the order they first appear in it:
  `seq.packed_order`); one item per entry; then the canonical bytes of each blob packed with them, as
  byte strings. For a chat entry
  (`chat_message_at`: four fields, the message last and exactly a text role and a text content) the
  byte string is its canonical bytes up to its message and the item is the message itself (a CBOR item
  of those bytes); for any other entry the byte string is all of its canonical bytes and the item is
  null. The seal is the first 16 bytes of blake3(leaf id || payload).
- a packed object's value in ``objs``: ``PACKED`` (0x05), the leaf's record key (its first 16 id
  bytes), the object's position among the pack's entries then blobs (one byte), then the object's
  canonical size (4 bytes big-endian).

The writer packs a leaf only with entries whose bytes it has checked hash to their ids, and seals the
payload after; a read checks the seal, the leaf's bytes (given, or rebuilt) against its id, and (read
alone) an entry's bytes against its own. A reader of a whole pack relies on the seal for its entries,
and for a leaf left out, as a delta's reader relies on its check (`revisions`): a record damaged
anywhere is refused. Because the messages are CBOR
items of the payload, a reader of the whole view decodes a pack's messages in one call
(`chat_messages`), and the writer's layout check stands for the read's check of each entry's shape.
docs/storage.md specifies it.

Pure functions over bytes.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import blake3
import cbor2

from ..errors import DamagedData, EncodingError
from ..format.codec import SMALL_HEADS, array_head_at, cbor_head
from ..format.objects import SeqNode
from ..format.seq import encode_node
from ..ids import ObjectId, object_id, to_hex

__all__ = ["FRAMED_AT", "LEAF_PACK", "MAX_BLOB", "MAX_ENTRIES", "MAX_PAYLOAD", "PACKED", "SEAL_SIZE", "Parts",
           "chat_message_at", "chat_messages", "entry_id_of", "is_pack", "leaf_bytes", "leaf_marker",
           "names_its_entries", "pack_payload", "pack_record", "payload_of", "pointer_target", "pointer_values",
           "rebuilt_leaf", "split", "stored_size_of"]

LEAF_PACK = 0x04
"""Codec byte of a closed leaf stored with its entries."""
PACKED = 0x05
"""Codec byte of an entry whose bytes are kept in a leaf pack."""
SEAL_SIZE = 16
_SIZE = 4
FRAMED_AT = SEAL_SIZE
"""Where a pack's framed payload starts in its record (in ``packs``)."""
MAX_ENTRIES = 255
"""Most entries one pack holds (a pointer names its entry's position in one byte; a leaf holds at most
128 items)."""
MAX_BLOB = 64 * 1024
"""Larger blobs are not packed (a read of the pack would carry them for every entry read)."""
MAX_PAYLOAD = 512 * 1024
"""A leaf that comes to more than this with its entries is not packed: its entries stay one record each.
A read of one of them would otherwise inflate the whole pack; and the commit that packs a leaf holds
its entries twice until it ends (their records are copied on write), so this bounds the space a commit
needs beyond its own objects (a full disk with a little space freed can still take an append)."""

_KEY_SIZE = 16  # records.KEY_SIZE (records imports this module, so the number is repeated here)


def _seal(leaf: ObjectId, payload: bytes) -> bytes:
    seal = blake3.blake3(leaf)
    seal.update(payload)  # not hashed as one concatenation: that would copy every payload once more
    return seal.digest()[:SEAL_SIZE]


def pack_payload(leaf_bytes: bytes | None, entries: Sequence[tuple[bytes, int | None]], blobs: Sequence[bytes]
                 ) -> bytes:
    """The payload of a pack for a leaf packed with `entries` (canonical bytes in `seq.packed_order`, each
    with where its message starts if it is a chat entry: `chat_message_at`) and `blobs` (canonical bytes
    of blobs they name), before it is framed and sealed (`pack_record`). `leaf_bytes` is None for a leaf
    that is its entries (`names_its_entries`): the payload then leaves it out, and a reader rebuilds it."""
    heads = [data if cut is None else data[:cut] for data, cut in entries]
    messages = [_NULL if cut is None else data[cut:] for data, cut in entries]
    leaf = _NULL if leaf_bytes is None else cbor_head(2, len(leaf_bytes)) + leaf_bytes
    return b"".join([cbor_head(4, 2 + len(entries) + len(blobs)), leaf,
                     cbor_head(4, len(heads)), *[cbor_head(2, len(h)) + h for h in heads], *messages,
                     *[cbor_head(2, len(b)) + b for b in blobs]])


def names_its_entries(items: Sequence[Sequence[Any]], entries: Sequence[tuple[bytes, int | None]]) -> bool:
    """Whether a leaf of these items *is* the chat entries it packs (canonical bytes in
    `seq.packed_order`, each with where its message starts: `chat_message_at`): every one a chat entry,
    named once, in that order, under its own id (`entry_id_of`). Such a leaf is left out of its pack and
    rebuilt from the entries when it is read alone (`rebuilt_leaf`): its items are about a third of a
    chat pack, and their oids do not compress, while a whole view's reader needs only the messages in
    order. A leaf with any other entry is kept: that reader needs its items, and rebuilding them would
    hash every entry (an agent's tool outputs) to save a few percent of the pack."""
    if len(items) != len(entries) or None in (cut for _, cut in entries):
        return False
    # A chat entry's id is the text right after ``a4 62 "id"`` (its layout is checked), so each is compared
    # as bytes there: this runs for every entry a commit packs.
    for (entry_id, _), (data, _) in zip(items, entries, strict=True):
        text = entry_id.encode()
        if len(text) > 255 or not data.startswith(SMALL_HEADS[3][len(text)] + text, len(_CHAT_START)):
            return False
    return True


def entry_id_of(data: bytes) -> str | None:
    """The ``id`` of an entry from its canonical bytes' layout (a map whose first key, the shortest, is
    ``id``), or None if they do not start so or the id is not a valid UTF-8 text."""
    if len(data) < 5 or not 0xA0 <= data[0] <= 0xB7 or data[1:4] != b"bid":
        return None
    try:
        start, end = _text_span(data, 4, 0x7B)
        return data[start:end].decode() if end <= len(data) else None
    except (IndexError, ValueError):
        return None


def rebuilt_leaf(leaf: ObjectId, entries: Sequence[bytes]) -> bytes:
    """The canonical bytes of a leaf that is its entries (`names_its_entries`), checked against its id;
    `DamagedData` if they do not rebuild it."""
    ids = [entry_id_of(data) for data in entries]
    if None in ids:
        raise _damaged(leaf, "an entry of a leaf kept as its entries has no id")
    data = encode_node(SeqNode(level=0, items=[[entry_id, object_id(e)] for entry_id, e in zip(ids, entries,
                                                                                                  strict=True)]))
    if data is None or object_id(data) != leaf:
        raise _damaged(leaf, "its entries do not rebuild the leaf")
    return data


def leaf_marker(leaf_bytes: bytes) -> bytes:
    """A packed leaf's stored value in ``objs``: the codec byte and the leaf's canonical size."""
    return bytes([LEAF_PACK]) + len(leaf_bytes).to_bytes(_SIZE, "big")


def pack_record(leaf: ObjectId, payload: bytes, framed: bytes) -> bytes:
    """A pack's record: the seal of `leaf` and `payload`, then `framed` (the payload as the store frames it)."""
    return _seal(leaf, payload) + framed


def chat_message_at(data: bytes) -> int | None:
    """Where the message starts in the canonical bytes of a chat entry: four fields (``id``, non-empty;
    ``kind``, a turn or a summary; ``type``; ``message``, last) whose message is exactly a text ``role``
    and a text ``content``, both valid UTF-8 (the pack's reader decodes them). None for any other object
    (and for an id or a role over 255 bytes, which a pack then keeps whole). Read from the bytes' layout:
    it runs for every entry a commit packs. Bytes that hash to their id need not be a valid entry, so the
    layout is checked, not assumed: what does not fit is kept whole, and read whole."""
    if not data.startswith(_CHAT_START):
        return None
    try:
        head = data[4]
        if 0x60 < head < 0x78:
            at = head - 0x5B  # 5 + the id's length
        elif head == 0x78 and data[5]:
            at = 6 + data[5]
        else:
            return None
        if data.startswith(_TURN, at):
            message = at + len(_TURN)
        elif data.startswith(_SUMMARY, at):
            message = at + len(_SUMMARY)
        else:
            return None
        if not data.startswith(_MESSAGE_START, message):
            return None
        role, at = _text_span(data, message + len(_MESSAGE_START), 0x78)
        if not data.startswith(_CONTENT_KEY, at):
            return None
        content, end = _text_span(data, at + len(_CONTENT_KEY), 0x7B)
        if end != len(data):
            return None
        data[role:at].decode()
        data[content:end].decode()
    except (IndexError, ValueError):  # cut short, not text, not UTF-8
        return None
    return message


def _text_span(data: bytes, at: int, widest: int) -> tuple[int, int]:
    """Where the text of the CBOR text string whose head is at `at` starts and ends; `ValueError` if there
    is no text head there, or a longer one than `widest` allows (0x78: a 1-byte length; 0x7B: 8 bytes)."""
    head = data[at]
    if 0x60 <= head < 0x78:
        return at + 1, at + head - 0x5F
    if not 0x78 <= head <= widest:
        raise ValueError("not a text head")
    start = at + 1 + (1 << (head - 0x78))
    return start, start + int.from_bytes(data[at + 1:start], "big")


_NULL = b"\xf6"
_CHAT_START = b"\xa4bid"  # a map of four fields, the first "id"
_TURN, _SUMMARY = (b"dkind" + bytes([0x60 + len(kind)]) + kind.encode() + b"dtypeeentrygmessage"
                   for kind in ("turn", "summary"))
_MESSAGE_START = b"\xa2drole"  # a map of two fields, the first "role" (canonical order: shorter first)
_CONTENT_KEY = b"gcontent"


def is_pack(value: bytes) -> bool:
    """Whether a stored value (in ``objs``) is a packed leaf's."""
    return bool(value) and value[0] == LEAF_PACK


def payload_of(leaf: ObjectId, record: bytes, unframe: Callable[[bytes], bytes]) -> bytes:
    """A pack's payload from its record, its seal checked; `DamagedData` if the record is damaged (or
    sealed for another leaf). `unframe` undoes the store's framing (`codec.decompress`)."""
    try:
        payload = unframe(record[FRAMED_AT:])
    except (EncodingError, IndexError) as exc:
        raise _damaged(leaf, str(exc)) from None
    if record[:SEAL_SIZE] != _seal(leaf, payload):
        raise _damaged(leaf, "its seal does not match")
    return payload


class Parts(NamedTuple):
    """A sealed pack's payload split into canonical bytes (`split`)."""

    leaf: bytes | None
    """The leaf's, or None where the pack leaves it out (`names_its_entries`): `leaf_bytes` rebuilds it."""
    objects: list[bytes]
    """The objects it holds, by position: its entries (in `seq.packed_order`), then its blobs."""
    entries: int
    """How many of `objects` are entries."""


def split(leaf: ObjectId, payload: bytes) -> Parts:
    """A sealed payload's parts as canonical bytes (what a read of one object checks against its id)."""
    head = array_head_at(payload, 0)
    if head is None:
        raise _damaged(leaf, "its payload is not an array")
    count, at = head
    stream = io.BytesIO(payload)
    stream.seek(at)
    decoder = cbor2.CBORDecoder(stream)
    try:
        leaf_bytes, heads = decoder.decode(), decoder.decode()
        at = stream.tell()
        ends = []
        for _ in range(count - 2):
            decoder.decode()
            ends.append(stream.tell())
    except (cbor2.CBORDecodeError, ValueError) as exc:
        raise _damaged(leaf, f"its payload does not decode: {exc}") from None
    if (type(leaf_bytes) not in (bytes, type(None)) or type(heads) is not list or len(heads) > count - 2
            or any(type(head) is not bytes for head in heads) or (ends[-1] if ends else at) != len(payload)):
        raise _damaged(leaf, "its payload is not a leaf and its entries")
    objects = []
    for head, end in zip(heads, ends, strict=False):
        message = payload[at:end]
        objects.append(head if message == _NULL else head + message)
        at = end
    try:
        blobs = cbor2.loads(b"".join([cbor_head(4, len(ends) - len(heads)), payload[at:]]))
    except (cbor2.CBORDecodeError, ValueError) as exc:
        raise _damaged(leaf, f"its payload does not decode: {exc}") from None
    if type(blobs) is not list or any(type(blob) is not bytes for blob in blobs):
        raise _damaged(leaf, "its payload holds a blob that is not a byte string")
    return Parts(leaf_bytes, objects + blobs, len(heads))


def leaf_bytes(leaf: ObjectId, parts: Parts) -> bytes:
    """The leaf's canonical bytes from its pack's parts: as the pack holds them, or rebuilt from its
    entries (`rebuilt_leaf`, checked against its id)."""
    return parts.leaf if parts.leaf is not None else rebuilt_leaf(leaf, parts.objects[:parts.entries])


def chat_messages(leaf: ObjectId, payload: bytes) -> tuple[bytes | None, list[Any]]:
    """A sealed payload decoded in one call: the leaf's canonical bytes (None where the pack leaves the
    leaf out: `names_its_entries`, so it names its entries once each, in order, all chat entries), and
    the message of each entry in order, where the writer found the entry a chat entry (`chat_message_at`:
    so a map of a text role and a text content), else None (read that entry whole)."""
    try:
        parts = cbor2.loads(payload)
    except (cbor2.CBORDecodeError, ValueError) as exc:
        raise _damaged(leaf, f"its payload does not decode: {exc}") from None
    if type(parts) is not list or len(parts) < 2 or type(parts[0]) not in (bytes, type(None)) or type(
            parts[1]) is not list or len(parts[1]) > len(parts) - 2:
        raise _damaged(leaf, "its payload is not a leaf and its entries")
    messages = parts[2:2 + len(parts[1])]
    if parts[0] is None and (None in messages or not messages):
        raise _damaged(leaf, "it leaves out a leaf that is not its chat entries")
    return parts[0], messages


def _damaged(leaf: ObjectId, why: str) -> DamagedData:
    return DamagedData(f"stored leaf pack {to_hex(leaf)} is corrupt ({why}); run `ctxstore fsck`")


def pointer_values(leaf: ObjectId, sizes: Sequence[int]) -> list[bytes]:
    """The stored values of the objects of `leaf`'s pack, of these canonical sizes, in pack order."""
    head = bytes([PACKED]) + leaf[:_KEY_SIZE]
    return [head + _PLACE(position, size) for position, size in enumerate(sizes)]


_PLACE = struct.Struct(">BI").pack  # a pointer's tail: the position (one byte), the size (`_SIZE` bytes)


def stored_size_of(value: bytes) -> int:
    """The canonical size of a packed leaf, or of an object kept in a pack, from its stored value."""
    at = 1 if value[0] == LEAF_PACK else 2 + _KEY_SIZE
    return int.from_bytes(value[at:at + _SIZE], "big")


def pointer_target(oid: ObjectId, value: bytes) -> tuple[bytes, int]:
    """The record key of the pack an entry's pointer names, and the entry's position in it."""
    if len(value) != 2 + _KEY_SIZE + _SIZE:
        raise DamagedData(f"stored entry {to_hex(oid)} is corrupt (a damaged pointer to its leaf pack); "
                          "run `ctxstore fsck`")
    return bytes(value[1:1 + _KEY_SIZE]), value[1 + _KEY_SIZE]
