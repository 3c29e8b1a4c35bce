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

from ._agent import AGENT_COMMANDS
from ._browse import grep_, ls
from ._common import ENV_REPO, EXIT_CODES, EXIT_NOT_FOUND, Context, Failure, environment_repo, fail
from ._edit import edit
from ._history import append, diff, log, render, show
from ._hub import hub
from ._mcp import mcp
from ._refs import branch, fork, reflog, refs, tag
from ._repo import export, fsck, gc, import_, init, stats, tour
from ._sync import SYNC_COMMANDS

__all__ = ["EXIT_CODES", "cli", "main"]

_EPILOG = "\b\nExit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
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
            fail(f"cannot change to directory {directory!r}: no such directory", EXIT_NOT_FOUND)
        previous = os.getcwd()
        os.chdir(directory)
        # Restore the caller's directory: in-process callers (tests, the tour) keep running.
        ctx.call_on_close(lambda: os.chdir(previous))
    repo_path = repo_path or environment_repo()
    state = Context(os.path.abspath(repo_path) if repo_path else None, Path.cwd(), quiet=quiet)
    ctx.obj = state
    ctx.call_on_close(state.close)


# Every command is registered here, statically: a command module that fails to import fails `ctxstore`
# at start, loudly, instead of its commands quietly vanishing.
for _command in (init, append, edit, log, show, render, branch, tag, fork, refs, reflog, diff, import_, export,
                 ls, grep_, fsck, gc, stats, tour, mcp, *SYNC_COMMANDS, hub, *AGENT_COMMANDS):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> Any:
    """The console script's entry point."""
    try:
        return cli.main(args=argv, prog_name="ctxstore")
    except Failure as failure:  # raised outside a command (standalone mode handles the rest)
        failure.show()
        sys.exit(failure.exit_code)


if __name__ == "__main__":
    main()
