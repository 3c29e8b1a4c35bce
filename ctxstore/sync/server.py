"""The hub: the sync protocol over HTTP (Starlette on uvicorn), serving one repository or a directory.

Each repository answers ``GET <repo>/refs``, ``POST <repo>/fetch`` and ``POST <repo>/push`` (see
`sync.http` and ``docs/protocol.md``). Callers authenticate with bearer tokens from a token file, each
with ``read`` or ``write`` scope; reads may be opened to anonymous callers, pushes never are. Tokens are
compared in constant time (blake3 digests through `hmac.compare_digest`, so length leaks nothing either).
Request bodies are bounded in size (413) and in the time they take to arrive (408). Everything outside
the served directory, and every name that is not a repository, is 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import os
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import blake3
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..errors import (
    AuthError,
    BadPack,
    CtxStoreError,
    InvalidInput,
    MissingObject,
    NonFastForward,
    NotARepository,
    RefError,
    RemoteError,
)
from ..repo.repository import Repository
from .http import CONTENT_TYPE
from .protocol import MAX_FRAME, Service, encode_error, encode_frame, read_frame

__all__ = ["DEFAULT_MAX_BODY", "HubSettings", "Token", "create_app", "load_tokens", "serve_http"]

DEFAULT_MAX_BODY = 1 << 30
"""Largest push body accepted, in bytes (a pack of a few million small messages)."""
DEFAULT_REQUEST_TIMEOUT = 600.0
Scope = Literal["read", "write"]
_Spool = tempfile.SpooledTemporaryFile[bytes]
_OPS = ("refs", "fetch", "push")


@dataclass(frozen=True)
class Token:
    """A bearer token and what it may do; stored as a digest so comparisons take the same time."""

    name: str
    scope: Scope
    digest: bytes = field(repr=False)


def _digest(secret: str) -> bytes:
    return blake3.blake3(secret.encode("utf-8")).digest()


def load_tokens(path: str | os.PathLike[str]) -> list[Token]:
    """Read a token file: one ``SCOPE TOKEN [NAME]`` per line (scope read or write); # starts a comment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read the token file {path}: {exc}") from None
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 2 or words[0] not in ("read", "write") or len(words[1]) < 16:
            raise InvalidInput(f"{path} line {number}: expected 'read|write TOKEN [NAME]' with a token of at "
                               "least 16 characters (make one with `ctxstore serve --new-token`)")
        tokens.append(Token(" ".join(words[2:]) or f"line {number}", words[0], _digest(words[1])))  # type: ignore[arg-type]
    return tokens


@dataclass
class HubSettings:
    """What a hub serves and how: the root, tokens and limits."""

    root: Path
    tokens: list[Token] = field(default_factory=list)
    allow_anonymous_read: bool = False
    max_body: int = DEFAULT_MAX_BODY
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT


def _frame_response(message: dict[str, Any], status: int = 200,
                    headers: dict[str, str] | None = None) -> Response:
    return Response(encode_frame(message), status_code=status, media_type=CONTENT_TYPE, headers=headers)


def _error(status: int, exc: CtxStoreError, headers: dict[str, str] | None = None) -> Response:
    return _frame_response(encode_error(exc), status, headers)


def _status_of(exc: CtxStoreError) -> int:
    if isinstance(exc, NonFastForward):
        return 409
    if isinstance(exc, AuthError):
        return 403
    # A RemoteError here is the client's: a request frame cut short or malformed.
    if isinstance(exc, BadPack | InvalidInput | RefError | MissingObject | RemoteError):
        return 400
    return 500


