"""The `ctxstore` command line: git-like commands over a repository of agent conversations.

Parsing and printing only: every command parses its arguments, calls the library, and prints. Data goes
to stdout as JSON (except drawings such as `log --graph`), messages for people go to stderr, and errors
are one line on stderr with a documented exit code (`EXIT_CODES`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ..errors import shown
from ._common import ENV_REPO, EXIT_CODES, EXIT_NOT_FOUND, Context, Failure, environment_repo, fail

__all__ = ["COMMANDS", "EXIT_CODES", "cli", "main"]

_EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())

COMMANDS: dict[str, tuple[str, str]] = {
    "init": ("_repo", "init"), "append": ("_history", "append"), "edit": ("_edit", "edit"),
    "log": ("_history", "log"), "show": ("_history", "show"), "render": ("_history", "render"),
    "branch": ("_refs", "branch"), "tag": ("_refs", "tag"), "fork": ("_refs", "fork"), "refs": ("_refs", "refs"),
    "reflog": ("_refs", "reflog"), "diff": ("_history", "diff"), "import": ("_interchange", "import_"),
    "export": ("_interchange", "export"), "ls": ("_browse", "ls"), "grep": ("_browse", "grep_"),
    "fsck": ("_repo", "fsck"), "gc": ("_repo", "gc"), "stats": ("_repo", "stats"), "tour": ("_repo", "tour"),
    "mcp": ("_mcp", "mcp"), "serve": ("_sync", "serve"), "fetch": ("_sync", "fetch"), "pull": ("_sync", "pull"),
    "push": ("_sync", "push"), "clone": ("_sync", "clone"), "remote": ("_sync", "remote"), "hub": ("_hub", "hub"),
    "chat": ("_agent", "chat"), "compact": ("_agent", "compact"),
}
"""Every command, by name: the module of this package that defines it and the command's name there.

A command's module is imported when the command runs (or its help is shown), so a command starts
without importing the others' (`fetch` loads neither the edit nor the agent commands). The test suite
loads every one, so a module that fails to import fails the tests, loudly, instead of its command
quietly vanishing."""


class _Commands(click.Group):
    """The main group: its commands are `COMMANDS`, each imported the first time it is looked up."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, name = COMMANDS[cmd_name]
            # `__import__`, not `importlib.import_module`: the interpreter's own import, which
            # `python -X importtime` times (the start-up benchmark adds up what it reports).
            command = getattr(__import__(f"{__name__}.{module}", fromlist=[name]), name)
            self.add_command(command, cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
             epilog=_EPILOG)
@click.option("-C", "directory", metavar="DIR", type=click.Path(file_okay=False),
              help="Run as if ctxstore was started in DIR.")
@click.option("--repo", "repo_path", metavar="PATH", type=click.Path(file_okay=False),
              help=f"The repository directory itself (default: .ctxstore in this directory or a parent; "
                   f"env {ENV_REPO}).")
@click.option("-q", "--quiet", is_flag=True, help="No messages for people on stderr (errors still show).")
@click.version_option(package_name="ctxstore", prog_name="ctxstore")
@click.pass_context
def cli(ctx: click.Context, directory: str | None, repo_path: str | None, quiet: bool) -> None:
    """A git-style, content-addressed history store for AI-agent conversations.

    Start with `ctxstore init`, add messages with `ctxstore append REF`, read them back with
    `ctxstore render REF` and `ctxstore log --graph`. `ctxstore tour` shows everything on a
    temporary repository.
    """
    if directory is not None:
        if not os.path.isdir(directory):
            fail(f"cannot change to directory {shown(directory)}: no such directory", EXIT_NOT_FOUND)
        previous = os.getcwd()
        os.chdir(directory)
        # Restore the caller's directory: in-process callers (tests, the tour) keep running.
        ctx.call_on_close(lambda: os.chdir(previous))
    repo_path = repo_path or environment_repo()
    state = Context(os.path.abspath(repo_path) if repo_path else None, Path.cwd(), quiet=quiet)
    ctx.obj = state
    ctx.call_on_close(state.close)


def main(argv: list[str] | None = None) -> Any:
    """The console script's entry point."""
    try:
        return cli.main(args=argv, prog_name="ctxstore")
    except Failure as failure:  # raised outside a command (standalone mode handles the rest)
        failure.show()
        sys.exit(failure.exit_code)


if __name__ == "__main__":
    main()
