"""Writers under contention: N processes appending to one ref, each append through `Repository.append`'s
rebase loop. Prints per-append latency (p50, p99, max) and rebases per append (mean, max).

    python tools/contention.py [--processes 8] [--appends 200] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ctxstore import Repository
from ctxstore.repo import commit as commit_module


def _writer(path: str, tag: int, appends: int, start: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    tries = [0]
    inner = commit_module.commit_many

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        tries[0] += 1
        return inner(*args, **kwargs)

    commit_module.commit_many = counting  # count the attempts of each append (1 = no rebase)
    samples = []
    with Repository.open(path, durable=False) as repo:
        while time.time() < start:
            time.sleep(0.001)
        for i in range(appends):
            tries[0] = 0
            t0 = time.perf_counter()
            repo.append("main", [{"role": "user", "content": f"{tag}:{i}"}])
            samples.append((time.perf_counter() - t0, tries[0] - 1))
    out.put(samples)


def run(processes: int, appends: int, directory: Path) -> dict[str, float]:
    path = directory / "repo"
    Repository.init(path, durable=False).close()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start = time.time() + 0.5
    procs = [ctx.Process(target=_writer, args=(str(path), n, appends, start, out)) for n in range(processes)]
    for p in procs:
        p.start()
    samples = [s for _ in procs for s in out.get()]
    for p in procs:
        p.join()
    with Repository.open(path) as repo:
        assert len(repo.history("main").render()) == processes * appends
    lat = sorted(s[0] for s in samples)
    rebases = [s[1] for s in samples]
    return {"appends": len(samples), "p50_ms": 1000 * lat[len(lat) // 2],
            "p99_ms": 1000 * lat[int(len(lat) * 0.99)], "max_ms": 1000 * lat[-1],
            "rebases_mean": statistics.mean(rebases), "rebases_max": max(rebases)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(run(args.processes, args.appends, args.dir or Path(tmp)), indent=1))


if __name__ == "__main__":
    main()
