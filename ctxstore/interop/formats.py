"""Import and export of message lists (JSON, JSON Lines) and snapshots, and `import_file` for any format.

`detect_format` is the one routine that tells a file's format from its content; `import_file` reads a
file of any format (Claude Code transcripts through `claude_code`). Every import builds the new
revisions in memory and lands them in one commit, so a file that turns out to be bad part-way leaves
the repository exactly as it was.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import IO, Any, Final

from ..errors import CtxStoreError, InvalidInput, shown
from ..history.entry import MessageHistoryEntry
from ..history.message_history import MessageHistory
from ..repo.repository import Repository
from .claude_code import import_claude_code, is_transcript_record, parse_claude_code
from .claude_export import claude_records, session_id_for
from .landing import ImportProgress, ImportResult, land
from .messages import check_messages, message_of
from .projects import read_session, subagent_files
from .source import Source, json_lines, numbered_json_lines, parse_json, read_text, source_name

__all__ = [
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "detect_format",
    "export_ref",
    "import_file",
    "import_messages",
    "import_snapshot",
    "parse_messages",
    "write_export",
]

IMPORT_FORMATS: Final = ("json", "jsonl", "snapshot", "claude")
"""What an import reads: a JSON list of messages, JSON Lines of messages, a snapshot, a Claude Code transcript."""
EXPORT_FORMATS: Final = ("json", "jsonl", "snapshot", "claude")
"""What an export writes: a JSON list, JSON Lines, a snapshot of the whole lineage, or a Claude Code transcript."""
_BATCH = 1000
"""Messages per revision when importing a list: bounds the size of one revision's operation."""


# -- telling formats apart ---------------------------------------------------------------------------

def _is_snapshot(value: Any) -> bool:
    return isinstance(value, Mapping) and {"entries", "revisions", "head"} <= set(value)


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list) or (isinstance(value, Mapping) and isinstance(value.get("messages"), list))


def detect_format(text: str) -> str:
    """The import format of a file's content: "json", "jsonl", "snapshot" or "claude" (`IMPORT_FORMATS`).

    A JSON document over several lines is a snapshot or a message list; JSON Lines are a Claude Code
    transcript when the first record is one only Claude Code writes (a message record with a `uuid`, or
    the `summary` title that may open the file), else messages.
    """
    stripped = text.lstrip()
    if not stripped:
        raise InvalidInput("the file is empty; nothing to import")
    if stripped.startswith("["):
        return "json"
    if not stripped.startswith("{"):
        raise InvalidInput("the file is not JSON, JSON Lines, a snapshot or a Claude Code transcript; "
                           f"give its format ({', '.join(IMPORT_FORMATS)})")
    first, _, rest = stripped.partition("\n")
    try:
        value = json.loads(first)
    except (ValueError, RecursionError):
        # The first line is not a value of its own: one JSON document spread over several lines.
        whole = parse_json(stripped, "the file")
        return "snapshot" if _is_snapshot(whole) else "json"
    if is_transcript_record(value):
        return "claude"
    if not rest.strip():
        if _is_snapshot(value):
            return "snapshot"
        if _is_message_list(value):
            return "json"
    return "jsonl"


# -- import ------------------------------------------------------------------------------------------

def parse_messages(text: str) -> list[Any]:
    """Messages (or entry inputs with 'message') from JSON text: one object, a list of them, or JSON Lines."""
    stripped = text.strip()
    if not stripped:
        raise InvalidInput("there are no messages: give a JSON message, a list of messages, or JSON Lines")
    try:
        value = json.loads(stripped)
    except (ValueError, RecursionError):
        items = json_lines(stripped)
    else:
        items = value if isinstance(value, list) else [value]
    _check_objects(items)
    return items


def _check_objects(items: Sequence[Any]) -> None:
    for number, item in enumerate(items, 1):
        if not isinstance(item, Mapping):
            raise InvalidInput(f"message {number} is not a JSON object but {json.dumps(item)[:40]}; "
                               'give e.g. {"role": "user", "content": "hi"}')


