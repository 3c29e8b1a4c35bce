"""Repositories shared by real processes: concurrent appenders, and writers killed with SIGKILL."""

from __future__ import annotations

import multiprocessing
import os
import random
import select
import signal
import sys
import time
from pathlib import Path

import pytest

from ctxstore import Repository
from ctxstore.errors import NonFastForward

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs fork and SIGKILL")

_ctx = multiprocessing.get_context("fork")
PROCESSES = 8
MESSAGES = 500


def _appender(path: str, ref: str, tag: str, count: int, shared_loop: bool) -> None:
    """Append `count` messages one commit at a time, rebasing whenever another writer got there first:
    by hand, or (`shared_loop`) through `Repository.append`'s rebase-and-retry loop."""
    with Repository.open(path, durable=False) as repo:
        for i in range(count):
            message = {"role": "user", "content": f"{tag}:{i}"}
            if shared_loop:
                result = repo.append(ref, [message])
                assert result.old != result.new
                continue
            history = repo.history(ref).append(message)
            while True:
                try:
                    repo.commit(ref, history)
                    break
                except NonFastForward:
                    history = repo.rebase(history, onto=ref)


def _run_all(path: Path, refs: list[str]) -> None:
    # Odd writers use Repository.append, even ones rebase by hand: both must lose nothing to the other.
    procs = [_ctx.Process(target=_appender, args=(str(path), ref, f"p{n}", MESSAGES, n % 2 == 1))
             for n, ref in enumerate(refs)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0, f"appender exited with {p.exitcode}"


def test_eight_processes_appending_to_one_conversation_lose_nothing(tmp_path: Path) -> None:
    Repository.init(tmp_path / "r", durable=False).close()
    _run_all(tmp_path / "r", ["main"] * PROCESSES)
    with Repository.open(tmp_path / "r") as repo:
        contents = [m["content"] for m in repo.history("main").render()]
        assert len(contents) == PROCESSES * MESSAGES
        assert set(contents) == {f"p{n}:{i}" for n in range(PROCESSES) for i in range(MESSAGES)}
        for n in range(PROCESSES):
            # Each writer's own messages keep their order.
            mine = [c for c in contents if c.startswith(f"p{n}:")]
            assert mine == [f"p{n}:{i}" for i in range(MESSAGES)]
        assert repo.fsck().ok


def test_eight_processes_on_eight_refs(tmp_path: Path) -> None:
    Repository.init(tmp_path / "r", durable=False).close()
    _run_all(tmp_path / "r", [f"conv/{n}" for n in range(PROCESSES)])
    with Repository.open(tmp_path / "r") as repo:
        assert len(repo.refs("conv/")) == PROCESSES
        for n in range(PROCESSES):
            contents = [m["content"] for m in repo.history(f"conv/{n}").render()]
            assert contents == [f"p{n}:{i}" for i in range(MESSAGES)]
        assert repo.fsck().ok


def _committer(path: str, out_fd: int, seed: int) -> None:
    """Commit forever (appends, forks, ref deletions, gc), writing each returned revision id to a pipe."""
    rng = random.Random(seed)
    out = os.fdopen(out_fd, "w", buffering=1)
    with Repository.open(path) as repo:
        i = 0
        while True:
            i += 1
            history = repo.history("main").extend(
                [{"role": "user", "content": f"{seed}:{i}:{j}" + "x" * rng.randrange(0, 3000)}
                 for j in range(rng.randrange(1, 20))])
            repo.commit("main", history)
            out.write(history.revision_id + "\n")
            if i % 4 == 0:
                repo.commit(f"fork/{seed}-{i}", history.fork().append({"role": "user", "content": "side"}))
            if i % 9 == 0:
                for name in list(repo.refs("fork/"))[:-2]:
                    repo.delete_ref(name)
            if i % 13 == 0:
                repo.gc(grace=0)


def test_writers_killed_at_random_moments_never_damage_the_repository(tmp_path: Path) -> None:
    path = tmp_path / "r"
    Repository.init(path).close()
    rng = random.Random(1234)
    returned: list[str] = []
    kills = 0
    for round_ in range(55):
        read_fd, write_fd = os.pipe()
        child = _ctx.Process(target=_committer, args=(str(path), write_fd, round_))
        child.start()
        os.close(write_fd)
        if rng.random() < 0.8:
            # Wait for the first commit, so most kills land while it is committing, not while it starts.
            select.select([read_fd], [], [], 5)
        time.sleep(rng.uniform(0, 0.08))
        assert child.pid is not None
        os.kill(child.pid, signal.SIGKILL)
        child.join(timeout=30)
        assert child.exitcode == -signal.SIGKILL
        kills += 1
        with os.fdopen(read_fd) as pipe:
            text = pipe.read()
        # A line cut short by the kill was never reported; only whole ones count.
        returned.extend(line for line in text.split("\n")[:-1] if len(line) == 64)
        with Repository.open(path) as repo:
            lineage = {rev.id for rev in repo.iter_revisions("main")} if repo.head("main") else set()
            missing = [rid for rid in returned if rid not in lineage]
            assert not missing, f"round {round_}: returned commits lost: {missing[:3]}"
            for head in repo.refs().values():
                assert repo.store.has(bytes.fromhex(head))
            if round_ % 10 == 9:
                # A full check now and then: damage, once done, stays until the end.
                report = repo.fsck()
                assert report.ok, report.problems[:5]
    assert kills >= 50 and len(returned) > 50
    with Repository.open(path) as repo:
        report = repo.fsck()
        assert report.ok, report.problems[:5]


def _bounded_appender(path: str, tag: str, count: int, retries: int, errors: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    with Repository.open(path, durable=False) as repo:
        for i in range(count):
            try:
                repo.append("main", [{"role": "user", "content": f"{tag}:{i}"}], retries=retries)
            except NonFastForward as exc:
                errors.put(f"{tag}:{i}: {exc}")
                return
    errors.put(None)


def test_contended_appends_each_need_a_bounded_number_of_rebases(tmp_path: Path) -> None:
    """Writers that lose a race queue for their turn: with 8 processes appending at once, no append needs
    more than 16 rebases (it needed over 100 before the queue), and every message lands exactly once."""
    path = tmp_path / "repo"
    Repository.init(path, durable=False).close()
    errors = _ctx.Queue()
    procs = [_ctx.Process(target=_bounded_appender, args=(str(path), f"w{n}", 60, 16, errors))
             for n in range(PROCESSES)]
    for p in procs:
        p.start()
    outcomes = [errors.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == [None] * PROCESSES
    with Repository.open(path) as repo:
        contents = sorted(m["content"] for m in repo.history("main").render())
    assert contents == sorted(f"w{n}:{i}" for n in range(PROCESSES) for i in range(60))


def _churn_and_gc(path: str, rounds: int) -> None:
    """Make conversations, delete them, and gc with no grace, over and over: objects keep vanishing."""
    with Repository.open(path, durable=False) as repo:
        for n in range(rounds):
            repo.append(f"tmp/{n}", [{"role": "user", "content": f"churn {n} " + "x" * 200}])
            repo.delete_ref(f"tmp/{n}")
            repo.gc(grace=0)


def test_fsck_beside_gc_reports_no_damage(tmp_path: Path) -> None:
    """fsck run while another process deletes unreachable objects never reports what gc removed."""
    path = tmp_path / "repo"
    with Repository.init(path, durable=False) as repo:
        for n in range(20):
            repo.append("main", [{"role": "user", "content": f"kept {n}"}])
    gc_proc = _ctx.Process(target=_churn_and_gc, args=(str(path), 150))
    gc_proc.start()
    reports = []
    try:
        with Repository.open(path, durable=False) as repo:
            while gc_proc.is_alive() or not reports:
                reports.append(repo.fsck())
    finally:
        gc_proc.join(timeout=120)
    assert gc_proc.exitcode == 0
    assert [p for r in reports for p in r.problems] == []
    assert len(reports) >= 2


def _plain_committer(path: str, tag: str, count: int, errors: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """Plain commits in a tight loop (load, append, commit; on a lost race rebase and commit again)."""
    with Repository.open(path, durable=False) as repo:
        for i in range(count):
            history = repo.history("main").append({"role": "user", "content": f"{tag}:{i}"})
            while True:
                try:
                    repo.commit("main", history)
                    break
                except NonFastForward:
                    history = repo.rebase(history, onto="main")
    errors.put(None)


def test_appends_beside_plain_committers_need_a_bounded_number_of_rebases(tmp_path: Path) -> None:
    """Plain commits take turns with rebasing writers, so fast plain committers cannot starve an append:
    with 3 processes committing in a tight loop and 3 appending with at most 4 rebases each, no append
    runs out of rebases (it needed hundreds when plain commits bypassed the queue), and nothing is lost."""
    path = tmp_path / "repo"
    Repository.init(path, durable=False).close()
    errors = _ctx.Queue()
    procs = [_ctx.Process(target=_bounded_appender, args=(str(path), f"a{n}", 60, 4, errors)) for n in range(3)]
    procs += [_ctx.Process(target=_plain_committer, args=(str(path), f"c{n}", 60, errors)) for n in range(3)]
    for p in procs:
        p.start()
    outcomes = [errors.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert outcomes == [None] * len(procs)
    with Repository.open(path) as repo:
        contents = sorted(m["content"] for m in repo.history("main").render())
    assert contents == sorted(f"{t}{n}:{i}" for t in "ac" for n in range(3) for i in range(60))