class _Hub:
    """The request handlers, with the settings and the repositories opened so far."""

    def __init__(self, settings: HubSettings) -> None:
        self.settings = settings
        self.root = settings.root.resolve()
        self.single = (self.root / "format").is_file()
        self._repos: dict[Path, Repository] = {}
        self._lock = threading.Lock()

    def scope(self, request: Request) -> Scope | Response | None:
        """The caller's scope (None: anonymous), or the 401 response for a bad credential."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        kind, _, secret = header.partition(" ")
        unauthorized = _error(401, AuthError("the token is not valid on this hub; ask its operator for one"),
                              {"WWW-Authenticate": 'Bearer realm="ctxstore"'})
        if kind.lower() != "bearer" or not secret:
            return unauthorized
        digest = _digest(secret.strip())
        found: Scope | None = None
        for token in self.settings.tokens:
            # Every token is compared, so the time taken says nothing about which one (or none) matched.
            if hmac.compare_digest(digest, token.digest) and found != "write":
                found = token.scope
        return found if found is not None else unauthorized

    def repository(self, parts: list[str]) -> Repository | None:
        """The repository a URL path names, or None (outside the root, hidden, or not a repository)."""
        if self.single:
            if parts:
                return None
            target = self.root
        else:
            if not parts or any(p in ("", ".", "..") or p.startswith(".") or "\\" in p or "\x00" in p
                                for p in parts):
                return None
            target = self.root.joinpath(*parts).resolve()
            if not target.is_relative_to(self.root) or target == self.root:
                return None
        with self._lock:
            repo = self._repos.get(target)
            if repo is None:
                try:
                    repo = Repository.open(target)
                except (NotARepository, OSError):
                    return None
                self._repos[target] = repo
            return repo

    async def handle(self, request: Request) -> Response:
        parts = [p for p in request.path_params.get("path", "").split("/") if p != ""]
        op = parts.pop() if parts else ""
        if op not in _OPS or request.method != ("GET" if op == "refs" else "POST"):
            return _error(404, InvalidInput(f"no such endpoint {request.url.path!r}; a hub serves "
                                            "<repo>/refs, <repo>/fetch and <repo>/push"))
        need: Scope = "write" if op == "push" else "read"
        scope = self.scope(request)
        if isinstance(scope, Response):
            return scope
        if scope is None and not (need == "read" and self.settings.allow_anonymous_read):
            return _error(401, AuthError(f"{'push' if need == 'write' else 'reading'} needs a token; "
                                         "pass one with --token or CTXSTORE_TOKEN"),
                          {"WWW-Authenticate": 'Bearer realm="ctxstore"'})
        if need == "write" and scope != "write":
            return _error(403, AuthError("this token has read scope; pushing needs a token with write scope"))
        repo = await run_in_threadpool(self.repository, parts)
        if repo is None:
            return _error(404, NotARepository(f"no repository at {'/'.join(parts) or '/'} on this hub"))
        service = Service(repo.store, writable=True)
        try:
            if op == "refs":
                return _frame_response((await run_in_threadpool(service.advertise)).to_message())
            body = await self._body(request, self.settings.max_body if op == "push" else MAX_FRAME + 4)
            if isinstance(body, Response):
                return body
            try:
                if op == "fetch":
                    return await self._fetch(service, body)
                return _frame_response(await run_in_threadpool(_push, service, body))
            finally:
                if op == "push":
                    body.close()
        except CtxStoreError as exc:
            return _error(_status_of(exc), exc)

    async def _body(self, request: Request, limit: int) -> _Spool | Response:
        """The request body spooled (to disk past 8 MiB), or the 413/408 response."""
        too_big = _error(413, InvalidInput(f"the request body is over this hub's {limit}-byte limit; "
                                           "push fewer revisions at a time or ask for a larger --max-body"))
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return too_big
        spool = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115 (closed by the caller)
        size = 0
        try:
            async with asyncio.timeout(self.settings.request_timeout):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > limit:
                        spool.close()
                        return too_big
                    spool.write(chunk)
        except TimeoutError:
            spool.close()
            return _error(408, InvalidInput(f"the request body took over {self.settings.request_timeout:.0f}"
                                            " s to arrive; try again on a faster link"))
        spool.seek(0)
        return spool

    async def _fetch(self, service: Service, body: _Spool) -> Response:
        with body:
            request = read_frame(body)
        oids = await run_in_threadpool(service.plan_fetch, request)
        head = encode_frame({"ok": True, "objects": len(oids), "pack": bool(oids)})

        def stream() -> Iterator[bytes]:
            yield head
            if oids:
                yield from service.send(oids)

        return StreamingResponse(stream(), media_type=CONTENT_TYPE)

    def close(self) -> None:
        with self._lock:
            for repo in self._repos.values():
                repo.close()
            self._repos.clear()


def _push(service: Service, body: _Spool) -> dict[str, Any]:
    return service.receive_push(read_frame(body), body)


def create_app(settings: HubSettings) -> Starlette:
    """The hub as an ASGI application."""
    hub = _Hub(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        hub.close()

    return Starlette(routes=[Route("/{path:path}", hub.handle, methods=["GET", "POST"])], lifespan=lifespan)


def serve_http(settings: HubSettings, host: str = "127.0.0.1", port: int = 8765, *,
               certfile: str | None = None, keyfile: str | None = None,
               on_ready: Callable[[str], None] | None = None) -> None:
    """Run the hub until interrupted; `on_ready` gets the URL once the socket listens (port 0: any free)."""
    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc}; choose another port") from None
    sock.listen(128)
    bound = sock.getsockname()[1]
    config = uvicorn.Config(create_app(settings), ssl_certfile=certfile, ssl_keyfile=keyfile,
                            log_level="warning", access_log=False, timeout_keep_alive=30,
                            timeout_graceful_shutdown=5, lifespan="on")
    scheme = "https" if certfile else "http"
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    if on_ready is not None:
        on_ready(f"{scheme}://{shown}:{bound}")
    uvicorn.Server(config).run(sockets=[sock])
