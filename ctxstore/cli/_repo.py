"""Commands about the repository as a whole: init, import, export, fsck, gc, stats, and the tour."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

import click

from ..errors import CtxStoreError
from ..history.message_history import MessageHistory
from ._common import (
    DIRNAME,
    EXIT_CORRUPT,
    EXIT_EXISTS,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    Context,
    emit,
    fail,
    reporting,
    stderr_is_terminal,
)
from ._history import parse_messages

__all__ = ["FORMATS", "export", "fsck", "gc", "import_", "init", "stats", "tour"]

FORMATS = ("messages", "jsonl", "snapshot", "claude")
"""Import formats: a JSON list of messages, JSON Lines, a snapshot, a Claude Code transcript."""

_PROGRESS_MIN = 2000  # lines; smaller imports finish before a bar would be worth drawing


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.pass_obj
def init(state: Context, directory: str | None) -> None:
    """Create an empty repository in DIRECTORY/.ctxstore (default: here).

    With --repo PATH (or CTXSTORE_DIR), the repository is created at PATH itself.
    Prints {"repository": path}.
    """
    from ..repo.repository import Repository

    if state.repo_path and directory:
        fail("give either DIRECTORY or --repo, not both", EXIT_USAGE)
    target = Path(state.repo_path) if state.repo_path else Path(directory or ".") / DIRNAME
    target = target.resolve()
    with reporting():
        Repository.init(target).close()
    state.tell(f"Initialized empty ctxstore repository in {target}")
    emit({"repository": str(target)})


def _read_source(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        fail(f"no such file: {path}", EXIT_NOT_FOUND)
    except (OSError, UnicodeDecodeError) as error:
        fail(f"cannot read {path}: {error}", EXIT_USAGE)


def detect_format(path: str, text: str) -> str:
    """The import format of a file, from its content (and its name when the content is ambiguous)."""
    stripped = text.lstrip()
    first_line = stripped.split("\n", 1)[0]
    try:
        whole = json.loads(stripped)
    except json.JSONDecodeError:
        whole = None
    if isinstance(whole, Mapping) and "revisions" in whole and "entries" in whole:
        return "snapshot"
    if isinstance(whole, list):
        return "messages"
    try:
        first = json.loads(first_line) if first_line else None
    except json.JSONDecodeError:
        first = None
    if isinstance(first, Mapping) and ("uuid" in first or "sessionId" in first or "parentUuid" in first):
        return "claude"
    if isinstance(whole, Mapping) or isinstance(first, Mapping) or path.endswith(".jsonl"):
        return "jsonl"
    fail(f"cannot tell the format of {path}; give --format ({'|'.join(FORMATS)})", EXIT_USAGE)


def _with_progress(lines: list[str], label: str) -> Iterator[str]:
    if len(lines) < _PROGRESS_MIN or not stderr_is_terminal():
        yield from lines
        return
    with click.progressbar(lines, label=label, file=sys.stderr) as bar:
        yield from bar


def _jsonl(lines: Iterable[str]) -> list[Any]:
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as error:
            fail(f"line {number} is not JSON ({error.msg}); fix it or import the rest separately", EXIT_USAGE)
    return out


@click.command("import")
@click.argument("file", metavar="FILE|-")
@click.option("--ref", "ref", metavar="REF", required=True, help="The ref to import into (created if new).")
@click.option("--format", "fmt", type=click.Choice(["auto", *FORMATS]), default="auto", show_default=True,
              help="What FILE holds.")
@click.option("--force", is_flag=True, help="For a snapshot: move REF even if that is not a fast-forward.")
@click.pass_obj
def import_(state: Context, file: str, ref: str, fmt: str, force: bool) -> None:
    """Import FILE (or stdin) into REF.

    messages (a JSON list) and jsonl (one message or entry per line) are appended to REF as one
    revision; a snapshot ({entries, revisions, head}: ours or the TypeScript library's) brings its
    whole graph and moves REF to its head; a Claude Code transcript keeps sidechains and compactions
    as forks and summaries. Prints {ref, revision, size, format}.
    """
    text = _read_source(file)
    if fmt == "auto":
        fmt = detect_format(file, text)
    repo = state.repo()
    with reporting():
        if fmt == "snapshot":
            try:
                snapshot = json.loads(text)
            except json.JSONDecodeError as error:
                fail(f"{file} is not JSON ({error.msg} at line {error.lineno})", EXIT_USAGE)
            history = MessageHistory.from_snapshot(snapshot)
            full = repo.commit(ref, history, force=force, message=f"import snapshot {file}")
            revision, size = history.revision_id, history.size
        elif fmt == "claude":
            full, revision, size = _import_claude(repo, ref, file, text)
        else:
            if fmt == "messages":
                entries = parse_messages(text)
            else:
                entries = _jsonl(_with_progress(text.splitlines(), "Reading"))
            if not entries:
                fail(f"{file} holds no messages", EXIT_USAGE)
            full = repo.ref_name(ref)
            revision = repo.append(full, entries, message=f"import {file}")
            size = repo.history(revision).size
    state.tell(f"imported {file} into {full} ({size} entries in view)")
    emit({"ref": full, "revision": revision, "size": size, "format": fmt})


def _import_claude(repo: Any, ref: str, file: str, text: str) -> tuple[str, str, int]:
    """A Claude Code transcript, through the library's importer when this build has one."""
    importer = getattr(repo, "import_claude_code", None)
    if importer is None:
        fail("this build of ctxstore cannot import Claude Code transcripts yet; "
             "convert it to JSON Lines of messages and use --format jsonl", 1)
    result = importer(ref, text if file == "-" else Path(file))
    full = repo.ref_name(ref)
    revision = getattr(result, "revision_id", None) or repo.head(full)
    return full, str(revision), repo.history(full).size


@click.command()
@click.argument("spec", metavar="REF|REVISION")
@click.option("--format", "fmt", type=click.Choice(["messages", "jsonl", "entries", "snapshot"]),
              default="messages", show_default=True, help="What to write.")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8", lazy=True), default="-",
              help="Write to this file instead of stdout.")
