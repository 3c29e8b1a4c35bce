"""The agent commands of the `ctxstore` CLI: `chat` (a conversation recorded into a ref) and `compact`.

The commands are in `AGENT_COMMANDS`, for the main group to add. They find the repository the way every
other command does (`--repo`, `CTXSTORE_DIR`, or `.ctxstore` in the current directory or a parent).
`python -m ctxstore.cli._agent [--repo PATH] chat|compact ...` runs them on their own.

A model is Anthropic's API (`anthropic_model`, which needs `ANTHROPIC_API_KEY`) or, with `--offline`,
the deterministic offline model: no key, no network.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any, TextIO

import click

from ..agents.anthropic import DEFAULT_MODEL, anthropic_model
from ..agents.loop import DEFAULT_BUDGET_TOKENS, Agent, RunResult
from ..agents.models import Model
from ..agents.offline import OfflineModel
from ..agents.recording import RepositoryHistoryStrategy, repository_history_strategy
from ..agents.strategies import HistoryReadContext, summarizing_history_strategy
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, current_context, emit, fail, reporting, say

__all__ = ["AGENT_COMMANDS", "ENV_API_KEY", "EXIT_COMMAND", "chat", "compact"]

ENV_API_KEY = "ANTHROPIC_API_KEY"
"""The environment variable that must be set to talk to Anthropic's API (the SDK reads it)."""
EXIT_COMMAND = "/exit"
"""A line that ends a chat (as end of input does)."""


def _model(offline: bool, name: str | None, max_tokens: int | None, what: str) -> Model:
    """The model a command talks to: offline, or Anthropic's API when a key is set."""
    if offline:
        return OfflineModel(name=name or "offline")
    if not os.environ.get(ENV_API_KEY):
        fail(f"{what} needs a model: set {ENV_API_KEY} to use Anthropic's API, or pass --offline for the "
             "offline model", EXIT_USAGE)
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
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per answer (text, revision, usage, cost) instead of the text.")
def chat(ref: str, offline: bool, model_name: str | None, system: str | None,
         max_tokens: int | None, as_json: bool) -> None:
    """Talk with a model, recording the conversation into REF as it goes.

    Reads one user message per line from stdin until end of input or a line `/exit`, and prints each
    answer on stdout. Every message is committed to REF as it happens; an existing REF is resumed
    (the model sees the whole conversation so far), a new one is created. Uses Anthropic's API when
    ANTHROPIC_API_KEY is set, or the offline model with --offline.
    """
    state = current_context()
    model = _model(offline, model_name, max_tokens, "chat")
    repo = state.repo()
    with reporting():
        strategy = repository_history_strategy(repo, ref)
        bot = Agent(model, history=strategy, system=system, max_tokens=max_tokens)
        size = strategy.history.size
        say(f"chat on {strategy.ref} with {model.name} ({size} message{'s' * (size != 1)} so far); "
            f"end with {EXIT_COMMAND} or end of input")
        turns = asyncio.run(_converse(bot, strategy, sys.stdin, as_json))
    if strategy.head is not None:
        say(f"{turns} turn{'s' * (turns != 1)} recorded; {strategy.ref} is at {strategy.head[:12]}")


async def _converse(bot: Agent, strategy: RepositoryHistoryStrategy, lines: TextIO, as_json: bool) -> int:
    """Answer each line until EOF or /exit; the number of turns."""
    interactive = _is_terminal(lines)
    turns = 0
    while True:
        if interactive:
            click.echo("you> ", nl=False, err=True)
        line = lines.readline()
        if not line:
            break
        text = line.strip()
        if text == EXIT_COMMAND:
            break
        if not text:
            continue
        result = await bot.generate(text)
        turns += 1
        if as_json:
            click.echo(json.dumps(_turn(result, strategy), ensure_ascii=False))
        else:
            click.echo(result.text)
    return turns


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
    state = current_context()
    model = _model(offline, model_name, None, "compact")
    repo = state.repo()
    with reporting():
        name = repo.ref_name(ref)
        previous = repo.head(name)
        if previous is None:
            fail(f"no ref named {ref!r} to compact; list refs with `ctxstore refs`", EXIT_NOT_FOUND)
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


AGENT_COMMANDS: list[click.Command] = [chat, compact]
"""The agent commands, for the main group: `for c in AGENT_COMMANDS: cli.add_command(c)`."""
