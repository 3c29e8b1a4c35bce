"""Import and export: message lists (JSON, JSONL), snapshots, and Claude Code transcripts.

Every import builds the new revisions in memory and lands them with one `Repository.commit_many`, so a
file that turns out to be bad part-way leaves the repository exactly as it was.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from ..errors import CtxStoreError, InvalidInput, NonFastForward, StoreError
from ..history.message_history import MessageHistory
from ..repo.repository import Repository
from ..report import json_fields

__all__ = [
    "EXPORT_FORMATS",
    "IMPORT_FORMATS",
    "ImportResult",
    "detect_format",
    "export_ref",
    "import_claude_code",
    "import_file",
    "import_messages",
    "import_snapshot",
    "parse_claude_code",
    "write_export",
]

IMPORT_FORMATS: Final = ("json", "jsonl", "snapshot", "claude")
EXPORT_FORMATS: Final = ("json", "jsonl", "snapshot")
_BATCH = 1000
"""Messages per revision when importing a list: bounds the size of one revision's operation."""
_REBASES = 50


@dataclass
class ImportResult:
    """What an import did: the refs it moved (full name to revision id) and how many entries it added."""

    refs: dict[str, str] = field(default_factory=dict)
    entries: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return json_fields(self)


# -- reading files -----------------------------------------------------------------------------------

def _read_text(source: str | os.PathLike[str] | IO[str]) -> str:
    if hasattr(source, "read"):
        return str(source.read())  # type: ignore[union-attr]
    try:
        return Path(source).read_text(encoding="utf-8")  # type: ignore[arg-type]
    except FileNotFoundError:
        raise InvalidInput(f"no file {os.fspath(source)}; check the path") from None  # type: ignore[arg-type]
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {os.fspath(source)}: {exc}") from None  # type: ignore[arg-type]


def _json_lines(text: str) -> list[Any]:
    lines = text.splitlines()
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as exc:
            if n == len(lines):
                break  # a transcript still being written may end in half a line
            raise InvalidInput(f"line {n} is not JSON ({exc}); fix or remove it") from None
    return out


