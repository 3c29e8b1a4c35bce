"""The sync commands of the CLI: serve, fetch, pull, push, clone and remote add/list/remove.

`SYNC_COMMANDS` is what the main group registers (``cli.add_command`` for each).
Tokens for HTTP remotes come from ``--token`` or ``CTXSTORE_TOKEN``.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from urllib.parse import urlsplit

import click

from ..repo.repository import Repository
from ..sync.client import Progress
from ..sync.client import clone as do_clone
from ..sync.client import fetch as do_fetch
from ..sync.client import pull as do_pull
from ..sync.client import push as do_push
from ..sync.protocol import Service, serve_stream
from ._common import (
    DIRNAME,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    current_context,
    emit,
    fail,
    reporting,
    say,
    stderr_is_terminal,
)

__all__ = ["ENV_TOKEN", "SYNC_COMMANDS"]

ENV_TOKEN = "CTXSTORE_TOKEN"
_token_option = click.option("--token", envvar=ENV_TOKEN, metavar="TOKEN", default=None,
                             help=f"Bearer token for an HTTP remote (env {ENV_TOKEN}).")


def _progress() -> Progress | None:
    if not stderr_is_terminal():
        return None

    def show(stage: str, objects: int, size: int) -> None:
        text = f"{stage}: {size / (1 << 20):.1f} MiB" + (f", {objects} objects" if objects else "")
        end = "\n" if stage in ("received", "sent") else ""
        click.echo(f"\r{text}   {end}", err=True, nl=False)

    return show


# -- serve -------------------------------------------------------------------------------------------------

def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        fail(f"--http wants HOST:PORT (like 127.0.0.1:8765, or :0 for any free port), not {text!r}",
             EXIT_USAGE)
    return host, int(port)


@click.command()
@click.argument("path", required=False, type=click.Path(file_okay=False))
@click.option("--stdio", is_flag=True, help="Speak the protocol on stdin/stdout (what ssh remotes run).")
@click.option("--http", "http", metavar="HOST:PORT",
              help="Serve HTTP on HOST:PORT (binds 127.0.0.1 by default).")
@click.option("--tokens", "tokens_file", type=click.Path(dir_okay=False, exists=True),
              help="Token file: lines of 'read|write TOKEN [NAME]'.")
@click.option("--allow-anonymous-read", is_flag=True, help="Let callers without a token fetch and clone.")
@click.option("--certfile", type=click.Path(dir_okay=False, exists=True), help="TLS certificate (PEM).")
@click.option("--keyfile", type=click.Path(dir_okay=False, exists=True), help="TLS private key (PEM).")
@click.option("--max-body", type=int, default=None, help="Largest push body in bytes (413 above it).")
@click.option("--request-timeout", type=float, default=None, help="Seconds a request body may take (408).")
@click.option("--new-token", is_flag=True, help="Print a fresh random token for a token file and exit.")
def serve(path: str | None, stdio: bool, http: str | None, tokens_file: str | None,
          allow_anonymous_read: bool, certfile: str | None, keyfile: str | None, max_body: int | None,
          request_timeout: float | None, new_token: bool) -> None:
    """Serve a repository (or, over HTTP, a directory of repositories) to fetch, pull, push and clone.

    PATH is a repository directory (default: this one); over HTTP it may also be a directory whose
    repositories are served at http://HOST:PORT/<relative path>.
    """
    if new_token:
        click.echo(secrets.token_urlsafe(32))
        return
    if stdio == bool(http):
        fail("say how to serve: --stdio or --http HOST:PORT", EXIT_USAGE)
    root = Path(path) if path else current_context().location()
    if stdio:
        _serve_stdio(root)
        return
    from ..sync.server import DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT, HubSettings, load_tokens, serve_http

    if bool(certfile) != bool(keyfile):
        fail("TLS needs both --certfile and --keyfile", EXIT_USAGE)
    if not root.is_dir():
        fail(f"nothing to serve at {root}: no such directory", EXIT_NOT_FOUND)
    with reporting():
        tokens = load_tokens(tokens_file) if tokens_file else []
    if not tokens and not allow_anonymous_read:
        say("ctxstore: warning: no --tokens and no --allow-anonymous-read: every request will be refused")
    settings = HubSettings(root, tokens, allow_anonymous_read, max_body or DEFAULT_MAX_BODY,
                           request_timeout or DEFAULT_REQUEST_TIMEOUT)
    host, port = _host_port(http or "")

    def ready(url: str) -> None:
        say(f"serving {root} on {url}")
        sys.stderr.flush()

    with reporting():
        serve_http(settings, host, port, certfile=certfile, keyfile=keyfile, on_ready=ready)


def _serve_stdio(root: Path) -> None:
    with reporting():
        repo = Repository.open(root)
        try:
            serve_stream(Service(repo.store), sys.stdin.buffer, sys.stdout.buffer)
        finally:
            repo.close()


# -- fetch, pull, push, clone ------------------------------------------------------------------------------

@click.command()
@click.argument("remote", default="origin")
@_token_option
def fetch(remote: str, token: str | None) -> None:
    """Bring REMOTE's heads into refs/remotes/REMOTE/* and its new tags into refs/tags/ (only what is new moves)."""
    state = current_context()
    with reporting():
        result = do_fetch(state.repo(), remote, token=token, progress=_progress())
    state.tell(f"fetched {len(result.updated)} ref(s), {result.objects} object(s), {result.bytes} bytes")
    emit(result)


