"""Commands that find conversations across a repository: ls and grep."""

from __future__ import annotations

import re

import click

from ..errors import shown
from ._common import EXIT_NOT_FOUND, Context, emit, fail, reporting
from ._pretty import console, fmt_time, human_size, want_pretty

__all__ = ["grep_", "ls"]

_SORTS = {
    "ref": lambda c: c.ref,
    "title": lambda c: c.title.lower(),
    "messages": lambda c: c.messages,
    "updated": lambda c: c.updated,
    "size": lambda c: c.bytes,
}


def _short(name: str) -> str:
    return name.removeprefix("refs/heads/").removeprefix("refs/")


@click.command()
@click.argument("specs", nargs=-1, metavar="[REF]...")
@click.option("--sort", "sort", type=click.Choice(sorted(_SORTS)), default="ref", show_default=True,
              help="Order of the listing (updated, messages and size: largest or newest last; see -r).")
@click.option("-r", "--reverse", is_flag=True, help="Reverse the order.")
@click.option("--json", "as_json", is_flag=True, help="JSON even on a terminal.")
@click.option("--pretty", is_flag=True, help="A table even when stdout is not a terminal.")
@click.pass_obj
def ls(state: Context, specs: tuple[str, ...], sort: str, reverse: bool, as_json: bool, pretty: bool) -> None:
    """List conversations (every head and tag, or the REFs given): ref, title, messages, last update, size.

    On a terminal, a table; otherwise JSON: a list of {ref, revision, title, messages, updated (ms),
    bytes (of the messages in view)}.
    """
    repo = state.repo()
    with reporting():
        from ..interop.browse import conversations

        found = sorted(conversations(repo, specs), key=_SORTS[sort], reverse=reverse)
    if not want_pretty(as_json, pretty):
        emit(found)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold", pad_edge=False)
    for column, justify in (("ref", "left"), ("title", "left"), ("messages", "right"), ("updated", "left"),
                            ("size", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for c in found:
        table.add_row(_short(c.ref), c.title, str(c.messages), fmt_time(c.updated), human_size(c.bytes))
    console().print(table)


@click.command("grep")
@click.argument("pattern")
@click.argument("specs", nargs=-1, metavar="[REF]...")
@click.option("-i", "--ignore-case", is_flag=True, help="Match without regard to case.")
@click.option("-F", "--fixed-strings", "fixed", is_flag=True, help="PATTERN is plain text, not a regular expression.")
@click.option("--in", "fields", type=click.Choice(["text", "tool", "meta"]), multiple=True,
              help="Search only these parts of entries (repeatable; default: all three).")
@click.option("--json", "as_json", is_flag=True, help="JSON even on a terminal.")
@click.option("--pretty", is_flag=True, help="Text lines even when stdout is not a terminal.")
@click.pass_obj
def grep_(state: Context, pattern: str, specs: tuple[str, ...], ignore_case: bool, fixed: bool,
          fields: tuple[str, ...], as_json: bool, pretty: bool) -> None:
    """Search conversations (every head and tag, or the REFs given) for PATTERN, a regular expression.

    Looks in message text (text, thinking and tool results), tool names and entry metadata. Prints one
    match per entry and place: on a terminal `ref entry-id [where] snippet`, otherwise JSON, a list of
    {ref, entryId, field, snippet}. Exits 3 when nothing matched, as grep exits 1.
    """
    repo = state.repo()
    with reporting():
        from ..interop.browse import grep

        found = list(grep(repo, pattern, specs, ignore_case=ignore_case, fixed=fixed,
                          fields=fields or ("text", "tool", "meta")))
    if want_pretty(as_json, pretty):
        from rich.text import Text

        out = console(soft_wrap=True)
        regex = re.compile(re.escape(pattern) if fixed else pattern, re.IGNORECASE if ignore_case else 0)
        for m in found:
            line = Text(_short(m.ref), style="magenta")
            line.append(f" {m.entry_id}", style="cyan")
            line.append(f" [{m.field}] ", style="dim")
            line.append(m.snippet)
            line.highlight_regex(regex, style="bold red")
            out.print(line)
    else:
        emit(found)
    if not found:
        fail(f"no match for {shown(pattern)}", EXIT_NOT_FOUND)

