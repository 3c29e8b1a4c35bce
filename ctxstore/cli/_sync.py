"""The sync commands of the CLI: serve, fetch, pull, push, clone and remote add/list/remove.

The main group names each in `ctxstore.cli.COMMANDS`.
Tokens for HTTP remotes come from ``--token`` or ``CTXSTORE_TOKEN``.

This module is imported when one of its commands runs, and the sync layer (and the HTTP client and
server stacks it reaches) inside each command, so `ctxstore render` and the other local commands never
pay for it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ..errors import shown
from ..repo.repository import Repository
from ._common import (
    DIRNAME,
    EXIT_EXISTS,
    EXIT_NON_FAST_FORWARD,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
    ProgressLine,
    current_context,
    emit,
    fail,
    reporting,
    say,
)

if TYPE_CHECKING:
    from ..sync.client import Progress

__all__ = ["ENV_TOKEN"]

ENV_TOKEN = "CTXSTORE_TOKEN"
_token_option = click.option("--token", envvar=ENV_TOKEN, metavar="TOKEN", default=None,
                             help=f"Bearer token for an HTTP remote (env {ENV_TOKEN}).")


@contextmanager
def _progress() -> Iterator[Progress | None]:
    """A pack's progress on stderr (objects in it, bytes moved, rate), when stderr is a terminal."""
    line = ProgressLine("", "objects", enabled=None)
    if not line.enabled or current_context().quiet:
        yield None
        return

    def show(stage: str, objects: int, size: int) -> None:
        line.what = stage
        line.bytes_update(objects, size, final=stage in ("received", "sent"))

    try:
        yield show
    finally:
        line.close()


# -- serve -------------------------------------------------------------------------------------------------

