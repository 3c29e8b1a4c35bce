"""Commands that write and read one conversation: append, log, show, render, diff."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import click

from ..errors import UnknownRevision, shown
from ..format.objects import Entry, Revision, parse_object
from ..history.entry import MessageHistoryEntry
from ..ids import from_hex
from ..repo.repository import Repository
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, Context, emit, fail, reporting
from ._graph import LogRevision, collect, draw, operation_summary
from ._pretty import stdout_is_terminal, want_pretty
from ._resolve import existing_history, load_revision, match_ref, object_ids_with_prefix, resolve_revision

__all__ = ["append", "diff", "log", "render", "show"]


@click.command()
@click.argument("ref")
@click.argument("text", nargs=-1)
@click.option("--role", type=click.Choice(["user", "assistant"]), default="user", show_default=True,
              help="Role of the message given as TEXT.")
@click.option("--id", "entry_id", metavar="ID", help="Entry id for the message (default: generated).")
@click.option("--meta", metavar="JSON", help="Metadata for the entry, a JSON object.")
@click.pass_obj
def append(state: Context, ref: str, text: tuple[str, ...], role: str, entry_id: str | None,
           meta: str | None) -> None:
    """Append a message to REF and commit it (REF is created if new).

    The message is TEXT (words joined by spaces) with --role. Without TEXT, JSON is read from stdin: a
    message {"role", "content"}, an entry {"id"?, "message", "meta"?}, a list of those (one revision),
    or JSON Lines. Messages are checked as the Messages API would: roles user and assistant, known
    content block types, each tool_result answering a tool_use of the assistant message before it.
    When another writer moved REF meanwhile, the append is rebased onto it and retried.
    Prints {ref, revision, entryIds, size}.
    """
    # The interchange layer (its package loads every importer) only where a message is appended.
    from ..interop.formats import parse_messages
    from ..interop.messages import check_messages

    if text:
        entries: list[Any] = [{"role": role, "content": " ".join(text)}]
    else:
        if sys.stdin.isatty():
            fail("give the message as TEXT, or pipe JSON on stdin", EXIT_USAGE)
        piped = sys.stdin.read()
        if not piped.strip():
            fail("no input: pipe a JSON message, a list of messages, or JSON Lines on stdin", EXIT_USAGE)
        with reporting():
            entries = parse_messages(piped)
    if entry_id is not None or meta is not None:
        if len(entries) != 1:
            fail("--id and --meta apply to a single message; put ids in the JSON for several", EXIT_USAGE)
        entries = [_entry_form(entries[0], entry_id, meta)]
    repo = state.repo()
    with reporting():
        check_messages(entries, before=_tail_for(repo, ref, entries))
        moved = repo.append(ref, entries, message="append (cli)")
        added = load_revision(repo, moved.new)
    op = added.operation or {}
    emit({"ref": moved.ref, "revision": moved.new, "entryIds": list(op.get("entryIds", [])), "size": added.size})


def _tail_for(repo: Repository, ref: str, entries: list[Any]) -> list[dict[str, Any]]:
    """The view's messages that tool results among `entries` may answer (read only when there are some)."""
    if "tool_result" not in json.dumps(entries, default=str) or repo.head(ref) is None:
        return []
    return repo.history(ref).render()


