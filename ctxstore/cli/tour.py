"""`ctxstore tour`: a short guided run that shows what ctxstore does, on a temporary repository.

The tour never prints: every line goes through the `say` callback, and shell commands run through the
`command` callback (the CLI passes one that runs `ctxstore ...` in-process), so the CLI does the
printing and tests can capture everything. Steps are plain functions in `STEPS`, in order; a step
that needs something this installation lacks raises `Skip` and the tour goes on.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import CtxStoreError
from ..history.message_history import MessageHistory

__all__ = ["STEPS", "Skip", "Step", "TourContext", "run_tour"]

Say = Callable[[str], None]
Command = Callable[[Sequence[str]], str]


class Skip(CtxStoreError):
    """A tour step cannot run here (a missing optional part); the message says why."""


@dataclass
class TourContext:
    """What the steps share: where to print, how to run commands, the repository, and notes."""

    say: Say
    command: Command
    directory: Path
    notes: dict[str, Any] = field(default_factory=dict)

    @property
    def repo_path(self) -> Path:
        """The tour's repository directory."""
        return self.directory / ".ctxstore"

    def code(self, source: str) -> None:
        """Show Python source as the reader would type it."""
        for line in textwrap.dedent(source).strip("\n").splitlines():
            self.say(f"    >>> {line}" if not line.startswith(" ") else f"    ... {line}")

    def show(self, value: Any) -> None:
        """Show a result, indented under the code that made it."""
        text = value if isinstance(value, str) else repr(value)
        for line in textwrap.wrap(text, 96, subsequent_indent="      ") or [""]:
            self.say(f"    {line}")

    def run(self, *args: str, shown: int = 14) -> str:
        """Run `ctxstore ARGS` on the tour's repository, show the command and (the start of) its output."""
        self.say(f"    $ ctxstore {shlex.join(args)}")
        out = self.command(["-C", str(self.directory), *args])
        lines = out.rstrip("\n").splitlines()
        for line in lines[:shown]:
            self.say(f"      {line}")
        if len(lines) > shown:
            self.say(f"      ... ({len(lines) - shown} more lines)")
        return out


@dataclass(frozen=True)
class Step:
    """One part of the tour: a title and what it does."""

    title: str
    run: Callable[[TourContext], None]


# -- the in-memory history -------------------------------------------------------------------------
def _history(t: TourContext) -> None:
    t.say("A MessageHistory is immutable: every operation returns a new history at a new revision,")
    t.say("and the old one still sees its own view.")
    t.code("""
        h0 = MessageHistory()
        h1 = h0.append({"role": "user", "content": "Plan a trip to Lisbon"})
        h2 = h1.append({"role": "assistant", "content": "Three days: Alfama, Belem, Sintra."})
        (h0.size, h1.size, h2.size)
    """)
    h0 = MessageHistory()
    h1 = h0.append({"role": "user", "content": "Plan a trip to Lisbon"})
    h2 = h1.append({"role": "assistant", "content": "Three days: Alfama, Belem, Sintra."})
    t.show((h0.size, h1.size, h2.size))
    t.code("h2.revision_id")
    t.show(h2.revision_id)
    t.say("Fork to try another answer; edit replaces an entry by id; with_view picks entries.")
    first, second = (e.id for e in h2.refs())
    t.code(f"""
        alt = h2.fork().edit({{"op": "replace", "id": "{second}",
                             "entries": [{{"role": "assistant", "content": "Two days, then Porto."}}]}})
        [m["content"] for m in alt.render()], [m["content"] for m in h2.render()]
    """)
    alt = h2.fork().edit({"op": "replace", "id": second,
                          "entries": [{"role": "assistant", "content": "Two days, then Porto."}]})
    t.show([[m["content"] for m in alt.render()], [m["content"] for m in h2.render()]])
    t.code(f'alt.with_view(["{first}"]).render()')
    t.show(alt.with_view([first]).render())
    t.say("Summaries compact the view; restore() gives the originals back.")
    t.code(f"""
        short = alt.edit({{"op": "summary", "sourceIds": ["{first}"], "replace": True,
                          "entry": {{"role": "user", "content": "[Summary] a Lisbon trip"}}}})
        short.render()[0]["content"], len(short.restore())
    """)
    short = alt.edit({"op": "summary", "sourceIds": [first], "replace": True,
                      "entry": {"role": "user", "content": "[Summary] a Lisbon trip"}})
    t.show([short.render()[0]["content"], len(short.restore())])
    t.notes["history"] = short
    t.notes["h2"] = h2.revision_id


def _snapshot(t: TourContext) -> None:
    short: MessageHistory = t.notes["history"]
    t.say("A snapshot is the whole graph as JSON; changes_since(base) is what a base lacks.")
    t.code("""
        snap = short.to_snapshot()
        same = MessageHistory.from_snapshot(snap).render() == short.render()
        len(snap["entries"]), len(snap["revisions"]), same
    """)
    snap = short.to_snapshot()
    same = MessageHistory.from_snapshot(json.loads(json.dumps(snap))).render() == short.render()
    t.show((len(snap["entries"]), len(snap["revisions"]), same))
    t.code("delta = short.changes_since(h2.revision_id)")
    delta = short.changes_since(t.notes["h2"])
    t.code('[r["operation"]["type"] for r in delta["revisions"]], len(delta["entries"])')
    t.show(([r["operation"]["type"] for r in delta["revisions"]], len(delta["entries"])))