@click.pass_obj
def export(state: Context, spec: str, fmt: str, output: TextIO) -> None:
    """Write the conversation at REF as messages (JSON list), jsonl, entries, or a snapshot.

    A snapshot ({entries, revisions, head}) keeps the whole lineage and loads back with
    `ctxstore import --format snapshot` or `MessageHistory.from_snapshot`.
    """
    from ._resolve import existing_history

    repo = state.repo()
    with reporting():
        history = existing_history(repo, spec)
        if fmt == "snapshot":
            value: Any = history.to_snapshot()
        elif fmt == "entries":
            value = [e.to_dict() for e in history.refs()]
        else:
            value = history.render()
    if fmt == "jsonl":
        for message in value:
            output.write(json.dumps(message, ensure_ascii=False) + "\n")
    else:
        output.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    output.flush()


@click.command()
@click.pass_obj
def fsck(state: Context) -> None:
    """Check every object's hash and form, and that refs and reflogs reach only stored objects.

    Prints the report ({ok, objects, problems, ...}); exits 6 when it found problems.
    """
    repo = state.repo()
    with reporting():
        report = repo.fsck()
    emit(report)
    if not report.ok:
        fail(f"fsck found {len(report.problems)} problem(s), listed in the report on stdout; "
             "restore the repository from a copy or re-import the damaged conversations", EXIT_CORRUPT)


@click.command()
@click.option("--grace", type=click.FloatRange(min=0), default=14 * 24 * 3600.0, show_default=True,
              metavar="SECONDS", help="Keep unreachable objects younger than this.")
@click.option("--now", "now", is_flag=True, help="No grace period (same as --grace 0).")
@click.pass_obj
def gc(state: Context, grace: float, now: bool) -> None:
    """Delete objects that no ref or reflog entry reaches and that are older than the grace period.

    Prints {deleted, bytes, keptYoung, reachable}.
    """
    repo = state.repo()
    with reporting():
        report = repo.gc(grace=0.0 if now else grace)
    state.tell(f"gc: deleted {report.deleted} objects ({report.bytes} bytes)")
    emit(report)


@click.command()
@click.pass_obj
def stats(state: Context) -> None:
    """Objects, bytes stored and on disk, and bytes saved by sharing entries between conversations."""
    repo = state.repo()
    with reporting():
        emit(repo.stats())


@click.command()
@click.option("--keep", "keep", metavar="DIR", type=click.Path(file_okay=False),
              help="Run in DIR and keep the repository there to explore afterwards (default: a temporary "
                   "directory, removed at the end).")
@click.pass_obj
def tour(state: Context, keep: str | None) -> None:
    """A short guided run of ctxstore on a temporary repository: it prints what it does."""
    from ._invoke import invoker
    from .tour import run_tour

    root = click.get_current_context().find_root().command
    try:
        run_tour(click.echo, command=invoker(root), directory=Path(keep) if keep else None)
    except CtxStoreError as error:
        fail(f"the tour failed: {error}", 1)
    except FileExistsError as error:
        fail(str(error), EXIT_EXISTS)
