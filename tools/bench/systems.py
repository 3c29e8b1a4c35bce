"""One adapter per system measured, each used the way its own documentation shows, durably.

Every adapter opens a store in a directory and offers the same few operations: append one message to a
branch and make it durable, import many in one commit, fork a branch off another, and (in a fresh
process) open the store and read the latest view back. Each system's code is imported only when that
system runs, so a competitor that is not installed is reported as such and nothing else fails.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, ClassVar

from benchdoc import dir_bytes

Message = dict[str, Any]


def version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


class System:
    """A store under test. Subclasses set `name`, `label`, `packages` and implement the operations."""

    name = ""
    label = ""
    packages: tuple[str, ...] = ()
    # Messages per workload beyond which recording one message per commit would take hours or hundreds
    # of gigabytes (see each subclass); a workload not named here has no limit.
    max_recorded: ClassVar[dict[str, int]] = {}
    # Modules a fresh process imports before its clock starts (import time is not the store's work).
    modules: tuple[str, ...] = ("json",)

    @classmethod
    def versions(cls) -> dict[str, str | None]:
        return {p: version(p) for p in cls.packages}

    @classmethod
    def installed(cls) -> bool:
        return all(v is not None for v in cls.versions().values())

    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, branch: str, message: Message) -> None:
        raise NotImplementedError

    def bulk(self, branch: str, messages: list[Message]) -> None:
        raise NotImplementedError

    def fork(self, source: str, branch: str) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def disk(self) -> int:
        return dir_bytes(self.path)

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        """Open the store at `path` and read `branch`'s latest view; the number of messages read."""
        raise NotImplementedError


class Jsonl(System):
    """One JSONL file per branch; every append is written, flushed and fsynced; a fork copies the file."""

    name, label = "jsonl", "JSONL + fsync"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        path.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, Any] = {}

    def _file(self, branch: str) -> Any:
        if branch not in self._files:
            # held open across appends, as a recorder would; closed by close()
            self._files[branch] = open(self.path / (branch.replace("/", "_") + ".jsonl"), "a",  # noqa: SIM115
                                       encoding="utf-8")
        return self._files[branch]

    def append(self, branch: str, message: Message) -> None:
        f = self._file(branch)
        f.write(json.dumps(message, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())

    def bulk(self, branch: str, messages: list[Message]) -> None:
        f = self._file(branch)
        f.write("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages))
        f.flush()
        os.fsync(f.fileno())

    def fork(self, source: str, branch: str) -> None:
        self._file(source).flush()
        target = self._file(branch)
        with open(self.path / (source.replace("/", "_") + ".jsonl"), encoding="utf-8") as src:
            shutil.copyfileobj(src, target)
        target.flush()
        os.fsync(target.fileno())

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        with open(path / (branch.replace("/", "_") + ".jsonl"), encoding="utf-8") as f:
            view = [json.loads(line) for line in f]
        return len(view)


class Sqlite(System):
    """stdlib sqlite3: a row per message, WAL, synchronous=FULL, a commit per append; a fork copies rows."""

    name, label = "sqlite", "SQLite (WAL, FULL)"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        path.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path / "chat.sqlite")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, branch TEXT NOT NULL, "
                        "data TEXT NOT NULL)")
        self.db.execute("CREATE INDEX IF NOT EXISTS by_branch ON messages (branch, id)")
        self.db.commit()

    def append(self, branch: str, message: Message) -> None:
        self.db.execute("INSERT INTO messages (branch, data) VALUES (?, ?)",
                        (branch, json.dumps(message, ensure_ascii=False)))
        self.db.commit()

    def bulk(self, branch: str, messages: list[Message]) -> None:
        self.db.executemany("INSERT INTO messages (branch, data) VALUES (?, ?)",
                            [(branch, json.dumps(m, ensure_ascii=False)) for m in messages])
        self.db.commit()

    def fork(self, source: str, branch: str) -> None:
        self.db.execute("INSERT INTO messages (branch, data) SELECT ?, data FROM messages WHERE branch = ? "
                        "ORDER BY id", (branch, source))
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        db = sqlite3.connect(path / "chat.sqlite")
        rows = db.execute("SELECT data FROM messages WHERE branch = ? ORDER BY id", (branch,)).fetchall()
        view = [json.loads(data) for (data,) in rows]
        db.close()
        return len(view)


