"""`CtxStoreSession`: an OpenAI Agents SDK session that keeps each conversation in a ctxstore `Repository`.

The layout: session `session_id` is the ref `refs/heads/openai-agents/<session>` (`session_ref`: the id
itself when it is a plain name, else `x-` and its UTF-8 in hex). Every call that changes the session
is one revision on that ref:

- `add_items(items)` appends the items as entries (one revision, landed with the repository's
  rebasing append, so two processes adding to one session both land);
- `pop_item()` removes the last entry (an edit), `clear_session()` makes the view empty (a view
  revision): what was there stays in the ref's lineage and reflog, `ctxstore log` lists it;
- `fork(new_session_id)` starts another session at a fork revision that shares every entry.

An item is the SDK's, not an Anthropic message, and is kept exactly (`get_items` gives back what was
added, equal as JSON values). An item with a string ``role`` (a user, assistant, system or developer
message) is the entry's message as it is, so `ctxstore render`/`show` read it as a message; any other
item (a function call, its output, reasoning, a handoff, ...) is wrapped: the message is
``{"role": <the item's type>, "content": [<the item>]}`` and the entry's meta says
``{"openaiAgents": {"wrapped": true}}``. A message's text or content part of 4 KiB or more, and a
wrapped item of 4 KiB or more, is stored as a content-addressed blob, so a repeated tool output costs a
reference.

`import_sqlite` brings an SDK `SQLiteSession` database in: every session to its ref, its rows as
entries, one revision per run of rows added in the same second (the database keeps no batches).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from agents.items import TResponseInputItem
from agents.memory.session_settings import SessionSettings, coerce_session_settings, resolve_session_limit

from ..errors import InvalidInput, NonFastForward, RefMoved, shown
from ..history import MessageHistory, MessageHistoryEntry
from ..history.intake import intake_copy, plain_copy
from ..repo import CommitResult, Repository

if TYPE_CHECKING:
    from agents.memory.session import Session

__all__ = ["PREFIX", "CtxStoreSession", "import_sqlite", "session_id_of", "session_ref", "sessions"]

PREFIX: Final = "refs/heads/openai-agents/"
"""Where sessions live: one ref per session id below it."""

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_META: Final = "openaiAgents"
_ROW_IDS: Final = "oa-sqlite-"
"""Entry ids of imported rows start with this; the rest is the row id and a hash of what it held."""
_TRIES: Final = 64
"""Compare-and-swap attempts of a pop or clear before another writer's moves are reported (`RefMoved`)."""
_FLUSH_ROWS: Final = 20_000
"""An import commits once it holds this many new rows, so a large database never sits in memory whole."""


def session_ref(session_id: str) -> str:
    """The full ref name of a session: `refs/heads/openai-agents/<id>`, the id spelled `x-<hex>` unless plain."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidInput(f"a session id is a non-empty string, not {shown(session_id)}")
    if _PLAIN.fullmatch(session_id) and not session_id.startswith("x-"):
        return PREFIX + session_id
    return PREFIX + "x-" + session_id.encode("utf-8", "surrogatepass").hex()


def session_id_of(ref: str) -> str:
    """The session id a session ref (full name, as `session_ref` spells it) stands for."""
    if not ref.startswith(PREFIX):
        raise InvalidInput(f"{ref} is not an OpenAI Agents session ref (those are under {PREFIX})")
    name = ref[len(PREFIX):]
    if name.startswith("x-"):
        try:
            return bytes.fromhex(name[2:]).decode("utf-8", "surrogatepass")
        except ValueError:
            raise InvalidInput(f"{ref} does not spell a session id (x- and UTF-8 in hex)") from None
    return name


def sessions(repo: Repository) -> list[str]:
    """The ids of the sessions a repository holds, sorted by ref name."""
    return [session_id_of(name) for name in repo.refs(PREFIX) if "/" not in name[len(PREFIX):]]


# -- items as entries --------------------------------------------------------------------------------

def _entry(item: Any, *, entry_id: str | None = None, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    """The entry input that keeps `item` exactly (see the module docstring)."""
    role = item.get("role") if isinstance(item, Mapping) else None
    info = dict(meta or {})
    if isinstance(role, str):
        message: Any = item
    else:
        kind = item.get("type") if isinstance(item, Mapping) else None
        message = {"role": kind if isinstance(kind, str) and kind else "item", "content": [item]}
        info[_META] = {**info.get(_META, {}), "wrapped": True}
    out: dict[str, Any] = {"message": message}
    if entry_id is not None:
        out["id"] = entry_id  # an explicit id is checked against the lineage: only the import gives one
    if info:
        out["meta"] = info
    return out


def _item(entry: MessageHistoryEntry) -> Any:
    """The item an entry keeps; an entry that another writer made (a plain message) is its message."""
    info = (entry.meta or {}).get(_META)
    if isinstance(info, Mapping) and info.get("wrapped"):
        content = entry.message.get("content")
        if isinstance(content, list) and len(content) == 1:
            return content[0]
    return entry.message


@dataclass(frozen=True)
class _View:
    """A session's items at one revision of its ref, with their entry ids (what a pop removes)."""

    head: str | None
    ids: list[str]
    items: list[Any]


