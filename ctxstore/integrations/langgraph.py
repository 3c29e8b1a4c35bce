"""`CtxStoreSaver`: a LangGraph checkpointer that keeps each thread in a ctxstore `Repository`.

The layout, one thread (`thread_id`) and checkpoint namespace (`checkpoint_ns`) at a time, each name
spelled as a ref component (`_component`):

- `refs/heads/langgraph/<thread>/<ns>`: the conversation, pointing at the latest checkpoint put. A put
  on an older checkpoint (LangGraph's time travel: `update_state` or `invoke` from a past config)
  forks: the branch moves to the new line, the old line stays named by its checkpoints' tags, and
  `ctxstore log --graph` shows the fork.
- `refs/tags/langgraph/<thread>/<ns>/<checkpoint_id>`: each checkpoint, naming its revision.
- `refs/heads/langgraph-writes/<thread>/<ns>/<checkpoint_id>`: the checkpoint's pending writes.

A checkpoint's revision holds, in its view, the messages of every message channel (a list of LangChain
messages, as `add_messages` keeps them) as one entry each, then one `checkpoint` entry: the checkpoint
and its metadata (LangGraph's serializer, base64) and a content block per other channel value. A step
that adds k messages adds k + 1 entries, never a copy of the list; a channel value of 4 KiB or more is
a content-addressed blob, so an unchanged one costs a reference. A message list that is not the previous
one plus new messages (a message removed or replaced by id) is stored by re-viewing: the old entries
leave the view, the whole list is appended.
"""

from __future__ import annotations

import base64
import random
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_checkpoint_metadata,
)
from langgraph.checkpoint.base import writes_sort_key as _writes_sort_key

from ..errors import InvalidInput
from ..history import MessageHistory, MessageHistoryEntry
from ..repo import Repository

__all__ = ["CtxStoreSaver"]

BRANCHES = "refs/heads/langgraph/"
CHECKPOINTS = "refs/tags/langgraph/"
WRITES = "refs/heads/langgraph-writes/"

_PLAIN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


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
    """Entry ids of each message channel's messages, in order."""
    view: list[str] = field(default_factory=list)
    history: MessageHistory | None = None
    """The history at this revision, when this process made it: appending to it reuses its entry index."""


