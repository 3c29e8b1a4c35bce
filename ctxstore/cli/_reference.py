"""docs/cli.md, generated from the `--help` of every command: `python tools/cli_reference.py`."""

from __future__ import annotations

import click

from ._common import EXIT_CODES

__all__ = ["live_help", "reference"]

_HEAD = """# Command line reference

Generated from `ctxstore --help` and each command's `--help` by `python tools/cli_reference.py`; \
a test fails when this page and the live help differ.

Conventions: data goes to stdout as JSON (except `log --graph` / `--oneline` drawings and the tour),
messages for people go to stderr (`-q` silences them), and an error is one line on stderr,
`ctxstore: error: <what happened; what to do>`, with one of these exit codes:

| code | meaning |
|---|---|
"""


def live_help(cli: click.Group, args: list[str]) -> str:
    """What `ctxstore ARGS --help` prints on a 100-column terminal."""
    from click.testing import CliRunner

    result = CliRunner().invoke(cli, [*args, "--help"], prog_name="ctxstore", terminal_width=100)
    return result.stdout


def reference(cli: click.Group) -> str:
    """The whole reference page (Markdown) of the group `cli`."""
    out = [_HEAD]
    out += [f"| {code} | {text} |\n" for code, text in EXIT_CODES.items()]
    out.append("\n## ctxstore\n\n```text\n" + live_help(cli, []) + "```\n")
    for name in cli.list_commands(click.Context(cli)):
        out.append(f"\n## ctxstore {name}\n\n```text\n{live_help(cli, [name])}```\n")
    return "".join(out)