class AgentsSession(System):
    """The OpenAI Agents SDK's `SQLiteSession`: a session per branch in one file; a fork re-adds the items."""

    name, label = "agents", "OpenAI Agents SQLiteSession"
    packages = ("openai-agents",)
    modules = ("json", "agents")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        path.mkdir(parents=True, exist_ok=True)
        self._loop = asyncio.new_event_loop()
        self._sessions: dict[str, Any] = {}

    def _session(self, branch: str) -> Any:
        if branch not in self._sessions:
            from agents import SQLiteSession

            self._sessions[branch] = SQLiteSession(branch, self.path / "sessions.sqlite")
        return self._sessions[branch]

    def append(self, branch: str, message: Message) -> None:
        self._loop.run_until_complete(self._session(branch).add_items([message]))

    def bulk(self, branch: str, messages: list[Message]) -> None:
        self._loop.run_until_complete(self._session(branch).add_items(messages))

    def fork(self, source: str, branch: str) -> None:
        items = self._loop.run_until_complete(self._session(source).get_items())
        self._loop.run_until_complete(self._session(branch).add_items(items))

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._loop.close()

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        from agents import SQLiteSession

        session = SQLiteSession(branch, path / "sessions.sqlite")
        view = asyncio.run(session.get_items())
        session.close()
        return len(view)


def _langgraph_app(path: Path, script: list[Message] | None = None) -> tuple[Any, Any]:
    """A StateGraph with an `add_messages` channel whose one node appends the next scripted message."""
    from typing import Annotated, TypedDict

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages

    # The functional form: this module's annotations are strings, which LangGraph would have to resolve.
    State = TypedDict("State", {"messages": Annotated[list[Any], add_messages], "next": int, "stop": int})  # noqa: UP013

    def step(state: Any) -> dict[str, Any]:
        n = state.get("next", 0)
        return {"messages": [(script or [])[n]], "next": n + 1}

    def more(state: Any) -> str:
        # a state written by update_state (bulk, appends, forks) has no script to run: stop
        return "step" if state.get("next", 0) < state.get("stop", 0) else END

    graph = StateGraph(State)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", more, ["step", END])
    conn = sqlite3.connect(path / "checkpoints.sqlite", check_same_thread=False)
    return graph.compile(checkpointer=SqliteSaver(conn)), conn


class LangGraph(System):
    """LangGraph's `SqliteSaver` under a StateGraph with an `add_messages` channel: a checkpoint per message.

    Recording runs the graph: one super-step (one checkpoint) per message. Appends to a stored state and
    forks use `update_state` (one checkpoint each; a fork starts from a checkpoint id, LangGraph's time
    travel). Every checkpoint serializes the whole messages channel, so n recorded messages cost O(n²)
    bytes: runs past `max_recorded` messages would take terabytes and are measured smaller.
    """

    name, label = "langgraph", "LangGraph SqliteSaver"
    packages = ("langgraph", "langgraph-checkpoint-sqlite")
    max_recorded: ClassVar[dict[str, int]] = {"chat": 1_000, "agent": 300}
    modules = ("json", "langgraph.graph", "langgraph.checkpoint.sqlite")

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        path.mkdir(parents=True, exist_ok=True)
        self.app, self.conn = _langgraph_app(path)
        self._heads: dict[str, dict[str, Any]] = {}

    def _config(self, branch: str) -> dict[str, Any]:
        return self._heads.get(branch, {"configurable": {"thread_id": "main"}})

    def record(self, branch: str, messages: list[Message], on_step: Any) -> None:
        """Run the graph over `messages`, calling `on_step()` after each super-step's checkpoint."""
        self.app, self.conn = _langgraph_app(self.path, messages)
        config = {"configurable": {"thread_id": "main"}, "recursion_limit": len(messages) + 10}
        for _ in self.app.stream({"next": 0, "stop": len(messages)}, config, stream_mode="updates",
                                 durability="sync"):
            on_step()

    def append(self, branch: str, message: Message) -> None:
        self._heads[branch] = self.app.update_state(self._config(branch), {"messages": [message]},
                                                    as_node="step")

    def bulk(self, branch: str, messages: list[Message]) -> None:
        self._heads[branch] = self.app.update_state(self._config(branch), {"messages": messages},
                                                    as_node="step")

    def fork(self, source: str, branch: str) -> None:
        head = self.app.get_state(self._config(source)).config
        self._heads[branch] = head

    def close(self) -> None:
        self.conn.close()

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        app, conn = _langgraph_app(path)
        view = app.get_state({"configurable": {"thread_id": "main"}}).values["messages"]
        conn.close()
        return len(view)


