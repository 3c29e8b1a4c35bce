"""Commands about the repository as a whole: init, import, export, fsck, gc, stats, and the tour."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TextIO

import click

from ..errors import CtxStoreError
from ..interop.formats import EXPORT_FORMATS, IMPORT_FORMATS, import_file, write_export
from ..repo.repository import Repository
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
)

__all__ = ["export", "fsck", "gc", "import_", "init", "stats", "tour"]


@click.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@click.pass_obj
def init(state: Context, directory: str | None) -> None:
    """Create an empty repository in DIRECTORY/.ctxstore (default: here).

    With --repo PATH (or CTXSTORE_DIR), the repository is created at PATH itself.
    Prints {"repository": path}.
    """
    if state.repo_path and directory:
        fail("give either DIRECTORY or --repo, not both", EXIT_USAGE)
    target = Path(state.repo_path) if state.repo_path else Path(directory or ".") / DIRNAME
    target = target.resolve()
    with reporting():
        Repository.init(target).close()
    state.tell(f"Initialized empty ctxstore repository in {target}")
    emit({"repository": str(target)})


def _open_source(path: str) -> IO[str]:
    if path == "-":
        return sys.stdin
    try:
        return open(path, encoding="utf-8")  # the import command closes it
    except FileNotFoundError:
        fail(f"no such file: {path}", EXIT_NOT_FOUND)
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror or error}", EXIT_USAGE)


@click.command("import")
@click.argument("file", metavar="FILE|-")
@click.option("--ref", "ref", metavar="REF",
              help="The ref to import into (created if new); a Claude Code transcript defaults to "
                   "claude/<session>.")
@click.option("--format", "fmt", type=click.Choice(["auto", *IMPORT_FORMATS]), default="auto",
              show_default=True, help="What FILE holds (auto: tell from its content).")
@click.option("--force", is_flag=True,
              help="Move REF even if the import does not descend from it (a snapshot of another lineage, "
                   "a transcript imported again).")
@click.pass_obj
def import_(state: Context, file: str, ref: str | None, fmt: str, force: bool) -> None:
    """Import FILE (or stdin) into REF, in one commit.

    json (a list of messages) and jsonl (one message or entry per line) are appended to REF; a
    snapshot ({entries, revisions, head}: ours or the TypeScript library's) brings its whole graph and
    moves REF to its head; a Claude Code transcript (~/.claude/projects/*/SESSION.jsonl) becomes REF,
    with its sidechains and retried turns as forks REF/sidechain-ID and REF/fork-ID, and its
    compactions as summaries. Prints {format, ref, revision, size, entries, refs}.
    """
    repo = state.repo()
    source = _open_source(file)
    try:
        with reporting():
            result = import_file(repo, source, ref, format=None if fmt == "auto" else fmt, force=force)
    finally:
        if source is not sys.stdin:
            source.close()
    forks = len(result.refs) - 1
    state.tell(f"imported {file} ({result.format}) into {result.ref}: {result.size} entries in view"
               + (f", {forks} more ref(s) for its forks" if forks else ""))
    emit(result)


@click.command()
@click.argument("spec", metavar="REF|REVISION")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="json", show_default=True,
              help="What to write.")
@click.option("--ids", "with_ids", is_flag=True,
              help="json and jsonl: entries {id, kind, message, meta?, sources?} instead of plain messages.")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8", lazy=True), default="-",
              help="Write to this file instead of stdout.")
@click.pass_obj
def export(state: Context, spec: str, fmt: str, with_ids: bool, output: TextIO) -> None:
    """Write the conversation at REF as json (a list of messages), jsonl, or a snapshot.

    With --ids, json and jsonl hold entries with their ids, which `ctxstore import` keeps. A snapshot
    ({entries, revisions, head}) keeps the whole lineage and loads back with `ctxstore import` or
    `MessageHistory.from_snapshot`.
    """
    repo = state.repo()
    with reporting():
        write_export(repo, spec, output, format=fmt, with_ids=with_ids)
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
