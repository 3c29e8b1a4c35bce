"""Commands about the repository as a whole: init, import, export, fsck, gc, stats, and the tour."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import CtxStoreError
from ..repo.repository import Repository
from ._common import (
    DIRNAME,
    EXIT_CORRUPT,
    EXIT_EXISTS,
    EXIT_USAGE,
    Context,
    emit,
    fail,
    reporting,
)
from ._durations import Duration
from ._interchange import export, import_

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


@click.command()
@click.option("--repair", is_flag=True,
              help="Drop reflog records that cannot be read (keeping the rest), then check.")
@click.pass_obj
def fsck(state: Context, repair: bool) -> None:
    """Check every object's hash and form, and that refs and reflogs reach only stored revisions.

    Prints the report ({ok, objects, problems, repaired, ...}); exits 6 when it found problems.
    With --repair, damaged reflog records are dropped first and listed under "repaired".
    """
    repo = state.repo()
    with reporting(), state.progress("fsck", "objects") as progress:
        report = repo.fsck(progress, repair=repair)
    emit(report)
    if not report.ok:
        fail(f"fsck found {len(report.problems)} problem(s), listed in the report on stdout; "
             "`ctxstore fsck --repair` drops damaged reflog records; for damaged objects restore the "
             "repository from a copy or re-import the damaged conversations", EXIT_CORRUPT)


@click.command()
@click.option("--grace", type=click.FloatRange(min=0), default=14 * 24 * 3600.0, show_default=True,
              metavar="SECONDS", help="Keep unreachable objects younger than this.")
@click.option("--prune", "prune", type=Duration(), metavar="now|DURATION",
              help="Keep unreachable objects younger than this instead (now, 3600, 12h, 2w, ...).")
@click.option("--now", "now", is_flag=True, help="No grace period (same as --prune=now).")
@click.pass_obj
def gc(state: Context, grace: float, prune: float | None, now: bool) -> None:
    """Delete objects that no ref or reflog entry reaches and that are older than the grace period.

    Reflogs of deleted refs count only for the grace period: `branch -d x` then `gc --prune=now`
    deletes what only x reached. To purge an old revision of a live ref, first
    `ctxstore reflog expire --expire=now REF`. Prints {deleted, bytes, keptYoung, reachable,
    reflogEntriesExpired}.
    """
    repo = state.repo()
    with reporting():
        report = repo.gc(grace=0.0 if now else grace if prune is None else prune)
    state.tell(f"gc: deleted {report.deleted} objects ({report.bytes} bytes)")
    emit(report)


@click.command()
@click.pass_obj
def stats(state: Context) -> None:
    """Objects, bytes stored and on disk, and bytes saved by sharing entries between conversations."""
    repo = state.repo()
    with reporting(), state.progress("stats", "refs") as progress:
        report = repo.stats(progress)
    emit(report)


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
