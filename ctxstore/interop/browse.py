"""Finding conversations in a repository: a listing of them (`conversations`) and a search (`grep`).

Both read each conversation's view once. A search looks at what a person remembers of a conversation:
the text of its messages (text, thinking and tool result blocks), the names of the tools it called, and
its entries' metadata (a Claude Code session's cwd, branch, title, ...).

A search reads the store directly rather than through histories: each view's entry objects are read in
batches (`get_many`), an entry object is looked at once however many views hold it (forks share most
of theirs), and when every match must contain some literal text, an entry whose stored bytes lack it is
skipped without being decoded (`prefilter`). So a search costs little more than reading the bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import InvalidInput, InvalidObject, shown
from ..format import seq
from ..format.objects import Blob, Entry, Revision, SeqNode, parse_object
from ..history.entry import MessageHistoryEntry, collector_paused, has_blobs
from ..history.intake import expand_message
from ..history.message_history import MessageHistory
from ..ids import ObjectId, from_hex, to_hex
from ..repo.repository import Repository
from ..report import json_fields
from ..store.base import ObjectStore
from .prefilter import Prefilter

__all__ = ["Conversation", "GrepMatch", "conversations", "entry_fields", "grep", "session_title", "title_of"]

_SNIPPET = 40
"""Characters of context either side of a match in a snippet."""
_BATCH = 1024
"""Entry objects a search reads per `get_many`."""
_VIEWS = 64
"""Views a search reads together: their revisions in one `get_many`, their entries in shared batches."""
_REMEMBERED = 200_000
"""Entry objects whose outcome a search keeps for the next views (forks share entries); then it starts over."""


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
        raise InvalidInput(f"the pattern {shown(pattern)} is not a regular expression ({exc}); "
                           "pass -F to search for it as plain text") from None
    search = _Search(repo.store, regex, frozenset(fields), Prefilter.of(pattern, fixed=fixed, ignore_case=ignore_case))
    refs = _refs(repo, specs)
    for start in range(0, len(refs), _VIEWS):
        group = refs[start:start + _VIEWS]
        for (name, _), found in zip(group, search.views([revision for _, revision in group]), strict=True):
            for entry_id, hits in found:
                for field, snippet in hits:
                    yield GrepMatch(name, entry_id, field, snippet)


Hits = tuple[tuple[str, str], ...]
"""An entry's matches as (field, snippet), one per field."""
_Object = TypeVar("_Object")


def _decoded(data: bytes, name: str, kind: type[_Object], what: str) -> _Object:
    """Stored bytes decoded as the `kind` of object they must be (`what`, for the error otherwise)."""
    obj = parse_object(data, trusted=True)
    if not isinstance(obj, kind):
        raise InvalidObject(f"object {name} is a {type(obj).__name__.lower()}, not {what}")
    return obj


class _Search:
    """One search over many views: each entry object read once, in batches, and decoded only when it may
    match."""

    def __init__(self, store: ObjectStore, regex: re.Pattern[str], wanted: frozenset[str],
                 prefilter: Prefilter | None) -> None:
        self._store, self._regex, self._wanted, self._prefilter = store, regex, wanted, prefilter
        self._hits: dict[ObjectId, Hits] = {}
        self._views: dict[str, list[tuple[str, Hits]]] = {}

    def views(self, revisions: list[str]) -> list[list[tuple[str, Hits]]]:
        """For each revision, the entries of its view that match, with their hits, in view order."""
        unknown = list(dict.fromkeys(r for r in revisions if r not in self._views))
        spines: dict[str, seq.Spine] = {}
        for revision, data in zip(unknown, self._store.get_many([from_hex(r) for r in unknown]), strict=True):
            spines[revision] = _decoded(data, revision, Revision, "a revision").seq
        # The views' top nodes in one read; nodes further down (long views) are read a level at a time.
        nodes: dict[ObjectId, SeqNode] = {}
        self._nodes(list(dict.fromkeys(oid for spine in spines.values() for oid, _ in seq.subtrees(spine))), nodes)
        items_of = {revision: seq.items_batched(spine, lambda oids: self._nodes(oids, nodes))
                    for revision, spine in spines.items()}
        if len(self._hits) > _REMEMBERED:
            self._hits.clear()
        with collector_paused():
            self._read([oid for items in items_of.values() for _, oid in items if oid is not None])
        for revision, items in items_of.items():
            if any(oid is None for _, oid in items):
                # A view revision may name entries by id alone: the history resolves them through its lineage.
                found = [(e.id, self._entry_hits(e)) for e in MessageHistory(source=self._store, head=revision).refs()]
            else:
                found = [(entry_id, self._hits[oid]) for entry_id, oid in items if oid is not None]
            self._views[revision] = [(entry_id, hits) for entry_id, hits in found if hits]
        return [self._views[r] for r in revisions]

    def _nodes(self, oids: list[ObjectId], known: dict[ObjectId, SeqNode]) -> list[SeqNode]:
        """Seq nodes by id, from `known` or read (in one `get_many`) into it."""
        missing = [oid for oid in dict.fromkeys(oids) if oid not in known]
        if missing:
            for oid, data in zip(missing, self._store.get_many(missing), strict=True):
                known[oid] = _decoded(data, to_hex(oid), SeqNode, "a seq node")
        return [known[oid] for oid in oids]

    def _read(self, oids: list[ObjectId]) -> None:
        hits, prefilter = self._hits, self._prefilter
        todo = list(dict.fromkeys(oid for oid in oids if oid not in hits))
        for start in range(0, len(todo), _BATCH):
            chunk = todo[start:start + _BATCH]
            datas = self._store.get_many(chunk)
            maybe = prefilter.may_match_many(datas) if prefilter is not None else [True] * len(datas)
            for oid, data, may in zip(chunk, datas, maybe, strict=True):
                if not may:
                    hits[oid] = ()
                    continue
                stored = _decoded(data, to_hex(oid), Entry, "an entry")
                message = expand_message(stored.message, self._blob) if has_blobs(stored.message) else stored.message
                hits[oid] = self._entry_hits(MessageHistoryEntry(stored.id, message, stored.kind, stored.meta))

    def _blob(self, oid: ObjectId) -> Any:
        return _decoded(self._store.get(oid), to_hex(oid), Blob, "a blob").data

    def _entry_hits(self, entry: MessageHistoryEntry) -> Hits:
        out: list[tuple[str, str]] = []
        done: set[str] = set()
        for field, text in entry_fields(entry):
            if field in self._wanted and field not in done:
                hit = self._regex.search(text)
                if hit is not None:
                    done.add(field)
                    out.append((field, _snippet(text, hit)))
        return tuple(out)


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
