"""Generated entry ids spell their time, node and counter exactly, however many an import draws at once.

`new_entry_id` spells the first 24 of an id's 26 digits once per millisecond and run of 1,024 counts;
each id must still be the full 130-bit value (48 bits of ms, the 48-bit node, the 32-bit counter).
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxstore.errors import InvalidInput
from ctxstore.format.codec import MAX_TIME_MS
from ctxstore.history.entry_ids import new_entry_id

_DIGITS = {c: n for n, c in enumerate("0123456789abcdefghjkmnpqrstvwxyz")}


def _fields(entry_id: str) -> tuple[int, int, int]:
    """(ms, node, counter) read back from an id's 26 base-32 digits."""
    value = 0
    for c in entry_id:
        value = value << 5 | _DIGITS[c]
    return value >> 80, value >> 32 & (1 << 48) - 1, value & 0xFFFFFFFF


@settings(max_examples=40, deadline=None)
@given(st.integers(0, MAX_TIME_MS - 10), st.lists(st.integers(1, 1500), min_size=1, max_size=4))
def test_each_id_spells_its_millisecond_node_and_count(start: int, runs: list[int]) -> None:
    """Ids drawn over a few milliseconds, across runs of 1,024 counts, each read back as their own
    millisecond, the one node and consecutive counts, and sort in the order they were drawn."""
    clock = [start]
    ids: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time_ns", lambda: clock[0] * 1_000_000 + 999_999)
        for count in runs:
            ids.extend(new_entry_id() for _ in range(count))
            clock[0] += 1
    fields = [_fields(i) for i in ids]
    assert [ms for ms, _, _ in fields] == [start + n for n, count in enumerate(runs) for _ in range(count)]
    assert len({node for _, node, _ in fields}) == 1
    first = fields[0][2]
    assert [c for _, _, c in fields] == [(first + n) & 0xFFFFFFFF for n in range(len(ids))]
    if first + len(ids) <= 2**32:  # the counter did not wrap
        assert ids == sorted(ids)


def test_a_clock_out_of_range_is_refused_after_a_run_of_good_ids() -> None:
    """An id is never spelled from a clock ctxstore cannot record, even in the middle of a run."""
    new_entry_id()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time_ns", lambda: (MAX_TIME_MS + 1) * 1_000_000)
        with pytest.raises(InvalidInput, match="the system clock"):
            new_entry_id()
        patch.setattr(time, "time_ns", lambda: -5_000_000)
        with pytest.raises(InvalidInput, match="the system clock"):
            new_entry_id()


def test_ids_drawn_by_threads_at_once_each_spell_their_own_count() -> None:
    """Threads drawing ids together (switching as often as the interpreter allows) never pair one run's
    prefix with another run's count: the counts read back are exactly the ones drawn, each once."""
    import sys
    import threading

    ids: list[list[str]] = [[] for _ in range(4)]

    def draw(out: list[str]) -> None:
        out.extend(new_entry_id() for _ in range(20_000))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=draw, args=(out,)) for out in ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    counts = {_fields(i)[2] for out in ids for i in out}
    starts = [c for c in counts if (c - 1) & 0xFFFFFFFF not in counts]
    assert len(counts) == 80_000 and len(starts) == 1  # all distinct, and one unbroken run of the counter
