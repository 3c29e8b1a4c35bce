"""Crashes: SIGKILL real processes at random points of commit, import, unpack, gc, rebase, fsck, and of
the hub mid-push; after each kill the repository opens, fsck is clean, no ref names a missing object and
every write the killed process had acknowledged (over a pipe, as each call returned) is there.

Run alone: `python tools/attacks/crash.py --seconds 60`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import multiprocessing
import os
import random
import select
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import WRITE_TOKEN, Hub, HubDidNotStart, Row, check_repository, first, main, push_rebasing, row

from ctxstore import NonFastForward, Repository, sync
from ctxstore.interop import import_file, import_messages

_ctx = multiprocessing.get_context("fork")
LOCAL_KINDS = ("commit", "import", "unpack", "gc", "rebase", "fsck")
ROUNDS_PER_REPO = 12  # a fresh repository after this many kills keeps each check fast


class _Acks:
    """The child's side of the pipe: one JSON line per write that returned."""

    def __init__(self, fd: int) -> None:
        self.out = os.fdopen(fd, "w", buffering=1)

    def __call__(self, ref: str, contents: list[str], **extra: Any) -> None:
        self.out.write(json.dumps({"ref": ref, "contents": contents, **extra}) + "\n")


def _messages(rng: random.Random, tag: str, n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{tag}:{j}:" + "x" * rng.randrange(0, 2000)} for j in range(n)]


def _commit(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    with Repository.open(path, durable=rng.random() < 0.5) as repo:
        for i in range(10_000):
            msgs = _messages(rng, f"c{seed}.{i}", rng.randrange(1, 12))
            history = repo.history("main").extend(msgs)
            repo.commit("main", history)
            ack("main", [m["content"] for m in msgs])
            if i % 3 == 0:
                side = {"role": "user", "content": f"f{seed}.{i}"}
                repo.commit(f"fork/{seed}-{i}", history.fork().append(side))
                ack(f"fork/{seed}-{i}", [side["content"]])


def _import(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    work = Path(path).parent
    with Repository.open(path, durable=False) as repo:
        for i in range(10_000):
            msgs = _messages(rng, f"i{seed}.{i}", rng.randrange(1, 40))
            if i % 2:
                import_messages(repo, "main", msgs)
                ack("main", [m["content"] for m in msgs])
            else:
                file = work / f"import-{seed}-{i}.jsonl"
                file.write_text("".join(json.dumps(m) + "\n" for m in msgs))
                import_file(repo, file, ref=f"imp/{seed}-{i}")
                ack(f"imp/{seed}-{i}", [m["content"] for m in msgs])


def _unpack(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    source = Repository.memory()
    ref = f"refs/heads/unpack/{seed}"
    base: str | None = None
    with Repository.open(path, durable=rng.random() < 0.5) as repo:
        for i in range(10_000):
            msgs = _messages(rng, f"u{seed}.{i}", rng.randrange(1, 30))
            new = source.append(ref, msgs).new
            repo.unpack(source.changes_since(ref, base), {ref: (base, new)})
            base = new
            ack(ref, [m["content"] for m in msgs])


def _gc(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    with Repository.open(path, durable=False) as repo:
        for i in range(10_000):
            msgs = _messages(rng, f"g{seed}.{i}", rng.randrange(1, 8))
            history = repo.history("main").extend(msgs)
            repo.commit("main", history)
            ack("main", [m["content"] for m in msgs])
            repo.commit(f"tmp/{seed}-{i}", history.fork().append({"role": "user", "content": "doomed"}))
            for name in list(repo.refs("tmp/"))[:-1]:
                repo.delete_ref(name)
            repo.gc(grace=0)


def _rebase(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    with Repository.open(path, durable=False) as repo:
        for i in range(10_000):
            mine = _messages(rng, f"r{seed}.{i}.a", rng.randrange(1, 5))
            theirs = _messages(rng, f"r{seed}.{i}.b", rng.randrange(1, 5))
            stale = repo.history("main").extend(mine)
            repo.commit("main", repo.history("main").extend(theirs))
            ack("main", [m["content"] for m in theirs])
            try:
                repo.commit("main", stale)
                raise AssertionError("a stale history committed without a rebase")
            except NonFastForward:
                pass
            if i % 2:
                repo.commit("main", repo.rebase(stale, onto="main"))
            else:
                repo.commit("main", stale, rebase=True)
            ack("main", [m["content"] for m in mine])


def _fsck(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    with Repository.open(path, durable=False) as repo:
        for i in range(10_000):
            msgs = _messages(rng, f"k{seed}.{i}", 1)
            repo.commit("main", repo.history("main").extend(msgs))
            ack("main", [m["content"] for m in msgs])
            report = repo.fsck()
            ack("main", [], fsck=report.ok, problems=report.problems[:3])


def _push(path: str, ack: _Acks, seed: int, rng: random.Random) -> None:
    with Repository.open(path, durable=False) as repo:
        for i in range(10_000):
            msgs = _messages(rng, f"p{seed}.{i}", rng.randrange(1, 20))
            repo.append("main", msgs)
            push_rebasing(repo, WRITE_TOKEN, 50)
            ack("main", [m["content"] for m in msgs])


CHILDREN: dict[str, Callable[[str, _Acks, int, random.Random], None]] = {
    "commit": _commit, "import": _import, "unpack": _unpack, "gc": _gc, "rebase": _rebase, "fsck": _fsck,
    "hub-push": _push,
}


def _child(kind: str, path: str, fd: int, seed: int) -> None:
    CHILDREN[kind](path, _Acks(fd), seed, random.Random(seed))


def _kill_round(kind: str, path: Path, seed: int, rng: random.Random,
                before_kill: Callable[[], None] | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """Start a child doing `kind`, SIGKILL it (or, via `before_kill`, something else) at a random moment;
    return what it acknowledged and its exit code if it ended by itself."""
    read_fd, write_fd = os.pipe()
    child = _ctx.Process(target=_child, args=(kind, str(path), write_fd, seed))
    child.start()
    os.close(write_fd)
    if rng.random() < 0.85:  # most kills land mid-work, some while the child starts
        select.select([read_fd], [], [], 10)
    time.sleep(rng.uniform(0, 0.06))
    if before_kill is not None:
        before_kill()
    assert child.pid is not None
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, signal.SIGKILL)
    child.join(timeout=30)
    with os.fdopen(read_fd) as lines:
        acks = [json.loads(line) for line in lines.read().splitlines() if line.endswith("}")]
    code = child.exitcode
    return acks, (None if code == -signal.SIGKILL else code)


class _Target:
    """One repository under attack and everything acknowledged into it so far."""

    def __init__(self, work: Path, name: str) -> None:
        self.work, self.name, self.generation = work, name, 0
        self.rounds = 0
        self.acked: dict[str, list[str]] = {}
        self.path = self._fresh()

    def _fresh(self) -> Path:
        self.generation += 1
        d = self.work / f"{self.name}-{self.generation}"
        shutil.rmtree(self.work / f"{self.name}-{self.generation - 1}", ignore_errors=True)
        d.mkdir(parents=True)
        Repository.init(d / "repo").close()
        self.acked = {}
        self.rounds = 0
        return d / "repo"

    def record(self, acks: list[dict[str, Any]]) -> list[str]:
        odd = []
        for a in acks:
            self.acked.setdefault(a["ref"], []).extend(a["contents"])
            if a.get("fsck") is False:
                odd.append(f"fsck in the child reported {a.get('problems')}")
        return odd

    def maybe_renew(self) -> None:
        self.rounds += 1
        if self.rounds >= ROUNDS_PER_REPO:
            self.path = self._fresh()


def _local(seconds: float, work: Path, rng: random.Random) -> list[Row]:
    targets = {kind: _Target(work, kind) for kind in LOCAL_KINDS}
    kills = dict.fromkeys(LOCAL_KINDS, 0)
    failures: dict[str, list[str]] = {k: [] for k in LOCAL_KINDS}
    deadline = time.monotonic() + seconds
    seed = 0
    while time.monotonic() < deadline or min(kills.values()) < 2:
        for kind in LOCAL_KINDS:
            seed += 1
            target = targets[kind]
            acks, code = _kill_round(kind, target.path, seed, rng)
            problems = target.record(acks)
            if code is not None:
                problems.append(f"the child ended by itself with exit code {code} before the kill")
            problems += check_repository(target.path, target.acked, exactly_once=True)
            kills[kind] += 1
            failures[kind] += [f"kill {kills[kind]}: {p}" for p in problems]
            target.maybe_renew()
        if seed > 100_000:
            break
    return [row(f"crash: SIGKILL during {kind}", kills[kind],
                "opens, fsck clean, no ref at a missing object, every acknowledged write present once",
                sum(1 for p in failures[kind] if p), first(failures[kind]))
            for kind in LOCAL_KINDS]


def _hub(seconds: float, work: Path, rng: random.Random) -> list[Row]:
    root = work / "hub-root"
    hub_repo = root / "conv"
    Repository.init(hub_repo).close()
    with Repository.open(hub_repo) as r:
        r.append("main", [{"role": "user", "content": "seed"}])
    try:
        hub = Hub(root)
    except HubDidNotStart as exc:
        return [row("crash: SIGKILL of the hub or its client mid-push", 0, "the hub starts", 1, str(exc))]
    local = work / "client"
    acked: list[str] = []
    client_kills = hub_kills = 0
    failures: list[str] = []
    deadline = time.monotonic() + seconds
    seed = 10_000_000
    try:
        sync.clone(f"{hub.url}/conv", local, token=WRITE_TOKEN).close()
        while time.monotonic() < deadline or hub_kills + client_kills < 3:
            seed += 1
            killed_hub = rng.random() < 0.3
            shoot = functools.partial(os.kill, hub.pid, signal.SIGKILL) if killed_hub else None
            acks, code = _kill_round("hub-push", local, seed, rng, before_kill=shoot)
            if killed_hub:
                hub.proc.wait(timeout=30)
                hub_kills += 1
            else:
                client_kills += 1
            for a in acks:
                acked.extend(a["contents"])
            problems = [] if code is None or killed_hub else [f"the client ended by itself with exit {code}"]
            if killed_hub:
                try:
                    hub = Hub(root)
                except HubDidNotStart as exc:
                    failures.append(f"the hub did not restart after a kill: {exc}")
                    break
                with Repository.open(local) as r:
                    r.remote_remove("origin")
                    r.remote_add("origin", f"{hub.url}/conv")
            problems += check_repository(hub_repo, {"main": acked}, exactly_once=True)
            problems += check_repository(local)
            failures += [f"round {hub_kills + client_kills}: {p}" for p in problems]
            if seed > 10_100_000:
                break
    finally:
        hub.stop()
    return [row("crash: SIGKILL of the hub or its client mid-push", hub_kills + client_kills,
                "hub repository opens, fsck clean, every acknowledged push present once",
                len(failures), f"{hub_kills} hub kills, {client_kills} client kills. {first(failures)}")]


def run(seconds: float, work: Path) -> list[Row]:
    rng = random.Random(12)
    rows = _local(seconds * 0.8, work / "local", rng)
    rows += _hub(seconds * 0.2, work / "hub", rng)
    return rows


if __name__ == "__main__":
    main(run)