# -- a repository ----------------------------------------------------------------------------------
def _repository(t: TourContext) -> None:
    from ..repo.repository import Repository

    t.say(f"A repository keeps conversations on disk (LMDB), named by refs. Working in {t.directory}.")
    t.say("Every command below runs in that directory, as `cd DIR && ctxstore ...` would.")
    t.run("init")
    t.say("Record a conversation from Python: commit is atomic and fast-forward only.")
    t.code("""
        with Repository.open(".ctxstore") as repo:
            h = repo.history("main").extend([...4 messages...])
            repo.commit("main", h)
    """)
    with Repository.open(t.repo_path) as repo:
        h = repo.history("main").extend([
            {"role": "user", "content": "Our deploy failed with exit code 137."},
            {"role": "assistant", "content": "137 is an OOM kill. What is the memory limit?"},
            {"role": "user", "content": "512 MiB."},
            {"role": "assistant", "content": "Raise it to 1 GiB and set a heap limit."},
        ])
        repo.commit("main", h)
    t.say("Or from the shell:")
    t.run("append", "main", "--role", "user", "Done; it works now. Thanks!")
    t.run("render", "main", shown=6)


def _forks(t: TourContext) -> None:
    t.say("Fork the conversation to explore another line; both share every entry up to the fork.")
    t.run("fork", "main~1", "experiment")
    t.run("append", "experiment", "--role", "user", "Could we shrink memory use instead?")
    t.run("append", "experiment", "--role", "assistant", "Yes: stream the file rather than loading it.")
    t.say("diff compares two views: entries added, removed and moved.")
    t.run("diff", "main", "experiment", shown=20)
    t.say("log --graph draws how the refs grew apart:")
    t.run("log", "--graph", "main", "experiment")


def _browse(t: TourContext) -> None:
    t.say("ls lists the conversations (a table on a terminal, JSON in a pipe; --pretty asks for the table):")
    t.run("ls", "--pretty", "--sort", "updated")
    t.say("grep searches message text, tool names and metadata across every conversation:")
    t.run("grep", "--pretty", "-i", "memory")
    t.say("render on a terminal is a transcript a person reads: role, time, wrapped text, folded tool calls")
    t.say("(in a pipe it stays the JSON list a model takes; --pretty and --json choose):")
    t.run("render", "--pretty", "experiment", shown=16)


def _stats(t: TourContext) -> None:
    t.say("stats: objects, bytes stored and on disk, and bytes saved against writing every ref's view")
    t.say("out on its own. (A conversation this small is mostly revision and tree objects; sharing pays")
    t.say("off as conversations and forks grow: see docs/benchmarks.md.)")
    t.run("stats")
    t.run("fsck", shown=3)


# -- agents (hooks for the policy layer) -----------------------------------------------------------
def _agent(t: TourContext) -> None:
    try:
        from ..agents.loop import Agent
        from ..agents.offline import OfflineModel
        from ..agents.strategies import append_only_history_strategy
        from ..repo.repository import Repository
    except ImportError as error:
        raise Skip(f"the agent layer is not installed ({error})") from None

    def multiply(a: int, b: int) -> int:
        """Multiply two integers."""
        return a * b

    t.say("An agent run with a tool call, on the offline model (no API key), recorded into ref 'agent'.")
    t.code("""
        strategy = append_only_history_strategy(repo.history("agent"))
        bot = Agent(OfflineModel(), history=strategy, tools=[multiply])
        result = await bot.generate("What is 17 * 23? Use multiply.")
        repo.commit("agent", strategy.history)
    """)
    with Repository.open(t.repo_path) as repo:
        strategy = append_only_history_strategy(repo.history("agent"))
        bot = Agent(OfflineModel(), history=strategy, tools=[multiply])
        result = asyncio.run(bot.generate("What is 17 * 23? Use multiply."))
        repo.commit("agent", strategy.history, message="agent run")
    t.show(f"{result.text!r} after {len(result.steps)} model calls")
    t.run("render", "agent", shown=30)


