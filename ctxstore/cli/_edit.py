"""The edit command: patches (remove, replace, insert, move, split, summary) applied to a ref as one revision.

`MessageHistory.edit` skips a patch whose target entry is absent, as the seed does; that stays for the
library. Here the skipped ids are reported: a patch that names an entry the view lacks is told on stderr,
and an edit that changes nothing at all commits nothing and exits 3 (not found) when it named absent
entries, so a script sees its typo instead of a silent success.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from ..errors import InvalidInput
from ..history.entry import MessageHistoryEntry
from ..history.intake import check_patch
from ..history.patches import TARGETED, apply_patch
from ..ids import ObjectId
from ..interop.messages import check_message, check_messages, message_of
from ..interop.source import json_lines, parse_json
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, Context, emit, fail, reporting
from ._resolve import match_ref

__all__ = ["edit"]



def parse_patches(text: str) -> list[dict[str, Any]]:
    """The patches of the edit's input: one patch object, a JSON list of them, or JSON Lines of them."""
    if not text.strip():
        raise InvalidInput("no patches: give a patch such as {\"op\": \"remove\", \"id\": \"ENTRY\"}, a list of "
                           "them, or JSON Lines")
    first, _, rest = text.strip().partition("\n")
    value: Any
    if rest.strip() and text.lstrip().startswith("{"):
        try:
            json.loads(first)
        except json.JSONDecodeError:
            value = parse_json(text, "the patch input")  # one object spread over several lines
        else:
            value = json_lines(text)
    else:
        value = parse_json(text, "the patch input")
    listed = [value] if isinstance(value, dict) else value
    if not isinstance(listed, list):
        raise InvalidInput("the patch input must be a patch object, a list of patches, or JSON Lines of patches")
    for number, patch in enumerate(listed, 1):
        try:
            check_patch(patch)
        except InvalidInput as exc:
            raise InvalidInput(f"patch {number}: {exc}") from None
        for k, item in enumerate(_inputs(patch), 1):
            check_message(message_of(item), f"patch {number}, entry {k}")
    return listed


def _inputs(patch: Mapping[str, Any]) -> list[Any]:
    """The entry inputs a patch brings (what becomes new entries)."""
    if patch["op"] in TARGETED:
        return list(patch["entries"])
    if patch["op"] == "summary":
        return [patch["entry"]]
    return []


def _named(patch: Mapping[str, Any]) -> list[str]:
    """The existing entries a patch names."""
    op = patch["op"]
    if op == "move":
        return [*patch["ids"], *(patch[a] for a in ("before", "after") if patch.get(a))]
    if op == "summary":
        return list(patch["sourceIds"])
    return [patch["id"]]


def absent_entries(view_ids: Sequence[str], patches: Sequence[Mapping[str, Any]]) -> list[tuple[int, list[str]]]:
    """For each patch (numbered from 1) that names entries the view lacks when it applies, those ids.

    The ids are followed through the patches with the library's own `apply_patch`, so an entry an
    earlier patch removed (or brought in with an explicit id) counts as the later patches see it.
    """
    items: list[tuple[str, ObjectId | None]] = [(i, None) for i in view_ids]
    names: dict[ObjectId, str] = {}
    out: list[tuple[int, list[str]]] = []
    for number, patch in enumerate(patches, 1):
        present = {i for i, _ in items}
        missing = [i for i in _named(patch) if i not in present]
        if missing:
            out.append((number, missing))
        tokens = []
        for k, item in enumerate(_inputs(patch)):
            token = ObjectId(f"{number}:{k}".encode())
            given = item.get("id") if isinstance(item, Mapping) and "message" in item else None
            names[token] = given if isinstance(given, str) else f"\0new {number}:{k}"
            tokens.append(token)
        stored = dict(patch)
        if patch["op"] in TARGETED:
            stored["entries"] = tokens
        elif patch["op"] == "summary":
            stored["entry"] = tokens[0]
        items = apply_patch(items, stored, names.__getitem__)
    return out


def _key(entry: MessageHistoryEntry) -> str:
    return json.dumps(entry.to_dict(), sort_keys=True, ensure_ascii=False)


def _changes(before: list[MessageHistoryEntry], after: list[MessageHistoryEntry]) -> dict[str, Any]:
    old, new = {_key(e) for e in before}, {_key(e) for e in after}
    common = [e.id for e in before if _key(e) in new]
    kept = set(common)
    return {"added": [e.to_dict() for e in after if _key(e) not in old],
            "removed": [e.id for e in before if _key(e) not in new],
            "moved": common != [e.id for e in after if e.id in kept]}


def _valid(messages: list[dict[str, Any]]) -> str | None:
    try:
        check_messages(messages)
    except InvalidInput as exc:
        return str(exc)
    return None


def _absent_text(absent: list[tuple[int, list[str]]], ref: str) -> str:
    ids = list(dict.fromkeys(i for _, missing in absent for i in missing))
    shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"entr{'y' if len(ids) == 1 else 'ies'} {shown} {'is' if len(ids) == 1 else 'are'} not in {ref}"