def _entry_form(message: Mapping[str, Any], entry_id: str | None, meta: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = dict(message) if "message" in message else {"message": dict(message)}
    if entry_id is not None:
        entry["id"] = entry_id
    if meta is not None:
        try:
            parsed = json.loads(meta)
        except json.JSONDecodeError as error:
            fail(f"--meta is not JSON ({error.msg}); give an object such as '{{\"source\": \"cli\"}}'",
                 EXIT_USAGE)
        if not isinstance(parsed, dict):
            fail("--meta must be a JSON object", EXIT_USAGE)
        entry["meta"] = parsed
    return entry


@click.command()
@click.argument("specs", nargs=-1, metavar="[REF|REVISION]...")
@click.option("--graph", is_flag=True, help="Draw the revisions with the forks between refs (text).")
@click.option("--oneline", is_flag=True, help="One text line per revision instead of JSON.")
@click.option("-n", "--max-count", type=click.IntRange(min=1), help="Show at most this many revisions.")
@click.option("-p", "--patch", "patch", is_flag=True,
              help="With each revision, the messages it added (text with --graph/--oneline or on a terminal; "
                   "JSON: an 'added' list of entries).")
@click.pass_obj
def log(state: Context, specs: tuple[str, ...], graph: bool, oneline: bool, max_count: int | None,
        patch: bool) -> None:
    """List revisions newest first, from the given refs or revisions (default: every head).

    JSON by default: a list of {id, parent, createdAt, date, operation, size, refs}; createdAt (ms) and
    date (UTC) say when the revision was made, which for an imported transcript is when the conversation
    happened. --graph draws how the refs forked from one another; --oneline prints one line per revision.
    """
    repo = state.repo()
    with reporting():
        all_refs = repo.refs()
        if specs:
            heads = {spec: resolve_revision(repo, spec) for spec in specs}
        else:
            heads = {name: rev for name, rev in all_refs.items() if name.startswith("refs/heads/")}
        wanted = set(heads.values())
        # Label every ref that points into what is shown, so forks say where they come from.
        labels = {_short_name(n): r for n, r in all_refs.items() if r in wanted}
        labels.update({_short_name(match_ref(repo, s) or s): r for s, r in heads.items()})
        revisions = collect(labels, lambda rid: load_revision(repo, rid), max_count)
        if patch and (graph or oneline or stdout_is_terminal()):
            from ._pretty import console, print_entries

            out = console()
            for rev, line in zip(revisions, draw(revisions, graph=graph), strict=True):
                out.print(line, highlight=False, markup=False, soft_wrap=True)
                print_entries(added_entries(repo, rev), out=out)
            return
        if patch:
            emit([{**r.to_dict(), "added": [e.to_dict() for e in added_entries(repo, r)]} for r in revisions])
            return
    if graph or oneline:
        for line in draw(revisions, graph=graph):
            click.echo(line)
    else:
        emit([r.to_dict() for r in revisions])


def added_entries(repo: Repository, rev: LogRevision) -> list[MessageHistoryEntry]:
    """The entries a revision brought into its view (an append's entries; for any other operation, what
    its view holds that its parent's did not)."""
    op = rev.operation or {}
    history = repo.history(rev.id)
    if op.get("type") == "append":
        return history.refs(list(op.get("entryIds", [])))
    if rev.parent is None:
        return history.refs()
    return history.refs(list(repo.diff(rev.parent, rev.id).added))


def _short_name(name: str) -> str:
    for prefix in ("refs/heads/", "refs/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@click.command()
@click.argument("spec", metavar="REVISION|ENTRY|OBJECT")
@click.option("--ref", "in_ref", metavar="REF", help="Look the entry id up in this ref only.")
@click.option("--json", "as_json", is_flag=True, help="JSON even on a terminal.")
@click.option("--pretty", is_flag=True, help="Readable text even when stdout is not a terminal.")
@click.pass_obj
def show(state: Context, spec: str, in_ref: str | None, as_json: bool, pretty: bool) -> None:
    """Show a revision (ref name, id, prefix or REF~N) with the messages it added, an entry (entry id) or
    any object (id).

    On a terminal: the revision's date, operation and refs, then its messages as `render` draws them.
    Otherwise JSON: {type, id, parent, createdAt, operation, size, refs, entryIds, added}.
    """
    repo = state.repo()
    readable = want_pretty(as_json, pretty)
    with reporting():
        if in_ref is None:
            try:
                rid = resolve_revision(repo, spec)
            except UnknownRevision:
                rid = None
            if rid is not None:
                _show_revision(repo, rid, readable)
                return
            found = object_ids_with_prefix(repo, spec) if _looks_hex(spec) else []
            if len(found) > 1:
                fail(f"object prefix {spec} is ambiguous ({len(found)} objects); give more digits",
                     EXIT_USAGE)
            if found:
                emit(_object_view(repo, found[0]))
                return
        entry = _find_entry(repo, spec, in_ref)
    if entry is None:
        fail(f"no revision, entry or object named {shown(spec)}; list revisions with `ctxstore log` "
             "and entries with `ctxstore render --entries REF`", EXIT_NOT_FOUND)
    ref, found_entry = entry
    if readable:
        from ._pretty import print_entries

        print_entries([found_entry], title=f"entry {found_entry.id} in {ref}")
    else:
        emit({"type": "entry", "ref": ref, **found_entry.to_dict()})


def _show_revision(repo: Repository, rid: str, readable: bool) -> None:
    view = _revision_view(repo, rid)
    rev = load_revision(repo, rid)
    added = added_entries(repo, rev)
    if not readable:
        emit({**view, "added": [e.to_dict() for e in added]})
        return
    from ._pretty import console, fmt_time, print_entries

    out = console()
    refs = f" ({', '.join(view['refs'])})" if view["refs"] else ""
    out.print(f"revision {rid}{refs}", style="bold yellow", highlight=False, markup=False)
    out.print(f"Date:      {fmt_time(rev.created_at)} UTC", highlight=False, markup=False)
    out.print(f"Operation: {operation_summary(rev.operation)}", highlight=False, markup=False)
    out.print(f"Parent:    {rev.parent or '(root)'}", highlight=False, markup=False)
    out.print(f"View:      {rev.size} entries; this revision added {len(added)}", highlight=False, markup=False)
    out.print()
    print_entries(added, out=out)


def _looks_hex(spec: str) -> bool:
    return 4 <= len(spec) <= 64 and all(c in "0123456789abcdef" for c in spec.lower())


def _revision_view(repo: Repository, rid: str) -> dict[str, Any]:
    rev = load_revision(repo, rid)
    return {"type": "revision", "id": rid, "parent": rev.parent, "createdAt": rev.created_at,
            "operation": rev.operation, "size": rev.size,
            "refs": sorted(n for n, r in repo.refs().items() if r == rid),
            "entryIds": [e.id for e in repo.history(rid).refs()]}


def _object_view(repo: Repository, hex_id: str) -> dict[str, Any]:
    obj = parse_object(repo.store.get(from_hex(hex_id)), trusted=True)
    if isinstance(obj, Revision):
        return _revision_view(repo, hex_id)
    value = obj.to_value()
    if isinstance(obj, Entry):
        return {"type": "entry", "oid": hex_id, **{k: v for k, v in value.items() if k != "type"}}
    return {"oid": hex_id, **value}


def _find_entry(repo: Repository, entry_id: str, in_ref: str | None) -> tuple[str, MessageHistoryEntry] | None:
    names = [repo.ref_name(in_ref)] if in_ref is not None else list(repo.refs())
    for name in names:
        for entry in repo.history(name).refs([entry_id]):
            return name, entry
    return None


@click.command()
@click.argument("spec", metavar="REF|REVISION")
@click.option("--restore", is_flag=True, help="Expand summaries back into the messages they replaced.")
@click.option("--entries", is_flag=True, help="Print entries {id, kind, message, meta?, sources?} instead.")
@click.option("--json", "as_json", is_flag=True, help="JSON even on a terminal.")
@click.option("--pretty", is_flag=True, help="Readable text even when stdout is not a terminal.")
@click.pass_obj
def render(state: Context, spec: str, restore: bool, entries: bool, as_json: bool, pretty: bool) -> None:
    """Print the view of REF (or a revision): readable on a terminal, else a JSON list of messages ready
    to send to a model.

    The readable form heads each message with its role and time, wraps text, folds each tool call and
    tool result to one line with the tool's name, shows images and long blocks as placeholders with
    their size, and marks a summary with how many entries it stands for.
    """
    repo = state.repo()
    with reporting():
        history = existing_history(repo, spec)
        if want_pretty(as_json, pretty):
            from ..interop.browse import title_of
            from ._pretty import print_entries

            view = history.refs()
            shown = [MessageHistoryEntry(id="", message=m) for m in history.restore()] if restore else view
            title = title_of(view, history.refs)
            print_entries(shown, title=f"{spec}" + (f" — {title}" if title else "") + f" ({len(shown)} messages)",
                          show_ids=not restore)
        elif entries:
            emit([e.to_dict() for e in history.refs()])
        elif restore:
            emit(history.restore())
        else:
            emit(history.render())


@click.command()
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.pass_obj
def diff(state: Context, a: str, b: str) -> None:
    """Compare the views of A and B (refs or revisions): entry ids added, removed and moved.

    Prints {a, b, added, removed, moved}: a and b are the revision ids compared; added are entries of B
    not in A, removed those of A not in B, moved those of both whose order changed (in B's order).
    """
    repo = state.repo()
    with reporting():
        emit(repo.diff(a, b))