@click.command()
@click.argument("remote", default="origin")
@click.argument("ref", default="main")
@click.option("--rebase", is_flag=True, help="Replay local revisions on top of the remote's when diverged.")
@_token_option
def pull(remote: str, ref: str, rebase: bool, token: str | None) -> None:
    """Fetch REMOTE, then fast-forward (or with --rebase, rebase) local REF onto it."""
    state = current_context()
    with reporting():
        result = do_pull(state.repo(), remote, ref, rebase=rebase, token=token, progress=_progress())
    state.tell(f"{result.ref}: {result.how}")
    emit(result)


@click.command()
@click.argument("remote", default="origin")
@click.argument("refs", nargs=-1)
@click.option("--force", "-f", is_flag=True, help="Overwrite the remote refs whatever they hold.")
@click.option("--force-with-lease", "leases", multiple=True, metavar="REF[=REV]",
              help="Overwrite REF only if the remote still holds REV (default: our remote-tracking ref).")
@_token_option
def push(remote: str, refs: tuple[str, ...], force: bool, leases: tuple[str, ...], token: str | None) -> None:
    """Move REMOTE's REFS (default: every local head) to ours; fast-forward only unless forced."""
    state = current_context()
    repo = state.repo()
    expect: dict[str, str | None] = {}
    with reporting():
        for lease in leases:
            name, sep, rev = lease.partition("=")
            if not sep:
                full = repo.ref_name(name)
                rev_or_none = repo.head(f"refs/remotes/{remote}/{full.removeprefix('refs/heads/')}")
                expect[name] = rev_or_none
            else:
                expect[name] = rev or None
        names = list(refs) or (list(expect) if expect else None)
        result = do_push(repo, remote, names, force=force, expect=expect or None, token=token,
                         progress=_progress())
    state.tell(f"pushed {len(result.updated)} ref(s), {result.objects} object(s), {result.bytes} bytes")
    emit(result)


@click.command()
@click.argument("url")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@_token_option
def clone(url: str, directory: str | None, token: str | None) -> None:
    """Copy the repository at URL into DIRECTORY/.ctxstore, with remote origin and every head."""
    if directory is None:
        tail = urlsplit(url).path.rstrip("/").rsplit("/", 1)[-1] or "clone"
        directory = tail.removesuffix(".ctxstore") or "clone"
    with reporting():
        repo = do_clone(url, Path(directory) / DIRNAME, token=token, progress=_progress())
    try:
        heads = repo.refs("refs/heads/")
    finally:
        repo.close()
    say(f"cloned {url} into {os.path.join(directory, DIRNAME)} ({len(heads)} head(s))")
    emit({"path": os.path.join(directory, DIRNAME), "heads": heads})


# -- remotes -----------------------------------------------------------------------------------------------

@click.group(invoke_without_command=True)
@click.pass_context
def remote(ctx: click.Context) -> None:
    """List, add and remove remotes (`ctxstore remote` lists them)."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(remote_list)


@remote.command("add")
@click.argument("name")
@click.argument("url")
def remote_add(name: str, url: str) -> None:
    """Record remote NAME at URL (a path, ssh://host/path or http(s)://hub/repo)."""
    with reporting():
        current_context().repo().remote_add(name, url)
    emit({"name": name, "url": url})


@remote.command("list")
def remote_list() -> None:
    """Every remote and its URL, as JSON."""
    with reporting():
        emit(current_context().repo().remotes())


@remote.command("remove")
@click.argument("name")
def remote_remove(name: str) -> None:
    """Forget remote NAME (its remote-tracking refs stay)."""
    with reporting():
        current_context().repo().remote_remove(name)
    emit({"removed": name})


SYNC_COMMANDS: list[click.Command] = [serve, fetch, pull, push, clone, remote]
"""The commands the main `ctxstore` group registers."""