def _limited(items: list[Any], limit: int | None) -> list[Any]:
    # As SQLiteSession's LIMIT: the latest `limit` items; 0 none; a negative limit is no limit.
    if limit is None or limit < 0:
        return items
    return items[max(len(items) - limit, 0):] if limit else []


class CtxStoreSession:
    """An OpenAI Agents SDK `Session` over a ctxstore `Repository`: the session is a ref, each change a revision.

    Pass it as ``Runner.run(agent, input, session=CtxStoreSession("user-1", repo))``. The methods are
    the SDK's (async); each is a few short local transactions made in the caller's thread, so none is
    left half done by a cancelled task. Items that JSON cannot carry, integers beyond 64 bits and NaN
    are refused with `InvalidInput`.
    """

    def __init__(self, session_id: str, repo: Repository, *,
                 session_settings: SessionSettings | dict[str, Any] | None = None) -> None:
        self.session_id = session_id
        self.ref = session_ref(session_id)
        self.repo = repo
        self.session_settings: SessionSettings | None = (
            coerce_session_settings(session_settings) if session_settings is not None else SessionSettings())
        self._view: _View | None = None
        self._owns_repo = False

    @classmethod
    def from_path(cls, session_id: str, path: str | os.PathLike[str], *,
                  session_settings: SessionSettings | dict[str, Any] | None = None) -> CtxStoreSession:
        """A session over the repository at `path`, made there first if there is none; `close` closes it."""
        repo = Repository.open(path, create=True)
        session = cls(session_id, repo, session_settings=session_settings)
        session._owns_repo = True
        return session

    def close(self) -> None:
        """Close the repository if `from_path` opened it (a repository passed in is the caller's)."""
        if self._owns_repo:
            self.repo.close()

    def __repr__(self) -> str:
        return f"<CtxStoreSession {self.session_id!r} at {self.ref} in {self.repo!r}>"

    # -- reading -------------------------------------------------------------------------------
    def _current(self, head: str | None) -> _View:
        """The view at `head`, from the last one seen when the ref has not moved since."""
        if self._view is not None and self._view.head == head:
            return self._view
        if head is None:
            view = _View(None, [], [])
        else:
            entries = self.repo.history(head).refs()
            view = _View(head, [e.id for e in entries], [_item(e) for e in entries])
        self._view = view
        return view

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first: all of them, or the latest `limit` (default: session_settings')."""
        view = self._current(self.repo.head(self.ref))
        return [plain_copy(item) for item in _limited(view.items, resolve_session_limit(limit, self.session_settings))]

    # -- writing -------------------------------------------------------------------------------
    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items to the session as one revision (rebased onto another writer's, if one landed first)."""
        listed = list(items)
        if not listed:
            return
        kept = [intake_copy(item) for item in listed]  # as the store will give them back (tuples as lists)
        entries = [_entry(item) for item in kept]
        before = self._view
        moved = self.repo.append(self.ref, entries, message="openai-agents: add items")
        if before is not None and moved.old == before.head:  # nobody else wrote: the view is ours plus these
            made = next(self.repo.iter_revisions(moved.new, limit=1)).operation or {}
            self._view = _View(moved.new, [*before.ids, *made.get("entryIds", [])], [*before.items, *kept])
        else:
            self._view = None

    def _change(self, change: Callable[[MessageHistory, _View], MessageHistory | None], message: str,
                after: Callable[[_View], _View]) -> _View | None:
        """Commit `change` of the current view as a compare-and-swap, re-reading when another writer won.

        Returns the view it changed (None when `change` found nothing to do)."""
        for _ in range(_TRIES):
            head = self.repo.head(self.ref)
            view = self._current(head)
            if head is None:
                return None
            changed = change(self.repo.history(head), view)
            if changed is None:
                return None
            try:
                moved = self.repo.commit(self.ref, changed, message=message)
            except NonFastForward:
                continue
            if moved.old == moved.new:
                # Another writer made this very revision (the same change of the same head in the same
                # millisecond: one object id), so it is that writer's change, not ours: read again.
                continue
            self._view = after(_View(changed.revision_id, view.ids, view.items))
            return view
        raise RefMoved(f"{self.ref} kept moving under {_TRIES} attempts to {message.split(': ')[-1]}; "
                       "other writers are busy on this session, try again")

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove and return the latest item (None when the session is empty), as one revision."""
        def remove(history: MessageHistory, view: _View) -> MessageHistory | None:
            return history.edit({"op": "remove", "id": view.ids[-1]}) if view.ids else None

        popped = self._change(remove, "openai-agents: pop item",
                              lambda v: _View(v.head, v.ids[:-1], v.items[:-1]))
        return None if popped is None else cast(TResponseInputItem, plain_copy(popped.items[-1]))

    async def clear_session(self) -> None:
        """Empty the session's view, as one revision; its items stay in the ref's lineage."""
        def clear(history: MessageHistory, view: _View) -> MessageHistory | None:
            return history.with_view([]) if view.ids else None

        self._change(clear, "openai-agents: clear session", lambda v: _View(v.head, [], []))

    def fork(self, new_session_id: str) -> CtxStoreSession:
        """A new session that starts as this one is now (a fork revision sharing every entry).

        `InvalidInput` if `new_session_id` already has a session.
        """
        target = session_ref(new_session_id)
        if self.repo.head(target) is not None:
            raise InvalidInput(f"session {shown(new_session_id)} already exists ({target}); fork into another id")
        head = self.repo.head(self.ref)
        base = self.repo.history(self.ref if head is None else head)
        self.repo.commit(target, base.fork(), message=f"openai-agents: fork of {self.session_id}")
        return CtxStoreSession(new_session_id, self.repo, session_settings=self.session_settings)


def _typed(session: CtxStoreSession) -> Session:
    return session  # mypy checks here that CtxStoreSession is a `Session` as the SDK defines it


# -- migrating an SQLiteSession database ----------------------------------------------------------------

@dataclass(frozen=True)
class _Row:
    id: int
    data: str
    created_at: str | None


def _time_ms(stamp: str | None) -> int | None:
    """SQLite's CURRENT_TIMESTAMP (``2026-01-01 09:30:00``, UTC) in ms, or None."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError:
        return None
    return int((when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() * 1000)


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _row_entry_id(session_id: str, row: _Row) -> str:
    digest = hashlib.sha256(f"{session_id}\0{row.id}\0{row.data}".encode("utf-8", "surrogatepass")).hexdigest()
    return f"{_ROW_IDS}{row.id}-{digest[:16]}"


def _read_database(path: Path, sessions_table: str, messages_table: str
                   ) -> dict[str, tuple[str | None, list[_Row]]]:
    """Every session of the database: its created_at and rows (id order). Refuses a file that is not one."""
    what = (f"an OpenAI Agents SDK SQLiteSession database (tables {sessions_table} and {messages_table}, "
            "as SQLiteSession(session_id, db_path) writes)")
    if not path.is_file():
        raise InvalidInput(f"no such file: {path}; expected {what}")
    for table in (sessions_table, messages_table):
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", table):
            raise InvalidInput(f"table name {shown(table)} is not a plain SQL name")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidInput(f"cannot open {path}: {exc}; expected {what}") from None
    try:
        try:
            tables = {name: [c[1] for c in conn.execute(f"PRAGMA table_info({name})")]
                      for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            columns = tables.get(messages_table, [])
            if not {"id", "session_id", "message_data"} <= set(columns):
                raise InvalidInput(f"{path} is an SQLite database without a {messages_table} table of "
                                   f"(id, session_id, message_data, created_at); expected {what}")
            stamp = "created_at" if "created_at" in columns else "NULL"
            out: dict[str, tuple[str | None, list[_Row]]] = {}
            if sessions_table in tables and "session_id" in tables[sessions_table]:
                made = "created_at" if "created_at" in tables[sessions_table] else "NULL"
                for sid, created in conn.execute(f"SELECT session_id, {made} FROM {sessions_table}"):
                    out[str(sid)] = (None if created is None else str(created), [])
            query = (f"SELECT id, session_id, message_data, {stamp} FROM {messages_table} "
                     "ORDER BY session_id, id")
            for row_id, sid, data, created in conn.execute(query):
                _, rows = out.setdefault(str(sid), (None if created is None else str(created), []))
                rows.append(_Row(int(row_id), data if isinstance(data, str) else "",
                                 None if created is None else str(created)))
            return out
        except sqlite3.DatabaseError as exc:
            raise InvalidInput(f"{path} is not an SQLite database ({exc}); expected {what}") from None
    finally:
        conn.close()


def _batches(rows: Sequence[tuple[_Row, Any]]) -> list[list[tuple[_Row, Any]]]:
    """Runs of rows added in the same second: what is left of SQLiteSession's add_items batches."""
    out: list[list[tuple[_Row, Any]]] = []
    for pair in rows:
        if out and out[-1][-1][0].created_at == pair[0].created_at:
            out[-1].append(pair)
        else:
            out.append([pair])
    return out


def _imported(repo: Repository, session_id: str, created_at: str | None, rows: list[_Row], source: Path,
              force: bool) -> MessageHistory | None:
    """The session's history with its view made the database's rows, built on what the ref holds; None
    when it already holds them."""
    ref = session_ref(session_id)
    head = repo.head(ref)
    decoded: list[tuple[_Row, Any]] = []
    for row in rows:
        try:
            decoded.append((row, json.loads(row.data)))
        except (ValueError, TypeError):
            continue  # SQLiteSession skips a row that is not JSON; so does the import
    wanted = [_row_entry_id(session_id, row) for row, _ in decoded]
    if head is None:
        history = MessageHistory(source=repo.store, created_at=_time_ms(created_at))
        have: list[str] = []
    else:
        history = repo.history(head)
        have = [e.id for e in history.refs()]
        if have == wanted:
            return None
        foreign = [i for i in have if not i.startswith(_ROW_IDS)]
        if foreign and not force:
            raise NonFastForward(
                f"{ref} holds {len(foreign)} item(s) that are not from {source}: session {shown(session_id)} went on "
                "in ctxstore after it was imported, and importing the database again would take them out of "
                "its view; import with force (--force) to make the view the database's again (they stay in "
                "the ref's log)", ref=ref, current=head)
    keep = 0
    while keep < min(len(have), len(wanted)) and have[keep] == wanted[keep]:
        keep += 1
    if keep < len(have):
        history = history.with_view(have[:keep])
    for batch in _batches(decoded[keep:]):
        ms = _time_ms(batch[0][0].created_at)
        stamp = _iso(ms)
        entries = []
        for row, item in batch:
            meta: dict[str, Any] = {_META: {"row": row.id}}
            if stamp is not None:
                meta["timestamp"] = stamp
            entries.append(_entry(item, entry_id=_row_entry_id(session_id, row), meta=meta))
        history = history.extend(entries, created_at=ms)
    return history


def import_sqlite(repo: Repository, db_path: str | os.PathLike[str], *,
                  progress: Callable[[int, int], None] | None = None, force: bool = False,
                  sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
                  ) -> list[CommitResult]:
    """Import every session of an Agents SDK `SQLiteSession` database, each to its `session_ref`.

    A session's rows become entries (its items, kept as `CtxStoreSession` keeps them, with the row id
    and time in their meta), one revision per run of rows added in the same second. Importing is
    idempotent: the same file again moves nothing, and a session that grew since fast-forwards (rows
    the database no longer has, after a pop or a clear, leave the view in a new revision). A session
    that went on in ctxstore after its import is refused (`NonFastForward`) unless `force`. Rows that
    are not JSON are skipped, as SQLiteSession skips them. `progress(done, total)` is called after each
    session. Returns the moves, in session order; a session already up to date is not among them.
    """
    source = Path(db_path)
    found = _read_database(source, sessions_table, messages_table)
    message = f"import openai-agents-sqlite from {source}"
    moves: list[CommitResult] = []
    pending: dict[str, MessageHistory] = {}
    held = 0
    total = len(found)
    for done, session_id in enumerate(sorted(found), 1):
        created_at, rows = found[session_id]
        history = _imported(repo, session_id, created_at, rows, source, force)
        if history is not None:
            pending[session_ref(session_id)] = history
            held += len(rows)
        if pending and (held >= _FLUSH_ROWS or done == total):
            moves.extend(repo.commit_many(pending, message=message))
            pending, held = {}, 0
        if progress is not None:
            progress(done, total)
    return moves
