"""Commands about refs: branch (list, create, delete, rename), tag, fork, refs and reflog."""

from __future__ import annotations

import click

from ..errors import shown
from ..refs import HEADS, REMOTES, TAGS, check_ref_name
from ._common import EXIT_EXISTS, EXIT_NOT_FOUND, EXIT_USAGE, Context, emit, fail, reporting
from ._durations import Duration
from ._resolve import match_ref, resolve_revision

__all__ = ["branch", "fork", "reflog", "refs", "tag"]


def _full(name: str, namespace: str) -> str:
    """NAME under `namespace` (``refs/heads/``, ``refs/tags/``, ``refs/remotes/``), or NAME when given in full."""
    full = name if name.startswith("refs/") else namespace + name
    if not full.startswith(namespace):
        fail(f"{name} is not under {namespace}; give a name like {namespace}x or just x", EXIT_USAGE)
    check_ref_name(full)
    return full


@click.command()
@click.argument("name", required=False)
@click.argument("start", required=False, metavar="[START]")
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete the head NAME (its reflog is kept).")
@click.option("-m", "--move", "move", is_flag=True,
              help="Rename: `branch -m OLD NEW` renames head OLD to NEW, with its reflog.")
@click.option("-f", "--force", is_flag=True, help="Point an existing NAME at START anyway (a reset).")
@click.option("-r", "--remotes", "remotes", is_flag=True,
              help="List or delete (-d) remote-tracking refs (origin/main) instead of heads.")
@click.pass_obj
def branch(state: Context, name: str | None, start: str | None, delete: bool, move: bool,
           force: bool, remotes: bool) -> None:
    """List heads, create NAME at START (any revision: main, main~2, 3f2a...), delete (-d) or rename (-m).

    Creating points NAME at START's revision without adding one (use `fork` to record a fork
    revision). With -r, list remote-tracking refs, or delete one (`branch -d -r origin/old`).
    Lists print {name: revision}; changes print {ref, revision}.
    """
    repo = state.repo()
    namespace = REMOTES if remotes else HEADS
    with reporting():
        if name is None:
            if delete or move or start:
                fail("give the NAME of the ref to change", EXIT_USAGE)
            emit(repo.refs(namespace))
            return
        if delete and move:
            fail("use either -d or -m, not both", EXIT_USAGE)
        full = _full(name, namespace)
        if delete:
            revision = repo.head(full)
            if revision is None:
                fail(f"no {'remote-tracking ref' if remotes else 'head'} {full} to delete; "
                     f"list them with `ctxstore branch{' -r' if remotes else ''}`", EXIT_NOT_FOUND)
            repo.delete_ref(full, message="branch -d")
            state.tell(f"deleted {full} (was {revision[:12]})")
            emit({"ref": full, "revision": None, "was": revision})
            return
        if remotes:
            fail("-r lists or deletes remote-tracking refs; create heads without it", EXIT_USAGE)
        if move:
            if start is None:
                fail(f"give the new name: `ctxstore branch -m {name} NEW`", EXIT_USAGE)
            if repo.head(full) is None:
                fail(f"no head {full} to rename; list heads with `ctxstore branch`", EXIT_NOT_FOUND)
            target = _full(start, HEADS)
            if repo.head(target) is not None:
                fail(f"head {target} already exists; delete it first or choose another name", EXIT_EXISTS)
            renamed = repo.rename_ref(full, target)
            state.tell(f"renamed {full} to {renamed}")
            emit({"ref": renamed, "revision": repo.head(renamed)})
            return
        if start is None:
            fail(f"give START, the ref or revision that {name} should point at "
                 f"(e.g. `ctxstore branch {name} main`)", EXIT_USAGE)
        if repo.head(full) is not None and not force:
            fail(f"head {full} already exists; pick another name, or reset it with --force", EXIT_EXISTS)
        revision = resolve_revision(repo, start)
        repo.set_ref(full, revision, create_only=not force, message=f"branch from {start}")
        state.tell(f"{full} now points at {revision[:12]}")
        emit({"ref": full, "revision": revision})


