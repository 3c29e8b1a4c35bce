"""The measurements, each a function of JSON-able arguments run in a fresh process by tools/bench.py.

A fresh process per measurement keeps one system's memory, caches and open files from another's figures;
the measurements that compare times run the systems in turns (one of each, again and again) inside one
process or one round of processes, so the shared machine's slow moments fall on all of them alike.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import floors
from .systems import SYSTEMS, CtxStore, Git, LangGraph, dir_bytes
from .workloads import workload

FLOOR = "floor"


def _sample_points(n: int) -> set[int]:
    points = {n}
    scale = 1
    while scale <= n:
        points.update(p * scale for p in (1, 2, 5) if p * scale <= n)
        scale *= 10
    return points


def record(system: str, kind: str, n: int, path: str, scale: float) -> dict[str, Any]:
    """Record `n` messages of workload `kind`, one durable append each; disk along the way and at the end.

    A system with a `max_recorded` for `kind` records at most that many times `scale` (the run's sizes
    against a full run's).
    """
    cls = SYSTEMS[system]
    cap = cls.max_recorded.get(kind)
    count = n if cap is None else min(n, max(10, int(cap * scale)))
    messages = workload(kind, count)
    store = cls(Path(path))
    points = _sample_points(count)
    samples: list[tuple[int, int]] = []
    latencies: list[float] = []
    started = time.perf_counter()
    if isinstance(store, LangGraph):
        last = [time.perf_counter()]

        def step() -> None:
            now = time.perf_counter()
            latencies.append(now - last[0])
            if len(latencies) in points:
                samples.append((len(latencies), store.disk()))
            last[0] = time.perf_counter()

        store.record("main", messages, step)
    else:
        for i, m in enumerate(messages, 1):
            t = time.perf_counter()
            store.append("main", m)
            latencies.append(time.perf_counter() - t)
            if i in points:
                samples.append((i, store.disk()))
    seconds = time.perf_counter() - started
    store.close()
    result: dict[str, Any] = {"n": count, "capped": count < n, "seconds": seconds,
                              "disk": store.disk(), "samples": samples,
                              "p50": statistics.median(latencies),
                              "latency": _binned(latencies, points)}
    if isinstance(store, Git):
        result["disk_loose"] = result["disk"]
        result["disk"] = store.gc()
    return result


def _binned(latencies: list[float], points: set[int]) -> list[tuple[int, float]]:
    """Median append latency between consecutive sample points, keyed by the conversation size at the end."""
    out = []
    prev = 0
    for p in sorted(points):
        chunk = latencies[prev:p]
        if chunk:
            out.append((p, statistics.median(chunk)))
        prev = p
    return out


def builds(system: str, kind: str, sizes: list[int], paths: list[str]) -> list[dict[str, Any]]:
    """`bulk` at several sizes in one process: the stores the smaller render and append rows read."""
    return [bulk(system, kind, n, path) for n, path in zip(sizes, paths, strict=True)]


def bulk(system: str, kind: str, n: int, path: str) -> dict[str, Any]:
    """Import `n` messages in one commit (made beforehand, outside the clock); seconds and disk."""
    messages = workload(kind, n)
    target = Path(path)
    if system == FLOOR:
        started = time.perf_counter()
        floors.bulk(target, messages)
        seconds = time.perf_counter() - started
        return {"n": n, "seconds": seconds, "disk": dir_bytes(target) - dir_bytes(target / "keys")}
    started = time.perf_counter()
    store = SYSTEMS[system](target)
    store.bulk("main", messages)
    store.close()
    seconds = time.perf_counter() - started
    return {"n": n, "seconds": seconds, "disk": store.disk()}


def _rss_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def render(system: str, path: str) -> dict[str, Any]:
    """Open the store and read the latest view, in this fresh process: seconds and resident memory added."""
    modules = ("lmdb", "cbor2", "zstandard") if system == FLOOR else SYSTEMS[system].modules
    started = time.perf_counter()
    for name in modules:
        importlib.import_module(name)
    imported = time.perf_counter() - started
    before = _rss_kb("VmRSS")
    started = time.perf_counter()
    count = floors.render(Path(path)) if system == FLOOR else SYSTEMS[system].render(Path(path))
    seconds = time.perf_counter() - started
    return {"messages": count, "seconds": seconds, "import_seconds": imported,
            "rss_delta": (_rss_kb("VmHWM") - before) * 1024}


def appends(stores: dict[str, dict[str, str]], rounds: int, budget: float) -> dict[str, Any]:
    """Durable append latency of every system at two sizes, in turns: one append each, round after round.

    `stores` maps system -> size -> a store holding that many messages. A (system, size) stops once it
    has five samples and would spend more than `budget` seconds at its median (LangGraph and git at
    100,000 take a second each). Before each timed append the file system is flushed (untimed), so an
    append's fsync pays for its own writes and not for what the system before it left dirty.
    """
    extra = workload("chat", rounds, offset=7)
    handles: dict[tuple[str, str], Any] = {}
    for system, by_size in stores.items():
        for size, path in by_size.items():
            handles[system, size] = (floors.DurablePut(Path(path)) if system == FLOOR
                                     else SYSTEMS[system](Path(path)))
    times: dict[tuple[str, str], list[float]] = {key: [] for key in handles}
    for i in range(rounds):
        for key, handle in handles.items():
            spent = times[key]
            if len(spent) >= 5 and statistics.median(spent) * len(spent) > budget:
                continue
            os.sync()
            t = time.perf_counter()
            if key[0] == FLOOR:
                handle.append(extra[i])
            else:
                handle.append("main", extra[i])
            spent.append(time.perf_counter() - t)
    for handle in handles.values():
        handle.close()
    out: dict[str, Any] = {}
    for (system, size), spent in times.items():
        out.setdefault(system, {})[size] = {"p50": statistics.median(spent), "samples": len(spent)}
    return out


def forks(system: str, base: int, count: int, each: int, path: str, sample: int) -> dict[str, Any]:
    """Bulk-import `base` agent messages, then `count` forks of `each` messages, one durable commit each.

    Systems that re-serialize the whole view per commit (LangGraph, git) run `sample` forks of `sample`
    messages and their cost is scaled to the full shape, marked as an estimate.
    """
    cls = SYSTEMS[system]
    estimated = cls in (LangGraph, Git) and sample * sample < count * each
    run_count, run_each = (sample, sample) if estimated else (count, each)
    store = cls(Path(path))
    store.bulk("main", workload("agent", base))
    before = store.gc() if isinstance(store, Git) else store.disk()
    extras = workload("agent", run_count * run_each, offset=3)
    started = time.perf_counter()
    for f in range(run_count):
        store.fork("main", f"fork/{f}")
        for m in extras[f * run_each:(f + 1) * run_each]:
            store.append(f"fork/{f}", m)
    seconds = time.perf_counter() - started
    store.close()
    scale = (count * each) / (run_count * run_each)
    added = (store.disk() - before) * scale
    result: dict[str, Any] = {"base": base, "forks": count, "each": each, "estimated": estimated,
                              "measured": [run_count, run_each], "base_disk": before,
                              "added": added, "disk": before + added, "seconds": seconds * scale,
                              "per_message_s": seconds / (run_count * run_each)}
    if isinstance(store, Git):
        result["added_loose"] = added
        result["added"] = (store.gc() - before) * scale
        result["disk"] = before + result["added"]
    return result


def _pack_bytes(clone: Path) -> int:
    return dir_bytes(clone / ".git" / "objects")


def sync(n: int, path: str, repeat: int, git: bool) -> dict[str, Any]:
    """Pull `n` new messages into a clone, ctxstore against `git fetch` (with `git`), both local, in turns."""
    from ctxstore import Repository, clone, pull

    root = Path(path)
    messages = workload("chat", n + 1)
    hub = Repository.init(root / "hub", durable=False)
    hub.append("main", [messages[0]])
    clone(str(root / "hub"), root / "client").close()
    history = hub.history("main")
    for m in messages[1:]:
        history = history.append(m)
        hub.commit("main", history)
    hub.close()
    if git:
        git_hub = Git(root / "github")
        subprocess.run(["git", "-C", str(git_hub.path), "config", "core.fsync", "none"], check=True)
        git_hub.append("main", messages[0])
        subprocess.run(["git", "clone", "-q", str(git_hub.path), str(root / "gitclient")], check=True)
        for m in messages[1:]:
            git_hub.append("main", m)
    for i in range(repeat):
        shutil.copytree(root / "client", root / f"client{i}")
        if git:
            shutil.copytree(root / "gitclient", root / f"gitclient{i}")
    out: dict[str, list[float]] = {"ctxstore_s": [], "ctxstore_bytes": []}
    if git:
        out.update(git_s=[], git_bytes=[], git_noop_s=[])
    for i in range(repeat):
        with Repository.open(root / f"client{i}") as client:
            started = time.perf_counter()
            result = pull(client, "origin", "main")
            out["ctxstore_s"].append(time.perf_counter() - started)
            out["ctxstore_bytes"].append(result.fetch.bytes)
            assert len(client.history("main").render()) == n + 1
        if not git:
            continue
        target = root / f"gitclient{i}"
        before = _pack_bytes(target)
        started = time.perf_counter()
        subprocess.run(["git", "-C", str(target), "fetch", "-q", "origin"], check=True)
        out["git_s"].append(time.perf_counter() - started)
        out["git_bytes"].append(_pack_bytes(target) - before)
        started = time.perf_counter()
        subprocess.run(["git", "-C", str(target), "fetch", "-q", "origin"], check=True)
        out["git_noop_s"].append(time.perf_counter() - started)
    return {"n": n, **{key: statistics.median(values) for key, values in out.items()}}


_IMPORT_LINE = re.compile(r"^import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def _import_seconds(stderr: str) -> tuple[float, float]:
    """Total import time (top-level cumulative times summed) and ctxstore's own share, from -X importtime."""
    total = ours = 0
    for line in stderr.splitlines():
        m = _IMPORT_LINE.match(line)
        if m and len(m.group(3)) == 1:
            total += int(m.group(2))
            if m.group(4).split(".")[0] == "ctxstore":
                ours += int(m.group(2))
    return total / 1e6, ours / 1e6


def cli(path: str, repeat: int, git: bool) -> dict[str, Any]:
    """Start-up of `ctxstore fetch` (nothing new) and `ctxstore render` (20 messages), in turns with git."""
    from ctxstore import Repository, clone

    root = Path(path)
    with Repository.init(root / "hub", durable=False) as hub:
        hub.append("main", workload("chat", 20))
    clone(str(root / "hub"), root / "client").close()
    if git:
        git_hub = Git(root / "github")
        git_hub.bulk("main", workload("chat", 20))
        subprocess.run(["git", "clone", "-q", str(git_hub.path), str(root / "gitclient")], check=True)
    script = Path(sys.executable).parent / "ctxstore"
    ctxstore = [sys.executable, str(script)] if script.exists() else [sys.executable, "-m", "ctxstore.cli"]
    commands = {
        "fetch": [*ctxstore, "--repo", str(root / "client"), "-q", "fetch"],
        "render": [*ctxstore, "--repo", str(root / "hub"), "render", "main"],
    }
    figures: dict[str, list[float]] = {}
    for _ in range(repeat):
        for name, argv in commands.items():
            started = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            figures.setdefault(f"{name}_wall_s", []).append(time.perf_counter() - started)
            out = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], check=True, capture_output=True,
                                 text=True)
            total, ours = _import_seconds(out.stderr)
            figures.setdefault(f"{name}_import_s", []).append(total)
            figures.setdefault(f"{name}_ctxstore_import_s", []).append(ours)
        if git:
            started = time.perf_counter()
            subprocess.run(["git", "-C", str(root / "gitclient"), "fetch", "-q"], check=True)
            figures.setdefault("git_fetch_wall_s", []).append(time.perf_counter() - started)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        figures.setdefault("python_wall_s", []).append(time.perf_counter() - started)
    return {key: statistics.median(values) for key, values in figures.items()}


MEASUREMENTS = {f.__name__: f for f in (record, builds, bulk, render, appends, forks, sync, cli)}


def child_main(name: str, arguments: str) -> None:
    """The entry point of a measurement process: run one measurement, print its JSON on the last line."""
    result = MEASUREMENTS[name](**json.loads(arguments))
    print(json.dumps(result))


__all__ = ["FLOOR", "MEASUREMENTS", "CtxStore", "child_main"]
