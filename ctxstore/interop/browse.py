"""Finding conversations in a repository: a listing of them (`conversations`) and a search (`grep`).

Both read each conversation's view once. A search looks at what a person remembers of a conversation:
the text of its messages (text, thinking and tool result blocks), the names of the tools it called, and
its entries' metadata (a Claude Code session's cwd, branch, title, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..history.entry import MessageHistoryEntry
from ..history.message_history import MessageHistory
from ..repo.repository import Repository
from ..report import json_fields

__all__ = ["Conversation", "GrepMatch", "conversations", "entry_fields", "grep", "session_title", "title_of"]

_SNIPPET = 40
"""Characters of context either side of a match in a snippet."""


@dataclass(frozen=True)
class Conversation:
    """One ref as `ctxstore ls` lists it: its title, messages in view, last update (ms) and bytes of messages."""

    ref: str
    revision: str
    title: str
    messages: int
    updated: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return json_fields(self)


@dataclass(frozen=True)
class GrepMatch:
    """A match: the ref and entry it is in, where in the entry (text, tool or meta), and a snippet around it."""

    ref: str
    entry_id: str
    field: str
    snippet: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return json_fields(self)


def _flat(text: str) -> str:
    return " ".join(text.split())


def _kept_title(entry: MessageHistoryEntry) -> str | None:
    meta = entry.meta or {}
    info = meta.get("claudeCode")
    title = info.get("title") if isinstance(info, Mapping) else meta.get("title")
    return title if isinstance(title, str) and title else None


def _opening(entries: Sequence[MessageHistoryEntry], lookup: Any) -> Iterator[MessageHistoryEntry]:
    """The first entry, then (while it is a summary) the first of its sources, through a chain of compactions."""
    first = entries[0] if entries else None
    seen: set[str] = set()
    while first is not None and first.id not in seen:
        seen.add(first.id)
        yield first
        if first.kind != "summary" or not first.sources or lookup is None:
            return
        found = lookup(first.sources[:1])
        first = found[0] if found else None


def session_title(entries: Sequence[MessageHistoryEntry], lookup: Any = None) -> str | None:
    """The title a conversation keeps in its opening entry's metadata (a Claude Code session's), or None.

    `lookup(ids)` (a history's `refs`) looks through summaries that open the view to what they replaced.
    """
    return next((t for t in map(_kept_title, _opening(entries, lookup)) if t is not None), None)


def title_of(entries: Sequence[MessageHistoryEntry], lookup: Any = None) -> str:
    """A conversation's title for a listing: `session_title`, else the first words of its first message."""
    title = session_title(entries, lookup)
    if title is not None:
        return _clip(_flat(title), 60)
    opening = list(_opening(entries, lookup))
    if not opening:
        return ""
    return _clip(_flat(" ".join(text for kind, text in entry_fields(opening[-1]) if kind == "text")), 60)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _result_text(content: Any) -> Iterator[str]:
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for block in content:
            if isinstance(block, Mapping) and isinstance(block.get("text"), str):
                yield block["text"]


def entry_fields(entry: MessageHistoryEntry) -> Iterator[tuple[str, str]]:
    """What a search looks at in an entry, as (field, text): "text", "tool" (a tool's name) and "meta"."""
    content = entry.message.get("content")
    if isinstance(content, str):
        yield "text", content
    elif isinstance(content, list):
        for block in content:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                yield "text", block["text"]
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                yield "text", block["thinking"]
            elif kind == "tool_result":
                for text in _result_text(block.get("content")):
                    yield "text", text
            elif kind in ("tool_use", "server_tool_use", "mcp_tool_use") and isinstance(block.get("name"), str):
                yield "tool", block["name"]
    if entry.meta:
        yield "meta", json.dumps(entry.meta, ensure_ascii=False, sort_keys=True)


def _snippet(text: str, match: re.Match[str]) -> str:
    start, end = max(0, match.start() - _SNIPPET), min(len(text), match.end() + _SNIPPET)
    return ("…" if start else "") + _flat(text[start:end]) + ("…" if end < len(text) else "")


def _refs(repo: Repository, specs: Sequence[str]) -> list[tuple[str, str]]:
    if specs:
        return [(spec, repo.resolve(spec)) for spec in specs]
    return [(name, rev) for name, rev in sorted(repo.refs().items()) if not name.startswith("refs/remotes/")]


def _view(repo: Repository, revision: str) -> MessageHistory:
    # The id is resolved already: open it directly rather than through the revision syntax again.
    return MessageHistory(source=repo.store, head=revision)


def grep(repo: Repository, pattern: str, specs: Sequence[str] = (), *, ignore_case: bool = False,
         fixed: bool = False, fields: Sequence[str] = ("text", "tool", "meta")) -> Iterator[GrepMatch]:
    """Matches of a regular expression (or, `fixed`, a plain string) in the conversations `specs` name
    (default: every head and tag), one per entry and field, in view order."""
    try:
        regex = re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
    except re.error as exc:
        raise InvalidInput(f"the pattern {pattern!r} is not a regular expression ({exc}); "
                           "pass -F to search for it as plain text") from None
    wanted = set(fields)
    for name, revision in _refs(repo, specs):
        for entry in _view(repo, revision).refs():
            done: set[str] = set()
            for field, text in entry_fields(entry):
                if field in wanted and field not in done:
                    hit = regex.search(text)
                    if hit is not None:
                        done.add(field)
                        yield GrepMatch(name, entry.id, field, _snippet(text, hit))


def conversations(repo: Repository, specs: Sequence[str] = ()) -> list[Conversation]:
    """Every head and tag (or the refs `specs` name) as `Conversation`s, in name order."""
    out = []
    for name, revision in _refs(repo, specs):
        history = _view(repo, revision)
        entries = history.refs()
        info = next(iter(repo.iter_revisions(revision, limit=1)))
        size = sum(len(json.dumps(e.message, ensure_ascii=False).encode("utf-8")) for e in entries)
        out.append(Conversation(name, revision, title_of(entries, history.refs), len(entries), info.created_at, size))
    return out
