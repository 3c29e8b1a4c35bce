"""The CLI starts without the layers a command does not need: local commands never import asyncio, the
model SDK, the HTTP client or the hub, and a fetch with nothing new no pack machinery (the timing goal
itself is measured by tools/bench_startup.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ctxstore import Repository

HEAVY = ("asyncio", "anthropic", "httpx2", "starlette", "uvicorn", "rich", "ctxstore.agents",
         "ctxstore.sync.http", "ctxstore.sync.server")
_LINE = re.compile(r"import time:\s+\d+ \|\s+\d+ \| +(\S+)$")
_NESTED = re.compile(r"import time:\s+\d+ \|\s+\d+ \|( +)(\S+)$")
# What a fetch with nothing new needs none of, so does not import (each is imported where it is used):
# planning or receiving a pack, revision specs, diffs, maintenance, the token budget helpers, and the
# standard library's process and file-tree modules (which no ctxstore module on that path may import).
FETCH_UNNEEDED = ("ctxstore.pack.plan", "ctxstore.pack.staging", "ctxstore.repo.receive", "ctxstore.repo.revspec",
                  "ctxstore.repo.diff", "ctxstore.repo.maintenance", "ctxstore.history.budget")
FETCH_UNNEEDED_STDLIB = ("subprocess", "shutil", "decimal")


def _imported(argv: list[str], cwd: Path) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ctxstore.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return {m.group(1) for line in done.stderr.splitlines() if (m := _LINE.match(line))}


def _imported_by(argv: list[str], cwd: Path) -> set[tuple[str, str]]:
    """(importer, module) for every module a ctxstore command loads, as `-X importtime` nests them."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ctxstore.cli", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    edges = set()
    # -X importtime prints a module after the ones it imported, one level deeper: a module's importer is
    # the next line printed at a shallower indentation.
    waiting: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not (m := _NESTED.match(line)):
            continue
        depth, name = len(m.group(1)), m.group(2)
        while waiting and waiting[-1][0] > depth:
            edges.add((name, waiting.pop()[1]))
        waiting.append((depth, name))
    return edges


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    origin = tmp_path / "origin"
    with Repository.init(origin / ".ctxstore") as repo:
        repo.append("main", [{"role": "user", "content": "hello"}])
    done = subprocess.run([sys.executable, "-m", "ctxstore.cli", "clone", str(origin), "copy"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return origin, tmp_path / "copy"


@pytest.mark.parametrize("argv, where", [(["render", "main"], 0), (["fetch"], 1), (["log"], 0),
                                         (["refs"], 0), (["--help"], 0)])
def test_local_commands_and_a_path_fetch_import_no_heavy_layer(pair: tuple[Path, Path], argv: list[str],
                                                               where: int) -> None:
    loaded = _imported(argv, pair[where])
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []
    # A command imports its own module of the CLI, not the others' (help lists them all, so loads them).
    own = {"render": "_history", "log": "_history", "refs": "_refs", "fetch": "_sync"}.get(argv[0])
    modules = {m.removeprefix("ctxstore.cli.") for m in loaded if m.startswith("ctxstore.cli._")}
    if own is None:
        assert {"_agent", "_sync", "_edit", "_hub", "_mcp"} <= modules
    else:
        assert own in modules and not {"_agent", "_edit", "_hub", "_mcp"} & modules
        assert ("_sync" in modules) == (own == "_sync")


def test_a_fetch_with_nothing_new_loads_no_pack_machinery(pair: tuple[Path, Path]) -> None:
    edges = _imported_by(["fetch"], pair[1])
    loaded = {module for _, module in edges}
    assert "ctxstore.sync.client" in loaded
    assert sorted(m for m in loaded if m in FETCH_UNNEEDED) == []
    assert sorted((by, m) for by, m in edges if m in FETCH_UNNEEDED_STDLIB and by.startswith("ctxstore")) == []


def test_chat_still_loads_the_agent_layer_when_used(pair: tuple[Path, Path]) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ctxstore.cli", "chat", "t", "--offline"],
                          cwd=pair[0], input="hi\n", capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ctxstore.agents.loop" in done.stderr and "asyncio" in done.stderr
    assert done.stdout == "Offline answer to: hi\n"
