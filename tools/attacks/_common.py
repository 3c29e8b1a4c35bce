"""What the attack modules share: the row they report, a hub subprocess, the checks run after an attack.

Every attack module has `run(seconds, work) -> list[dict]` returning rows
`{"attack", "runs", "held", "failed", "details"}` and runs alone through `main(run)`:
`python tools/attacks/X.py --seconds N` prints its rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ctxstore import CtxStoreError, NonFastForward, Repository, pull, push  # noqa: E402
from ctxstore.ids import from_hex  # noqa: E402

CLI = [sys.executable, "-m", "ctxstore.cli"]
READ_TOKEN = "r" * 24
WRITE_TOKEN = "w" * 24

Row = dict[str, Any]


def row(attack: str, runs: int, held: str, failed: int, details: str = "") -> Row:
    """One line of the reliability table: what ran how often, what it proves, and how often it did not."""
    return {"attack": attack, "runs": runs, "held": held, "failed": failed, "details": details}


def first(problems: Iterable[str], limit: int = 3) -> str:
    """The first few problems of a list, for a row's details."""
    items = list(problems)
    shown = "; ".join(p[:300] for p in items[:limit])
    return shown + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


def cli(*args: str, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the `ctxstore` command as a real process (a hang past `timeout` is an error here)."""
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def clean_cli_error(done: subprocess.CompletedProcess[str]) -> str | None:
    """Why a failed CLI run was not a clean refusal (one line, a documented exit code), or None."""
    if done.returncode < 0 or done.returncode > 6:
        return f"exit {done.returncode} (signal or undocumented code): {done.stderr.strip()[-200:]!r}"
    if "Traceback" in done.stderr:
        return f"traceback on stderr: {done.stderr.strip().splitlines()[-1][:200]!r}"
    if done.returncode == 0:
        return "exit 0"
    return None


class HubDidNotStart(RuntimeError):
    """`ctxstore serve --http` exited or printed no address within 30 s."""


class Hub:
    """`ctxstore serve --http 127.0.0.1:0 ROOT` as a real process, with a read and a write token."""

    def __init__(self, root: Path, *extra: str) -> None:
        tokens = root.parent / f"{root.name}.tokens"
        tokens.write_text(f"read {READ_TOKEN} reader\nwrite {WRITE_TOKEN} writer\n")
        self.proc = subprocess.Popen([*CLI, "serve", "--http", "127.0.0.1:0", str(root), "--tokens", str(tokens),
                                      *extra], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                     stdin=subprocess.DEVNULL, text=True)
        assert self.proc.stderr is not None
        deadline = time.monotonic() + 30
        line = ""
        said: list[str] = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if "serving" in line or not line:
                break
            said.append(line.strip())
        if "serving" not in line:
            self.kill()
            raise HubDidNotStart(f"the hub did not start: {(said or [''])[-1][:300]!r}")
        self.url = line.rsplit(" on ", 1)[1].strip()
        # Keep reading stderr so a chatty hub never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for _ in self.proc.stderr:
            pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL, no chance to clean up."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()


def check_repository(path: Path, acked: Mapping[str, Iterable[str]] | None = None, *,
                     exactly_once: bool = False) -> list[str]:
    """What is wrong with a repository after an attack: it opens, fsck is clean, no ref names a missing
    object, and every acknowledged message (content by ref) is in that ref's view (once, if asked)."""
    problems: list[str] = []
    try:
        with Repository.open(path) as repo:
            report = repo.fsck()
            if not report.ok:
                problems += [f"fsck: {p}" for p in report.problems]
            refs = repo.refs("refs/")
            for name, head in refs.items():
                if not repo.store.has(from_hex(head)):
                    problems.append(f"ref {name} names missing object {head[:12]}")
            for ref, contents in (acked or {}).items():
                wanted = list(contents)
                if not wanted:
                    continue
                full = ref if ref.startswith("refs/") else f"refs/heads/{ref}"
                if full not in refs:
                    problems.append(f"ref {full} is gone but {len(wanted)} acknowledged messages were in it")
                    continue
                seen: dict[str, int] = {}
                for message in repo.history(full).render():
                    content = message.get("content")
                    if isinstance(content, str):
                        seen[content] = seen.get(content, 0) + 1
                lost = [c for c in wanted if c not in seen]
                if lost:
                    problems.append(f"{len(lost)} acknowledged messages missing from {full}: {lost[:3]}")
                if exactly_once:
                    twice = [c for c in set(wanted) if seen.get(c, 0) > 1]
                    if twice:
                        problems.append(f"{len(twice)} messages more than once in {full}: {twice[:3]}")
    except CtxStoreError as exc:
        problems.append(f"{type(exc).__name__}: {exc}")
    return problems


class Latencies:
    """Operation latencies by name, summarised as count, p50, p99 and max (milliseconds)."""

    def __init__(self) -> None:
        self.samples: dict[str, list[float]] = {}

    def add(self, op: str, seconds: float) -> None:
        self.samples.setdefault(op, []).append(seconds * 1000)

    def merge(self, other: Mapping[str, list[float]]) -> None:
        for op, values in other.items():
            self.samples.setdefault(op, []).extend(values)

    @staticmethod
    def quantile(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]

    def summary(self) -> dict[str, dict[str, float]]:
        return {op: {"count": len(v), "p50": round(self.quantile(v, 0.5), 1), "p99": round(self.quantile(v, 0.99), 1),
                     "max": round(max(v), 1)} for op, v in sorted(self.samples.items()) if v}

    def text(self) -> str:
        return ", ".join(f"{op} n={s['count']:.0f} p50={s['p50']:g}ms p99={s['p99']:g}ms max={s['max']:g}ms"
                         for op, s in self.summary().items())


def main(run: Callable[[float, Path], list[Row]], default_seconds: float = 60) -> None:
    """Run one attack alone: `--seconds N [--work DIR]`, rows printed as JSON, exit 1 if any failed."""
    parser = argparse.ArgumentParser(description=(sys.modules["__main__"].__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=default_seconds)
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
        rows = run(args.seconds, args.work)
    else:
        with tempfile.TemporaryDirectory(prefix="ctxstore-attack-") as tmp:
            rows = run(args.seconds, Path(tmp))
    print(json.dumps(rows, indent=2))
    sys.exit(1 if any(r["failed"] for r in rows) else 0)


def push_rebasing(repo: Repository, token: str, tries: int) -> None:
    """Push main to origin, pulling with rebase after each lost race, as a client of a busy hub does: after
    the n-th lost race in a row it waits a random time of up to 5 ms · 2^n (at most 0.5 s) first, so
    pushers that lose together do not race again in step while the winner pushes its next message (without
    it, two of three pushers once lost 200 races in a row)."""
    rng = random.Random()
    for lost in range(tries):
        try:
            push(repo, "origin", ["main"], token=token)
            return
        except NonFastForward:
            time.sleep(rng.uniform(0, min(0.5, 0.005 * 2 ** min(lost, 10))))
            pull(repo, "origin", "main", rebase=True, token=token)
    raise AssertionError(f"push lost {tries} races")
