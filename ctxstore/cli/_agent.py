"""The agent commands of the `ctxstore` CLI: `chat` (a conversation recorded into a ref) and `compact`.

The main group names each command in `ctxstore.cli.COMMANDS`. They find the repository the way every
other command does (`--repo`, `CTXSTORE_DIR`, or `.ctxstore` in the
current directory or a parent).

A model is Anthropic's API (`anthropic_model`, which needs `ANTHROPIC_API_KEY`) or, with `--offline`,
the deterministic offline model: no key, no network. The agent layer (asyncio, the SDK) is imported
inside the commands, so the rest of the CLI starts without it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, TextIO

import click

from ..errors import shown
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, current_context, emit, fail, reporting, say

if TYPE_CHECKING:
    import asyncio

    from ..agents.loop import Agent, RunResult
    from ..agents.models import Model
    from ..agents.recording import RepositoryHistoryStrategy
    from ..repo.repository import Repository

__all__ = ["CHAT_COMMANDS", "DEFAULT_MODEL", "ENV_API_KEY", "EXIT_COMMAND", "chat",
           "compact"]

ENV_API_KEY = "ANTHROPIC_API_KEY"
"""The environment variable that must be set to talk to Anthropic's API (the SDK reads it)."""
EXIT_COMMAND = "/exit"
"""A line that ends a chat (as end of input does)."""
DEFAULT_MODEL: Final = "claude-sonnet-4-6"
"""The model id the commands use by default: the Anthropic adapter's (a test keeps the two equal; the
help text needs it without importing the agent layer)."""

CHAT_COMMANDS: Final = {
    "/help": "list these commands",
    "/fork NAME": "fork the conversation into ref NAME and go on there (the old ref stays as it was)",
    "/undo": "drop the last exchange (your last message and the answer to it) from the view",
    "/compact": "summarize the older part of the conversation into one summary entry",
    "/exit": "end the chat (end of input, Ctrl-D, does the same)",
}
"""The lines `chat` takes as commands instead of sending them to the model."""


def _model(offline: bool, name: str | None, max_tokens: int | None, what: str, latency: float = 0.0) -> Model:
    """The model a command talks to: offline, or Anthropic's API when a key is set."""
    if offline:
        from ..agents.offline import OfflineModel

        return OfflineModel(name=name or "offline", latency=latency)
    if not os.environ.get(ENV_API_KEY):
        fail(f"{what} needs a model: set {ENV_API_KEY} to use Anthropic's API, or pass --offline for the "
             "offline model", EXIT_USAGE)
    from ..agents.anthropic import anthropic_model

    with reporting():
        if max_tokens is not None:
            return anthropic_model(name or DEFAULT_MODEL, max_tokens=max_tokens)
        return anthropic_model(name or DEFAULT_MODEL)


_OFFLINE = click.option("--offline", is_flag=True,
                        help="Use the deterministic offline model (no API key, no network).")
_MODEL = click.option("--model", "model_name", metavar="NAME",
                      help=f"Model id (default {DEFAULT_MODEL}; with --offline, the offline model's name, "
                           "which only sets pricing).")


@click.command()
@click.argument("ref")
@_OFFLINE
@_MODEL
@click.option("--system", metavar="TEXT", help="System prompt for every request.")
@click.option("--max-tokens", type=click.IntRange(min=1), metavar="N", help="Output token limit per answer.")
@click.option("--latency", type=click.FloatRange(min=0), default=0.0, metavar="SECONDS",
              help="With --offline: seconds each answer takes (to try interrupting one with Ctrl-C).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per answer (text, revision, usage, cost) instead of the text.")
def chat(ref: str, offline: bool, model_name: str | None, system: str | None,
         max_tokens: int | None, latency: float, as_json: bool) -> None:
    """Talk with a model, recording the conversation into REF as it goes.

    Reads one user message per line until end of input (Ctrl-D) or `/exit`, and prints each answer on
    stdout; on a terminal, lines can be edited and earlier ones recalled (readline). Ctrl-C interrupts
    an answer and drops that exchange, without leaving the chat. Lines starting with / are commands,
    never sent to the model: /help, /fork NAME, /undo, /compact, /exit. Every message is committed to
    REF as it happens; an existing REF is resumed (the model sees the whole conversation so far), a new
    one is created. Uses Anthropic's API when ANTHROPIC_API_KEY is set, or the offline model with
    --offline.
    """
    import asyncio

    state = current_context()
    model = _model(offline, model_name, max_tokens, "chat", latency)
    repo = state.repo()
    with reporting():
        session = _Chat(repo, model, ref, system, max_tokens)
        size = session.strategy.history.size
        say(f"chat on {session.strategy.ref} with {model.name} ({size} message{'s' * (size != 1)} so far); "
            f"/help lists commands, end with {EXIT_COMMAND} or end of input")
        with asyncio.Runner() as runner:
            turns = _converse(session, runner, sys.stdin, as_json)
    if session.strategy.head is not None:
        say(f"{turns} turn{'s' * (turns != 1)} recorded; {session.strategy.ref} is at "
            f"{session.strategy.head[:12]}")


