"""`ctxstore hub`: the repositories and tokens of a hub's PostgreSQL database, worked on directly.

Stateless hubs (`ctxstore serve --http --store postgresql://...`) serve every repository in one database
and read their tokens from it; these commands create and list the repositories, add, list and remove the
tokens, and check or collect a repository there, without going through a hub. The database layer is
imported inside each command, so other commands never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import shown
from ._common import EXIT_CORRUPT, EXIT_EXISTS, EXIT_NOT_FOUND, current_context, emit, fail, reporting
from ._durations import Duration

if TYPE_CHECKING:
    from ..sync.stores import PostgresRepositories

__all__ = ["ENV_STORE", "hub", "require_postgres"]

ENV_STORE = "CTXSTORE_STORE"
F = TypeVar("F", bound=Callable[..., Any])


def store_options(command: F) -> F:
    """--store (required, or env CTXSTORE_STORE), --blobs and --s3-endpoint."""
    command = click.option("--s3-endpoint", metavar="URL", default=None,
                           help="The S3 service's endpoint (SeaweedFS, MinIO, ...); default AWS.")(command)
    command = click.option("--blobs", metavar="s3://BUCKET/PREFIX", default=None,
                           help="Where the database keeps large blobs (as given to `serve --blobs`).")(command)
    return click.option("--store", "store", metavar="URL", envvar=ENV_STORE, required=True,
                        help=f"The hub's PostgreSQL database, postgresql://USER@HOST:PORT/DB (env {ENV_STORE}).")(
        command)


def require_postgres() -> None:
    """Return when `ctxstore.sync.stores` (psycopg behind it) imports; else a clear failure saying what to install."""
    try:
        from ..sync import stores  # noqa: F401
    except ImportError as exc:
        fail(f"PostgreSQL support is not installed ({exc}); install it with pip install 'ctxstore[postgres]' "
             "(and 'ctxstore[s3]' for --blobs)")


@contextmanager
def database(store: str, blobs: str | None = None, s3_endpoint: str | None = None) -> Iterator[PostgresRepositories]:
    """The database's repositories, closed after the block; errors become one-line CLI failures."""
    require_postgres()
    from ..sync.stores import PostgresRepositories

    with reporting():
        repositories = PostgresRepositories(store, blobs=blobs, s3_endpoint=s3_endpoint)
        try:
            yield repositories
        finally:
            repositories.close()


@click.group()
def hub() -> None:
    """Repositories and tokens of a hub's PostgreSQL database (what `serve --store` serves)."""


@hub.command("create")
@click.argument("name")
@store_options
def hub_create(name: str, store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Create repository NAME (like team/support) in the database; hubs serve it at once at /NAME.

    Prints {"created": NAME}; exits 5 if it exists.
    """
    from ..sync.stores import redacted_url

    with database(store, blobs, s3_endpoint) as repositories:
        repositories.create(name)
    current_context().tell(f"created repository {name} in {redacted_url(store)}")
    emit({"created": name})


@hub.command("list")
@store_options
def hub_list(store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Every repository in the database, sorted, as a JSON list of names."""
    with database(store, blobs, s3_endpoint) as repositories:
        names = repositories.names()
    emit(names)


@hub.command("fsck")
@click.argument("name")
@store_options
def hub_fsck(name: str, store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Check repository NAME in the database, as `ctxstore fsck` does a local one (exits 6 on problems)."""
    state = current_context()
    with database(store, blobs, s3_endpoint) as repositories:
        repo = _existing(repositories, name)
        with state.progress("fsck", "objects") as progress:
            report = repo.fsck(progress)
    emit(report)
    if not report.ok:
        fail(f"fsck found {len(report.problems)} problem(s) in {name}, listed in the report on stdout",
             EXIT_CORRUPT)


@hub.command("gc")
@click.argument("name")
@click.option("--prune", "prune", type=Duration(), default="14d", show_default=True, metavar="now|DURATION",
              help="Keep unreachable objects younger than this (now, 3600, 12h, 2w, ...).")
@store_options
def hub_gc(name: str, prune: float, store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Delete what no ref or reflog of repository NAME reaches and is older than --prune.

    Safe while hubs serve it: reachability is re-checked in the deleting transaction, and the grace
    period covers pushes whose objects are written but whose refs have not moved yet.
    """
    with database(store, blobs, s3_endpoint) as repositories:
        report = _existing(repositories, name).gc(grace=prune)
    current_context().tell(f"gc {name}: deleted {report.deleted} objects ({report.bytes} bytes)")
    emit(report)


def _existing(repositories: PostgresRepositories, name: str) -> Any:
    repo = repositories.open(name)
    if repo is None:
        fail(f"no repository {shown(name)} in the database; `ctxstore hub list` shows them", EXIT_NOT_FOUND)
    return repo


@hub.group("token")
def hub_token() -> None:
    """Tokens kept in the database: every hub serving it checks them on each request."""


@hub_token.command("add")
@click.argument("name")
@click.option("--scope", type=click.Choice(["read", "write", "admin"]), default="write", show_default=True,
              help="read: fetch and clone; write: also push; admin: also list and create repositories.")
@store_options
def token_add(name: str, scope: str, store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Make a token called NAME and print it once as {name, scope, token}; only its digest is kept.

    Exits 5 if a token of that name exists (remove it first to replace it).
    """
    with database(store, blobs, s3_endpoint) as repositories:
        if any(t.name == name for t in repositories.tokens()):
            fail(f"a token called {shown(name)} exists; remove it first (`ctxstore hub token remove {name}`) "
                 "or choose another name", EXIT_EXISTS)
        made = repositories.add_token(name, scope)
    current_context().tell(f"added {scope} token {name}; it is shown only now, keep it somewhere safe")
    emit({"name": made.name, "scope": made.scope, "token": made.token})


@hub_token.command("list")
@store_options
def token_list(store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Every token's name and scope (never the token), as a JSON list."""
    with database(store, blobs, s3_endpoint) as repositories:
        tokens = sorted(repositories.tokens(), key=lambda t: t.name)
    emit([{"name": t.name, "scope": t.scope} for t in tokens])


@hub_token.command("remove")
@click.argument("name")
@store_options
def token_remove(name: str, store: str, blobs: str | None, s3_endpoint: str | None) -> None:
    """Forget token NAME: every hub refuses it from its next request on. Exits 3 if there is none."""
    with database(store, blobs, s3_endpoint) as repositories:
        if not any(t.name == name for t in repositories.tokens()):
            fail(f"no token called {shown(name)}; `ctxstore hub token list` shows them", EXIT_NOT_FOUND)
        repositories.remove_token(name)
    current_context().tell(f"removed token {name}")
    emit({"removed": name})

