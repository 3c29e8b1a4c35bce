"""Disk full: a repository on a small tmpfs (`mount -t tmpfs -o size=8m`, as root) written to the brim.

Writes on the full disk fail with a `CtxStoreError` that says the disk is full (never SIGBUS, never a
traceback from the CLI), nothing already stored is damaged, and once space returns the repository works
again. Every write runs in a child process, so a SIGBUS is seen as that process's exit, not ours. Where no
tmpfs can be mounted (not root, no mount permission) the attack reports a skipped row with the reason.

Run alone: `python tools/attacks/diskfull.py --seconds 30`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from _common import Row, check_repository, clean_cli_error, cli, first, main, row

SIZE = "8m"

# Appends incompressible messages until a write fails; acknowledges each one (outside the tmpfs) as it
# returns, then prints how the failure looked.
_FILLER = textwrap.dedent("""
    import base64, json, os, sys
    from ctxstore import CtxStoreError, Repository
    repo_path, acks_path, tag = sys.argv[1:4]
    acks = open(acks_path, "a", buffering=1)
    outcome = {"error": None}
    try:
        with Repository.open(repo_path, durable=False) as repo:
            for i in range(100_000):
                content = f"{tag}:{i}:" + base64.b64encode(os.urandom(48_000)).decode()
                repo.append("main", [{"role": "user", "content": content}])
                acks.write(content + "\\n")
    except Exception as exc:
        outcome = {"error": type(exc).__name__, "ctxstore": isinstance(exc, CtxStoreError), "message": str(exc)}
    print(json.dumps(outcome))
""")


def _mount(point: Path) -> str | None:
    """Mount a fresh tmpfs at `point`; the reason it cannot be done, or None."""
    if sys.platform != "linux":
        return f"tmpfs mounts need Linux (this is {sys.platform})"
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (CI runs as root)"
    point.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(point)],
                          capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        return f"mount -t tmpfs failed: {done.stderr.strip()[:200]}"
    return None


def _umount(point: Path) -> None:
    subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30)


def _fill_brim(point: Path, name: str = "filler") -> Path:
    """Take whatever space is left with a filler file, so even a lock file cannot be created."""
    filler = point / name
    try:
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    except OSError:
        return filler  # not even a new inode fits: already at the brim
    try:
        for size in (1 << 20, 1 << 12, 1):
            try:
                for _ in range(64 << 20):
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def _cycle(point: Path, work: Path, n: int, fails: dict[str, list[str]]) -> None:
    repo = point / f"repo{n}"
    acks = work / f"acks{n}.txt"
    done = cli("--repo", str(repo), "init")
    if done.returncode != 0:
        fails["setup"].append(f"init with space free failed: {done.stderr.strip()[:200]}")
        return
    ballast = point / "ballast"  # freed at the end: the space that returns
    ballast.write_bytes(b"\0" * (2 << 20))
    filled = subprocess.run([sys.executable, "-c", _FILLER, str(repo), str(acks), f"c{n}"], capture_output=True,
                            text=True, timeout=300)
    outcome = json.loads(filled.stdout.strip().splitlines()[-1]) if filled.stdout.strip() else None
    if filled.returncode != 0 or outcome is None:
        fails["write"].append(f"the writer died with exit {filled.returncode}: {filled.stderr.strip()[-200:]!r}")
    elif not outcome["ctxstore"]:
        fails["write"].append(f"a full disk raised {outcome['error']} (not a CtxStoreError): {outcome['message']}")
    else:
        fails["seen"].append(f"{len(acks.read_text().splitlines()) if acks.exists() else 0} writes acknowledged, "
                             f"then {outcome['error']}: {outcome['message'][:160]}")
    if outcome and outcome["ctxstore"] and "space" not in outcome["message"].lower():
        fails["says"].append(f"{outcome['error']}: {outcome['message'][:200]}")
    filler = _fill_brim(point)
    for args in (("append", "main", "on a full disk"), ("render", "main"), ("fsck",), ("refs",)):
        done = cli("--repo", str(repo), *args)
        if done.returncode != 0 and (why := clean_cli_error(done)):
            fails["cli"].append(f"ctxstore {args[0]} on a full disk: {why}")
    for what, args in (("init", ("--repo", str(point / f"new{n}"), "init")),
                       ("refs after lock.mdb is removed", ("--repo", str(repo), "refs"))):
        if what.startswith("refs"):
            (repo / "db" / "lock.mdb").unlink(missing_ok=True)
            _fill_brim(point, "filler2")  # the lock file's pages must not be free for its re-creation
        done = cli(*args)
        if done.returncode != 0 and (why := clean_cli_error(done)):
            fails["lock"].append(f"ctxstore {what} on a full disk: {why}")
    for freed in (filler, point / "filler2", ballast):
        freed.unlink(missing_ok=True)
    acked = acks.read_text().splitlines() if acks.exists() else []
    problems = check_repository(repo, {"main": acked})
    fails["damage"] += [f"after space returned: {p[:200]}" for p in problems]
    done = cli("--repo", str(repo), "append", "main", f"again {n}")
    if done.returncode != 0:
        fails["again"].append(f"append after space returned: exit {done.returncode} {done.stderr.strip()[:200]}")
    else:
        problems = check_repository(repo, {"main": [*acked, f"again {n}"]})
        fails["again"] += problems
    for stale in point.iterdir():  # room for the next cycle
        subprocess.run(["rm", "-rf", str(stale)], timeout=60)


def run(seconds: float, work: Path) -> list[Row]:
    point = work / "tmpfs"
    why = _mount(point)
    if why is not None:
        return [row("disk full: a repository on a full tmpfs", 0, f"skipped: {why}", 0, why)]
    fails: dict[str, list[str]] = {k: [] for k in ("setup", "write", "says", "cli", "lock", "damage", "again",
                                                           "seen")}
    cycles = 0
    deadline = time.monotonic() + seconds
    try:
        while cycles < 1 or (time.monotonic() < deadline and cycles < 50):
            cycles += 1
            _cycle(point, work, cycles, fails)
    finally:
        _umount(point)
    size = f"{SIZE.upper()}iB tmpfs"
    return [
        row("disk full: writes on a full disk", cycles, f"a CtxStoreError, no crash ({size})",
            len(fails["setup"] + fails["write"]), first(fails["setup"] + fails["write"] + fails["seen"][-1:])),
        row("disk full: the error says the disk is full", cycles, "the message says 'no space'",
            len(fails["says"]), first(fails["says"])),
        row("disk full: CLI append, render, fsck, refs on a full disk", cycles * 4,
            "exit 0 or a one-line error with a documented code (no traceback, no signal)",
            len(fails["cli"]), first(fails["cli"])),
        row("disk full: init and re-creating lock.mdb on a full disk", cycles * 2,
            "a one-line error with a documented code, no SIGBUS", len(fails["lock"]), first(fails["lock"])),
        row("disk full: nothing stored damaged", cycles, "fsck clean and every acknowledged write present "
            "once space returns", len(fails["damage"]), first(fails["damage"])),
        row("disk full: works again when space returns", cycles, "append succeeds and is read back",
            len(fails["again"]), first(fails["again"])),
    ]


if __name__ == "__main__":
    main(run, default_seconds=30)