class CtxStoreSaver(BaseCheckpointSaver[str]):
    """A LangGraph `BaseCheckpointSaver` over a ctxstore `Repository`: threads are refs, checkpoints revisions."""

    def __init__(self, repo: Repository, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.repo = repo
        self._latest: dict[tuple[str, str], _State] = {}
        self._decoded: dict[str, BaseMessage] = {}

    @classmethod
    def from_path(cls, path: str, **kwargs: Any) -> CtxStoreSaver:
        """A saver over the repository at `path`, made there first if there is none."""
        import os

        repo = Repository.open(path) if os.path.exists(os.path.join(path, "format")) else Repository.init(path)
        return cls(repo, **kwargs)

    # -- names ---------------------------------------------------------------------------------
    @staticmethod
    def _where(thread_id: str, ns: str) -> str:
        return f"{_component(str(thread_id))}/{_component(ns)}"

    def _tags(self, thread_id: str | None = None, ns: str | None = None) -> list[tuple[str, str, str, str]]:
        """(thread, ns, checkpoint id, revision) of stored checkpoints, newest first within a namespace."""
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
        out.sort(key=lambda t: (t[0], t[1], _Desc(t[2])))
        return out

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
        message_ids: dict[str, list[str]] = {c: [] for c in meta.get("messages", [])}
        for entry in entries[:-1]:
            channel = (entry.meta or {}).get("channel")
            if channel in message_ids:
                message_ids.setdefault(channel, []).append(entry.id)
        by_id = {e.id: e for e in entries}
        for channel in meta.get("messages", []):
            values[channel] = [self._message(by_id[i]) for i in message_ids.get(channel, [])]
        return _State(revision, meta["id"], meta.get("parent"), checkpoint, metadata, values, raw,
                      message_ids, [e.id for e in entries])

    def _state(self, thread_id: str, ns: str, checkpoint_id: str | None) -> _State | None:
        cached = self._latest.get((thread_id, ns))
        if checkpoint_id is None:
            tags = self._tags(thread_id, ns)
            if not tags:
                return None
            checkpoint_id, revision = tags[0][2], tags[0][3]
        else:
            found = self.repo.refs(f"{CHECKPOINTS}{self._where(thread_id, ns)}/{checkpoint_id}")
            revision = found.get(f"{CHECKPOINTS}{self._where(thread_id, ns)}/{checkpoint_id}", "")
            if not revision:
                return None
        if cached is not None and cached.revision == revision and cached.checkpoint_id == checkpoint_id:
            return cached
        return self._read(revision)

    def _writes(self, thread_id: str, ns: str, checkpoint_id: str) -> list[tuple[str, str, Any]]:
        ref = f"{WRITES}{self._where(thread_id, ns)}/{checkpoint_id}"
        if self.repo.head(ref) is None:
            return []
        kept: dict[tuple[str, int], tuple[str, str, str, str, str]] = {}
        for entry in self.repo.history(ref).refs():
            for w in entry.message["content"]:
                key = (w["task"], w["idx"])
                if key in kept and w["idx"] >= 0:
                    continue
                kept[key] = (w["task"], w["channel"], w["serde"], w["data"], w["path"])
        order = sorted(kept, key=lambda k: _writes_sort_key(kept[k][4], k[0], k[1]))
        return [(kept[k][0], kept[k][1], self.serde.loads_typed((kept[k][2], _unb64(kept[k][3])))) for k in order]

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
            state = self._state(thread, space, checkpoint_id) or self._read(revision)
            if filter and not all(state.metadata.get(k) == v for k, v in filter.items()):
                continue
            if limit is not None:
                limit -= 1
            yield self._tuple(thread, space, state)

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
        head = self.repo.head(branch)
        if parent is not None:
            history = parent.history or self.repo.history(parent.revision)
        else:  # a new line: on an existing branch it starts from an empty view
            history = self.repo.history(branch)
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
        message_channels: list[str] = []
        new_entries: list[dict[str, Any]] = []
        dropped: set[str] = set()
        message_values: dict[str, list[BaseMessage]] = {}
        message_ids: dict[str, list[str]] = {}
        for channel in sorted(versions):
            fresh = channel in new_versions
            if not fresh:
                if parent is None or parent.checkpoint["channel_versions"].get(channel) != versions[channel]:
                    continue
                if channel in parent.message_ids and channel in parent.values:
                    message_channels.append(channel)
                    message_ids[channel] = parent.message_ids[channel]
                elif channel in parent.raw:
                    serde, stored = parent.raw[channel]
                    blocks.append({"type": "channel", "channel": channel, "serde": serde, "data": stored})
                continue
            if channel not in values:
                continue
            value = values[channel]
            if _is_messages(value):
                message_channels.append(channel)
                old_ids = parent.message_ids.get(channel, []) if parent else []
                old = parent.values.get(channel, []) if parent and channel in parent.message_ids else []
                n = len(old_ids)
                if len(old) == n <= len(value) and all(a is b or a == b for a, b in zip(old, value[:n], strict=False)):
                    todo = value[n:]
                    ids = list(old_ids)
                else:
                    dropped.update(old_ids)
                    todo, ids = value, []
                for message in todo:
                    entry = self._message_entry(channel, message)
                    new_entries.append(entry)
                    ids.append(entry["id"])
                message_ids[channel] = ids
                message_values[channel] = list(value)
                continue
            if parent is not None:  # no longer a message list: its entries leave the view
                dropped.update(parent.message_ids.get(channel, []))
            serde, encoded = self.serde.dumps_typed(value)
            blocks.append({"type": "channel", "channel": channel, "serde": serde, "data": _b64(encoded)})
        step = (metadata or {}).get("step")
        record = {
            "id": _entry_id(),
            "message": {"role": "checkpoint",
                        "content": [{"type": "text", "text": f"checkpoint {checkpoint['id']} step {step}"},
                                    *blocks]},
            "meta": {"id": checkpoint["id"], "parent": parent_id, "type": kind, "checkpoint": _b64(data),
                     "metadata": _b64(meta_data), "messages": message_channels},
        }
        if parent is not None and dropped:
            history = history.with_view([i for i in parent.view if i not in dropped])
        history = history.extend([*new_entries, record])
        forks = parent is not None and head is not None and head != parent.revision
        self.repo.commit(branch, history, force=forks, message="langgraph: fork" if forks else "langgraph: put")
        self.repo.set_ref(f"{CHECKPOINTS}{where}/{checkpoint['id']}", history.revision_id)
        view = [i for i in parent.view if i not in dropped] if parent else []
        values = {c: message_values.get(c, parent.values.get(c) if parent else None) for c in message_channels}
        values.update({b["channel"]: self.serde.loads_typed((b["serde"], _unb64(b["data"]))) for b in blocks})
        self._latest[(thread_id, ns)] = _State(
            history.revision_id, checkpoint["id"], parent_id, self.serde.loads_typed((kind, data)),
            self.serde.loads_typed((kind, meta_data)), values,
            {b["channel"]: (b["serde"], b["data"]) for b in blocks}, message_ids,
            [*view, *(str(e["id"]) for e in new_entries), str(record["id"])], history)
        return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}}

    def _message_entry(self, channel: str, message: BaseMessage) -> dict[str, Any]:
        content = message.content
        plain = isinstance(content, str)
        kind, data = self.serde.dumps_typed(message.model_copy(update={"content": ""}) if plain else message)
        entry_id = _entry_id()
        self._decoded[entry_id] = message
        return {"id": entry_id,
                "message": {"role": _ROLES.get(message.type, message.type), "content": content if plain else "",
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
        if blocks:
            self.repo.append(ref, [{"role": "writes", "content": blocks}])

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread: its conversations, checkpoints and writes, in every namespace."""
        where = _component(str(thread_id)) + "/"
        for prefix in (BRANCHES, CHECKPOINTS, WRITES):
            for name in self.repo.refs(prefix + where):
                self.repo.delete_ref(name, message="langgraph: delete thread")
        self._latest = {k: v for k, v in self._latest.items() if k[0] != str(thread_id)}

    def _drop(self, thread_id: str, ns: str, checkpoint_id: str, why: str) -> None:
        where = self._where(thread_id, ns)
        for ref in (f"{CHECKPOINTS}{where}/{checkpoint_id}", f"{WRITES}{where}/{checkpoint_id}"):
            if self.repo.head(ref) is not None:
                self.repo.delete_ref(ref, message=f"langgraph: {why}")
        self._latest.pop((thread_id, ns), None)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata names one of `run_ids`."""
        runs = set(run_ids)
        if not runs:
            return
        for thread, ns, checkpoint_id, revision in self._tags():
            if self._read(revision).metadata.get("run_id") in runs:
                self._drop(thread, ns, checkpoint_id, "delete for runs")

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep only each namespace's latest checkpoint (`keep_latest`) or none (`delete`) of these threads.

        The conversations' revisions stay in their refs' lineages; only the checkpoints' names go.
        """
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInput(f"unknown prune strategy {strategy!r}; expected keep_latest or delete")
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

    async def adelete_thread(self, thread_id: str) -> None:
        self.delete_thread(thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        self.delete_for_runs(run_ids)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self.prune(thread_ids, strategy=strategy)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self.copy_thread(source_thread_id, target_thread_id)


class _Desc:
    """A string key that sorts in reverse."""

    __slots__ = ("s",)

    def __init__(self, s: str) -> None:
        self.s = s

    def __lt__(self, other: _Desc) -> bool:
        return self.s > other.s

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.s == other.s

    def __hash__(self) -> int:
        return hash(self.s)


def _entry_id() -> str:
    return f"lg-{random.getrandbits(96):024x}"
