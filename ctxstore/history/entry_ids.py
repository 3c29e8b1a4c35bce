"""Generated entry ids: time-ordered, unique across processes and machines without coordination."""

from __future__ import annotations

import itertools
import os
import time

from ..format.codec import check_time_ms

__all__ = ["new_entry_id"]

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_MASK_130 = (1 << 130) - 1
_PAIRS = [a + b for a in _CROCKFORD for b in _CROCKFORD]
_PREFIX_SHIFTS = range(120, 39, -10)


class _IdSource:
    """The per-process part of generated entry ids: a random node and a counter, redrawn after fork."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.node = int.from_bytes(os.urandom(6), "big")
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))
        self.ms = -1
        self.prefix: str | None = None


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
    ms = time.time_ns() // 1_000_000
    ids = _IDS
    if ms != ids.ms or ids.prefix is None:
        check_time_ms(ms, "the system clock")
        # The first 9 pairs of digits (bits 40-129) are the time and the node's high bits: the same for
        # every id of a millisecond, so an import spells them once per millisecond, not once per id.
        value = ((ms << 80) | (ids.node << 32)) & _MASK_130
        ids.ms, ids.prefix = ms, "".join([_PAIRS[(value >> shift) & 0x3FF] for shift in _PREFIX_SHIFTS])
    low = ((ids.node & 0xFF) << 32) | (next(ids.counter) & 0xFFFFFFFF)
    # 26 base-32 digits are 130 bits: 13 pairs of digits, each looked up by its 10 bits (an import makes
    # an id per message, and base64.b32encode is a Python loop).
    pairs = _PAIRS
    return ids.prefix + pairs[low >> 30] + pairs[(low >> 20) & 0x3FF] + pairs[(low >> 10) & 0x3FF] + pairs[low & 0x3FF]
