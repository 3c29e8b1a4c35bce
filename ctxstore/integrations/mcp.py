"""A repository as an MCP server, so Claude Code, Claude Desktop or any MCP client can use it as shared memory.

`ConversationServer(repo)` is an `mcp.server.mcpserver.MCPServer` (the `mcp` extra) over one
`Repository`; `serve(repo)` runs it on stdio, which is what `ctxstore mcp` does. Tools:

- ``list_conversations``: every head and tag as `ctxstore ls` lists it (`interop.browse.conversations`);
- ``read_conversation``: a window of one conversation's messages (offset/limit, or the last N), in its
  view as stored, its compacted view (each summary in place of the entries it condenses) or in full
  (summaries expanded back into what they replaced);
- ``grep``: a search across conversations (`interop.browse.grep`, as `ctxstore grep`);
- ``diff``: what a revision changed from its parent, or from another revision (`Repository.diff`);
- ``append`` and ``fork``: the two writes, checked as the CLI checks them.

Each conversation is also a resource, ``ctxstore://conversation/<full ref name>`` (its rendered JSON, the
messages `ctxstore render` prints), listed afresh on every request; the template
``ctxstore://conversation/{+ref}`` reads any revision spec the same way.

Every revision argument is the repository's one revision syntax (`Repository.resolve`: ``main``,
``refs/tags/v1``, ``main~2``, ``main@{1}``, a revision id or unique prefix). A ctxstore error becomes the
tool's error result, its message for the model to read, and the server keeps serving; arguments that do
not fit a tool's input schema are refused by the SDK with the field that is wrong.

The server is read-only unless made with ``write=True`` (``ctxstore mcp --write``): append and fork are
still listed, so a client sees what exists and why it may not use it, but a call is refused with an error
that names ``--write``. Repository calls take turns on one lock, since the SDK runs each tool on a
worker thread.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated, Any, Final, Literal
from urllib.parse import quote

import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.types import Resource, ToolAnnotations
from pydantic import Field

from ..errors import CtxStoreError, InvalidInput, MissingObject, UnknownRef, UnknownRevision
from ..history.entry import MessageHistoryEntry
from ..interop.browse import conversations, grep
from ..interop.messages import check_messages
from ..repo.repository import Repository

__all__ = ["DEFAULT_LIMIT", "GREP_LIMIT", "URI_PREFIX", "VIEWS", "ConversationServer", "conversation_uri",
           "serve"]

URI_PREFIX: Final = "ctxstore://conversation/"
"""Where the conversation resources live: the prefix of ``ctxstore://conversation/<ref>``."""
VIEWS: Final = ("view", "compacted", "full")
"""The ways `read_conversation` shows a conversation (see its description)."""
DEFAULT_LIMIT: Final = 100
"""Messages `read_conversation` returns when no limit is given."""
GREP_LIMIT: Final = 100
"""Matches `grep` returns when no limit is given."""

_READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                          open_world_hint=False)

_Spec = Annotated[str, Field(min_length=1, description="A ref or revision: main, refs/tags/v1, main~2, "
                                                       "main@{1}, a revision id or unique prefix.")]
_Count = Annotated[int | None, Field(ge=1)]


def conversation_uri(ref: str) -> str:
    """The resource URI of a conversation: ``ctxstore://conversation/`` and the ref, percent-encoded."""
    return URI_PREFIX + quote(ref, safe="/")


def serve(repo: Repository, *, write: bool = False) -> None:
    """Serve `repo` over stdio until the client closes the connection (what `ctxstore mcp` runs)."""
    ConversationServer(repo, write=write).run("stdio")


def _package_version() -> str:
    try:
        return version("ctxstore")
    except PackageNotFoundError:
        return ""


def _instructions(write: bool) -> str:
    mode = ("append and fork are enabled" if write else
            "this server is read-only: append and fork are refused unless it is started with --write")
    return ("A ctxstore repository of agent conversations, versioned like git: each conversation is a ref "
            "(refs/heads/<name>) whose revisions are kept. Use list_conversations and grep to find one, "
            "read_conversation to read it, diff to see what a revision changed. Revision arguments take "
            f"git's syntax: main, main~2 (two revisions back), main@{{1}}, an id prefix. Here {mode}.")


def _compacted(entries: list[MessageHistoryEntry]) -> list[MessageHistoryEntry]:
    """The view with each summary standing in for the entries it condenses: those entries left out.

    A compaction that replaced its sources (`ctxstore compact`, the summarizing strategies) left none of
    them in the view, so this is the view itself; a summary added beside its sources drops them here (a
    summary that a later summary condenses too).
    """
    condensed = {source for entry in entries if entry.kind == "summary" for source in entry.sources or ()}
    return [entry for entry in entries if entry.id not in condensed]


def _check_window(offset: int | None, limit: int | None, last: int | None) -> None:
    if last is not None and (offset is not None or limit is not None):
        raise InvalidInput("give either last, or offset and limit, not both")


