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
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, Context, emit, fail, reporting

__all__ = ["FROM_STORES", "export", "import_"]

FROM_STORES = ("openai-agents-sqlite", "langgraph-sqlite")
"""What `import --from` reads: other frameworks' stores, imported one ref per session or thread."""


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
@click.option("--from", "origin", type=click.Choice(FROM_STORES), metavar="STORE",
              help="FILE is another framework's store, imported one ref per session or thread: "
                   "openai-agents-sqlite (an Agents SDK SQLiteSession database) or langgraph-sqlite "
                   "(a LangGraph SqliteSaver database).")
@click.pass_obj
def import_(state: Context, file: str, ref: str | None, fmt: str, strict: bool, force: bool,
            origin: str | None) -> None:
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
    cc/<project>/<session>, with progress on a terminal, and the subagent transcripts Claude Code keeps
    beside a session (SESSION/subagents/agent-ID.jsonl) as its sidechain refs; prints {sessions,
    failed, subagentSkipped, moved}.

    --from openai-agents-sqlite DB imports every session of an OpenAI Agents SDK SQLiteSession database
    as openai-agents/<session> (CtxStoreSession's refs), one revision per batch of items; --from
    langgraph-sqlite DB every thread of a LangGraph SqliteSaver database as CtxStoreSaver keeps it.
    Importing again moves only what grew. One line per ref moved, progress on a terminal; prints
    {from, file, moved, refs: [{ref, old, new}]}.
    """
    if origin is not None:
        _import_store(state, origin, file, ref=ref, fmt=fmt, strict=strict, force=force)
        return
    repo = state.repo()
    if file != "-" and Path(file).is_dir():
        if ref is not None or fmt not in ("auto", "claude"):
            fail("a directory is imported as Claude Code sessions, one ref each; drop --ref and --format",
                 EXIT_USAGE)
        with reporting(), state.progress("importing sessions", "sessions") as progress:
            projects = import_projects(repo, file, strict=strict, force=force,
                                       progress=None if progress is None
                                       else lambda done, total, _b, _t: progress(done, total))
        state.tell(f"imported {len(projects.sessions)} session(s) from {file}: {projects.moved} ref(s) moved"
                   + (f", {len(projects.failed)} failed (listed under 'failed')" if projects.failed else "")
                   + (f"; malformed lines skipped in {len(projects.subagent_skipped)} subagent file(s) (listed "
                      "under 'subagentSkipped')" if projects.subagent_skipped else ""))
        emit(projects)
        return
    source = _open_source(file)
    try:
        with reporting(), state.progress("importing", "messages") as progress:
            result = import_file(repo, source, ref, format=None if fmt == "auto" else fmt, force=force,
                                 strict=strict, progress=progress)
    finally:
        if source is not sys.stdin:
            source.close()
    _tell_import(state, file, result)
    emit(result)


def _import_store(state: Context, origin: str, file: str, *, ref: str | None, fmt: str, strict: bool,
                  force: bool) -> None:
    """`import --from`: another framework's database, one ref per session or thread."""
    if ref is not None or fmt != "auto" or strict:
        fail(f"--from {origin} imports one ref per session; drop --ref, --format and --strict", EXIT_USAGE)
    if force and origin != "openai-agents-sqlite":
        fail(f"--force is not used by --from {origin}", EXIT_USAGE)
    if file == "-":
        fail(f"--from {origin} reads a database file, not stdin; give its path", EXIT_USAGE)
    path = Path(file)
    if not path.exists():
        fail(f"no such file: {file}", EXIT_NOT_FOUND)
    if not path.is_file():
        fail(f"{file} is not a file; --from {origin} reads an SQLite database file", EXIT_USAGE)
    repo = state.repo()
    # The integrations (and their frameworks) load only when asked for: `ctxstore` starts without them.
    with reporting(), state.progress("importing sessions", "sessions") as progress:
        try:
            if origin == "openai-agents-sqlite":
                from ..integrations.openai_agents import import_sqlite as import_agents

                moves = import_agents(repo, path, progress=progress, force=force)
            else:
                from ..integrations.langgraph import import_sqlite as import_langgraph

                moves = import_langgraph(repo, path, progress=progress)
        except ImportError as error:
            extra = "openai-agents" if origin == "openai-agents-sqlite" else "langgraph"
            fail(f"--from {origin} needs the {extra} extra: pip install 'ctxstore[{extra}]' ({error})")
    for move in moves:
        state.tell(f"{move.ref}: {move.old[:12] + '..' if move.old else 'new at '}{move.new[:12]}")
    if not moves:
        state.tell(f"{file} ({origin}): nothing new; every session is already imported")
    emit({"from": origin, "file": file, "moved": len(moves), "refs": moves})


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
