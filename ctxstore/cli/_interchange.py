"""Commands that move conversations in and out of a repository: import and export."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TextIO

import click

from ..interop.claude_code import skipped_lines_text
from ..interop.claude_export import session_id_for
from ..interop.formats import EXPORT_FORMATS, IMPORT_FORMATS, import_file, write_export
from ..interop.landing import ImportResult
from ..interop.projects import import_projects
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, Context, ProgressLine, emit, fail, reporting

__all__ = ["export", "import_"]


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
@click.argument("file", metavar="FILE|DIR|-")
@click.option("--ref", "ref", metavar="REF",
              help="The ref to import into (created if new); a Claude Code transcript defaults to "
                   "claude/<session>, a projects directory to cc/<project>/<session>.")
@click.option("--format", "fmt", type=click.Choice(["auto", *IMPORT_FORMATS]), default="auto",
              show_default=True, help="What FILE holds (auto: tell from its content).")
@click.option("--strict", is_flag=True,
              help="Refuse a transcript with malformed lines instead of skipping them.")
@click.option("--force", is_flag=True,
              help="Move REF even if the import does not descend from it (a snapshot of another lineage, "
                   "a transcript that does not continue what REF holds).")
@click.pass_obj
def import_(state: Context, file: str, ref: str | None, fmt: str, strict: bool, force: bool) -> None:
    """Import FILE (or stdin) into REF, in one commit; or every Claude Code session under DIR.

    json (a list of messages) and jsonl (one message or entry per line) are appended to REF, less what
    REF's view already ends with (importing a list twice adds nothing); a snapshot ({entries,
    revisions, head}: ours or the TypeScript library's) brings its whole graph and moves REF to its
    head; a Claude Code transcript (~/.claude/projects/*/SESSION.jsonl) becomes REF, with its
    subagents' sidechains and retried turns as forks REF/sidechain-ID and REF/fork-ID, its compactions
    as summaries, and its title, system records, cwd, branch and timestamps in entry metadata.
    Importing a transcript again changes nothing; importing it after the session grew fast-forwards.
    Malformed lines are skipped and their line numbers reported (--strict refuses the file). Prints
    {format, ref, revision, size, entries, refs, unchanged, skipped}.

    A directory (~/.claude/projects, or one project's directory) imports each session as
    cc/<project>/<session>, with progress on a terminal; prints {sessions, failed, moved}.
    """
    repo = state.repo()
    if file != "-" and Path(file).is_dir():
        if ref is not None or fmt not in ("auto", "claude"):
            fail("a directory is imported as Claude Code sessions, one ref each; drop --ref and --format",
                 EXIT_USAGE)
        progress = ProgressLine("importing sessions", "sessions", enabled=None if not state.quiet else False)
        try:
            with reporting():
                projects = import_projects(repo, file, strict=strict, force=force,
                                           progress=lambda done, total, _b, _t: progress.update(done, total))
        finally:
            progress.close()
        state.tell(f"imported {len(projects.sessions)} session(s) from {file}: {projects.moved} ref(s) moved"
                   + (f", {len(projects.failed)} failed (listed under 'failed')" if projects.failed else ""))
        emit(projects)
        return
    source = _open_source(file)
    progress = ProgressLine("importing", "messages", enabled=None if not state.quiet else False)
    try:
        with reporting():
            result = import_file(repo, source, ref, format=None if fmt == "auto" else fmt, force=force,
                                 strict=strict, progress=progress.update)
    finally:
        progress.close()
        if source is not sys.stdin:
            source.close()
    _tell_import(state, file, result)
    emit(result)


def _tell_import(state: Context, file: str, result: ImportResult) -> None:
    if not result.refs:
        state.tell(f"{file} ({result.format}): nothing new; {result.ref} already holds it")
    else:
        forks = len([r for r in result.refs if r != result.ref])
        state.tell(f"imported {file} ({result.format}) into {result.ref}: {result.size} entries in view"
                   + (f", {forks} more ref(s) for its forks" if forks else ""))
    if result.skipped:
        state.tell(f"skipped {len(result.skipped)} malformed line(s): {skipped_lines_text(result.skipped)}")


@click.command()
@click.argument("spec", metavar="REF|REVISION")
@click.option("--format", "fmt", type=click.Choice(EXPORT_FORMATS), default="json", show_default=True,
              help="What to write.")
@click.option("--ids", "with_ids", is_flag=True,
              help="json and jsonl: entries {id, kind, message, meta?, sources?} instead of plain messages.")
@click.option("--session", metavar="UUID",
              help="claude: the session id to write (default: one named by the revision).")
@click.option("-o", "--output", type=click.File("w", encoding="utf-8", lazy=True), default="-",
              help="Write to this file instead of stdout.")
@click.pass_obj
def export(state: Context, spec: str, fmt: str, with_ids: bool, session: str | None, output: TextIO) -> None:
    """Write the conversation at REF as json (a list of messages), jsonl, a snapshot, or a Claude Code
    transcript.

    With --ids, json and jsonl hold entries with their ids, which `ctxstore import` keeps. A snapshot
    ({entries, revisions, head}) keeps the whole lineage and loads back with `ctxstore import` or
    `MessageHistory.from_snapshot`. claude writes the view as a session Claude Code resumes: save it as
    ~/.claude/projects/<project>/<session>.jsonl and run `claude --resume <session>`.
    """
    repo = state.repo()
    with reporting():
        if fmt == "claude" and session is None:
            session = session_id_for(repo.resolve(spec))
        with state.progress_output("export", output, repo.history(spec).size) as out:
            write_export(repo, spec, out, format=fmt, with_ids=with_ids, session=session)
    output.flush()
    if fmt == "claude":
        state.tell(f"session {session}: save as {session}.jsonl in the project's directory under "
                   f"~/.claude/projects and run `claude --resume {session}`")
