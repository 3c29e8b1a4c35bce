"""A repository on a file system filled to the brim (issue 12, defect 4): clear errors instead of SIGBUS,
nothing stored damaged, and everything works again once space returns.

Runs on a small tmpfs mounted by the test, which needs root and permission to mount (CI runs as root);
elsewhere it is skipped, saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ctxstore import Repository


def _mount_tmpfs(size: str) -> Path | None:
    if sys.platform != "linux" or os.geteuid() != 0 or shutil.which("mount") is None:
        return None
    where = Path(tempfile.mkdtemp(prefix="ctxstore-full-"))
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True, check=False)
    if done.returncode != 0:
        where.rmdir()
        return None
    return where


@pytest.fixture
def small_disk() -> Iterator[Path]:
    where = _mount_tmpfs("4m")
    if where is None:
        pytest.skip("needs root and permission to mount a tmpfs (mount -t tmpfs) to fill a disk safely")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        where.rmdir()


def _fill(disk: Path) -> list[Path]:
    """Fill the file system to the last block; returns the filler files (remove them to free space)."""
    fillers = []
    for n, chunk in enumerate((1 << 16, 1 << 12, 512, 1)):
        path = disk / f"filler-{n}"
        fillers.append(path)
        with open(path, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * chunk)
            except OSError:
                pass
    for n in range(64):  # the last inodes' worth of tiny files
        try:
            (disk / f"tiny-{n}").write_bytes(b"x")
            fillers.append(disk / f"tiny-{n}")
        except OSError:
            break
    return fillers


def _ctxstore(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ctxstore.cli", *args], capture_output=True, text=True,
                          input=stdin, timeout=120, check=False)


def test_a_full_disk_gives_clear_errors_not_sigbus_and_loses_nothing(small_disk: Path) -> None:
    repo = small_disk / "repo"
    assert _ctxstore("--repo", str(repo), "init").returncode == 0
    for n in range(5):
        assert _ctxstore("--repo", str(repo), "append", "main", f"message {n}").returncode == 0
    before = _ctxstore("--repo", str(repo), "export", "main").stdout
    fillers = _fill(small_disk)

    made = _ctxstore("--repo", str(small_disk / "other"), "init")
    assert made.returncode == 1, made  # StoreError; SIGBUS was -7 (exit 135 from a shell)
    assert "disk is full (no space left on device)" in made.stderr

    big = json.dumps({"role": "user", "content": os.urandom(150_000).hex()})  # does not compress away
    write = _ctxstore("--repo", str(repo), "append", "main", stdin=big)
    assert write.returncode == 1, write
    assert "no space left" in write.stderr and "Input/output error" not in write.stderr

    (repo / "db" / "lock.mdb").unlink()  # as after a reboot: any open recreates it
    fillers_left = _fill(small_disk)  # take the lock file's blocks too
    refs = _ctxstore("--repo", str(repo), "refs")
    assert refs.returncode == 1, refs
    assert "disk is full" in refs.stderr

    for path in fillers + fillers_left:
        path.unlink(missing_ok=True)
    assert _ctxstore("--repo", str(repo), "export", "main").stdout == before
    assert _ctxstore("--repo", str(repo), "append", "main", "after").returncode == 0
    assert _ctxstore("--repo", str(repo), "fsck").returncode == 0
    with Repository.open(repo) as opened:
        assert [m["content"] for m in opened.history("main").render()] == [f"message {n}" for n in range(5)] + [
            "after"]
    assert _ctxstore("--repo", str(small_disk / "other2"), "init").returncode == 0
