"""A Claude Code projects directory (``~/.claude/projects/``) imported at once: one ref per session.

Claude Code keeps each project's sessions as ``<projects>/<project>/<session>.jsonl``; each becomes the
ref ``cc/<project>/<session>`` (with its forks below it), imported as `import_claude_code` imports one
file, so importing the directory again moves only the sessions that grew. A session that cannot be
imported (no messages, or malformed lines under `strict`) is reported and the others still land.

Recent Claude Code versions write a subagent's transcript to a file of its own beside the session,
``<project>/<session>/subagents/agent-<id>.jsonl``, instead of as `isSidechain` records inside the
session file. `read_session` reads the session with those files merged in, each record placed by its
timestamp among the session's records (a file's own order is kept), so a subagent lands exactly where
it would have been written inline: as the ref ``<session ref>/sidechain-<uuid8>``, with `agentId` and
`branchedFrom` in its entries' meta, the same as an inline sidechain. Malformed lines of a subagent file
are skipped like the session's own and listed by file (`ProjectsImport.subagent_skipped`).
"""

from __future__ import annotations

import heapq
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import CtxStoreError, InvalidInput
from ..repo.repository import Repository
from ..report import json_fields
from .claude_code import Transcript, import_claude_code, parse_claude_code, skipped_lines_text, timestamp_ms
from .landing import ImportResult
from .source import numbered_json_lines, read_text

__all__ = ["ProjectsImport", "import_projects", "read_session", "session_files", "subagent_files"]

Progress = Callable[[int, int, int, int], None]
"""Called after each session: (sessions done, sessions in all, bytes done, bytes in all)."""


@dataclass(frozen=True)
class ProjectsImport:
    """What importing a projects directory did: each session's `ImportResult` by file, the files that
    failed with why, and the malformed lines skipped in subagent files (by subagent file)."""

    sessions: dict[str, ImportResult]
    failed: dict[str, str] = field(default_factory=dict)
    subagent_skipped: dict[str, list[int]] = field(default_factory=dict)

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


def subagent_files(session: str | os.PathLike[str]) -> list[Path]:
    """The subagent transcripts Claude Code keeps for a session file: ``<session>/subagents/agent-*.jsonl``
    beside ``<session>.jsonl``, in name order."""
    path = Path(session)
    return sorted(p for p in (path.parent / path.stem / "subagents").glob("agent-*.jsonl") if p.is_file())


def read_session(session: str | os.PathLike[str], *, strict: bool = False,
                 text: str | None = None) -> tuple[Transcript, dict[str, list[int]]]:
    """A session file parsed with its subagent files merged in (`subagent_files`), and the malformed
    lines of each subagent file that were skipped, by file (only files that had some); under `strict` a
    subagent file with a malformed line is refused (`InvalidInput`). `text` is the session file's text
    when the caller has read it already.

    The transcript's own `skipped` lists the session file's lines only.
    """
    path = Path(session)
    sources = [path, *subagent_files(path)]
    streams = []
    bad: list[int] = []
    spans: list[tuple[int, int]] = []  # per source: its first line number in the joint numbering, its line count
    offset = 0
    for index, source in enumerate(sources):
        content = text if index == 0 and text is not None else read_text(source)
        numbered, malformed = numbered_json_lines(content)
        if index:
            numbered = [(n, _as_subagent(rec, source)) for n, rec in numbered]
        bad += [offset + n for n in malformed]
        streams.append(list(_keyed(numbered, index, offset)))
        count = content.count("\n") + 1
        spans.append((offset, count))
        offset += count
    merged = [(line, rec) for _, _, line, rec in heapq.merge(*streams, key=lambda item: (item[0], item[1]))]
    transcript = parse_claude_code(merged, skipped=bad)
    own = [n for n in transcript.skipped if n <= spans[0][1]]
    by_file: dict[str, list[int]] = {}
    for source, (start, count) in zip(sources[1:], spans[1:], strict=True):
        lines = [n - start for n in transcript.skipped if start < n <= start + count]
        if lines:
            by_file[str(source)] = lines
    if strict and by_file:
        name, lines = next(iter(by_file.items()))
        raise InvalidInput(f"subagent file {name} has {len(lines)} malformed line(s) "
                           f"({skipped_lines_text(lines)}); fix them, or import without --strict")
    return replace(transcript, skipped=own), by_file


def _as_subagent(rec: Any, source: Path) -> Any:
    """A record of a subagent file, marked as the sidechain it is (with the agent id its file is named by)
    should the record not say so itself."""
    if not isinstance(rec, dict) or not isinstance(rec.get("uuid"), str):
        return rec
    marks = {"isSidechain": True, "agentId": source.stem.removeprefix("agent-")}
    missing = {k: v for k, v in marks.items() if rec.get(k) in (None, False)}
    return {**rec, **missing} if missing else rec


def _keyed(numbered: list[tuple[int, Any]], index: int, offset: int) -> list[tuple[int, int, int, Any]]:
    """(time, source index, joint line number, record) of a file's records, in the file's order; a record
    with no timestamp (a title, a file snapshot) takes the time of the record before it."""
    out = []
    at = 0
    for line, rec in numbered:
        stamp = timestamp_ms(rec.get("timestamp")) if isinstance(rec, dict) else None
        at = stamp if stamp is not None else at
        out.append((at, index, offset + line, rec))
    return out


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
    sizes = [path.stat().st_size + sum(p.stat().st_size for p in subagent_files(path)) for _, path in files]
    total = sum(sizes)
    done_bytes = 0
    sessions: dict[str, ImportResult] = {}
    failed: dict[str, str] = {}
    subagent_skipped: dict[str, list[int]] = {}
    for number, ((project, path), size) in enumerate(zip(files, sizes, strict=True), 1):
        ref = f"{prefix}/{_component(project)}/{_component(path.stem)}"
        try:
            transcript, agent_bad = read_session(path, strict=strict)
            sessions[str(path)] = import_claude_code(repo, transcript, ref, strict=strict, force=force,
                                                     message=f"import claude from {path}")
            subagent_skipped.update(agent_bad)
        except CtxStoreError as exc:
            failed[str(path)] = str(exc)
        done_bytes += size
        if progress is not None:
            progress(number, len(files), done_bytes, total)
    return ProjectsImport(sessions, failed, subagent_skipped)
