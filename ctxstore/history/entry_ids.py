"""Generated entry ids: time-ordered, unique across processes and machines without coordination."""

from __future__ import annotations

import base64
import itertools
import os

from ..format.codec import now_ms

__all__ = ["new_entry_id"]

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_TO_CROCKFORD = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", _CROCKFORD.encode())
_MASK_130 = (1 << 130) - 1


class _IdSource:
    """The per-process part of generated entry ids: a random node and a counter, redrawn after fork."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.node = int.from_bytes(os.urandom(6), "big")
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))


_IDS = _IdSource()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_IDS.reset)


def new_entry_id() -> str:
    """A fresh entry id: 48 bits of milliseconds, a 48-bit random process node, a 32-bit counter.

    Unique across processes and machines without coordination: each process (and each forked child)
    draws its own random node, and the counter keeps a process's ids apart within one millisecond.
    Ids sort by creation time, and a process's ids share their middle characters, so a run of them
    compresses to a few bytes each (the random part is drawn once per process, not once per id).
    """
    value = (now_ms() << 80) | (_IDS.node << 32) | (next(_IDS.counter) & 0xFFFFFFFF)
    # 26 base-32 digits are 130 bits; shifted to 160 they are the first 26 of b32encode's 32 digits.
    return base64.b32encode(((value & _MASK_130) << 30).to_bytes(20, "big"))[:26].translate(_TO_CROCKFORD).decode()
