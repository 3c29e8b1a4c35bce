"""Shared by the benchmarks: sample messages, bytes on disk, byte-compiling the package before it is timed,
and writing one section of docs/benchmarks.md."""

from __future__ import annotations

import compileall
import os
import platform
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
_HEADER = """# Benchmarks

Figures written by the scripts in `tools/`, each into its own section. Every goal is a ratio against a
baseline measured in the same run, so the figures hold on any machine; the absolute numbers are this
machine's. Reproduce a section with the command under its heading.
"""

_WORDS = ("the deploy window is friday and the rollback plan needs a second reviewer before we merge "
          "database migration latency budget retry queue cache invalidation customer ticket summary "
          "tool result error stack trace config flag experiment metrics dashboard alert owner").split()


def byte_compile() -> None:
    """Byte-compile the package, as an installed one is: a process that cannot write the cache (say under
    PYTHONDONTWRITEBYTECODE) would otherwise compile every changed module in every timed start-up."""
    compileall.compile_dir(ROOT / "ctxstore", quiet=1)


def dir_bytes(path: Path) -> int:
    """Bytes allocated on disk under `path` (a sparse file counts what it holds, not its apparent size);
    a single file counts with its SQLite companions (``-wal``, ``-shm``, ``-journal``) beside it."""
    if path.is_file():
        files = [path, *(p for p in (Path(f"{path}{extra}") for extra in ("-wal", "-shm", "-journal"))
                         if p.exists())]
    else:
        files = [Path(root) / name for root, _dirs, names in os.walk(path) for name in names]
    total = 0
    for file in files:
        try:
            st = file.stat()
        except FileNotFoundError:  # a WAL or lock file that went away while walking
            continue
        total += min(st.st_blocks * 512, st.st_size) if st.st_blocks else st.st_size
    return total


def message(n: int, rng: random.Random | None = None) -> dict[str, object]:
    """A chat message of a realistic size (about 300-700 characters), deterministic in `n`."""
    rng = rng or random.Random(n)
    words = rng.randint(50, 110)
    text = " ".join(rng.choice(_WORDS) for _ in range(words))
    return {"role": "user" if n % 2 == 0 else "assistant", "content": f"[{n}] {text}"}


def write_section(title: str, command: str, body: str) -> None:
    """Replace (or add) the section `## title` of docs/benchmarks.md, leaving the others alone."""
    text = DOC.read_text() if DOC.exists() else _HEADER
    machine = f"{platform.python_implementation()} {platform.python_version()} on {platform.machine()}"
    section = f"## {title}\n\nReproduce: `{command}` ({machine})\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text)
    else:
        text = text.rstrip() + "\n\n" + section
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text.rstrip() + "\n")
