"""`CtxStoreSaver`: a LangGraph checkpointer that keeps each thread in a ctxstore `Repository`.

The layout, one thread (`thread_id`) and checkpoint namespace (`checkpoint_ns`) at a time, each name
spelled as a ref component (`_component`):

- `refs/heads/langgraph/<thread>/<ns>`: the conversation, pointing at the latest checkpoint (the one
  with the greatest id, which is the latest put). A put on an older checkpoint (LangGraph's time
  travel: `update_state` or `invoke` from a past config) forks: the branch moves to the new line, the
  old line stays named by its checkpoints' tags, and `ctxstore log --graph` shows the fork.
- `refs/tags/langgraph/<thread>/<ns>/<checkpoint_id>`: each checkpoint, naming its revision.
- `refs/heads/langgraph-writes/<thread>/<ns>/<checkpoint_id>`: the checkpoint's pending writes.

A checkpoint's revision holds, in its view, the messages of every message channel (a list of LangChain
messages, as `add_messages` keeps them) as one entry each, then one `checkpoint` entry: the checkpoint
and its metadata (LangGraph's serializer, base64) and a content block per other channel value. A step
that adds k messages adds k + 1 entries, never a copy of the list; a channel value of 4 KiB or more is
a content-addressed blob, so an unchanged one costs a reference. A message list that is not the previous
one plus new messages (a message removed or replaced by id) is stored by re-viewing: the old entries
leave the view, the whole list is appended.

What a step costs does not depend on the thread's length: the branch head's last entry says which
checkpoint is the latest (`Repository.appended` reads just that revision's new entries), a checkpoint
is found by its tag (one key), and a put is one transaction that moves the branch and writes the tag.

A `DeltaChannel` (LangGraph's channel that stores writes, with a `_DeltaSnapshot` of the whole value
every `snapshot_frequency` updates) keeps its snapshots as message entries too: a snapshot adds the
messages since the previous one, not the list. `get_delta_channel_history` answers from the tags,
the checkpoints' last entries and the writes refs, keeping what it answered, without `get_tuple`'s reads.

`import_sqlite` brings a `SqliteSaver` database in, in this same shape, through the saver itself (its
puts and writes held and committed once per thread).
"""

from __future__ import annotations

import base64
import builtins
import json
import os
import random
import re
import sqlite3
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.base import writes_sort_key as _writes_sort_key
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from ..errors import CtxStoreError, InvalidInput, NonFastForward, shown
from ..history import MessageHistory, MessageHistoryEntry
from ..interop.landing import ImportProgress
from ..repo import CommitResult, Repository

__all__ = ["CtxStoreSaver", "import_sqlite"]

BRANCHES = "refs/heads/langgraph/"
CHECKPOINTS = "refs/tags/langgraph/"
WRITES = "refs/heads/langgraph-writes/"

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}
_CACHED = 1024
"""Checkpoint records and write lists kept per saver (each keyed by an immutable revision)."""
_STATES = 8
"""Whole checkpoints kept besides each namespace's latest: the snapshots a DeltaChannel seeds from."""

_K = TypeVar("_K")
_Walk = tuple[dict[str, tuple[bool, Any, list[PendingWrite]]], frozenset[str]]
_V = TypeVar("_V")


def _component(name: str) -> str:
    """A thread id or namespace as one ref component: itself when plain, else `x-` and its UTF-8 in hex."""
    if _PLAIN.fullmatch(name) and not name.startswith("x-"):
        return name
    return "x-" + name.encode("utf-8").hex()


def _name(component: str) -> str:
    return bytes.fromhex(component[2:]).decode("utf-8") if component.startswith("x-") else component


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"))


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, BaseMessage) for m in value)


def _remember(cache: OrderedDict[_K, _V], key: _K, value: _V, size: int) -> _V:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
    return value


@dataclass(frozen=True)
class _Record:
    """A checkpoint's own entry, read alone: enough to walk parents and to know what it stores."""

    checkpoint_id: str
    parent_id: str | None
    stored: frozenset[str]
    """The channels whose value this checkpoint holds (messages or a block)."""


@dataclass
class _State:
    """A checkpoint read back: what `get_tuple` answers with, and what the next put builds on."""

    revision: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    values: dict[str, Any]
    raw: dict[str, tuple[str, str]]
    """Non-message channel values as stored: (serializer type, base64 data)."""
    message_ids: dict[str, list[str]] = field(default_factory=dict)
    """Entry ids of each message channel's messages, in order; also of a DeltaChannel's last snapshot,
    whose entries stay in the view while the checkpoint holds no value for it."""
    lists: dict[str, list[BaseMessage]] = field(default_factory=dict)
    """The messages those entries hold, by channel."""
    view: list[str] = field(default_factory=list)
    history: MessageHistory | None = None
    """The history at this revision, when this process made it: appending to it reuses its entry index."""


class CtxStoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph `BaseCheckpointSaver` over a ctxstore `Repository`: threads are refs, checkpoints revisions."""

    def __init__(self, repo: Repository, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.repo = repo
        self._latest: dict[tuple[str, str], _State] = {}
        self._states: OrderedDict[str, _State] = OrderedDict()
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._write_lists: OrderedDict[str, list[tuple[str, str, str, str, str, int]]] = OrderedDict()
        self._decoded: dict[str, BaseMessage] = {}
        # What get_delta_channel_history found for a child of a checkpoint, by (thread, ns, id, channels).
        # The value: per channel (seeded, seed, writes since), and the checkpoints whose writes it holds.
        self._walks: OrderedDict[tuple[str, str, str, frozenset[str]], _Walk] = OrderedDict()
        # While importing: refs and tags made but not committed yet (`_flush` commits them in one go).
        self._batch: dict[str, MessageHistory] | None = None
        self._batch_tags: dict[str, str] = {}

    @classmethod
    def from_path(cls, path: str, **kwargs: Any) -> CtxStoreSaver:
        """A saver over the repository at `path`, made there first if there is none."""
        repo = Repository.open(path, create=True)
        return cls(repo, **kwargs)

    # -- names ---------------------------------------------------------------------------------
    @staticmethod
    def _where(thread_id: str, ns: str) -> str:
        return f"{_component(str(thread_id))}/{_component(ns)}"

    def _tags(self, thread_id: str | None = None, ns: str | None = None) -> list[tuple[str, str, str, str]]:
        """(thread, ns, checkpoint id, revision) of stored checkpoints, newest first within a namespace.

        A scan of the tags: for listing, deleting and pruning, never on a step's path.
        """
        prefix = CHECKPOINTS
        if thread_id is not None:
            prefix += _component(str(thread_id)) + "/"
            if ns is not None:
                prefix += _component(ns) + "/"
        out: list[tuple[str, str, str, str]] = []
        for name, revision in self.repo.refs(prefix).items():
            parts = name[len(CHECKPOINTS):].split("/")
            if len(parts) == 3:
                out.append((_name(parts[0]), _name(parts[1]), parts[2], revision))
        out.sort(key=lambda t: t[2], reverse=True)
        out.sort(key=lambda t: (t[0], t[1]))  # stable: newest first within each namespace
        return out

    def _head(self, ref: str) -> str | None:
        if self._batch is not None:
            if ref in self._batch:
                return self._batch[ref].revision_id
            if ref in self._batch_tags:
                return self._batch_tags[ref]
        return self.repo.head(ref)

    def _history(self, ref: str) -> MessageHistory:
        if self._batch is not None and ref in self._batch:
            return self._batch[ref]
        return self.repo.history(ref)

    def _tag(self, thread_id: str, ns: str, checkpoint_id: str) -> str | None:
        """The revision of a checkpoint (one key read), or None."""
        return self._head(f"{CHECKPOINTS}{self._where(thread_id, ns)}/{checkpoint_id}")

    def _checkpoint_of(self, thread_id: str, ns: str, head: str | None) -> str | None:
        """The id of the checkpoint a branch head is at (cached, else its last entry), or None."""
        if head is None:
            return None
        cached = self._latest.get((thread_id, ns))
        if cached is not None and cached.revision == head:
            return cached.checkpoint_id
        record = self._record(head)
        return None if record is None else record.checkpoint_id

    def _find(self, thread_id: str, ns: str, checkpoint_id: str | None) -> tuple[str, str] | None:
        """(checkpoint id, revision) of the checkpoint named, or of the latest when `checkpoint_id` is None."""
        if checkpoint_id is not None:
            revision = self._tag(thread_id, ns, checkpoint_id)
            return None if revision is None else (checkpoint_id, revision)
        head = self._head(BRANCHES + self._where(thread_id, ns))
        latest = self._checkpoint_of(thread_id, ns, head)
        if head is not None and latest is not None and self._tag(thread_id, ns, latest) == head:
            return latest, head
        # The branch names no live checkpoint (an interrupted delete, a branch moved by hand): scan.
        tags = self._tags(thread_id, ns)
        return (tags[0][2], tags[0][3]) if tags else None

    # -- reading -------------------------------------------------------------------------------
    def _message(self, entry: MessageHistoryEntry) -> BaseMessage:
        found = self._decoded.get(entry.id)
        if found is None:
            stored = entry.message
            found = self.serde.loads_typed((stored["lc_type"], _unb64(stored["lc"])))
            if isinstance(stored.get("content"), str) and stored.get("lc_content", False):
                found = found.model_copy(update={"content": stored["content"]})
            self._decoded[entry.id] = found
        return found

    def _record(self, revision: str) -> _Record | None:
        """The checkpoint entry of a revision a put made, read without its view; None for another revision."""
        found = self._records.get(revision)
        if found is not None:
            return found
        try:
            entries = self.repo.appended(revision)
        except CtxStoreError:
            return None
        if not entries or entries[-1].message.get("role") != "checkpoint":
            return None
        last = entries[-1]
        meta = last.meta or {}
        stored = {b["channel"] for b in last.message["content"][1:]} | set(meta.get("messages", []))
        return _remember(self._records, revision, _Record(meta["id"], meta.get("parent"), frozenset(stored)),
                         _CACHED)

    def _read(self, revision: str) -> _State:
        entries = self.repo.history(revision).refs()
        if not entries or entries[-1].message.get("role") != "checkpoint":
            raise InvalidInput(f"revision {revision} is not a LangGraph checkpoint")
        last = entries[-1]
        meta = last.meta or {}
        checkpoint = self.serde.loads_typed((meta["type"], _unb64(meta["checkpoint"])))
        metadata = self.serde.loads_typed((meta["type"], _unb64(meta["metadata"])))
        raw: dict[str, tuple[str, str]] = {}
        values: dict[str, Any] = {}
        for block in last.message["content"][1:]:
            raw[block["channel"]] = (block["serde"], block["data"])
            values[block["channel"]] = self.serde.loads_typed((block["serde"], _unb64(block["data"])))
        present = list(meta.get("messages", []))
        message_ids: dict[str, list[str]] = {c: [] for c in [*present, *meta.get("kept", [])]}
        by_id: dict[str, MessageHistoryEntry] = {}
        for entry in entries[:-1]:
            channel = (entry.meta or {}).get("channel")
            if channel in message_ids:
                message_ids[channel].append(entry.id)
                by_id[entry.id] = entry
        lists = {c: [self._message(by_id[i]) for i in ids] for c, ids in message_ids.items()}
        snapshots = set(meta.get("snapshots", []))
        for channel in present:
            values[channel] = _DeltaSnapshot(list(lists[channel])) if channel in snapshots else lists[channel]
        return _State(revision, meta["id"], meta.get("parent"), checkpoint, metadata, values, raw,
                      message_ids, lists, [e.id for e in entries])

    def _state_at(self, revision: str) -> _State:
        """The checkpoint at `revision`: from this process's caches, else read whole (and kept a while)."""
        found = self._states.get(revision)
        if found is None:
            found = _remember(self._states, revision, self._read(revision), _STATES)
        return found

    def _state(self, thread_id: str, ns: str, checkpoint_id: str | None) -> _State | None:
        found = self._find(thread_id, ns, checkpoint_id)
        if found is None:
            return None
        cached = self._latest.get((thread_id, ns))
        if cached is not None and cached.revision == found[1] and cached.checkpoint_id == found[0]:
            return cached
        return self._state_at(found[1])

    def _write_list(self, thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, str, str, str, str, int]]:
        """A checkpoint's writes as stored (task, channel, serde, data, path, idx), in `writes_sort_key` order."""
        ref = f"{WRITES}{self._where(thread_id, ns)}/{checkpoint_id}"
        head = self._head(ref)
        if head is None:
            return []
        cached = self._write_lists.get(head)
        if cached is not None:
            return cached
        kept: dict[tuple[str, int], tuple[str, str, str, str, str, int]] = {}
        for entry in self._history(ref).refs():
            for w in entry.message["content"]:
                key = (w["task"], w["idx"])
                if key in kept and w["idx"] >= 0:
                    continue
                kept[key] = (w["task"], w["channel"], w["serde"], w["data"], w["path"], w["idx"])
        order = sorted(kept.values(), key=lambda w: _writes_sort_key(w[4], w[0], w[5]))
        return order if self._batch is not None else _remember(self._write_lists, head, order, _CACHED)

    def _writes(self, thread_id: str, ns: str, checkpoint_id: str) -> list[PendingWrite]:
        return [(w[0], w[1], self.serde.loads_typed((w[2], _unb64(w[3]))))
                for w in self._write_list(thread_id, ns, checkpoint_id)]

    def _tuple(self, thread_id: str, ns: str, state: _State) -> CheckpointTuple:
        def config(checkpoint_id: str) -> RunnableConfig:
            return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}

        checkpoint = cast(Checkpoint, {**state.checkpoint, "channel_values": dict(state.values)})
        return CheckpointTuple(
            config=config(state.checkpoint_id),
            checkpoint=checkpoint,
            metadata=cast(CheckpointMetadata, dict(state.metadata)),
            parent_config=config(state.parent_id) if state.parent_id else None,
            pending_writes=self._writes(thread_id, ns, state.checkpoint_id),
        )

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint `config` names (its `checkpoint_id`, else the thread's latest), or None."""
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        state = self._state(thread_id, ns, get_checkpoint_id(config))
        return None if state is None else self._tuple(thread_id, ns, state)

    def list(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
             before: RunnableConfig | None = None, limit: int | None = None) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first, of one thread (and namespace) or of all, filtered as LangGraph's are."""
        thread_id = str(config["configurable"]["thread_id"]) if config else None
        ns = config["configurable"].get("checkpoint_ns") if config else None
        only = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        for thread, space, checkpoint_id, revision in self._tags(thread_id, ns):
            if limit is not None and limit <= 0:
                return
            if (only and checkpoint_id != only) or (before_id and checkpoint_id >= before_id):
                continue
            cached = self._latest.get((thread, space))
            state = cached if cached is not None and cached.revision == revision else self._state_at(revision)
            if filter and not all(state.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None:
                limit -= 1
            yield self._tuple(thread, space, state)

    def get_delta_channel_history(self, *, config: RunnableConfig,
                                  channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        """Each DeltaChannel's writes on the path to a checkpoint since its nearest stored value (the seed).

        The contract of `BaseCheckpointSaver.get_delta_channel_history`, answered from the structure:
        an ancestor is one tag read, its checkpoint entry (cached by revision) and its writes ref, and a
        seed of messages is the snapshot's entries. What was answered for a checkpoint is kept, so the
        next step's answer reads only the checkpoints made since.
        """
        if not channels:
            return {}
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        found = self._find(thread_id, ns, get_checkpoint_id(config))
        target = None if found is None else self._record(found[1])
        if target is None or target.parent_id is None:
            return {c: {"writes": []} for c in channels}
        after = self._delta_after(thread_id, ns, target.parent_id, frozenset(channels), {target.checkpoint_id})
        out: dict[str, DeltaChannelHistory] = {}
        for channel in channels:
            seeded, seed, writes = after[channel]
            out[channel] = {"writes": list(writes), "seed": seed} if seeded else {"writes": list(writes)}
        return out

    def _delta_after(self, thread_id: str, ns: str, checkpoint_id: str, channels: frozenset[str],
                     seen: set[str]) -> dict[str, tuple[bool, Any, builtins.list[PendingWrite]]]:
        """For a child of `checkpoint_id`: per channel whether a seed was found, the seed, and the writes
        since it (oldest first), walking back only to a checkpoint already answered for."""
        path: list[tuple[str, str, _Record]] = []  # nearest first
        base: _Walk | None = None
        cursor: str | None = checkpoint_id
        while cursor is not None and cursor not in seen:
            seen.add(cursor)
            base = self._walks.get((thread_id, ns, cursor, channels))
            if base is not None:
                break
            revision = self._tag(thread_id, ns, cursor)
            record = None if revision is None else self._record(revision)
            if revision is None or record is None:
                break
            path.append((cursor, revision, record))
            if channels <= record.stored:
                break
            cursor = record.parent_id
        current, covered = base or ({c: (False, None, []) for c in channels}, frozenset())
        for cursor, revision, record in reversed(path):
            writes = [(w[0], w[1], self.serde.loads_typed((w[2], _unb64(w[3]))))
                      for w in self._write_list(thread_id, ns, cursor) if w[1] in channels]
            step: dict[str, tuple[bool, Any, builtins.list[PendingWrite]]] = {}
            for channel in channels:
                mine = [w for w in writes if w[1] == channel]
                if channel in record.stored:
                    step[channel] = (True, self._state_at(revision).values[channel], mine)
                else:
                    seeded, seed, before = current[channel]
                    step[channel] = (seeded, seed, [*before, *mine])
            current, covered = step, (frozenset() if channels <= record.stored else covered) | {cursor}
            _remember(self._walks, (thread_id, ns, cursor, channels), (current, covered), _STATES * 4)
        return current

    # -- writing -------------------------------------------------------------------------------
    def put(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> RunnableConfig:
        """Store a checkpoint as a new revision on the thread's ref: new messages and one checkpoint entry."""
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        parent_id = config["configurable"].get("checkpoint_id")
        where = self._where(thread_id, ns)
        branch = BRANCHES + where
        parent = self._state(thread_id, ns, parent_id) if parent_id else None
        head = self._head(branch)
        if parent is not None:
            history = parent.history or self.repo.history(parent.revision)
        else:  # a new line: on an existing branch it starts from an empty view
            history = self._history(branch)
            if head is not None:
                history = history.with_view([])

        values: dict[str, Any] = dict(checkpoint["channel_values"])
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        kind, data = self.serde.dumps_typed(rest)
        meta_kind, meta_data = self.serde.dumps_typed(get_checkpoint_metadata(config, metadata))
        if meta_kind != kind:
            raise InvalidInput("LangGraph's serializer gave two encodings for one checkpoint")
        versions = checkpoint["channel_versions"]
        blocks: list[dict[str, Any]] = []
        present: list[str] = []  # message channels with a value here
        kept: list[str] = []  # DeltaChannels between snapshots: their last snapshot's entries stay in the view
        snapshots: list[str] = []
        new_entries: list[dict[str, Any]] = []
        new_messages: list[BaseMessage] = []
        dropped: set[str] = set()
        lists: dict[str, list[BaseMessage]] = {}
        message_ids: dict[str, list[str]] = {}
        for channel in sorted(versions):
            fresh = channel in new_versions
            if not fresh or channel not in values:
                if parent is None or (not fresh and parent.checkpoint["channel_versions"].get(channel)
                                      != versions[channel]):
                    continue
                if channel in parent.message_ids:  # unchanged, or a DeltaChannel step that stores no value
                    has_value = not fresh and channel in parent.values
                    (present if has_value else kept).append(channel)
                    if has_value and isinstance(parent.values[channel], _DeltaSnapshot):
                        snapshots.append(channel)
                    message_ids[channel] = parent.message_ids[channel]
                    lists[channel] = parent.lists[channel]
                elif not fresh and channel in parent.raw:
                    serde, stored = parent.raw[channel]
                    blocks.append({"type": "channel", "channel": channel, "serde": serde, "data": stored})
                continue
            value = values[channel]
            snapshot = isinstance(value, _DeltaSnapshot)
            if snapshot:
                value = value.value
            old_ids = parent.message_ids.get(channel, []) if parent else []
            old = parent.lists.get(channel, []) if parent else []
            n = len(old_ids)
            # The previous messages again, then new ones: only the new ones are looked at one by one.
            grows = bool(n) and isinstance(value, list) and len(old) == n <= len(value) and old == value[:n]
            todo = value[n:] if grows else value
            if _is_messages(todo) or (grows and not todo):
                present.append(channel)
                if snapshot:
                    snapshots.append(channel)
                if grows:
                    ids = list(old_ids)
                else:
                    dropped.update(old_ids)
                    ids = []
                new_entries.extend(self._message_entry(channel, message) for message in todo)
                new_messages.extend(todo)
                message_ids[channel] = ids  # the new entries' ids join it once they are made
                lists[channel] = list(value)
                continue
            if parent is not None:  # no longer a message list: its entries leave the view
                dropped.update(parent.message_ids.get(channel, []))
            serde, encoded = self.serde.dumps_typed(values[channel])  # a snapshot stays one
            blocks.append({"type": "channel", "channel": channel, "serde": serde, "data": _b64(encoded)})
        step = (metadata or {}).get("step")
        record = {
            "message": {"role": "checkpoint",
                        "content": [{"type": "text", "text": f"checkpoint {checkpoint['id']} step {step}"},
                                    *blocks]},
            "meta": {"id": checkpoint["id"], "parent": parent_id, "type": kind, "checkpoint": _b64(data),
                     "metadata": _b64(meta_data), "messages": present,
                     **({"kept": kept} if kept else {}), **({"snapshots": snapshots} if snapshots else {})},
        }
        view = parent.view if parent else []
        if parent is not None and dropped:
            view = [i for i in view if i not in dropped]
            history = history.with_view(view)
        # While importing, ids are given (they cannot clash: nothing else writes there); a put lets the
        # history make them, which spares it looking them up in a lineage it may not have read.
        if self._batch is not None:
            for entry in [*new_entries, record]:
                entry["id"] = _entry_id()
        history = history.extend([*new_entries, record])
        revision = history.revision_id
        tag = f"{CHECKPOINTS}{where}/{checkpoint['id']}"
        latest = self._checkpoint_of(thread_id, ns, head)
        if head is not None and latest is not None and checkpoint["id"] < latest:
            # An older id put again: name it, but the branch stays at the latest checkpoint.
            if self._batch is not None:
                self._flush("langgraph: import")
            self.repo.commit_many({branch: history}, force=True, message="langgraph: put", set_refs={tag: revision})
            self.repo.set_ref(branch, head, message="langgraph: latest")
        else:
            forks = parent is not None and head is not None and head != parent.revision
            self._commit({branch: history}, force=forks, message="langgraph: fork" if forks else "langgraph: put",
                         tags={tag: revision})
        made = ([str(e["id"]) for e in [*new_entries, record]] if self._batch is not None
                else [e.id for e in self.repo.appended(revision)])
        for entry, message, entry_id in zip(new_entries, new_messages, made, strict=False):
            message_ids[entry["meta"]["channel"]].append(entry_id)
            self._decoded[entry_id] = message
        values = {c: (_DeltaSnapshot(list(lists[c])) if c in snapshots else lists[c]) for c in present}
        values.update({b["channel"]: self.serde.loads_typed((b["serde"], _unb64(b["data"]))) for b in blocks})
        state = _State(
            revision, checkpoint["id"], parent_id, self.serde.loads_typed((kind, data)),
            self.serde.loads_typed((kind, meta_data)), values,
            {b["channel"]: (b["serde"], b["data"]) for b in blocks}, message_ids, lists,
            [*view, *made], history)
        self._latest[(thread_id, ns)] = state
        if snapshots:
            _remember(self._states, revision, state, _STATES)
        holds = frozenset(present) | {b["channel"] for b in blocks}
        _remember(self._records, revision, _Record(checkpoint["id"], parent_id, holds), _CACHED)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _commit(self, updates: dict[str, MessageHistory], *, force: bool, message: str,
                tags: dict[str, str] | None = None) -> None:
        """Move refs (and set tags) in one transaction, or hold them for `_flush` while importing."""
        if self._batch is not None:
            self._batch.update(updates)
            self._batch_tags.update(tags or {})
            return
        self.repo.commit_many(updates, force=force, message=message, set_refs=tags)

    def _flush(self, message: str) -> builtins.list[CommitResult]:
        """Commit what an import holds: every ref and tag in one transaction."""
        if not self._batch and not self._batch_tags:
            return []
        updates, tags = dict(self._batch or {}), dict(self._batch_tags)
        self._batch, self._batch_tags = {}, {}
        if not updates:
            for name, revision in tags.items():
                self.repo.set_ref(name, revision, message=message)
            return []
        return self.repo.commit_many(updates, force=True, message=message, set_refs=tags)

    def _message_entry(self, channel: str, message: BaseMessage) -> dict[str, Any]:
        content = message.content
        plain = isinstance(content, str)
        kind, data = self.serde.dumps_typed(message.model_copy(update={"content": ""}) if plain else message)
        return {"message": {"role": _ROLES.get(message.type, message.type), "content": content if plain else "",
                            "lc_type": kind, "lc": _b64(data), "lc_content": plain},
                "meta": {"channel": channel}}

    def put_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                   task_path: str = "") -> None:
        """Store a task's writes against a checkpoint (its `langgraph-writes` ref gains one entry)."""
        thread_id = str(config["configurable"]["thread_id"])
        ns = config["configurable"].get("checkpoint_ns", "")
        checkpoint_id = config["configurable"]["checkpoint_id"]
        ref = f"{WRITES}{self._where(thread_id, ns)}/{checkpoint_id}"
        blocks = []
        for idx, (channel, value) in enumerate(writes):
            serde, data = self.serde.dumps_typed(value)
            blocks.append({"type": "write", "task": task_id, "idx": WRITES_IDX_MAP.get(channel, idx),
                           "channel": channel, "path": task_path, "serde": serde, "data": _b64(data)})
        if not blocks:
            return
        entry = [{"role": "writes", "content": blocks}]
        if self._batch is not None:
            self._batch[ref] = self._history(ref).extend(entry)
        elif self.repo.head(ref) is None:
            try:  # every writes ref starts from one shared empty root, not a root revision of its own
                self.repo.commit(ref, MessageHistory(source=self.repo.store, created_at=0).extend(entry),
                                 message="langgraph: writes")
            except NonFastForward:  # another task's writes to this checkpoint landed first: go after them
                self.repo.append(ref, entry, message="langgraph: writes")
        else:
            self.repo.append(ref, entry, message="langgraph: writes")
        # Once they are stored: what was answered for this checkpoint's descendants replayed without them.
        written = {channel for channel, _ in writes}
        for key, (_, covered) in list(self._walks.items()):  # a copy: a subgraph's thread may read meanwhile
            if key[:2] == (thread_id, ns) and key[3] & written and checkpoint_id in covered:
                self._walks.pop(key, None)

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: its conversations, checkpoints and writes, in every namespace."""
        where = _component(str(thread_id)) + "/"
        for prefix in (BRANCHES, CHECKPOINTS, WRITES):
            for name in self.repo.refs(prefix + where):
                self.repo.delete_ref(name, message="langgraph: delete thread")
        self._latest = {k: v for k, v in self._latest.items() if k[0] != str(thread_id)}
        self._walks.clear()

    def _drop(self, thread_id: str, ns: str, checkpoint_id: str, why: str) -> None:
        where = self._where(thread_id, ns)
        branch = BRANCHES + where
        head = self.repo.head(branch)
        record = None if head is None else self._record(head)
        for ref in (f"{CHECKPOINTS}{where}/{checkpoint_id}", f"{WRITES}{where}/{checkpoint_id}"):
            if self.repo.head(ref) is not None:
                self.repo.delete_ref(ref, message=f"langgraph: {why}")
        self._latest.pop((thread_id, ns), None)
        self._walks.clear()
        if record is not None and record.checkpoint_id == checkpoint_id:
            # The latest checkpoint went: the branch moves back to the newest one left, so finding the
            # latest stays one read.
            tags = self._tags(thread_id, ns)
            if tags:
                self.repo.set_ref(branch, tags[0][3], message=f"langgraph: {why}")
            else:
                self.repo.delete_ref(branch, message=f"langgraph: {why}")

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of `run_ids`."""
        runs = set(run_ids)
        if not runs:
            return
        for thread, ns, checkpoint_id, revision in self._tags():
            if self._state_at(revision).metadata.get("run_id") in runs:
                self._drop(thread, ns, checkpoint_id, "delete for runs")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint (`keep_latest`) or none (`delete`) of these threads.

        The conversations' revisions stay in their refs' lineages; only the checkpoints' names go.
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"unknown prune strategy {shown(strategy)}; expected keep_latest or delete")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            seen: set[str] = set()
            for thread, ns, checkpoint_id, _ in self._tags(str(thread_id)):
                if ns in seen:
                    self._drop(thread, ns, checkpoint_id, "prune")
                seen.add(ns)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's refs under another thread id: every revision is shared, nothing is rewritten."""
        source, target = _component(str(source_thread_id)) + "/", _component(str(target_thread_id)) + "/"
        for prefix in (BRANCHES, CHECKPOINTS, WRITES):
            for name, revision in self.repo.refs(prefix + source).items():
                self.repo.set_ref(prefix + target + name[len(prefix + source):], revision,
                                  message=f"langgraph: copy of thread {source_thread_id}")

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version after `current`: a zero-padded counter and a random tie-breaker (as InMemorySaver's)."""
        if current is None:
            number = 0
        elif isinstance(current, int):
            number = current
        else:
            number = int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- async: the repository's calls are short local transactions, made in the caller's thread ---------
    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.get_tuple(config)

    async def alist(self, config: RunnableConfig | None, *, filter: dict[str, Any] | None = None,
                    before: RunnableConfig | None = None, limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        for item in self.list(config, filter=filter, before=before, limit=limit):
            yield item

    async def aput(self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> RunnableConfig:
        return self.put(config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str,
                          task_path: str = "") -> None:
        self.put_writes(config, writes, task_id, task_path)

    async def aget_delta_channel_history(self, *, config: RunnableConfig,
                                         channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
        return self.get_delta_channel_history(config=config, channels=channels)

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)


def _entry_id() -> str:
    return f"lg-{random.getrandbits(96):024x}"


def _sqlite_rows(path: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The checkpoints and writes rows of a SqliteSaver database, read without changing it."""
    if not path.is_file():
        raise InvalidInput(f"no file {path}; give the path of a LangGraph SqliteSaver database")
    try:
        with closing(sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"checkpoints", "writes"} <= tables:
                raise InvalidInput(f"{path} is a SQLite database but not a LangGraph SqliteSaver one: it has no "
                                   "checkpoints and writes tables")
            columns = {r[1] for r in conn.execute("PRAGMA table_info(writes)")}
            task_path = "task_path" if "task_path" in columns else "''"
            checkpoints = conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata "
                "FROM checkpoints ORDER BY thread_id, checkpoint_ns, checkpoint_id").fetchall()
            writes = conn.execute(
                f"SELECT thread_id, checkpoint_ns, checkpoint_id, task_id, {task_path}, idx, channel, type, value "
                "FROM writes ORDER BY thread_id, checkpoint_ns, checkpoint_id, task_id, idx").fetchall()
    except sqlite3.DatabaseError as exc:
        raise InvalidInput(f"{path} is not a LangGraph SqliteSaver database ({exc}); give the file "
                           "SqliteSaver.from_conn_string was opened on") from None
    return checkpoints, writes


def _parents_first(rows: dict[str, tuple[Any, ...]]) -> list[str]:
    """Checkpoint ids in id order, each after its parent (ids are only monotonic within one process)."""
    order: list[str] = []
    done: set[str] = set()
    for start in sorted(rows):
        chain = []
        cursor: str | None = start
        while cursor is not None and cursor in rows and cursor not in done and cursor not in chain:
            chain.append(cursor)
            cursor = rows[cursor][3]
        for checkpoint_id in reversed(chain):
            done.add(checkpoint_id)
            order.append(checkpoint_id)
    return order


def _import_writes(saver: CtxStoreSaver, config: RunnableConfig, rows: list[tuple[Any, ...]],
                   have: dict[str, int]) -> None:
    """A checkpoint's writes rows, a `put_writes` per task; a task with as many writes stored is skipped."""
    by_task: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        by_task.setdefault(row[3], []).append(row)
    for task_id, task_rows in by_task.items():
        if have.get(task_id, 0) >= len(task_rows):
            continue
        task_rows.sort(key=lambda r: (r[5] < 0, r[5]))  # LangGraph's special writes go last, as it puts them
        saver.put_writes(config, [(r[6], saver.serde.loads_typed((r[7], r[8]))) for r in task_rows],
                         task_id, task_rows[0][4])


def import_sqlite(repo: Repository, db_path: str | os.PathLike[str], *,
                  progress: ImportProgress | None = None) -> list[CommitResult]:
    """Bring every thread and namespace of a LangGraph `SqliteSaver` database into `repo`, one branch each.

    Each checkpoint becomes a revision in the shape `CtxStoreSaver` writes (its messages as entries, a
    checkpoint entry, a tag; its writes on a writes ref), so a graph compiled with `CtxStoreSaver` over
    `repo` continues the thread. Checkpoints already imported are skipped, so importing the same file
    again moves nothing, and a thread that grew since gains only its new checkpoints. `progress(done,
    total)` follows the checkpoints as they are built, as the interop imports follow their messages.
    Returns the branches' moves (old None for a new one), in thread order; one already up to date is
    not among them. A missing file or one that is not such a database is an `InvalidInput`.
    """
    path = Path(db_path)
    checkpoints, write_rows = _sqlite_rows(path)
    saver = CtxStoreSaver(repo)
    serde = saver.serde
    writes: dict[tuple[str, str, str], list[tuple[Any, ...]]] = {}
    for row in write_rows:
        writes.setdefault((str(row[0]), row[1], row[2]), []).append(row)
    groups: dict[tuple[str, str], dict[str, tuple[Any, ...]]] = {}
    for row in checkpoints:
        groups.setdefault((str(row[0]), row[1]), {})[row[2]] = row
    before = {key: repo.head(BRANCHES + saver._where(*key)) for key in groups}
    message = f"langgraph: import {path.name}"
    done = 0
    saver._batch = {}
    try:
        for (thread_id, ns), rows in groups.items():
            for checkpoint_id in _parents_first(rows):
                _, _, _, parent_id, kind, blob, meta = rows[checkpoint_id]
                done += 1
                ours: RunnableConfig = {
                    "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
                if saver._tag(thread_id, ns, checkpoint_id) is not None:  # imported before: only new writes
                    have: dict[str, int] = {}
                    for w in saver._write_list(thread_id, ns, checkpoint_id):
                        have[w[0]] = have.get(w[0], 0) + 1
                    _import_writes(saver, ours, writes.get((thread_id, ns, checkpoint_id), []), have)
                    if progress is not None:
                        progress(done, len(checkpoints))
                    continue
                cached = saver._latest.get((thread_id, ns))
                if saver._batch and parent_id is not None and (cached is None or cached.checkpoint_id != parent_id):
                    saver._flush(message)  # a fork: its parent must be readable from the store
                checkpoint = cast(Checkpoint, serde.loads_typed((kind, blob)))
                parent_row = rows.get(parent_id) if parent_id is not None else None
                parent_versions: dict[str, Any] = {}
                if parent_row is not None:
                    parent_versions = serde.loads_typed((parent_row[4], parent_row[5]))["channel_versions"]
                versions = checkpoint["channel_versions"]
                new_versions = {c: v for c, v in versions.items() if parent_versions.get(c) != v}
                configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
                if parent_id is not None:
                    configurable["checkpoint_id"] = parent_id
                saver.put({"configurable": configurable}, checkpoint,
                          cast(CheckpointMetadata, json.loads(meta) if meta else {}), new_versions)
                _import_writes(saver, ours, writes.get((thread_id, ns, checkpoint_id), []), {})
                if progress is not None:
                    progress(done, len(checkpoints))
            saver._flush(message)
    finally:
        saver._batch, saver._batch_tags = None, {}
    results = []
    for key, old in before.items():
        new = repo.head(BRANCHES + saver._where(*key))
        if new is not None and new != old:
            results.append(CommitResult(BRANCHES + saver._where(*key), old, new))
    return results

