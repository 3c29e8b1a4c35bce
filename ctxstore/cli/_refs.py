"""Commands about refs: branch (list, create, delete, rename), fork, refs and reflog."""

from __future__ import annotations

import click

from ._common import EXIT_EXISTS, EXIT_USAGE, Context, emit, fail, reporting
from ._resolve import match_ref

__all__ = ["branch", "fork", "reflog", "refs"]


@click.command()
@click.argument("name", required=False)
@click.argument("start", required=False, metavar="[START]")
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete the ref NAME (its reflog is kept).")
@click.option("-m", "--move", "move", metavar="NEW", help="Rename the ref NAME to NEW, with its reflog.")
@click.option("-f", "--force", is_flag=True, help="Point an existing NAME at START anyway (a reset).")
@click.pass_obj
def branch(state: Context, name: str | None, start: str | None, delete: bool, move: str | None,
           force: bool) -> None:
    """List heads, or create NAME at START (a ref or revision), delete it (-d) or rename it (-m NEW).

    Creating points NAME at START's revision without adding one (use `fork` to record a fork
    revision). Lists print {name: revision}; changes print {ref, revision}.
    """
    repo = state.repo()
    with reporting():
        if name is None:
            if delete or move or start:
                fail("give the NAME of the ref to change", EXIT_USAGE)
            emit(repo.refs("refs/heads/"))
            return
        if delete and move:
            fail("use either -d or -m, not both", EXIT_USAGE)
        if delete:
            revision = repo.head(name)
            full = repo.delete_ref(name, message="branch -d")
            state.tell(f"deleted {full} (was {revision[:12] if revision else 'nothing'})")
            emit({"ref": full, "revision": None, "was": revision})
            return
        if move is not None:
            full = repo.rename_ref(name, move)
            state.tell(f"renamed {name} to {full}")
            emit({"ref": full, "revision": repo.head(full)})
            return
        if start is None:
            fail(f"give START, the ref or revision that {name} should point at "
                 f"(e.g. `ctxstore branch {name} main`)", EXIT_USAGE)
        existing = match_ref(repo, name)
        if existing is not None and not force:
            fail(f"ref {existing} already exists; pick another name, or reset it with --force", EXIT_EXISTS)
        revision = repo.resolve(start)
        full = repo.set_ref(name, revision, create_only=not force, message=f"branch from {start}")
        state.tell(f"{full} now points at {revision[:12]}")
        emit({"ref": full, "revision": revision})


@click.command()
@click.argument("source", metavar="SOURCE")
@click.argument("name", metavar="NEW")
@click.pass_obj
def fork(state: Context, source: str, name: str) -> None:
    """Fork SOURCE (a ref or revision) into a new ref NEW, recording a fork revision.

    Both refs then share every entry up to the fork; appending to one leaves the other as it was.
    Prints {ref, revision, from}.
    """
    repo = state.repo()
    with reporting():
        existing = match_ref(repo, name)
        if existing is not None:
            fail(f"ref {existing} already exists; pick another name for the fork", EXIT_EXISTS)
        base = repo.resolve(source)
        forked = repo.history(base).fork()
        full = repo.commit(name, forked, message=f"fork of {source}").ref
    state.tell(f"forked {source} ({base[:12]}) into {full}")
    emit({"ref": full, "revision": forked.revision_id, "from": base})


@click.command()
@click.argument("prefix", required=False)
@click.pass_obj
def refs(state: Context, prefix: str | None) -> None:
    """List refs as {full name: revision}, optionally only those under PREFIX (e.g. refs/tags/)."""
    repo = state.repo()
    with reporting():
        emit(repo.refs(prefix))


@click.command()
@click.argument("ref")
@click.option("-n", "--max-count", type=click.IntRange(min=1), help="Show at most this many moves.")
@click.pass_obj
def reflog(state: Context, ref: str, max_count: int | None) -> None:
    """List the moves of REF, newest first: {old, new, time, message} (also for a deleted ref)."""
    repo = state.repo()
    with reporting():
        moves = repo.reflog(ref, max_count)
    emit([{"old": m.old, "new": m.new, "time": m.time_ms, "message": m.message} for m in moves])