def _compaction(t: TourContext) -> None:
    try:
        from ..agents.offline import OfflineModel
        from ..agents.strategies import HistoryReadContext, summarizing_history_strategy
        from ..repo.repository import Repository
    except ImportError as error:
        raise Skip(f"the strategies are not installed ({error})") from None

    t.say("Compaction: a summarizing strategy folds older turns into one summary entry once the view")
    t.say("reaches a token budget; the repository keeps every original, and restore() brings them back.")
    t.code("""
        strategy = summarizing_history_strategy(model=OfflineModel(), trigger_tokens=30, keep_recent=2,
                                                history=repo.history("main"))
        view = await strategy.on_read(HistoryReadContext(model, budget_tokens=200_000))
        repo.commit("main", strategy.history)
    """)
    model = OfflineModel()
    with Repository.open(t.repo_path) as repo:
        before = repo.history("main")
        strategy = summarizing_history_strategy(model=model, trigger_tokens=30, keep_recent=2, history=before)
        asyncio.run(strategy.on_read(HistoryReadContext(model, 200_000)))
        after = strategy.history
        repo.commit("main", after, message="compact")
        kinds = [e.kind for e in after.refs()]
        t.show(f"view: {before.size} entries -> {after.size} ({kinds.count('summary')} summary); "
               f"restore() gives {len(after.restore())} messages")
    t.run("render", "main", shown=8)


def _sync(t: TourContext) -> None:
    """Two repositories synced through a hub that the tour starts on loopback and stops."""
    import secrets
    import subprocess
    import sys

    from .. import sync
    from ..repo.repository import Repository

    hub_dir = t.directory / "hub"
    Repository.init(hub_dir / "team" / "support").close()
    token = secrets.token_hex(16)
    (t.directory / "tokens").write_text(f"write {token} tour\n")
    argv = [sys.executable, "-m", "ctxstore.cli", "serve", "--http", "127.0.0.1:0", str(hub_dir),
            "--tokens", str(t.directory / "tokens")]
    t.say(f"    $ ctxstore serve --http 127.0.0.1:0 {hub_dir} --tokens tokens   # in the background")
    server = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert server.stderr is not None
        line = server.stderr.readline()
        if " on " not in line:
            raise Skip(f"the hub did not start: {line.strip() or 'no output'}")
        url = line.rsplit(" on ", 1)[1].strip() + "/team/support"
        t.show(f"hub listening at {url}")
        with Repository.open(t.repo_path) as repo:
            t.code(f"""
                repo.remote_add("hub", "{url}")
                sync.push(repo, "hub", ["main"], token=TOKEN)
            """)
            repo.remote_add("hub", url)
            pushed = sync.push(repo, "hub", ["main"], token=token)
            t.show(pushed)
            t.code("""
                other = sync.clone(url, "elsewhere", token=TOKEN)    # a second machine
                other.append("main", [{"role": "user", "content": "hello from elsewhere"}])
                sync.push(other, "origin", ["main"], token=TOKEN)
                sync.pull(repo, "hub", "main", token=TOKEN)
            """)
            other = sync.clone(url, t.directory / "elsewhere", token=token)
            with other:
                other.append("main", [{"role": "user", "content": "hello from elsewhere"}])
                sync.push(other, "origin", ["main"], token=token)
                sync.pull(repo, "hub", "main", token=token)
                same = repo.refs()["refs/heads/main"] == other.refs()["refs/heads/main"]
            t.show(f"both repositories now have main at {repo.refs()['refs/heads/main'][:12]}: {same}")
            t.show(f"last message: {repo.history('main').render()[-1]['content']}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    t.show("hub stopped")


STEPS: list[Step] = [
    Step("An in-memory MessageHistory: append, fork, edit, with_view, summary", _history),
    Step("Snapshots", _snapshot),
    Step("A repository: record a conversation", _repository),
    Step("Forks, diff and log --graph", _forks),
    Step("Finding and reading conversations: ls, grep, a readable render", _browse),
    Step("Stats and fsck", _stats),
    Step("An offline agent run with a tool call", _agent),
    Step("Compaction and restore", _compaction),
    Step("Syncing two repositories through a server on loopback", _sync),
]
"""The tour's steps, in order; later parts of ctxstore add or fill in steps here."""


def run_tour(say: Say, *, command: Command, directory: Path | None = None,
             steps: Sequence[Step] | None = None) -> list[str]:
    """Run the tour, printing through `say`; returns the titles of the steps that were skipped.

    `command(args)` runs `ctxstore ARGS` and returns its stdout (`ctxstore.cli._invoke.invoker(cli)`).
    `directory` keeps the repository there (it must not hold one yet); default: a temporary directory.
    """
    chosen = STEPS if steps is None else list(steps)
    skipped: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ctxstore-tour-") as scratch:
        where = Path(scratch) if directory is None else directory
        if (where / ".ctxstore").exists():
            raise FileExistsError(f"{where / '.ctxstore'} already exists; give the tour an empty directory")
        where.mkdir(parents=True, exist_ok=True)
        t = TourContext(say, command, where.resolve())
        say("ctxstore tour: a git-style, content-addressed history store for AI-agent conversations.")
        for number, step in enumerate(chosen, 1):
            say("")
            say(f"== {number}. {step.title} ==")
            try:
                step.run(t)
            except Skip as why:
                say(f"    (skipped: {why})")
                skipped.append(step.title)
        say("")
        if directory is None:
            say("Done. The tour's repository was temporary; `ctxstore tour --keep DIR` keeps one to explore.")
        else:
            say(f"Done. Explore the repository: cd {where} && ctxstore log --graph")
    return skipped