@click.command()
@click.argument("name", required=False)
@click.argument("revision", required=False, metavar="[REV]")
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete the tag NAME.")
@click.option("-f", "--force", is_flag=True, help="Re-point an existing tag NAME at REV.")
@click.pass_obj
def tag(state: Context, name: str | None, revision: str | None, delete: bool, force: bool) -> None:
    """List tags, or tag REV (default: main) as NAME: a name for one revision that appends never move.

    `append`, `chat` and commits refuse a tag; fork it to continue (`ctxstore fork NAME NEW`). Fetch
    brings the remote's new tags; push sends a tag when named (`ctxstore push origin NAME`). Lists
    print {name: revision}; changes print {ref, revision}.
    """
    repo = state.repo()
    with reporting():
        if name is None:
            if delete or force or revision:
                fail("give the NAME of the tag", EXIT_USAGE)
            emit(repo.refs(TAGS))
            return
        full = _full(name, TAGS)
        existing = repo.head(full)
        if delete:
            if revision is not None:
                fail("tag -d takes only the tag's NAME", EXIT_USAGE)
            if existing is None:
                fail(f"no tag {full} to delete; list tags with `ctxstore tag`", EXIT_NOT_FOUND)
            repo.delete_ref(full, message="tag -d")
            state.tell(f"deleted {full} (was {existing[:12]})")
            emit({"ref": full, "revision": None, "was": existing})
            return
        if existing is not None and not force:
            fail(f"tag {full} already exists at {existing[:12]}; tags do not move, so choose another "
                 f"name, or re-point it with `ctxstore tag -f {name} REV`", EXIT_EXISTS)
        target = resolve_revision(repo, revision or "main")
        repo.set_ref(full, target, create_only=not force, message=f"tag {revision or 'main'}")
        state.tell(f"tagged {target[:12]} as {full}")
        emit({"ref": full, "revision": target})


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
        base = resolve_revision(repo, source)
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


class _ReflogGroup(click.Group):
    """`reflog REF` shows REF's moves (git's `reflog [show]`); `reflog expire` drops old ones."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["show", *args]
        return super().parse_args(ctx, args)


@click.group(cls=_ReflogGroup)
def reflog() -> None:
    """List the moves of a ref (`reflog [show] REF`), or drop old ones (`reflog expire`).

    `reflog REF [-n N]` prints REF's moves, newest first: {old, new, time, message} (also for a
    deleted ref). `reflog expire [--expire=now|DURATION] [--all|REF]` drops records older than
    DURATION (default 90d; now: all of them) and any damaged record; `gc --prune=now` then deletes
    what only they reached.
    """


@reflog.command("show")
@click.argument("ref")
@click.option("-n", "--max-count", type=click.IntRange(min=1), help="Show at most this many moves.")
@click.pass_obj
def reflog_show(state: Context, ref: str, max_count: int | None) -> None:
    """List the moves of REF, newest first: {old, new, time, message} (also for a deleted ref)."""
    repo = state.repo()
    with reporting():
        moves = repo.reflog(ref, max_count)
        if not moves and repo.head(ref) is None:
            fail(f"no ref named {shown(ref)} and no reflog for it; list refs with `ctxstore refs`", EXIT_NOT_FOUND)
    emit([{"old": m.old, "new": m.new, "time": m.time_ms, "message": m.message} for m in moves])


@reflog.command("expire")
@click.argument("ref", required=False)
@click.option("--expire", "expire", type=Duration(), default="90d", show_default=True, metavar="now|DURATION",
              help="Drop records older than this (now: every record).")
@click.option("--all", "all_refs", is_flag=True, help="Expire every reflog, deleted refs' included.")
@click.pass_obj
def reflog_expire(state: Context, ref: str | None, expire: float, all_refs: bool) -> None:
    """Drop reflog records of REF (or of every ref with --all) older than --expire, and damaged ones.

    Prints {expired: {ref: records dropped}}; run `gc --prune=now` after it to delete what only the
    dropped records reached.
    """
    if (ref is None) == (not all_refs):
        fail("give either REF or --all", EXIT_USAGE)
    repo = state.repo()
    with reporting():
        dropped = repo.expire_reflogs(ref, older_than=None if expire == 0 else expire)
    state.tell(f"reflog expire: dropped {sum(dropped.values())} record(s)")
    emit({"expired": dropped})