def _git(path: Path, *args: str, capture: bool = False) -> str:
    out = subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True)
    return out.stdout if capture else ""


class Git(System):
    """git: a transcript file, one commit per message, durable with core.fsync=committed; a fork is a branch.

    Each commit stores the whole transcript as a new blob (loose, zlib): n messages recorded one commit
    each cost O(n²) bytes until `git gc` packs them as deltas, and hashing the growing file makes each
    commit O(n). Runs past `max_recorded` messages are measured smaller.
    """

    name, label = "git", "git (transcript, commit per message)"
    packages = ()
    max_recorded: ClassVar[dict[str, int]] = {"chat": 1_000, "agent": 300}

    @classmethod
    def versions(cls) -> dict[str, str | None]:
        try:
            out = subprocess.run(["git", "--version"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return {"git": None}
        return {"git": out.split()[-1]}

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        if not (path / ".git").exists():
            path.mkdir(parents=True, exist_ok=True)
            _git(path, "init", "-q", "-b", "main")
            for key, value in (("user.name", "bench"), ("user.email", "bench@localhost"),
                               ("commit.gpgsign", "false"), ("gc.auto", "0"), ("core.fsync", "committed"),
                               ("core.fsyncMethod", "fsync"), ("fetch.unpackLimit", "1")):
                _git(path, "config", key, value)
        self._branch = "main"
        self._born = (path / "transcript.jsonl").exists()

    def _switch(self, branch: str) -> None:
        if branch != self._branch:
            _git(self.path, "checkout", "-q", branch)
            self._branch = branch

    def _commit(self, text: str) -> None:
        with open(self.path / "transcript.jsonl", "a", encoding="utf-8") as f:
            f.write(text)
        if not self._born:
            _git(self.path, "add", "transcript.jsonl")
            self._born = True
        _git(self.path, "commit", "-q", "-a", "-m", "message")

    def append(self, branch: str, message: Message) -> None:
        self._switch(branch)
        self._commit(json.dumps(message, ensure_ascii=False) + "\n")

    def bulk(self, branch: str, messages: list[Message]) -> None:
        self._switch(branch)
        self._commit("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages))

    def fork(self, source: str, branch: str) -> None:
        self._switch(source)
        _git(self.path, "checkout", "-q", "-b", branch)
        self._branch = branch

    def disk(self) -> int:
        """The repository's objects and refs (.git); the checked-out copy of the transcript is not counted."""
        return dir_bytes(self.path / ".git")

    def gc(self) -> int:
        _git(self.path, "gc", "-q")
        return self.disk()

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        text = _git(path, "cat-file", "blob", f"{branch}:transcript.jsonl", capture=True)
        view = [json.loads(line) for line in text.splitlines()]
        return len(view)


class CtxStore(System):
    """ctxstore through its public API: `Repository` and `MessageHistory`, durable commits (the default)."""

    name, label = "ctxstore", "ctxstore"
    packages = ("ctxstore",)
    modules = ("ctxstore",)

    def __init__(self, path: Path) -> None:
        from ctxstore import Repository

        super().__init__(path)
        self.repo = Repository.open(path) if path.exists() else Repository.init(path)
        self._heads: dict[str, Any] = {}

    def _history(self, branch: str) -> Any:
        if branch not in self._heads:
            self._heads[branch] = self.repo.history(branch)
        return self._heads[branch]

    def append(self, branch: str, message: Message) -> None:
        history = self._history(branch).append(message)
        self.repo.commit(branch, history)
        self._heads[branch] = history

    def bulk(self, branch: str, messages: list[Message]) -> None:
        history = self._history(branch).extend(messages)
        self.repo.commit(branch, history)
        self._heads[branch] = history

    def fork(self, source: str, branch: str) -> None:
        self._heads[branch] = self._history(source).fork()

    def close(self) -> None:
        self.repo.close()

    @classmethod
    def render(cls, path: Path, branch: str = "main") -> int:
        from ctxstore import Repository

        with Repository.open(path) as repo:
            view = repo.history(branch).render()
        return len(view)


COMPETITORS: tuple[type[System], ...] = (Jsonl, Sqlite, AgentsSession, LangGraph, Git)
SYSTEMS: dict[str, type[System]] = {s.name: s for s in (*COMPETITORS, CtxStore)}