def detect_format(text: str) -> str:
    """Guess a file's import format from its content: snapshot, json, claude or jsonl."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        return "json"
    if stripped.startswith("{"):
        first, _, rest = stripped.partition("\n")
        try:
            value = json.loads(first if rest.strip() else stripped)
        except ValueError:
            try:
                value = json.loads(stripped)
            except ValueError:
                raise InvalidInput("the file is neither JSON nor JSON lines") from None
            return "snapshot" if _is_snapshot(value) else "json"
        if not rest.strip() and _is_snapshot(value):
            return "snapshot"
        if isinstance(value, dict) and ("uuid" in value or "sessionId" in value
                                        or value.get("type") in ("summary", "file-history-snapshot")):
            return "claude"
        return "jsonl"
    if not stripped:
        raise InvalidInput("the file is empty; nothing to import")
    raise InvalidInput("the file is not JSON, JSON lines, a snapshot or a Claude Code transcript")


def _is_snapshot(value: Any) -> bool:
    return isinstance(value, dict) and {"entries", "revisions", "head"} <= set(value)


def import_file(repo: Repository, source: str | os.PathLike[str] | IO[str], ref: str | None = None, *,
                format: str | None = None, force: bool = False) -> ImportResult:
    """Import a file of any supported format into `ref` (for transcripts, default ``claude/<session>``)."""
    text = _read_text(source)
    fmt = format or detect_format(text)
    if fmt not in IMPORT_FORMATS:
        raise InvalidInput(f"unknown import format {fmt!r}; use one of {', '.join(IMPORT_FORMATS)}")
    if fmt == "claude":
        return import_claude_code(repo, _json_lines(text), ref, force=force)
    if ref is None:
        raise InvalidInput("name the ref to import into (for example main)")
    if fmt == "snapshot":
        try:
            snapshot = json.loads(text)
        except ValueError as exc:
            raise InvalidInput(f"the snapshot is not JSON: {exc}") from None
        return import_snapshot(repo, ref, snapshot, force=force)
    if fmt == "json":
        try:
            messages = json.loads(text)
        except ValueError as exc:
            raise InvalidInput(f"the file is not JSON: {exc}") from None
        if isinstance(messages, dict) and isinstance(messages.get("messages"), list):
            messages = messages["messages"]
        if not isinstance(messages, list):
            raise InvalidInput("a JSON import is a list of messages (or of entries with 'message')")
    else:
        messages = _json_lines(text)
    return import_messages(repo, ref, messages, force=force)


# -- messages and snapshots --------------------------------------------------------------------------

def _land(repo: Repository, updates: dict[str, MessageHistory], *, force: bool) -> dict[str, str]:
    """Commit histories; a single-ref import that lost a race is rebased and tried again."""
    for _attempt in range(_REBASES):
        try:
            names = repo.commit_many(updates, force=force, message="import")
            return {name: h.revision_id for name, h in zip(names, updates.values(), strict=True)}
        except NonFastForward:
            if len(updates) != 1:
                raise
            [(ref, history)] = updates.items()
            updates = {ref: repo.rebase(history, onto=ref)}
    raise StoreError("the ref kept moving during the import; try again")


def import_messages(repo: Repository, ref: str, messages: Sequence[Any], *, force: bool = False,
                    batch: int = _BATCH) -> ImportResult:
    """Append messages (or entry inputs with 'message') to a ref, `batch` per revision, in one commit."""
    if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Sequence):
        raise InvalidInput("messages must be a list")
    if not messages:
        raise InvalidInput("there are no messages to import")
    history = repo.history(ref)
    for start in range(0, len(messages), batch):
        try:
            history = history.extend(messages[start:start + batch])
        except InvalidInput as exc:
            raise InvalidInput(f"message {start + 1}..{min(start + batch, len(messages))}: {exc}") from None
    refs = _land(repo, {ref: history}, force=force)
    return ImportResult(refs, len(messages))


def import_snapshot(repo: Repository, ref: str, snapshot: Mapping[str, Any], *,
                    force: bool = False) -> ImportResult:
    """Store a snapshot (ours or the TypeScript library's) and point `ref` at its head.

    Snapshot revision ids are the writer's; they are re-hashed here, so the ref gets a new id for the
    same graph. An existing ref moves only if the snapshot descends from it, or with `force`.
    """
    history = MessageHistory.from_snapshot(snapshot)
    refs = repo.commit_many({ref: history}, force=force, message="import snapshot")
    return ImportResult({n: history.revision_id for n in refs}, len(snapshot.get("entries") or []))


# -- Claude Code transcripts -------------------------------------------------------------------------

@dataclass
class _Node:
    """One kept transcript step: a message (consecutive records of one assistant message merged)."""

    uuid: str
    kind: str  # "message", "summary" (isCompactSummary) or "boundary" (compact_boundary)
    record: dict[str, Any]
    message: dict[str, Any] | None
    uuids: list[str]
    sidechain: bool
    parent: str | None = None
    children: list[str] = field(default_factory=list)


def _content_list(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    if content is None or content == "":
        return []
    return [{"type": "text", "text": str(content)}]


def _meta(node: _Node) -> dict[str, Any]:
    rec = node.record
    info: dict[str, Any] = {"uuid": node.uuid}
    if len(node.uuids) > 1:
        info["uuids"] = list(node.uuids)
    for key in ("parentUuid", "timestamp", "sessionId", "isSidechain", "cwd", "gitBranch", "version"):
        if rec.get(key) is not None:
            info[key] = rec[key]
    msg = rec.get("message")
    if isinstance(msg, dict):
        for key in ("model", "id", "usage", "stop_reason"):
            if msg.get(key) is not None:
                info["messageId" if key == "id" else key] = msg[key]
    if node.kind == "boundary" and isinstance(rec.get("compactMetadata"), dict):
        info["compactMetadata"] = rec["compactMetadata"]
    return {"claudeCode": json.loads(json.dumps(info))}


def parse_claude_code(records: Iterable[Any]) -> tuple[dict[str, _Node], list[str], str | None]:
    """The kept steps of a transcript by uuid, their uuids in file order, and the session id."""
    nodes: dict[str, _Node] = {}
    order: list[str] = []
    alias: dict[str, str] = {}  # every record uuid -> the kept step it belongs to or stands behind
    raw_parent: dict[str, str | None] = {}
    session: str | None = None
    last_main: str | None = None
    for n, rec in enumerate(records, 1):
        if not isinstance(rec, dict):
            raise InvalidInput(f"transcript record {n} is not a JSON object")
        uuid = rec.get("uuid")
        if not isinstance(uuid, str) or not uuid or uuid in raw_parent:
            continue  # titles, file snapshots and repeated records carry no conversation step
        session = session or (rec.get("sessionId") if isinstance(rec.get("sessionId"), str) else None)
        parent = rec.get("parentUuid") if isinstance(rec.get("parentUuid"), str) else None
        kind = None
        rtype = rec.get("type")
        msg = rec.get("message")
        if rtype == "system" and rec.get("subtype") == "compact_boundary":
            kind = "boundary"
            parent = parent or (rec.get("logicalParentUuid") if isinstance(rec.get("logicalParentUuid"), str)
                                else None)
        elif rtype in ("user", "assistant") and isinstance(msg, dict):
            kind = "summary" if rec.get("isCompactSummary") else "message"
        sidechain = bool(rec.get("isSidechain"))
        if parent is None and sidechain and last_main is not None:
            parent = last_main  # a subagent's first step: branch where the main line stood
        raw_parent[uuid] = parent
        target = alias.get(parent) if parent is not None else None
        if kind is None:
            alias[uuid] = target if target is not None else ""  # a step with no message: pass through
            continue
        role = msg.get("role") if isinstance(msg, dict) else None
        if kind == "message" and rtype == "assistant" and target and nodes[target].kind == "message":
            prev = nodes[target]
            same = (isinstance(prev.record.get("message"), dict) and prev.message is not None
                    and prev.message.get("role") == "assistant" and isinstance(msg, dict)
                    and msg.get("id") is not None and prev.record["message"].get("id") == msg.get("id"))
            if same and not prev.children:
                # Claude Code writes one record per content block of an assistant message: rejoin them.
                prev.message["content"] = _content_list(prev.message.get("content")) + _content_list(
                    msg.get("content"))
                prev.uuids.append(uuid)
                alias[uuid] = target
                continue
        if kind == "boundary":
            message: dict[str, Any] | None = {"role": "user",
                                              "content": str(rec.get("content") or "Conversation compacted")}
        else:
            message = {"role": role if isinstance(role, str) else str(rtype),
                       "content": json.loads(json.dumps(msg.get("content", "")))}
        node = _Node(uuid, kind, rec, message, [uuid], sidechain, parent=target or None)
        nodes[uuid] = node
        order.append(uuid)
        alias[uuid] = uuid
        if node.parent is not None:
            nodes[node.parent].children.append(uuid)
        if not sidechain:
            last_main = uuid
    return nodes, order, session


def _view_ids(history: MessageHistory) -> list[str]:
    return [e.id for e in history.refs()]


def _apply(history: MessageHistory, node: _Node, nodes: Mapping[str, _Node]) -> MessageHistory:
    entry = {"id": node.uuid, "message": node.message, "meta": _meta(node)}
    if node.kind == "message":
        return history.append(entry)
    if node.kind == "boundary" and any(nodes[c].kind == "summary" for c in node.children):
        return history  # the summary record that follows carries the text; the boundary adds nothing
    sources = _view_ids(history)
    return history.edit({"op": "summary", "sourceIds": sources, "replace": True, "entry": entry})


def import_claude_code(repo: Repository, records: Iterable[Any] | str | os.PathLike[str],
                       ref: str | None = None, *, force: bool = False) -> ImportResult:
    """Import a Claude Code transcript (``~/.claude/projects/*/<session>.jsonl``) as refs.

    The main line (ending at the last non-sidechain step) goes to `ref` (default ``claude/<session>``);
    every other line of the record tree (subagent sidechains, retried or edited turns) becomes a fork
    named ``<ref>/sidechain-<uuid8>`` or ``<ref>/fork-<uuid8>`` after its last step. Record uuids are the
    entry ids; records of one assistant message are joined; a compaction becomes a summary entry whose
    sources are the entries it replaced, so `restore` still reaches them. All refs land in one commit;
    a ref that already exists is replaced only with `force` (re-importing a session needs it).
    """
    if isinstance(records, str | os.PathLike):
        records = _json_lines(_read_text(records))
    nodes, order, session = parse_claude_code(records)
    if not nodes:
        raise InvalidInput("the transcript has no user or assistant messages to import")
    base = ref or f"claude/{session or 'session'}"
    tips = [u for u in order if not nodes[u].children]
    main_tips = [u for u in tips if not nodes[u].sidechain]
    main = main_tips[-1] if main_tips else tips[-1]
    states: dict[str, MessageHistory] = {}
    repo.ref_name(base)  # a bad name fails before any work
    root = MessageHistory(source=repo.store)
    updates: dict[str, MessageHistory] = {}
    for tip in [main, *[t for t in tips if t != main]]:
        chain = []
        at: str | None = tip
        while at is not None and at not in states:
            chain.append(at)
            at = nodes[at].parent
        history = root if at is None else states[at]
        if tip != main and at is not None:
            history = history.fork()
        for uuid in reversed(chain):
            try:
                history = _apply(history, nodes[uuid], nodes)
            except CtxStoreError as exc:
                raise InvalidInput(f"transcript record {uuid}: {exc}") from None
            states[uuid] = history
        kind = "sidechain" if nodes[tip].sidechain else "fork"
        updates[base if tip == main else f"{base}/{kind}-{tip[:8]}"] = history
    refs = repo.commit_many(updates, force=force, message="import claude code transcript")
    return ImportResult({n: h.revision_id for n, h in zip(refs, updates.values(), strict=True)}, len(nodes))


# -- export ------------------------------------------------------------------------------------------

def _export_lines(repo: Repository, ref: str, fmt: str, with_ids: bool) -> Iterator[str]:
    history = repo.history(ref)
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
                 with_ids: bool = False) -> None:
    """Write a ref's view to a text stream as JSON, JSONL, or a snapshot of its whole lineage.

    With `with_ids`, JSON and JSONL hold entries (id, kind, message, meta, sources), which import
    reads back with their ids; otherwise plain messages, ready for a model.
    """
    if format not in EXPORT_FORMATS:
        raise InvalidInput(f"unknown export format {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
    repo.resolve(ref)  # an unknown ref is an error, not an empty export
    for chunk in _export_lines(repo, ref, format, with_ids):
        out.write(chunk)


def export_ref(repo: Repository, ref: str, *, format: str = "json", with_ids: bool = False) -> str:
    """`write_export` into a string."""
    import io

    buf = io.StringIO()
    write_export(repo, ref, buf, format=format, with_ids=with_ids)
    return buf.getvalue()