def _short(name: str) -> str:
    return name.removeprefix("refs/heads/")


@click.command()
@click.argument("ref")
@click.option("-f", "--file", "path", metavar="FILE", type=click.Path(dir_okay=False),
              help="Read the patches from FILE instead of stdin (- is stdin).")
@click.option("-n", "--dry-run", is_flag=True, help="Show what the edit would change; commit nothing.")
@click.option("-m", "--message", "note", metavar="TEXT", default="edit (cli)", show_default=True,
              help="The reflog message of the commit.")
@click.pass_obj
def edit(state: Context, ref: str, path: str | None, dry_run: bool, note: str) -> None:
    """Apply patches to the view of REF (a branch) and commit them as one revision.

    Patches are JSON on stdin or in --file: one patch, a list of them (applied in order), or JSON Lines.
    Entries are named by id (see `ctxstore render --entries REF`):

    \b
      {"op": "remove", "id": ID}
      {"op": "replace" | "split" | "insertBefore" | "insertAfter", "id": ID, "entries": [MESSAGE|ENTRY...]}
      {"op": "move", "ids": [ID...], "before"?: ID, "after"?: ID}
      {"op": "summary", "sourceIds": [ID...], "replace"?: true, "entry": MESSAGE|ENTRY}

    New messages are checked as the Messages API would check them, and so is the view the edit leaves
    (a tool_result must still answer a tool_use of the assistant message before it); when REF's view
    was not valid before the edit, only the new messages are checked. A patch naming an entry REF's
    view lacks is skipped, as the library skips it, and said on stderr. When the edit changes nothing,
    nothing is committed: if it named absent entries it fails with exit 3 ("nothing changed: entry ID
    is not in REF"), otherwise it says so and exits 0. If REF moved meanwhile the commit is refused
    (exit 4): look at the new view and edit again.

    Prints {ref, old, revision, size, added (entries), removed (ids), moved, skipped}; with --dry-run
    the same without committing (revision is then REF's current head).
    """
    if path is not None and path != "-":
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except FileNotFoundError:
            fail(f"no such file: {path}", EXIT_NOT_FOUND)
        except (OSError, UnicodeDecodeError) as error:
            fail(f"cannot read {path}: {getattr(error, 'strerror', None) or error}", EXIT_USAGE)
    else:
        if sys.stdin.isatty():
            fail("pipe the patches as JSON on stdin, or give --file", EXIT_USAGE)
        text = sys.stdin.read()
    with reporting():
        patches = parse_patches(text)
    repo = state.repo()
    with reporting():
        name = match_ref(repo, ref)
        if name is None:
            repo.resolve(ref)  # an unknown name exits 3; a revision that resolves is refused below
            fail(f"{ref} is a revision, not a branch; edit moves a branch: fork it first "
                 f"(`ctxstore fork {ref} NEW`) and edit NEW", EXIT_USAGE)
        history = repo.history(name)
        before = history.refs()
        absent = absent_entries([e.id for e in before], patches)
        edited = history.edit(patches)
        after = edited.refs()
        changes = _changes(before, after)
        short = _short(name)
        if [_key(e) for e in before] == [_key(e) for e in after]:
            if absent:
                fail(f"nothing changed: {_absent_text(absent, short)}; list its entries with "
                     f"`ctxstore render --entries {short}`", EXIT_NOT_FOUND)
            state.tell(f"nothing changed: the patches leave {short} as it is; nothing committed")
            emit({"ref": name, "old": history.revision_id, "revision": history.revision_id, "size": len(after),
                  **changes, "skipped": []})
            return
        problem = _valid([e.message for e in after])
        if problem is not None:
            if _valid([e.message for e in before]) is None:
                raise InvalidInput(f"the edit would leave {short} invalid for the Messages API: {problem}; "
                                   "change the patches (remove a tool_use together with its tool_result)")
            state.tell(f"warning: {short} is not valid for the Messages API ({problem}); only the new messages "
                       "were checked")
        for number, missing in absent:
            partly = patches[number - 1]["op"] in ("move", "summary")
            state.tell(f"patch {number}: {_absent_text([(number, missing)], short)}; "
                       + ("the patch applied without them" if partly else "skipped"))
        skipped = [{"patch": number, "absent": missing} for number, missing in absent]
        if dry_run:
            state.tell(f"dry run: would remove {len(changes['removed'])} and add {len(changes['added'])} "
                       f"entr{'y' if len(changes['added']) == 1 else 'ies'}; nothing committed")
            emit({"ref": name, "old": history.revision_id, "revision": history.revision_id, "size": len(after),
                  **changes, "skipped": skipped, "dryRun": True})
            return
        moved = repo.commit(name, edited, message=note)
    emit({"ref": moved.ref, "old": moved.old, "revision": moved.new, "size": len(after), **changes,
          "skipped": skipped})