def _window(total: int, offset: int | None, limit: int | None, last: int | None) -> tuple[int, int]:
    """The [start, end) of the messages to return."""
    if last is not None:
        return max(0, total - last), total
    start = offset or 0
    return start, min(total, start + (DEFAULT_LIMIT if limit is None else limit))


class ConversationServer(MCPServer[Any]):
    """An MCP server over one repository: conversation tools and one resource per conversation."""

    def __init__(self, repo: Repository, *, write: bool = False, name: str = "ctxstore") -> None:
        super().__init__(name, version=_package_version(), instructions=_instructions(write),
                         log_level="WARNING")
        self.repo = repo
        self.write = write
        self._lock = threading.Lock()
        for tool, hints in ((self._list_conversations, _READS), (self._read_conversation, _READS),
                            (self._grep, _READS), (self._diff, _READS), (self._append, _WRITES),
                            (self._fork, _WRITES)):
            self.add_tool(tool, name=tool.__name__.lstrip("_"), annotations=hints)
        self.resource(URI_PREFIX + "{+ref}", name="conversation", mime_type="application/json",
                      description="A conversation's messages as JSON (what `ctxstore render` prints), at any "
                                  "ref or revision: ctxstore://conversation/refs/heads/main, "
                                  "ctxstore://conversation/main~2.")(self._resource)

    @contextmanager
    def _using(self) -> Iterator[Repository]:
        """The repository, for one call at a time; a ctxstore error becomes the tool's error result."""
        with self._lock:
            try:
                yield self.repo
            except CtxStoreError as error:
                raise ToolError(str(error)) from error

    def _writable(self, tool: str) -> None:
        if not self.write:
            raise ToolError(f"{tool} writes to the repository, and this server is read-only; start it with "
                            f"`ctxstore mcp --write` to allow append and fork")

    # -- resources -----------------------------------------------------------------------------------
    async def list_resources(self) -> list[Resource]:
        """The server's resources: one per conversation (every head and tag), read afresh each time."""
        return [*await super().list_resources(), *await anyio.to_thread.run_sync(self._conversation_resources)]

    def _conversation_resources(self) -> list[Resource]:
        with self._lock:
            found = conversations(self.repo)
        return [Resource(uri=conversation_uri(c.ref), name=c.ref, title=c.title or None,
                         description=f"{c.messages} messages; revision {c.revision[:12]}",
                         mime_type="application/json", size=None)
                for c in found]

    def _resource(self, ref: str) -> str:
        with self._lock:
            try:
                return json.dumps(self.repo.history(self.repo.resolve(ref)).render(), ensure_ascii=False)
            except (UnknownRevision, UnknownRef, MissingObject) as error:
                raise ResourceNotFoundError(str(error)) from error
            except CtxStoreError as error:
                raise ResourceError(str(error)) from error

    # -- tools: reading --------------------------------------------------------------------------------
    def _list_conversations(
        self,
        prefix: Annotated[str | None, Field(description="Only refs under this prefix, e.g. 'support/' (taken "
                                                        "under refs/heads/) or 'refs/tags/'.")] = None,
        sort: Annotated[Literal["ref", "updated"], Field(description="By ref name, or by last update "
                                                                      "(newest first).")] = "ref",
        limit: Annotated[_Count, Field(description="At most this many.")] = None,
    ) -> dict[str, Any]:
        """List the conversations in the repository (every head and tag): ref, revision, title, number of
        messages in view, last update (ms since the epoch) and bytes of messages."""
        with self._using() as repo:
            if prefix is None:
                found = conversations(repo)
            else:
                names = list(repo.refs(prefix))
                found = conversations(repo, names) if names else []
        if sort == "updated":
            found.sort(key=lambda c: c.updated, reverse=True)
        listed = found if limit is None else found[:limit]
        return {"conversations": [c.to_dict() for c in listed], "total": len(found)}

    def _read_conversation(
        self,
        conversation: _Spec,
        view: Annotated[Literal["view", "compacted", "full"], Field(
            description="'view': the messages as stored (after a compaction, its summary stands in for what "
                        "it replaced); 'compacted': the view with every summary in place of the entries it "
                        "condenses; 'full': every summary expanded back into the messages it replaced.")] = "view",
        offset: Annotated[int | None, Field(ge=0, description="First message to return (0-based).")] = None,
        limit: Annotated[_Count, Field(description=f"Messages to return from offset (default "
                                                   f"{DEFAULT_LIMIT}).")] = None,
        last: Annotated[_Count, Field(description="Return the last N messages instead of a window from "
                                                  "offset.")] = None,
    ) -> dict[str, Any]:
        """Read a conversation: a window of its messages, each with its index, entry id, kind and message
        (entry ids are not shown in the 'full' view). `nextOffset` says where the next window starts."""
        with self._using() as repo:
            _check_window(offset, limit, last)
            revision = repo.resolve(conversation)
            history = repo.history(revision)
            if view == "full":
                messages = history.restore()
                start, end = _window(len(messages), offset, limit, last)
                items = [{"index": n, "message": m} for n, m in enumerate(messages[start:end], start)]
                total = len(messages)
            else:
                entries = history.refs()
                if view == "compacted":
                    entries = _compacted(entries)
                start, end = _window(len(entries), offset, limit, last)
                items = [{"index": n, **e.to_dict()} for n, e in enumerate(entries[start:end], start)]
                total = len(entries)
        return {"conversation": conversation, "revision": revision, "view": view, "total": total,
                "offset": start, "nextOffset": end if end < total else None, "messages": items}

    def _grep(
        self,
        pattern: Annotated[str, Field(min_length=1, description="A Python regular expression (or plain "
                                                                "text with fixed).")],
        conversations: Annotated[list[str] | None, Field(description="Refs or revisions to search (default: "
                                                                     "every head and tag).")] = None,
        ignore_case: bool = False,
        fixed: Annotated[bool, Field(description="The pattern is plain text, not a regular expression.")] = False,
        fields: Annotated[list[Literal["text", "tool", "meta"]] | None, Field(
            description="Where to look: message text (text, thinking, tool results), tool names, entry "
                        "metadata (default: all three).")] = None,
        limit: Annotated[_Count, Field(description=f"At most this many matches (default {GREP_LIMIT}).")] = None,
    ) -> dict[str, Any]:
        """Search conversations for a pattern: one match per entry and field, with the ref, entry id, field
        and a snippet around the match. `truncated` says that more matches were left out."""
        cap = GREP_LIMIT if limit is None else limit
        with self._using() as repo:
            found = list(itertools.islice(grep(repo, pattern, conversations or (), ignore_case=ignore_case,
                                               fixed=fixed, fields=fields or ("text", "tool", "meta")), cap + 1))
        return {"matches": [m.to_dict() for m in found[:cap]], "truncated": len(found) > cap}

    def _diff(
        self,
        revision: _Spec,
        base: Annotated[str | None, Field(min_length=1, description="The revision to compare with (default: "
                                                                    "the revision's parent).")] = None,
    ) -> dict[str, Any]:
        """What a revision changed: entry ids added, removed and moved from `base` (default: its parent) to
        `revision`, with the added entries themselves."""
        with self._using() as repo:
            target = repo.resolve(revision)
            info = next(iter(repo.iter_revisions(target, limit=1)))
            start = repo.resolve(base) if base is not None else info.parent
            history = repo.history(target)
            if start is None:  # a root revision: everything in its view is new
                changes: dict[str, Any] = {"a": None, "b": target, "added": [e.id for e in history.refs()],
                                           "removed": [], "moved": []}
            else:
                changes = repo.diff(start, target).to_dict()
            added = history.refs(list(changes["added"]))
        return {**changes, "operation": info.operation, "addedEntries": [e.to_dict() for e in added]}

    # -- tools: writing --------------------------------------------------------------------------------
    def _append(
        self,
        conversation: Annotated[str, Field(min_length=1, description="The ref to append to, e.g. main or "
                                                                     "notes/today (created if new).")],
        messages: Annotated[list[dict[str, Any]], Field(
            min_length=1, description="Messages {role: user|assistant, content: text or content blocks}, or "
                                      "entries {id?, message, meta?}; stored as one revision.")],
    ) -> dict[str, Any]:
        """Append messages to a conversation as one revision (the ref is created if new). Messages are
        checked as the Messages API would check them; a writer that got there first is rebased onto.
        Needs the server started with --write."""
        self._writable("append")
        with self._using() as repo:
            before: list[dict[str, Any]] = []
            if "tool_result" in json.dumps(messages, default=str) and repo.head(conversation) is not None:
                before = repo.history(conversation).render()  # the tool uses a tool result may answer
            check_messages(messages, before=before)
            moved = repo.append(conversation, messages, message="append (mcp)")
            info = next(iter(repo.iter_revisions(moved.new, limit=1)))
        operation = info.operation or {}
        return {"ref": moved.ref, "revision": moved.new, "entryIds": list(operation.get("entryIds", [])),
                "size": info.size}

    def _fork(
        self,
        source: _Spec,
        name: Annotated[str, Field(min_length=1, description="The new ref, e.g. try-2 (must not exist).")],
    ) -> dict[str, Any]:
        """Fork a conversation (any ref or revision) into a new ref, recording a fork revision; both then
        share every entry up to the fork. Needs the server started with --write."""
        self._writable("fork")
        with self._using() as repo:
            full = repo.ref_name(name)
            if repo.head(full) is not None:
                raise InvalidInput(f"ref {full} already exists; pick another name for the fork")
            base = repo.resolve(source)
            forked = repo.history(base).fork()
            moved = repo.commit(full, forked, message=f"fork of {source} (mcp)")
        return {"ref": moved.ref, "revision": forked.revision_id, "from": base}
