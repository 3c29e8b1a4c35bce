"""Commands that write and read one conversation: append, log, show, render, diff."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

import click

from ..errors import UnknownRevision
from ..format.objects import Entry, Revision, parse_object
from ..ids import from_hex
from ..interop.formats import parse_messages
from ..repo.repository import Repository
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, Context, emit, fail, reporting
from ._graph import collect, draw
from ._resolve import existing_history, load_revision, match_ref, object_ids_with_prefix

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
    or JSON Lines. When another writer moved REF meanwhile, the append is rebased onto it and retried.
    Prints {ref, revision, entryIds, size}.
    """
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
        moved = repo.append(ref, entries, message="append (cli)")
        added = load_revision(repo, moved.new)
    op = added.operation or {}
    emit({"ref": moved.ref, "revision": moved.new, "entryIds": list(op.get("entryIds", [])), "size": added.size})


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
@click.pass_obj
def log(state: Context, specs: tuple[str, ...], graph: bool, oneline: bool, max_count: int | None) -> None:
    """List revisions newest first, from the given refs or revisions (default: every head).

    JSON by default: a list of {id, parent, createdAt, operation, size, refs}. --graph draws how the
    refs forked from one another; --oneline prints one line per revision.
    """
    repo = state.repo()
    with reporting():
        all_refs = repo.refs()
        if specs:
            heads = {spec: repo.resolve(spec) for spec in specs}
        else:
            heads = {name: rev for name, rev in all_refs.items() if name.startswith("refs/heads/")}
        wanted = set(heads.values())
        # Label every ref that points into what is shown, so forks say where they come from.
        labels = {_short_name(n): r for n, r in all_refs.items() if r in wanted}
        labels.update({_short_name(match_ref(repo, s) or s): r for s, r in heads.items()})
        revisions = collect(labels, lambda rid: load_revision(repo, rid), max_count)
    if graph or oneline:
        for line in draw(revisions, graph=graph):
            click.echo(line)
    else:
        emit([r.to_dict() for r in revisions])


def _short_name(name: str) -> str:
    for prefix in ("refs/heads/", "refs/"):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@click.command()
@click.argument("spec", metavar="REVISION|ENTRY|OBJECT")
@click.option("--ref", "in_ref", metavar="REF", help="Look the entry id up in this ref only.")
@click.pass_obj
def show(state: Context, spec: str, in_ref: str | None) -> None:
    """Show a revision (ref name, id, prefix or REF~N), an entry (entry id) or any object (id), as JSON."""
    repo = state.repo()
    with reporting():
        if in_ref is None:
            try:
                emit(_revision_view(repo, repo.resolve(spec)))
                return
            except UnknownRevision:
                pass
            found = object_ids_with_prefix(repo, spec) if _looks_hex(spec) else []
            if len(found) > 1:
                fail(f"object prefix {spec} is ambiguous ({len(found)} objects); give more digits",
                     EXIT_USAGE)
            if found:
                emit(_object_view(repo, found[0]))
                return
        entry = _find_entry(repo, spec, in_ref)
    if entry is None:
        fail(f"no revision, entry or object named {spec!r}; list revisions with `ctxstore log` "
             "and entries with `ctxstore render --entries REF`", EXIT_NOT_FOUND)
    emit(entry)


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


def _find_entry(repo: Repository, entry_id: str, in_ref: str | None) -> dict[str, Any] | None:
    names = [repo.ref_name(in_ref)] if in_ref is not None else list(repo.refs())
    for name in names:
        for entry in repo.history(name).refs([entry_id]):
            return {"type": "entry", "ref": name, **entry.to_dict()}
    return None


@click.command()
@click.argument("spec", metavar="REF|REVISION")
@click.option("--restore", is_flag=True, help="Expand summaries back into the messages they replaced.")
@click.option("--entries", is_flag=True, help="Print entries {id, kind, message, meta?, sources?} instead.")
@click.pass_obj
def render(state: Context, spec: str, restore: bool, entries: bool) -> None:
    """Print the view of REF (or a revision) as a JSON list of messages, ready to send to a model."""
    repo = state.repo()
    with reporting():
        history = existing_history(repo, spec)
        if entries:
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