def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        fail(f"--http wants HOST:PORT (like 127.0.0.1:8765, or :0 for any free port), not {shown(text)}",
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
@click.option("--max-push-size", type=click.IntRange(1), default=None,
              help="Largest inflated size of a pushed pack in bytes (400 above it).")
@click.option("--max-push-objects", type=click.IntRange(1), default=None, help="Most objects in one push.")
@click.option("--pack-jobs", type=click.IntRange(1), default=None,
              help="Fetches and pushes packed or unpacked at once (others wait).")
@click.option("--queue-timeout", type=click.FloatRange(0, min_open=True), default=None,
              help="Seconds a request waits for a pack job (503 after).")
@click.option("--header-timeout", type=click.FloatRange(0, min_open=True), default=None,
              help="Seconds to send request headers, or to pause inside a body (then closed, or 408).")
@click.option("--send-timeout", type=click.FloatRange(0, min_open=True), default=None,
              help="Seconds a client may stop reading an answer before the hub hangs up.")
@click.option("--max-connections", type=click.IntRange(1), default=None,
              help="Open connections past which the hub answers 503.")
@click.option("--store", "store", metavar="URL",
              help="Serve every repository in this PostgreSQL database (postgresql://USER@HOST:PORT/DB) "
                   "instead of PATH; tokens kept there count too (`ctxstore hub`).")
@click.option("--blobs", metavar="s3://BUCKET/PREFIX", help="With --store: where large blobs live (S3).")
@click.option("--s3-endpoint", metavar="URL", help="With --blobs: the S3 service's endpoint (default AWS).")
@click.option("--new-token", is_flag=True, help="Print a fresh random token for a token file and exit.")
def serve(path: str | None, stdio: bool, http: str | None, tokens_file: str | None,
          allow_anonymous_read: bool, certfile: str | None, keyfile: str | None, max_body: int | None,
          request_timeout: float | None, max_push_size: int | None, max_push_objects: int | None,
          pack_jobs: int | None, queue_timeout: float | None, header_timeout: float | None,
          send_timeout: float | None, max_connections: int | None, store: str | None, blobs: str | None,
          s3_endpoint: str | None, new_token: bool) -> None:
    """Serve a repository (or, over HTTP, a directory of repositories) to fetch, pull, push and clone.

    PATH is a repository directory (default: this one); over HTTP it may also be a directory whose
    repositories are served at http://HOST:PORT/<relative path>. With --store, the hub serves every
    repository of a PostgreSQL database and keeps no state itself: run as many as you like on one
    database, behind one address.
    """
    if new_token:
        import secrets

        click.echo(secrets.token_urlsafe(32))
        return
    if stdio == bool(http):
        fail("say how to serve: --stdio or --http HOST:PORT", EXIT_USAGE)
    if store is not None and (path is not None or stdio):
        fail("--store serves the database's repositories over --http; give no PATH and no --stdio", EXIT_USAGE)
    if (blobs or s3_endpoint) and store is None:
        fail("--blobs and --s3-endpoint go with --store", EXIT_USAGE)
    if s3_endpoint and not blobs:
        fail("--s3-endpoint needs --blobs s3://BUCKET/PREFIX", EXIT_USAGE)
    root = Path(path) if path else None if store is not None else current_context().location()
    if stdio:
        assert root is not None
        _serve_stdio(root)
        return
    from ..sync.server import DEFAULT_MAX_BODY, DEFAULT_REQUEST_TIMEOUT, HubSettings, load_tokens, serve_http

    if bool(certfile) != bool(keyfile):
        fail("TLS needs both --certfile and --keyfile", EXIT_USAGE)
    if root is not None and not root.is_dir():
        fail(f"nothing to serve at {root}: no such directory", EXIT_NOT_FOUND)
    host, port = _host_port(http or "")
    with reporting():
        tokens = load_tokens(tokens_file) if tokens_file else []
    repositories = None
    served = str(root)
    if store is not None:
        from ._hub import require_postgres

        require_postgres()
        from ..sync.stores import PostgresRepositories, redacted_url

        served = redacted_url(store)
        with reporting():
            repositories = PostgresRepositories(store, blobs=blobs, s3_endpoint=s3_endpoint)
            tokens_there = len(repositories.tokens())
        if not tokens_there and not tokens and not allow_anonymous_read:
            say("ctxstore: warning: no tokens in the database (`ctxstore hub token add`), no --tokens and no "
                "--allow-anonymous-read: every request will be refused")
    elif not tokens and not allow_anonymous_read:
        say("ctxstore: warning: no --tokens and no --allow-anonymous-read: every request will be refused")
    settings = HubSettings(root, tokens, allow_anonymous_read, max_body or DEFAULT_MAX_BODY,
                           request_timeout or DEFAULT_REQUEST_TIMEOUT, repositories=repositories)
    # Each limit left unset keeps HubSettings' default.
    settings = dataclasses.replace(
        settings, max_push_size=max_push_size or settings.max_push_size,
        max_push_objects=max_push_objects or settings.max_push_objects, pack_jobs=pack_jobs or settings.pack_jobs,
        queue_timeout=queue_timeout or settings.queue_timeout, header_timeout=header_timeout or settings.header_timeout,
        send_timeout=send_timeout or settings.send_timeout, max_connections=max_connections or settings.max_connections)

    def ready(url: str) -> None:
        say(f"serving {served} on {url}")
        sys.stderr.flush()

    with reporting():
        serve_http(settings, host, port, certfile=certfile, keyfile=keyfile, on_ready=ready)


def _serve_stdio(root: Path) -> None:
    from ..sync.protocol import Service, serve_stream

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
    from ..sync.client import fetch as do_fetch

    state = current_context()
    with reporting(), _progress() as progress:
        result = do_fetch(state.repo(), remote, token=token, progress=progress)
    state.tell(f"fetched {len(result.updated)} ref(s), {result.objects} object(s), {result.bytes} bytes")
    emit(result)


@click.command()
@click.argument("remote", default="origin")
@click.argument("ref", required=False)
@click.option("--all", "every", is_flag=True,
              help="Pull every tracked head (a local x with a REMOTE/x); what pull does without REF.")
@click.option("--rebase", is_flag=True, help="Replay local revisions on top of the remote's when diverged.")
@_token_option
def pull(remote: str, ref: str | None, every: bool, rebase: bool, token: str | None) -> None:
    """Fetch REMOTE, then fast-forward (or with --rebase, rebase) local REF onto it.

    Without REF (or with --all), every tracked head is pulled: each local head x that has a
    remote-tracking REMOTE/x. Prints {ref, old, new, how, fetch}, or a list of those for every head;
    a head that diverged (without --rebase) is left as it was, listed with how "diverged", and the
    command exits 4 after the others were pulled.
    """
    from ..sync.client import pull as do_pull
    from ..sync.client import pull_all

    if every and ref is not None:
        fail("give either REF or --all, not both", EXIT_USAGE)
    state = current_context()
    with reporting(), _progress() as progress:
        if ref is not None:
            result = do_pull(state.repo(), remote, ref, rebase=rebase, token=token, progress=progress)
        else:
            results = pull_all(state.repo(), remote, rebase=rebase, token=token, progress=progress)
    if ref is not None:
        state.tell(f"{result.ref}: {result.how}")
        emit(result)
        return
    for one in results:
        state.tell(f"{one.ref}: {one.how}")
    if not results:
        state.tell(f"no local head tracks a head of {remote}; pull one by name (`ctxstore pull {remote} REF`)")
    emit(results)
    diverged = [one.ref for one in results if one.how == "diverged"]
    if diverged:
        fail(f"{', '.join(diverged)} diverged from {remote} and stayed as they were; "
             f"pull with --rebase to replay your revisions on top of theirs", EXIT_NON_FAST_FORWARD)


@click.command()
@click.argument("remote", default="origin")
@click.argument("refs", nargs=-1)
@click.option("--force", "-f", is_flag=True, help="Overwrite the remote refs whatever they hold.")
@click.option("--force-with-lease", "leases", multiple=True, metavar="REF[=REV]",
              help="Overwrite REF only if the remote still holds REV (default: our remote-tracking ref).")
@click.option("-d", "--delete", "delete", is_flag=True,
              help="Delete REFS on REMOTE (and their remote-tracking refs here) instead of moving them.")
@_token_option
def push(remote: str, refs: tuple[str, ...], force: bool, leases: tuple[str, ...], delete: bool,
         token: str | None) -> None:
    """Move REMOTE's REFS (default: every local head) to ours; fast-forward only unless forced.

    With --delete, REFS are deleted on REMOTE (heads by name, tags as refs/tags/NAME).
    """
    from ..sync.client import push as do_push

    state = current_context()
    repo = state.repo()
    expect: dict[str, str | None] = {}
    if delete:
        if not refs or force or leases:
            fail("push --delete takes the REFS to delete, without --force or --force-with-lease", EXIT_USAGE)
        with reporting():
            result = do_push(repo, remote, list(refs), delete=True, token=token)
        state.tell(f"deleted {len(result.updated)} ref(s) on {remote}")
        emit(result)
        return
    with reporting(), _progress() as progress:
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
                         progress=progress)
    state.tell(f"pushed {len(result.updated)} ref(s), {result.objects} object(s), {result.bytes} bytes")
    emit(result)


