"""A Claude Code projects directory (``~/.claude/projects/``) imported at once: one ref per session.

Claude Code keeps each project's sessions as ``<projects>/<project>/<session>.jsonl``; each becomes the
ref ``cc/<project>/<session>`` (with its forks below it), imported as `import_claude_code` imports one
file, so importing the directory again moves only the sessions that grew. A session that cannot be
imported (no messages, or malformed lines under `strict`) is reported and the others still land.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CtxStoreError, InvalidInput
from ..repo.repository import Repository
from ..report import json_fields
from .claude_code import import_claude_code, read_transcript
from .landing import ImportResult

__all__ = ["ProjectsImport", "import_projects", "session_files"]

Progress = Callable[[int, int, int, int], None]
"""Called after each session: (sessions done, sessions in all, bytes done, bytes in all)."""


@dataclass(frozen=True)
class ProjectsImport:
    """What importing a projects directory did: each session's `ImportResult` by file, and the files that
    failed with why."""

    sessions: dict[str, ImportResult]
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def moved(self) -> int:
        """Refs the import moved, over every session."""
        return sum(len(r.refs) for r in self.sessions.values())

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return {**json_fields(self), "moved": self.moved}


def session_files(directory: str | os.PathLike[str]) -> list[tuple[str, Path]]:
    """The transcripts of a projects directory (or of one project's directory) as (project, path)."""
    root = Path(directory)
    if not root.is_dir():
        raise InvalidInput(f"no directory {root}; give ~/.claude/projects or one project's directory in it")
    own = sorted(p for p in root.glob("*.jsonl") if p.is_file())
    if own:
        return [(root.resolve().name, p) for p in own]
    return [(p.parent.name, p) for p in sorted(root.glob("*/*.jsonl")) if p.is_file()]


def _component(name: str) -> str:
    """A directory or file name as one ref name component (Claude Code's project names are paths)."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).lstrip(".").replace("..", "-")
    return (cleaned[:-5] + "-lock" if cleaned.endswith(".lock") else cleaned).rstrip(".") or "-"


def import_projects(repo: Repository, directory: str | os.PathLike[str], *, prefix: str = "cc",
                    strict: bool = False, force: bool = False, progress: Progress | None = None) -> ProjectsImport:
    """Import every session of a projects directory as ``<prefix>/<project>/<session>``."""
    files = session_files(directory)
    if not files:
        raise InvalidInput(f"{directory} holds no Claude Code sessions (<project>/<session>.jsonl files)")
    sizes = [path.stat().st_size for _, path in files]
    total = sum(sizes)
    done_bytes = 0
    sessions: dict[str, ImportResult] = {}
    failed: dict[str, str] = {}
    for number, ((project, path), size) in enumerate(zip(files, sizes, strict=True), 1):
        ref = f"{prefix}/{_component(project)}/{_component(path.stem)}"
        try:
            sessions[str(path)] = import_claude_code(repo, read_transcript(path), ref, strict=strict, force=force,
                                                     message=f"import claude from {path}")
        except CtxStoreError as exc:
            failed[str(path)] = str(exc)
        done_bytes += size
        if progress is not None:
            progress(number, len(files), done_bytes, total)
    return ProjectsImport(sessions, failed)
