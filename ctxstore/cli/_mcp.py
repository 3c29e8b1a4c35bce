"""The `ctxstore mcp` command: the repository as an MCP server on stdio (`ctxstore.integrations.mcp`).

The integration, and with it the `mcp` SDK, is imported inside the command, so the rest of the CLI starts
without it. While it serves, stdout carries the protocol and nothing else: messages go to stderr.
"""

from __future__ import annotations

import os

import click

from ._common import EXIT_ERROR, Context, fail

__all__ = ["mcp"]


@click.command("mcp")
@click.option("--repo", "repo_path", metavar="PATH", type=click.Path(file_okay=False),
              help="The repository directory (default: the global --repo, CTXSTORE_DIR, or .ctxstore in this "
                   "directory or a parent).")
@click.option("--write", is_flag=True, help="Allow the append and fork tools (default: read-only).")
@click.pass_obj
def mcp(state: Context, repo_path: str | None, write: bool) -> None:
    """Serve the repository to MCP clients (Claude Code, Claude Desktop, ...) over stdio.

    Tools: list_conversations, read_conversation, grep, diff, and with --write append and fork (listed
    without it, but refused). Each conversation is a resource, ctxstore://conversation/<ref>, its
    messages as JSON. Runs until the client closes stdin. Register it in Claude Code with
    `claude mcp add ctxstore -- ctxstore mcp --repo PATH`. Needs the mcp extra
    (pip install 'ctxstore[mcp]').
    """
    if repo_path is not None:
        state.repo_path = os.path.abspath(repo_path)
    repo = state.repo()
    try:
        from ..integrations.mcp import serve
    except ImportError as error:
        if not (error.name or "").startswith("mcp"):
            raise
        fail("`ctxstore mcp` needs the MCP SDK: pip install 'ctxstore[mcp]'", EXIT_ERROR)
    state.tell(f"ctxstore mcp: serving {state.location()} on stdio, "
               f"{'read-write' if write else 'read-only (start with --write to allow append and fork)'}")
    serve(repo, write=write)