def _message_list(value: Any) -> list[Any]:
    if isinstance(value, Mapping) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if not isinstance(value, list):
        raise InvalidInput("a JSON import is a list of messages (or of entries with 'message'), "
                           'or {"messages": [...]}')
    return value


def import_file(repo: Repository, source: Source, ref: str | None = None, *, format: str | None = None,
                force: bool = False, strict: bool = False, progress: ImportProgress | None = None) -> ImportResult:
    """Import a file (a path or a text stream) of any of `IMPORT_FORMATS` into `ref`.

    The format is detected from the content unless given. A Claude Code transcript names its own ref
    when `ref` is None (``claude/<session>``); other formats need one. `force` moves a ref that the
    import does not descend from (a snapshot of another lineage, a transcript that does not continue
    what the ref holds). A transcript's malformed lines are skipped and listed unless `strict`.
    `progress(done, total)` follows the messages or transcript steps as they are built into histories.
    """
    if format is not None and format not in IMPORT_FORMATS:
        raise InvalidInput(f"unknown import format {shown(format)}; use one of {', '.join(IMPORT_FORMATS)}")
    text = read_text(source)
    fmt = format or detect_format(text)
    message = f"import {fmt} from {source_name(source)}"
    if fmt == "claude":
        if isinstance(source, str | os.PathLike) and subagent_files(source):
            # Claude Code keeps this session's subagents in files of their own beside it: merge them in.
            transcript, _ = read_session(source, strict=strict, text=text)
        else:
            numbered, bad = numbered_json_lines(text)
            transcript = parse_claude_code(numbered, skipped=bad)
        return import_claude_code(repo, transcript, ref, force=force, strict=strict, message=message,
                                  progress=progress)
    if ref is None:
        raise InvalidInput(f"name the ref to import {source_name(source)} into (for example main); "
                           "only a Claude Code transcript names its own")
    if fmt == "snapshot":
        return import_snapshot(repo, ref, parse_json(text, "the snapshot"), force=force, message=message)
    messages = _message_list(parse_json(text, "the file")) if fmt == "json" else json_lines(text)
    return replace(import_messages(repo, ref, messages, force=force, message=message, progress=progress),
                   format=fmt)


def import_messages(repo: Repository, ref: str, messages: Sequence[Any], *, force: bool = False,
                    batch: int = _BATCH, message: str = "", progress: ImportProgress | None = None) -> ImportResult:
    """Append messages (or entry inputs with 'message') to a ref, `batch` per revision, in one commit.

    The messages are checked as the Messages API would (`messages.check_messages`) against the view
    they follow. What the ref's view already ends with is not appended again: an entry whose id the
    view holds, and the longest run of leading messages equal to the view's last ones, so importing
    the same list twice (or a list that grew since) adds only what is new. A ref that another writer
    moved meanwhile is rebased onto, as appending does.
    """
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidInput("messages must be a list")
    if not messages:
        raise InvalidInput("there are no messages to import")
    _check_objects(messages)
    history = repo.history(ref)
    view = history.refs() if history.size else []
    tail = view[-len(messages):]
    fresh = _not_in_view(messages, tail, view)
    check_messages(fresh, before=[e.message for e in tail])
    if not fresh:
        return land(repo, {ref: history}, format="json", entries=len(messages), message=message)
    for start in range(0, len(fresh), batch):
        try:
            history = history.extend(fresh[start:start + batch])
        except CtxStoreError as exc:
            raise InvalidInput(f"message {start + 1}..{min(start + batch, len(fresh))}: {exc}") from None
        if progress is not None:
            progress(min(start + batch, len(fresh)), len(fresh))
    return land(repo, {ref: history}, format="json", entries=len(messages), force=force, rebase=True,
                message=message or "import messages")


def _same(item: Any, entry: MessageHistoryEntry) -> bool:
    if isinstance(item, Mapping) and "message" in item and "role" not in item and item.get("id") is not None:
        return bool(item["id"] == entry.id)
    try:
        return bool(json.loads(json.dumps(message_of(item))) == entry.message)
    except (TypeError, ValueError, RecursionError):
        return False


