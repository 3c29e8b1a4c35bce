"""Object ids and their two spellings: raw bytes inside objects and stores, hex text in the public API.

The conversion happens at one boundary (the repository facade, the sync results, the CLI), so mypy
catches a raw id where a hex one belongs: `ObjectId` and `HexId` are distinct types.
"""

from __future__ import annotations

from typing import NewType

import blake3

from .errors import InvalidInput

__all__ = ["OID_SIZE", "HexId", "ObjectId", "from_hex", "hex_or_none", "is_oid", "object_id", "short_hex", "to_hex"]

ObjectId = NewType("ObjectId", bytes)
"""A raw 32-byte blake3-256 digest of an object's canonical bytes (storage and object fields)."""

HexId = NewType("HexId", str)
"""The public spelling of an object id: 64 lowercase hex digits."""

OID_SIZE = 32


def is_oid(value: object) -> bool:
    """Whether `value` is a raw object id: exactly `OID_SIZE` bytes (a `bytes`, not a subclass or view)."""
    return type(value) is bytes and len(value) == OID_SIZE


def object_id(data: bytes) -> ObjectId:
    """The object id of canonical bytes: their blake3-256 digest."""
    # Not wrapped in `ObjectId(...)`: a NewType is the identity at run time, but calling it is a Python
    # call, and this runs for every object a commit makes (a bulk import's hundreds of thousands).
    return blake3.blake3(data).digest()  # type: ignore[return-value]


def to_hex(oid: bytes) -> HexId:
    """The public, hex spelling of an object id."""
    return HexId(oid.hex())


def hex_or_none(oid: bytes | None) -> HexId | None:
    """`to_hex`, passing None through (an unborn or deleted ref)."""
    return None if oid is None else HexId(oid.hex())


def short_hex(oid: bytes | None) -> str:
    """The 12-digit prefix people see in messages, or "nothing" for no object."""
    return "nothing" if oid is None else oid.hex()[:12]


def from_hex(text: str) -> ObjectId:
    """Parse the hex spelling of an object id (a clear `InvalidInput` for anything else)."""
    if not isinstance(text, str) or len(text) != 2 * OID_SIZE:
        raise InvalidInput(f"not an object id: {text!r} (expected {2 * OID_SIZE} hex digits)")
    try:
        raw = bytes.fromhex(text)
    except ValueError:
        raise InvalidInput(f"not an object id: {text!r} (expected {2 * OID_SIZE} hex digits)") from None
    return ObjectId(raw)