class _Chat:
    """One chat session: the ref it records into, its strategy and agent, and the / commands."""

    def __init__(self, repo: Repository, model: Model, ref: str, system: str | None,
                 max_tokens: int | None) -> None:
        self.repo = repo
        self.model = model
        self.system = system
        self.max_tokens = max_tokens
        self.switch(ref)

    def switch(self, ref: str) -> None:
        """Record into `ref` from now on (resuming what it holds)."""
        from ..agents.loop import Agent
        from ..agents.recording import repository_history_strategy

        self.strategy: RepositoryHistoryStrategy = repository_history_strategy(self.repo, ref)
        self.bot: Agent = Agent(self.model, history=self.strategy, system=self.system,
                                max_tokens=self.max_tokens)

    def command(self, line: str, runner: asyncio.Runner) -> bool:
        """Run a / command; False when the chat should end."""
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        handlers: dict[str, Callable[[str, asyncio.Runner], None]] = {
            "/help": self.help, "/fork": self.fork, "/undo": self.undo, "/compact": self.compact}
        if name == EXIT_COMMAND:
            return False
        handler = handlers.get(name)
        if handler is None:
            say(f"unknown command {name}; /help lists the commands (start a message with // to send a /)")
            return True
        with reporting():
            handler(arg, runner)
        return True

    def help(self, _arg: str, _runner: asyncio.Runner) -> None:
        width = max(len(c) for c in CHAT_COMMANDS)
        for usage, text in CHAT_COMMANDS.items():
            say(f"  {usage.ljust(width)}  {text}")

    def fork(self, name: str, _runner: asyncio.Runner) -> None:
        if not name:
            say("give the new ref's name: /fork NAME")
            return
        if self.repo.head(name) is not None:
            say(f"ref {self.repo.ref_name(name)} already exists; /fork into a new name")
            return
        forked = self.strategy.history.fork()
        full = self.repo.commit(name, forked, message=f"chat /fork of {self.strategy.ref}").ref
        old = self.strategy.ref
        self.switch(full)
        say(f"forked {old} into {full}; the chat goes on in {full}")

    def undo(self, _arg: str, _runner: asyncio.Runner) -> None:
        if not self.drop_last_exchange("chat /undo"):
            say("nothing to undo: the conversation has no message of yours")
            return
        say(f"undone: {self.strategy.ref} now holds {self.strategy.history.size} message(s)")

    def drop_last_exchange(self, message: str) -> bool:
        """Take the last user prompt and everything after it out of the view; False when there is none."""
        entries = self.strategy.history.refs()
        last = next((i for i in range(len(entries) - 1, -1, -1) if _is_prompt(entries[i].message)), None)
        if last is None:
            return False
        self.strategy.history = self.strategy.history.with_view([e.id for e in entries[:last]])
        self.strategy.commit(message=message)
        return True

    def compact(self, _arg: str, runner: asyncio.Runner) -> None:
        from ..agents.loop import DEFAULT_BUDGET_TOKENS
        from ..agents.recording import repository_history_strategy
        from ..agents.strategies import HistoryReadContext, summarizing_history_strategy

        ref = self.strategy.ref
        before = self.strategy.history.size
        inner = summarizing_history_strategy(model=self.model, trigger_tokens=0, keep_recent=4)
        once = repository_history_strategy(self.repo, ref, inner)
        runner.run(once.on_read(HistoryReadContext(self.model, DEFAULT_BUDGET_TOKENS)))
        self.switch(ref)
        after = self.strategy.history.size
        say(f"compacted {ref}: {before} message(s) in view, now {after}" if after != before
            else "nothing to compact yet")


