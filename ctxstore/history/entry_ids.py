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
_PREFIX_SHIFTS = range(120, 9, -10)


class _IdSource:
    """The per-process part of generated entry ids: a random node and a counter, redrawn after fork."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.node = int.from_bytes(os.urandom(6), "big")
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))
        # The id's first 12 pairs of digits, and the millisecond and run of 1,024 counts they spell: one
        # value, read and replaced whole, so a thread never takes one run's prefix for another's.
        self.spelled = (-1, "")


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
    ids = _IDS
    ms = time.time_ns() // 1_000_000
    count = next(ids.counter) & 0xFFFFFFFF
    run = ms << 22 | count >> 10
    spelled = ids.spelled
    if spelled[0] != run:
        check_time_ms(ms, "the system clock")
        # 26 base-32 digits are 130 bits: 13 pairs of digits, each spelling 10 bits. All but the last pair
        # are the same for every id of a millisecond and a run of 1,024 counts, so an import spells them
        # once per millisecond, not once per id (and base64.b32encode would be a Python loop).
        value = ((ms << 80) | (ids.node << 32) | count) & _MASK_130
        spelled = ids.spelled = (run, "".join([_PAIRS[(value >> shift) & 0x3FF] for shift in _PREFIX_SHIFTS]))
    return spelled[1] + _PAIRS[count & 0x3FF]