@click.command()
@click.argument("url")
@click.argument("directory", required=False, type=click.Path(file_okay=False))
@_token_option
def clone(url: str, directory: str | None, token: str | None) -> None:
    """Copy the repository at URL into DIRECTORY/.ctxstore, with remote origin and every head.

    URL is a hub or ssh URL or a local path: a repository directory or a working directory holding
    .ctxstore/; a path is recorded absolute, so later fetches and pushes work from anywhere.
    """
    from urllib.parse import urlsplit

    from ..sync.client import clone as do_clone

    if directory is None:
        parts = [p for p in urlsplit(url).path.rstrip("/").split("/") if p and p != DIRNAME]
        directory = (parts[-1] if parts else "").removesuffix(".ctxstore") or "clone"
        if directory in (".", ".."):
            directory = "clone"
    existed = os.path.exists(directory)
    try:
        with reporting(), _progress() as progress:
            repo = do_clone(url, Path(directory) / DIRNAME, token=token, progress=progress)
    except BaseException:
        if not existed:  # the library removed the repository; the directory made for it goes too
            import shutil

            shutil.rmtree(directory, ignore_errors=True)
        raise
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
    """Record remote NAME at URL (a path, ssh://host/path or http(s)://hub/repo).

    A path is recorded absolute; a working directory's path stands for its .ctxstore/ repository.
    NAME is printable text without '/', '.', ':', '\\' or spaces, not starting with '-'.
    """
    from ..sync.client import remote_url

    repo = current_context().repo()
    with reporting():
        if name in repo.remotes():
            fail(f"remote {name} already exists at {repo.remotes()[name]}; remove it first "
                 f"(`ctxstore remote remove {name}`) or choose another name", EXIT_EXISTS)
        url = remote_url(url)
        repo.remote_add(name, url)
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
