"""Generated entry ids: unique across processes started together, across fork, and sortable by time."""

from __future__ import annotations

import multiprocessing
import os
import re
import sys
from collections.abc import Callable
from multiprocessing.synchronize import Barrier

import pytest

from ctxstore.history.entry_ids import new_entry_id
from ctxstore.history.message_history import MessageHistory

PER_PROCESS = 50_000
ID_FORM = re.compile(r"[0-9a-hjkmnp-tv-z]{26}")


def _generate(barrier: Barrier, out: multiprocessing.Queue, count: int) -> None:
    barrier.wait()
    ids = [new_entry_id() for _ in range(count)]
    out.put(ids)


def _history_ids(barrier: Barrier, out: multiprocessing.Queue, count: int) -> None:
    barrier.wait()
    history = MessageHistory().extend([{"role": "user", "content": "same"}] * count)
    out.put([e.id for e in history.refs()])


def _collect(ctx: multiprocessing.context.BaseContext, processes: int, count: int,
             target: Callable[..., None] = _generate) -> list[list[str]]:
    barrier = ctx.Barrier(processes)
    queue = ctx.Queue()
    workers = [ctx.Process(target=target, args=(barrier, queue, count)) for _ in range(processes)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return results


@pytest.mark.parametrize("method", ["spawn", "fork"] if sys.platform != "win32" else ["spawn"])
def test_processes_started_together_never_collide(method: str) -> None:
    """Processes released by one barrier each make 50,000 ids; none repeats."""
    results = _collect(multiprocessing.get_context(method), 3, PER_PROCESS)
    every = [i for ids in results for i in ids]
    assert len(every) == 3 * PER_PROCESS
    assert len(set(every)) == len(every)
    assert all(ID_FORM.fullmatch(i) for i in every[:1000])


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_forked_child_does_not_repeat_the_parent() -> None:
    """After os.fork, parent and child draw different ids at the same moment."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            os.close(read)
            with os.fdopen(write, "w") as pipe:
                pipe.write("\n".join(new_entry_id() for _ in range(5000)))
        finally:
            os._exit(0)
    os.close(write)
    mine = [new_entry_id() for _ in range(5000)]
    with os.fdopen(read) as pipe:
        theirs = pipe.read().split("\n")
    os.waitpid(pid, 0)
    assert len(theirs) == 5000
    assert not set(mine) & set(theirs)


def test_ids_are_unique_within_a_process() -> None:
    ids = [new_entry_id() for _ in range(100_000)]
    assert len(set(ids)) == len(ids)


def test_ids_sort_by_creation_time() -> None:
    import time

    first = new_entry_id()
    time.sleep(0.003)
    second = new_entry_id()
    assert first < second
    assert len(first) == len(second) == 26


def test_histories_in_two_processes_make_distinct_entries() -> None:
    """Bare messages appended in two processes get ids that do not clash when the graphs meet."""
    ctx = multiprocessing.get_context("spawn")
    results = _collect(ctx, 2, 2000, _history_ids)
    assert not set(results[0]) & set(results[1])
    history = MessageHistory()
    for ids in results:
        history = history.extend([{"id": i, "message": {"role": "user", "content": "same"}} for i in ids])
    assert history.size == 4000


def test_ids_made_in_one_millisecond_differ_by_the_counter() -> None:
    """Ids of one process share the node part; within one millisecond the counter keeps them apart."""
    ids = [new_entry_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    assert len({i[10:19] for i in ids}) == 1  # characters 10..18 of 26 hold only bits of the 48-bit node
