"""Benchmark of the in-memory core: append cost at 1,000 vs 100,000 entries, snapshots of 10,000.

Run: python tools/bench_core.py  (writes the "Core" section of docs/benchmarks.md)
"""

from __future__ import annotations

import gc
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchdoc import message, write_section

from ctxstore import MessageHistory

APPENDS = 400
BATCH = 5_000


def _history(n: int) -> MessageHistory:
    history = MessageHistory()
    for start in range(0, n, BATCH):
        history = history.extend([message(i) for i in range(start, min(n, start + BATCH))])
    return history


def _append_cost(n: int) -> tuple[float, float]:
    """Median seconds and mean new object bytes of one append to a history of `n` entries."""
    history = _history(n)
    ws = history.workspace
    before = {oid for oid, _ in ws.pending()}
    msgs = [message(n + i) for i in range(APPENDS)]
    times = []
    gc.disable()
    for msg in msgs:
        t = time.perf_counter()
        history = history.append(msg)
        times.append(time.perf_counter() - t)
    gc.enable()
    new_bytes = sum(len(data) for oid, data in ws.pending() if oid not in before)
    return statistics.median(times), new_bytes / APPENDS


def _snapshot_figures(revisions: int, per_revision: int) -> tuple[float, float, int]:
    history = MessageHistory()
    n = 0
    for _ in range(revisions):
        history = history.extend([message(n + i) for i in range(per_revision)])
        n += per_revision
    t = time.perf_counter()
    snap = history.to_snapshot()
    t_to = time.perf_counter() - t
    size = len(json.dumps(snap))
    t = time.perf_counter()
    loaded = MessageHistory.from_snapshot(snap)
    t_from = time.perf_counter() - t
    assert loaded.revision_id == history.revision_id
    return t_to, t_from, size


def main() -> None:
    small_t, small_b = _append_cost(1_000)
    large_t, large_b = _append_cost(100_000)
    rows = [
        "| history size | median time per append | new object bytes per append |",
        "|---:|---:|---:|",
        f"| 1,000 | {small_t * 1e6:.0f} µs | {small_b:,.0f} |",
        f"| 100,000 | {large_t * 1e6:.0f} µs | {large_b:,.0f} |",
        f"| **ratio (goal ≤ 1.5x)** | **{large_t / small_t:.2f}x** | **{large_b / small_b:.2f}x** |",
    ]
    snap_rows = ["| shape | to_snapshot | from_snapshot | snapshot JSON |", "|---|---:|---:|---:|"]
    for revisions, per in ((100, 100), (10_000, 1)):
        t_to, t_from, size = _snapshot_figures(revisions, per)
        snap_rows.append(f"| 10,000 entries in {revisions:,} revisions of {per} | {t_to:.2f} s | "
                         f"{t_from:.2f} s | {size / 1e6:.1f} MB |")
    body = (
        f"Appending one message ({APPENDS} appends, messages of 300-700 characters) to histories built "
        "to each size. New object bytes are the canonical bytes of the objects an append creates: the "
        "entry and the revision, which holds the sequence tree's right spine (the last node of each "
        "level), plus a node when the append closes a chunk.\n\n"
        + "\n".join(rows)
        + "\n\nSnapshots carry every revision's full `entryIds` (the seed's shape), so a history with a "
        "revision per message has a snapshot that grows with revisions × entries.\n\n"
        + "\n".join(snap_rows)
    )
    write_section("Core", "python tools/bench_core.py", body)
    print(body)


if __name__ == "__main__":
    main()
