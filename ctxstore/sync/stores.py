"""Repositories kept in PostgreSQL, large blobs in an S3 bucket: what a stateless hub serves.

`PostgresRepositories` is the hub's `Repositories` over one database (`ctxstore.store.postgres`): every
ref read, push and token check goes to the database, and what a hub keeps in memory is only what cannot
change (objects, which are named by their content). Any number of hub processes may therefore serve one
database, and a push through one is seen through every other at once. Two pushes to one ref race in the
database's transaction: the loser's compare-and-swap fails with `RefMoved`, which the hub answers with 409
and the client retries after a pull.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from ..errors import InvalidInput, NotARepository, UnknownSetting, shown
from ..repo.repository import Repository
from ..store.postgres import PostgresDatabase, StoredToken
from .server import SCOPES, Scope, Token, token_digest

__all__ = ["NewToken", "PostgresRepositories", "check_store_url", "redacted_url"]

_SCHEMES = ("postgresql", "postgres")


def check_store_url(url: str) -> str:
    """`url` if it names a PostgreSQL database (``postgresql://[user[:password]@]host[:port]/dbname``),
    else `InvalidInput` saying what is wanted."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        raise InvalidInput(f"not a PostgreSQL URL: {shown(redacted_url(url))} ({exc})") from None
    if parts.scheme not in _SCHEMES or not parts.path.strip("/"):
        raise InvalidInput(f"--store wants a PostgreSQL URL like postgresql://user@host:5432/dbname, "
                           f"not {shown(redacted_url(url))}")
    return url


def redacted_url(url: str) -> str:
    """`url` with any password replaced by ``***``, fit for logs and messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        host = parts.hostname or ""
        netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    except ValueError:
        return "<a malformed URL>"


@dataclass(frozen=True)
class NewToken:
    """A token just made: the secret is shown once, and only its digest is kept."""

    name: str
    scope: Scope
    token: str


class PostgresRepositories:
    """The repositories of one PostgreSQL database (blobs past the threshold in an S3 bucket), and its tokens.

    Nothing about a repository is kept between requests: each `open` looks the name up in the database
    (a repository dropped and made again under its name is the new one at once), and its store reads
    refs and config in the database on every transaction. What the database object caches is objects,
    which never change under their id.
    """

    def __init__(self, url: str, *, blobs: str | None = None, s3_endpoint: str | None = None) -> None:
        check_store_url(url)
        bucket = None
        if blobs is not None:
            if not blobs.startswith("s3://"):
                raise InvalidInput(f"--blobs wants an S3 URL like s3://bucket/prefix, not {shown(blobs)}")
            from ..store.s3 import S3Bucket

            bucket = S3Bucket(blobs, endpoint_url=s3_endpoint)
        self.url = url
        try:
            self.database = PostgresDatabase(url, blobs=bucket)
        except BaseException:
            if bucket is not None:
                bucket.close()
            raise
        self._bucket = bucket

    def __repr__(self) -> str:
        return f"<PostgresRepositories {redacted_url(self.url)}>"

    def open(self, name: str) -> Repository | None:
        try:
            return Repository(self.database.open(name))
        except NotARepository:
            return None

    def tokens_and_open(self, name: str) -> tuple[Sequence[Token], Repository | None]:
        stored, store = self.database.tokens_and_open(name)
        return _tokens(stored), None if store is None else Repository(store)

    def create(self, name: str) -> Repository:
        return Repository(self.database.create(name))  # the database checks the name

    def names(self) -> list[str]:
        return self.database.names()

    def tokens(self) -> Sequence[Token]:
        return _tokens(self.database.tokens())

    def add_token(self, name: str, scope: str) -> NewToken:
        """Make a token called `name` with `scope` and keep its digest; `InvalidInput` if the name is taken."""
        if not name or not name.isprintable() or len(name) > 100:
            raise InvalidInput(f"a token name is printable text of 1 to 100 characters, not {shown(name)}")
        checked = _scope(scope)
        if any(t.name == name for t in self.database.tokens()):
            raise InvalidInput(f"a token called {shown(name)} exists; remove it first "
                               f"(`ctxstore hub token remove {name}`) or choose another name")
        secret = secrets.token_urlsafe(32)
        self.database.set_token(name, checked, token_digest(secret))
        return NewToken(name, checked, secret)

    def remove_token(self, name: str) -> None:
        """Forget token `name`: hubs refuse it from their next request on; `UnknownSetting` if there is none."""
        if not self.database.delete_token(name):
            raise UnknownSetting(f"no token called {shown(name)}; `ctxstore hub token list` shows them")

    def close(self) -> None:
        self.database.close()
        if self._bucket is not None:
            self._bucket.close()


def _tokens(stored: Sequence[StoredToken]) -> list[Token]:
    return [Token(t.name, _scope(t.scope), t.digest) for t in stored]


def _scope(scope: str) -> Scope:
    for known in SCOPES:
        if scope == known:
            return known
    raise InvalidInput(f"a token's scope is one of {', '.join(SCOPES)}, not {shown(scope)}")
