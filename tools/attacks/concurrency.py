"""Concurrency: up to 16 real processes mixing append, fork, commit with rebase, fetch, push, gc and fsck
on one repository and one hub. Every acknowledged message is present exactly once, every operation's
latency is recorded (p50, p99, max), and a watchdog kills and reports any process still running long
after its time is up (a deadlock).

Run alone: `python tools/attacks/concurrency.py --seconds 60`.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
import traceback
from pathlib import Path
from typing import Any

from _common import (
    WRITE_TOKEN,
    Hub,
    HubDidNotStart,
    Latencies,
    Row,
    check_repository,
    first,
    main,
    push_rebasing,
    row,
)

from ctxstore import CtxStoreError, NonFastForward, Repository, sync

_ctx = multiprocessing.get_context("fork")
FULL_ROLES = ("append", "commit", "push", "fork", "gc", "fsck", "append", "fetch",
              "append", "push", "commit", "fork", "append", "push", "fetch", "fsck")
QUICK_ROLES = ("append", "push", "gc", "fsck")
WATCHDOG = 60.0  # seconds past the end a process may take to finish its last operation
LATENCY_GOAL_MS = 10_000  # issue 12, defect 11: no writer waits this long while others get through


def _worker(role: str, n: int, local: str, clone: str, until: float, out: str) -> None:
    lat: dict[str, list[float]] = {}
    acked: dict[str, list[str]] = {}
    errors: list[str] = []
    fsck_problems: list[str] = []
    i = 0

    def timed(op: str, t0: float) -> None:
        lat.setdefault(op, []).append((time.monotonic() - t0) * 1000)

    try:
        with Repository.open(clone if role in ("push", "fetch") else local, durable=False) as repo:
            while time.monotonic() < until and i < 100_000:
                i += 1
                content = f"{role}{n}:{i}"
                t0 = time.monotonic()
                try:
                    if role == "append":
                        repo.append("main", [{"role": "user", "content": content}])
                        timed("append", t0)
                        acked.setdefault("main", []).append(content)
                    elif role == "commit":
                        history = repo.history("main").append({"role": "user", "content": content})
                        for _ in range(1000):
                            try:
                                repo.commit("main", history)
                                break
                            except NonFastForward:
                                history = repo.rebase(history, onto="main")
                        else:
                            raise AssertionError("commit lost 1000 races")
                        timed("commit+rebase", t0)
                        acked.setdefault("main", []).append(content)
                    elif role == "fork":
                        ref = f"fork/{n}-{i}"
                        repo.commit(ref, repo.history("main").fork().append({"role": "user", "content": content}))
                        timed("fork", t0)
                        acked[ref] = [content]
                        for old in [r for r in acked if r.startswith("fork/")][:-2]:
                            repo.delete_ref(old)
                            del acked[old]
                    elif role == "push":
                        repo.append("main", [{"role": "user", "content": content}])
                        push_rebasing(repo, WRITE_TOKEN, 200)
                        timed("push (with pull --rebase retries)", t0)
                        acked.setdefault("hub:main", []).append(content)
                    elif role == "fetch":
                        sync.fetch(repo, "origin", token=WRITE_TOKEN)
                        timed("fetch", t0)
                    elif role == "gc":
                        repo.gc(grace=0.5)
                        timed("gc", t0)
                        time.sleep(0.02)
                    elif role == "fsck":
                        report = repo.fsck()
                        timed("fsck", t0)
                        if not report.ok:
                            fsck_problems += report.problems[:2]
                except CtxStoreError as exc:
                    errors.append(f"{role}: {type(exc).__name__}: {exc}")
    except Exception:
        errors.append(f"{role}: {traceback.format_exc(limit=3)}")
    Path(out).write_text(json.dumps({"role": role, "lat": lat, "acked": acked, "errors": errors,
                                     "fsck": fsck_problems, "ops": i}))


def run(seconds: float, work: Path) -> list[Row]:
    roles = QUICK_ROLES if seconds < 30 else FULL_ROLES
    local = work / "local"
    Repository.init(local, durable=False).close()
    root = work / "hub-root"
    Repository.init(root / "conv").close()
    with Repository.open(local) as r:
        r.append("main", [{"role": "user", "content": "start"}])
    with Repository.open(root / "conv") as r:
        r.append("main", [{"role": "user", "content": "start"}])
    try:
        hub = Hub(root)
    except HubDidNotStart as exc:
        return [row("concurrency: processes on a repository and a hub", 0, "the hub starts", 1, str(exc))]
    try:
        clones = []
        for n, role in enumerate(roles):
            clone = work / f"clone-{n}"
            if role in ("push", "fetch"):
                sync.clone(f"{hub.url}/conv", clone, token=WRITE_TOKEN).close()
            clones.append(clone)
        until = time.monotonic() + seconds
        procs = []
        for n, role in enumerate(roles):
            p = _ctx.Process(target=_worker, args=(role, n, str(local), str(clones[n]), until,
                                                   str(work / f"result-{n}.json")))
            p.start()
            procs.append(p)
        hung = []
        for n, p in enumerate(procs):
            p.join(timeout=max(0.0, until + WATCHDOG - time.monotonic()))
            if p.is_alive():
                hung.append(f"{roles[n]} process {n} still running {WATCHDOG:.0f}s after its end")
                assert p.pid is not None
                os.kill(p.pid, signal.SIGKILL)
                p.join(timeout=10)
    finally:
        hub.stop()
    lat = Latencies()
    acked: dict[str, list[str]] = {}
    errors: list[str] = []
    fsck_false: list[str] = []
    fsck_runs = ops = 0
    for n in range(len(roles)):
        file = work / f"result-{n}.json"
        if not file.exists():
            errors.append(f"process {n} ({roles[n]}) wrote no result")
            continue
        result: dict[str, Any] = json.loads(file.read_text())
        lat.merge(result["lat"])
        for ref, contents in result["acked"].items():
            acked.setdefault(ref, []).extend(contents)
        errors += result["errors"]
        fsck_false += result["fsck"]
        fsck_runs += len(result["lat"].get("fsck", []))
        ops += sum(len(v) for v in result["lat"].values())
    hub_acked = acked.pop("hub:main", [])
    lost = check_repository(local, acked, exactly_once=True)
    lost += [f"hub: {p}" for p in check_repository(root / "conv", {"main": hub_acked}, exactly_once=True)]
    writes = sum(len(v) for v in acked.values()) + len(hub_acked)
    summary = lat.summary()
    slow = {op: s["max"] for op, s in summary.items()
            if op in ("append", "commit+rebase", "fork") and s["max"] > LATENCY_GOAL_MS}
    rows = [
        row(f"concurrency: {len(roles)} processes ({', '.join(sorted(set(roles)))}) on a repository and a hub",
            writes, "every acknowledged message present exactly once; fsck clean after; no operation failed",
            len(lost) + len(errors), " ".join([f"{ops} operations in {seconds:.0f}s.", first(lost + errors)]).strip()),
        row("concurrency: no deadlock (watchdog)", len(roles), f"every process finished within {WATCHDOG:.0f}s of "
            "its end", len(hung), first(hung)),
        row("concurrency: fsck beside gc and writers", fsck_runs, "no false damage reported",
            len(fsck_false), first(fsck_false)),
        row("concurrency: writer latency", sum(int(summary.get(op, {}).get("count", 0))
                                                for op in ("append", "commit+rebase", "fork")),
            f"no append/commit/fork waits over {LATENCY_GOAL_MS / 1000:.0f}s", len(slow),
            (f"over the goal: {', '.join(f'{op} {ms / 1000:.1f}s' for op, ms in slow.items())}. " if slow else "")
            + lat.text()),
    ]
    return rows


if __name__ == "__main__":
    main(run)