def _is_prompt(message: Any) -> bool:
    """Whether a message is something the user typed (not a tool result handed back to the model)."""
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    content = message.get("content")
    return not (isinstance(content, list) and content and
                all(isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _converse(session: _Chat, runner: asyncio.Runner, lines: TextIO, as_json: bool) -> int:
    """Answer each line until end of input or /exit; the number of turns answered."""
    interactive = _is_terminal(lines) and lines is sys.stdin
    if interactive:
        _line_editing()
    turns = 0
    while True:
        try:
            line = _read_line(lines, interactive)
        except KeyboardInterrupt:  # Ctrl-C at the prompt: a fresh prompt, as a shell does
            click.echo("", err=True)
            continue
        if line is None:
            break
        text = line.strip()
        if not text:
            continue
        if text.startswith("/") and not text.startswith("//"):
            if not session.command(text, runner):
                break
            continue
        if text.startswith("//"):
            text = text[1:]
        try:
            result = runner.run(session.bot.generate(text))
        except KeyboardInterrupt:
            session.drop_last_exchange("chat: interrupted")
            say("interrupted; that exchange was dropped (the chat goes on)")
            continue
        turns += 1
        if as_json:
            click.echo(json.dumps(_turn(result, session.strategy), ensure_ascii=False))
        else:
            click.echo(result.text)
    return turns


def _read_line(lines: TextIO, interactive: bool) -> str | None:
    """The next line (None at end of input); on a terminal through readline's `input`, with a prompt."""
    if interactive:
        try:
            return input("you> ")
        except EOFError:
            click.echo("", err=True)
            return None
    line = lines.readline()
    return line or None


def _line_editing() -> None:
    """Turn on readline's line editing and history for `input` (where the platform has readline)."""
    try:
        import readline
    except ImportError:  # Windows without pyreadline: plain input still works
        return
    readline.parse_and_bind("tab: complete")
    readline.set_completer(_complete)


def _complete(text: str, state: int) -> str | None:
    matches = [c.split(" ")[0] for c in CHAT_COMMANDS if c.startswith(text)] if text.startswith("/") else []
    return matches[state] if state < len(matches) else None


def _turn(result: RunResult, strategy: RepositoryHistoryStrategy) -> dict[str, Any]:
    usage = result.usage
    return {"text": result.text, "revision": strategy.head, "steps": len(result.steps),
            "usage": {"inputTokens": usage.input_tokens, "outputTokens": usage.output_tokens},
            "cost": result.cost}


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


@click.command()
@click.argument("ref")
@click.option("--trigger-tokens", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Compact only when the conversation's estimated tokens reach N (0: always).")
@click.option("--keep-recent", type=click.IntRange(min=0), default=4, show_default=True, metavar="K",
              help="Leave the last K messages out of the summary.")
@_OFFLINE
@_MODEL
def compact(ref: str, trigger_tokens: int, keep_recent: int, offline: bool,
            model_name: str | None) -> None:
    """Summarize the older part of the conversation at REF and commit the summary revision.

    Runs the summarizing strategy once: when the view's estimate reaches --trigger-tokens, the messages
    before the last --keep-recent, up to the last assistant message without a tool call, become one
    summary entry. The originals stay in the repository (`render` shows the compacted view; the summary
    entry lists its sources). Prints {ref, revision, previous, compacted, size, summarized}; `revision`
    is the new head (the old one when there was nothing to compact).
    """
    import asyncio

    from ..agents.loop import DEFAULT_BUDGET_TOKENS
    from ..agents.recording import repository_history_strategy
    from ..agents.strategies import HistoryReadContext, summarizing_history_strategy

    state = current_context()
    model = _model(offline, model_name, None, "compact")
    repo = state.repo()
    with reporting():
        name = repo.ref_name(ref)
        previous = repo.head(name)
        if previous is None:
            fail(f"no ref named {shown(ref)} to compact; list refs with `ctxstore refs`", EXIT_NOT_FOUND)
        inner = summarizing_history_strategy(model=model, trigger_tokens=trigger_tokens,
                                             keep_recent=keep_recent)
        strategy = repository_history_strategy(repo, name, inner)
        before = {entry.id for entry in strategy.history.refs()}
        asyncio.run(strategy.on_read(HistoryReadContext(model, DEFAULT_BUDGET_TOKENS)))
        after = strategy.history.refs()
    summarized = len(before - {entry.id for entry in after})
    revision = strategy.head
    emit({"ref": name, "revision": revision, "previous": previous, "compacted": revision != previous,
          "size": len(after), "summarized": summarized})