def _not_in_view(messages: Sequence[Any], tail: Sequence[MessageHistoryEntry],
                 view: Sequence[MessageHistoryEntry]) -> list[Any]:
    """`messages` less those the view (whose last entries are `tail`) already ends with, and less entries
    whose ids it holds."""
    overlap = 0
    for k in range(min(len(messages), len(tail)), 0, -1):
        if all(_same(m, e) for m, e in zip(messages[:k], tail[-k:], strict=True)):
            overlap = k
            break
    rest = list(messages[overlap:])
    ids = [m["id"] for m in rest if isinstance(m, Mapping) and isinstance(m.get("id"), str) and "message" in m]
    if not ids:
        return rest
    held = {e.id for e in view} & set(ids)
    return [m for m in rest if not (isinstance(m, Mapping) and m.get("id") in held and "message" in m)]


def import_snapshot(repo: Repository, ref: str, snapshot: Any, *, force: bool = False,
                    message: str = "") -> ImportResult:
    """Store a snapshot (``{entries, revisions, head}``: ours or the TypeScript library's) at `ref`.

    Snapshot revision ids are the writer's; they are re-hashed here, so a snapshot from elsewhere gets
    new ids for the same graph (one of ours keeps its ids). An existing ref moves only if the snapshot
    descends from it, or with `force`.
    """
    if not isinstance(snapshot, Mapping) or not _is_snapshot(snapshot):
        raise InvalidInput("a snapshot is a JSON object with entries, revisions and head")
    entries, revisions = snapshot["entries"], snapshot["revisions"]
    if not isinstance(entries, list) or not isinstance(revisions, list):
        raise InvalidInput("a snapshot's entries and revisions are lists")
    try:
        history = MessageHistory.from_snapshot(snapshot)
    except CtxStoreError as exc:
        raise InvalidInput(f"the snapshot is not a valid history: {exc}") from None
    return land(repo, {ref: history}, format="snapshot", entries=len(entries), force=force,
                message=message or "import snapshot")


# -- export ------------------------------------------------------------------------------------------

def _export_lines(history: MessageHistory, fmt: str, with_ids: bool) -> Iterator[str]:
    if fmt == "snapshot":
        yield json.dumps(history.to_snapshot(), ensure_ascii=False)
        yield "\n"
        return
    items: list[Any] = [e.to_dict() for e in history.refs()] if with_ids else history.render()
    if fmt == "json":
        yield json.dumps(items, ensure_ascii=False, indent=2)
        yield "\n"
        return
    for item in items:
        yield json.dumps(item, ensure_ascii=False, separators=(",", ":"))
        yield "\n"


def write_export(repo: Repository, ref: str, out: IO[str], *, format: str = "json",
                 with_ids: bool = False, session: str | None = None) -> None:
    """Write the view of a ref (or revision) to a text stream in one of `EXPORT_FORMATS`.

    JSON and JSONL hold plain messages, ready for a model; with `with_ids`, entries (id, kind, message,
    meta, sources), which import reads back with their ids. A snapshot holds the whole lineage. A
    Claude Code transcript ("claude") holds the view as records Claude Code resumes, with `session` as
    its session id (default: one named by the revision, `claude_export.session_id_for`).
    """
    if format not in EXPORT_FORMATS:
        raise InvalidInput(f"unknown export format {shown(format)}; use one of {', '.join(EXPORT_FORMATS)}")
    revision = repo.resolve(ref)  # an unknown ref is an error, not an empty export
    history = repo.history(revision)
    if format == "claude":
        created = next(iter(repo.iter_revisions(revision, limit=1))).created_at
        for record in claude_records(history, session=session or session_id_for(revision), created_at=created):
            out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
            out.write("\n")
        return
    for chunk in _export_lines(history, format, with_ids):
        out.write(chunk)


def export_ref(repo: Repository, ref: str, *, format: str = "json", with_ids: bool = False,
               session: str | None = None) -> str:
    """`write_export` into a string."""
    buf = io.StringIO()
    write_export(repo, ref, buf, format=format, with_ids=with_ids, session=session)
    return buf.getvalue()
