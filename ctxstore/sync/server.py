"""The hub: the sync protocol over HTTP (Starlette on uvicorn), serving the repositories of one place.

Each repository answers ``GET <repo>/refs``, ``POST <repo>/fetch`` and ``POST <repo>/push`` (see
`sync.http` and ``docs/protocol.md``). Where the repositories live is a `Repositories`: a directory of
LMDB repositories (`RepositoryDirectory`, or one repository served at the root), or a PostgreSQL database
(`ctxstore.sync.stores`), which makes the hub stateless so that any number of hub processes can serve one
database. Callers authenticate with bearer tokens (from a token file, and from the `Repositories` itself),
each with ``read``, ``write`` or ``admin`` scope; reads may be opened to anonymous callers, pushes never
are, and ``admin`` may also list and create repositories (``/.hub/repositories``). Tokens are compared in
constant time (blake3 digests through `hmac.compare_digest`, so length leaks nothing either). Request
bodies are bounded in size (413) and in the time they take to arrive (408). Everything outside the served
directory, and every name that is not a repository, is 404.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import socket
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import blake3
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import (
    AuthError,
    BadPack,
    CtxStoreError,
    EncodingError,
    InvalidInput,
    MissingObject,
    NonFastForward,
    NotARepository,
    RefError,
    RemoteError,
    RepositoryExists,
    shown,
)
from ..repo.repository import Repository
from ..store.base import check_repository_name
from .http import CONTENT_TYPE
from .protocol import MAX_FRAME, Service, encode_error, encode_frame, read_request

__all__ = [
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_PUSH_OBJECTS",
    "DEFAULT_MAX_PUSH_SIZE",
    "DEFAULT_PACK_JOBS",
    "DEFAULT_QUEUE_TIMEOUT",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SEND_TIMEOUT",
    "SCOPES",
    "HubSettings",
    "Repositories",
    "RepositoryDirectory",
    "Scope",
    "Token",
    "create_app",
    "load_tokens",
    "serve_http",
    "token_digest",
]

DEFAULT_MAX_BODY = 1 << 30
"""Largest push body accepted, in bytes (a pack of a few million small messages)."""
DEFAULT_REQUEST_TIMEOUT = 600.0
DEFAULT_MAX_PUSH_SIZE = 1 << 30
DEFAULT_MAX_PUSH_OBJECTS = 1 << 20
DEFAULT_PACK_JOBS = 4
DEFAULT_QUEUE_TIMEOUT = 30.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_SEND_TIMEOUT = 60.0
DEFAULT_MAX_CONNECTIONS = 1000
_SPOOL_IN_MEMORY = 1 << 20
Scope = Literal["read", "write", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "write", "admin")
"""Token scopes, each allowing what the ones before it do: fetch and clone; push; list and create repositories."""
_Spool = tempfile.SpooledTemporaryFile[bytes]
_OPS = ("refs", "fetch", "push")
_ADMIN = ".hub"
"""The first path segment of the admin endpoints: a hidden name, so never a repository's."""


@dataclass(frozen=True)
class Token:
    """A bearer token and what it may do; stored as a digest so comparisons take the same time."""

    name: str
    scope: Scope
    digest: bytes = field(repr=False)


def token_digest(secret: str) -> bytes:
    """What a hub keeps of a token: its blake3 digest (compared in constant time, never the token itself)."""
    return blake3.blake3(secret.encode("utf-8")).digest()


def _rank(scope: Scope | None) -> int:
    return -1 if scope is None else SCOPES.index(scope)


def load_tokens(path: str | os.PathLike[str]) -> list[Token]:
    """Read a token file: one ``SCOPE TOKEN [NAME]`` per line (scope read, write or admin); # starts a comment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read the token file {path}: {exc}") from None
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) < 2 or words[0] not in SCOPES or len(words[1]) < 16:
            raise InvalidInput(f"{path} line {number}: expected 'read|write|admin TOKEN [NAME]' with a token "
                               "of at least 16 characters (make one with `ctxstore serve --new-token`)")
        scope: Scope = words[0]
        tokens.append(Token(" ".join(words[2:]) or f"line {number}", scope, token_digest(words[1])))
    return tokens


@runtime_checkable
class Repositories(Protocol):
    """Where a hub's repositories live: what it opens for a URL, creates and lists, and the tokens kept there.

    A name is the URL path below the hub (``team/support``; ``""`` is the hub's root URL). Every call may
    come from any of the hub's threads. The hub closes it when it stops.
    """

    def open(self, name: str) -> Repository | None:
        """The repository called `name`, or None when there is none (or the name cannot be one)."""
        ...

    def create(self, name: str) -> Repository:
        """Create repository `name` (`check_repository_name`); `RepositoryExists` if it is there."""
        ...

    def names(self) -> list[str]:
        """Every repository's name, sorted."""
        ...

    def tokens(self) -> Sequence[Token]:
        """The tokens kept with the repositories (besides the hub's token file); read on every request."""
        ...

    def tokens_and_open(self, name: str) -> tuple[Sequence[Token], Repository | None]:
        """`tokens()` and `open(name)` at once, what a request needs first (a database: one statement)."""
        ...

    def close(self) -> None:
        """Release what the repositories hold open."""
        ...


class RepositoryDirectory:
    """The repositories in one directory tree, each an LMDB repository at its relative path; or, when the
    directory is a repository itself, that one at the root (name ``""``). No tokens are kept here."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.single = (self.root / "format").is_file()
        self._repos: dict[Path, Repository] = {}
        self._lock = threading.Lock()

    def _target(self, name: str) -> Path | None:
        parts = [p for p in name.split("/") if p != ""]
        if self.single:
            return None if parts else self.root
        if not parts or any(p in ("", ".", "..") or p.startswith(".") or "\\" in p or "\x00" in p for p in parts):
            return None
        target = self.root.joinpath(*parts).resolve()
        if not target.is_relative_to(self.root) or target == self.root:
            return None
        return target

    def open(self, name: str) -> Repository | None:
        target = self._target(name)
        if target is None:
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

    def create(self, name: str) -> Repository:
        check_repository_name(name)
        target = self._target(name)
        if target is None:
            raise InvalidInput(f"cannot create {shown(name)} here: {self.root} is a single repository")
        inside = next((p for p in target.parents if p.is_relative_to(self.root) and (p / "format").is_file()), None)
        if inside is not None:
            raise InvalidInput(f"cannot create {shown(name)}: {inside.relative_to(self.root).as_posix()} is a "
                               "repository, and repositories do not nest")
        with self._lock:
            repo = Repository.init(target)
            self._repos[target] = repo
            return repo

    def names(self) -> list[str]:
        if self.single:
            return [""]
        found = []
        for here, dirs, _ in os.walk(self.root):
            path = Path(here)
            if path != self.root and (path / "format").is_file():
                found.append(path.relative_to(self.root).as_posix())
                dirs.clear()  # a repository's own directories hold no repositories
            else:
                dirs[:] = [d for d in dirs if not d.startswith(".")]
        return sorted(found)

    def tokens(self) -> Sequence[Token]:
        return ()

    def tokens_and_open(self, name: str) -> tuple[Sequence[Token], Repository | None]:
        return (), self.open(name)

    def close(self) -> None:
        with self._lock:
            for repo in self._repos.values():
                repo.close()
            self._repos.clear()


@dataclass
class HubSettings:
    """What a hub serves and how: the root or the repositories, tokens and limits (each a `serve` option;
    docs/hub.md)."""

    root: Path | None = None
    """The directory served (`RepositoryDirectory`), unless `repositories` says where they live."""
    tokens: list[Token] = field(default_factory=list)
    allow_anonymous_read: bool = False
    max_body: int = DEFAULT_MAX_BODY
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    max_push_size: int = DEFAULT_MAX_PUSH_SIZE
    """Largest inflated size of a pushed pack: a small body that decompresses past it is refused (400)."""
    max_push_objects: int = DEFAULT_MAX_PUSH_OBJECTS
    pack_jobs: int = DEFAULT_PACK_JOBS
    """Fetches and pushes planned, packed or unpacked at once; each holds a compressor or a staging area."""
    queue_timeout: float = DEFAULT_QUEUE_TIMEOUT
    """Seconds a request waits for a pack job before 503."""
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    """Seconds a connection may take to send a request's headers, and a body may pause between chunks."""
    send_timeout: float = DEFAULT_SEND_TIMEOUT
    """Seconds a client may stop reading an answer before the hub hangs up and frees its pack job."""
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    """Open connections (and requests) past which the hub answers 503."""
    repositories: Repositories | None = None
    """Where the repositories live (a PostgreSQL database: `ctxstore.sync.stores`); the hub closes it."""


def _frame_response(message: dict[str, Any], status: int = 200,
                    headers: dict[str, str] | None = None) -> Response:
    return Response(encode_frame(message), status_code=status, media_type=CONTENT_TYPE, headers=headers)


def _error(status: int, exc: CtxStoreError, headers: dict[str, str] | None = None) -> Response:
    return _frame_response(encode_error(exc), status, headers)


def _json(status: int, value: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(json.dumps(value), status_code=status, media_type="application/json", headers=headers)


class _Refused(Exception):
    """A request refused before any work: its status, the error to send, and any headers to send with it."""

    def __init__(self, status: int, error: CtxStoreError, headers: dict[str, str] | None = None) -> None:
        super().__init__(str(error))
        self.status = status
        self.error = error
        self.headers = headers

    def frame(self) -> Response:
        return _error(self.status, self.error, self.headers)

    def json(self) -> Response:
        return _json(self.status, encode_error(self.error), self.headers)


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ctxstore"'}


def _status_of(exc: CtxStoreError) -> int:
    if isinstance(exc, NonFastForward | RepositoryExists):
        return 409
    if isinstance(exc, AuthError):
        return 403
    if isinstance(exc, _Busy):
        return 503
    # A RemoteError here is the client's: a request frame cut short or malformed.
    if isinstance(exc, BadPack | InvalidInput | RefError | MissingObject | RemoteError | EncodingError):
        return 400
    return 500


class _Busy(RemoteError):
    """Every pack job is taken (or one took too long): the client should try again shortly."""


T = TypeVar("T")


class _Jobs:
    """The hub's pack jobs: at most `n` fetches or pushes plan, pack or unpack at once, each on its own thread.

    A job that outlives its deadline is answered 503 but keeps its place until its thread ends, so a
    request that cannot be interrupted (a slow store, a pathological input) still counts against `n`.
    """

    def __init__(self, n: int, queue_timeout: float) -> None:
        self._n = n
        self._queue_timeout = queue_timeout
        self._free: asyncio.Semaphore | None = None
        self._pool = ThreadPoolExecutor(n, thread_name_prefix="ctxstore-pack")

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[_Slot]:
        if self._free is None:
            self._free = asyncio.Semaphore(self._n)
        try:
            async with asyncio.timeout(self._queue_timeout):
                await self._free.acquire()
        except TimeoutError:
            raise _Busy(f"the hub is busy: all {self._n} pack jobs were taken for {self._queue_timeout:.0f} s; "
                        "try again shortly") from None
        slot = _Slot(self._pool, self._free)
        try:
            yield slot
        finally:
            slot.release()

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _Slot:
    """One pack job's place: work runs on the pool, and the place is freed when the last of it ends."""

    def __init__(self, pool: ThreadPoolExecutor, free: asyncio.Semaphore) -> None:
        self._pool = pool
        self._free = free
        self._running: asyncio.Future[Any] | None = None
        self._released = False

    async def run(self, timeout: float, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` on the job's thread; `_Busy` if it takes over `timeout` seconds."""
        future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        self._running = future
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            raise _Busy(f"the request took over {timeout:.0f} s on the hub and was stopped; "
                        "try again, or fetch or push less at a time") from None
        finally:
            if future.done():
                self._running = None

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        running = self._running
        if running is None or running.done():
            self._free.release()
        else:
            running.add_done_callback(lambda _: self._free.release())


class _PackAnswer(Response):
    """A fetch answer streamed from a pack job: head frame, then bands, each sent within a deadline.

    A client that stops reading is dropped after `send_timeout` seconds, which ends its pack job: the
    answer never waits unbounded on the network, and only one band is ever buffered per answer.
    """

    def __init__(self, head: bytes, bands: Iterator[bytes] | None, slot: _Slot, jobs: AsyncExitStack,
                 step_timeout: float, send_timeout: float) -> None:
        self.status_code = 200
        self.background = None
        self.raw_headers = [(b"content-type", CONTENT_TYPE.encode())]
        self._head = head
        self._bands = bands
        self._slot = slot
        self._jobs = jobs
        self._step_timeout = step_timeout
        self._send_timeout = send_timeout

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        gone = asyncio.Event()

        async def watch() -> None:
            # The body was read whole: the next message is the client hanging up.
            while (await receive())["type"] != "http.disconnect":
                pass
            gone.set()

        watcher = asyncio.create_task(watch())
        async with self._jobs:
            try:
                await self._send(send, {"type": "http.response.start", "status": 200,
                                        "headers": self.raw_headers})
                await self._send(send, {"type": "http.response.body", "body": self._head, "more_body": True})
                while self._bands is not None and not gone.is_set():
                    band = await self._slot.run(self._step_timeout, next, self._bands, None)
                    if band is None:
                        break
                    await self._send(send, {"type": "http.response.body", "body": band, "more_body": True})
                await self._send(send, {"type": "http.response.body", "body": b"", "more_body": False})
            except (TimeoutError, _Busy, OSError):
                return  # the client stopped reading, or the pack stalled: the server closes the connection
            finally:
                watcher.cancel()

    async def _send(self, send: Any, message: dict[str, Any]) -> None:
        async with asyncio.timeout(self._send_timeout):
            await send(message)


class _Hub:
    """The request handlers, with the settings and where the repositories live."""

    def __init__(self, settings: HubSettings) -> None:
        self.settings = settings
        if settings.repositories is not None:
            self.repositories: Repositories = settings.repositories
        elif settings.root is not None:
            self.repositories = RepositoryDirectory(settings.root)
        else:
            raise InvalidInput("a hub needs a directory to serve or the repositories to serve")
        self._jobs = _Jobs(settings.pack_jobs, settings.queue_timeout)

    def _tokens(self) -> list[Token]:
        return [*self.settings.tokens, *self.repositories.tokens()]

    async def scope(self, request: Request, stored: Sequence[Token] | None = None) -> Scope | None:
        """The caller's scope (None: anonymous); `_Refused` (401) for a bad credential. `stored`: the
        tokens kept with the repositories, when the request already read them."""
        header = request.headers.get("authorization")
        if header is None:
            return None
        kind, _, secret = header.partition(" ")
        unauthorized = _Refused(401, AuthError("the token is not valid on this hub; ask its operator for one"),
                                _CHALLENGE)
        if kind.lower() != "bearer" or not secret:
            raise unauthorized
        digest = token_digest(secret.strip())
        # Tokens kept with the repositories are read for every request: one added or removed there
        # counts at once on every hub serving them. A directory keeps none: no thread needed.
        if type(self.repositories) is RepositoryDirectory:
            tokens = self.settings.tokens
        elif stored is not None:
            tokens = [*self.settings.tokens, *stored]
        else:
            tokens = await run_in_threadpool(self._tokens)
        found: Scope | None = None
        for token in tokens:
            # Every token is compared, so the time taken says nothing about which one (or none) matched.
            if hmac.compare_digest(digest, token.digest) and _rank(token.scope) > _rank(found):
                found = token.scope
        if found is None:
            raise unauthorized
        return found

    async def _check_scope(self, request: Request, need: Scope, what: str,
                           stored: Sequence[Token] | None = None) -> None:
        """Return when the caller may do `what`, which needs scope `need`; else `_Refused` (401 or 403)."""
        scope = await self.scope(request, stored)
        if scope is None:
            if need == "read" and self.settings.allow_anonymous_read:
                return
            raise _Refused(401, AuthError(f"{what} needs a token; pass one with --token or CTXSTORE_TOKEN"),
                           _CHALLENGE)
        if _rank(scope) < _rank(need):
            raise _Refused(403, AuthError(f"this token has {scope} scope; {what} needs a token with {need} scope"))

    async def handle(self, request: Request) -> Response:
        parts = [p for p in request.path_params.get("path", "").split("/") if p != ""]
        if parts[:1] == [_ADMIN]:
            return await self._admin(request, parts[1:])
        op = parts.pop() if parts else ""
        if op not in _OPS or request.method != ("GET" if op == "refs" else "POST"):
            return _error(404, InvalidInput(f"no such endpoint {shown(request.url.path)}; a hub serves "
                                            "<repo>/refs, <repo>/fetch and <repo>/push"))
        settings = self.settings
        try:
            need: Scope = "write" if op == "push" else "read"
            what = "pushing" if op == "push" else "reading"
            if type(self.repositories) is RepositoryDirectory:
                await self._check_scope(request, need, what)
                repo = await run_in_threadpool(self.repositories.open, "/".join(parts))
            else:
                # Tokens and repository in one look-up (one round trip to a database, one thread hop);
                # the token is still judged before anything is said about the repository.
                stored, repo = await run_in_threadpool(self.repositories.tokens_and_open, "/".join(parts))
                await self._check_scope(request, need, what, stored)
            if repo is None:
                return _error(404, NotARepository(f"no repository at {'/'.join(parts) or '/'} on this hub"))
            service = Service(repo.store, writable=True, max_push_size=settings.max_push_size,
                              max_push_objects=settings.max_push_objects)
            if op == "refs":
                return _frame_response((await run_in_threadpool(service.advertise)).to_message())
            body = await self._body(request, settings.max_body if op == "push" else MAX_FRAME + 4)
            if op == "fetch":
                return await self._fetch(service, body)
            return await self._push(service, body)
        except _Refused as refused:
            return refused.frame()
        except CtxStoreError as exc:
            return _error(_status_of(exc), exc)

    async def _admin(self, request: Request, parts: list[str]) -> Response:
        """``GET /.hub/repositories`` lists the repositories, ``POST`` with ``{"name": ...}`` creates one:
        JSON both ways, for operators' scripts, and admin scope for both."""
        if parts != ["repositories"] or request.method not in ("GET", "POST"):
            return _json(404, encode_error(InvalidInput(
                f"no such endpoint {shown(request.url.path)}; the admin endpoint is /{_ADMIN}/repositories")))
        try:
            await self._check_scope(request, "admin", "listing or creating repositories")
            if request.method == "GET":
                return _json(200, {"repositories": await run_in_threadpool(self.repositories.names)})
            with await self._body(request, 1 << 16) as body:
                try:
                    asked = json.loads(body.read())
                except (ValueError, UnicodeDecodeError):
                    asked = None
            if not isinstance(asked, dict) or not isinstance(asked.get("name"), str):
                raise InvalidInput('create a repository with a JSON body {"name": "team/support"}')
            name = check_repository_name(asked["name"])
            await run_in_threadpool(self.repositories.create, name)
            return _json(201, {"created": name})
        except _Refused as refused:
            return refused.json()
        except CtxStoreError as exc:
            return _json(_status_of(exc), encode_error(exc))

    async def _body(self, request: Request, limit: int) -> _Spool:
        """The request body spooled (to disk past 1 MiB); `_Refused` (413, 408) when too large or too slow.

        The whole body must arrive within the request timeout, and no pause between its chunks may pass
        the header timeout, so a trickling client holds nothing for long.
        """
        settings = self.settings
        too_big = _Refused(413, InvalidInput(f"the request body is over this hub's {limit}-byte limit; "
                                             "push fewer revisions at a time or ask for a larger --max-body"))
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise too_big
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115 (closed by the caller)
        size = 0
        chunks = request.stream().__aiter__()
        try:
            async with asyncio.timeout(settings.request_timeout):
                while True:
                    try:
                        async with asyncio.timeout(settings.header_timeout):
                            chunk = await chunks.__anext__()
                    except StopAsyncIteration:
                        break
                    size += len(chunk)
                    if size > limit:
                        spool.close()
                        raise too_big
                    spool.write(chunk)
        except TimeoutError:
            spool.close()
            raise _Refused(408, InvalidInput(
                f"the request body took too long to arrive (over {settings.request_timeout:.0f} s in all, or "
                f"a pause over {settings.header_timeout:.0f} s); try again on a faster link")) from None
        spool.seek(0)
        return spool

    async def _fetch(self, service: Service, body: _Spool) -> Response:
        settings = self.settings

        def decode() -> dict[str, Any]:
            with body:
                return read_request(body, MAX_FRAME)

        stack = AsyncExitStack()
        async with stack:
            try:
                slot = await stack.enter_async_context(self._jobs.slot())
            except _Busy:
                body.close()
                raise
            # Decoding and planning run on the job's thread with a deadline, never on the event loop.
            request = await slot.run(settings.request_timeout, decode)
            plan = await slot.run(settings.request_timeout, service.plan_fetch, request)
            head = encode_frame({"ok": True, "objects": len(plan), "pack": bool(plan)})
            bands = service.send_bands(plan) if plan else None
            # The answer holds the job until its pack is sent.
            return _PackAnswer(head, bands, slot, stack.pop_all(), settings.request_timeout,
                               settings.send_timeout)

    async def _push(self, service: Service, body: _Spool) -> Response:
        def work() -> dict[str, Any]:
            with body:
                return service.receive_push(read_request(body, MAX_FRAME), body)

        acquired = False
        try:
            async with self._jobs.slot() as slot:
                acquired = True
                return _frame_response(await slot.run(self.settings.request_timeout, work))
        finally:
            if not acquired:
                body.close()

    def close(self) -> None:
        self._jobs.close()
        self.repositories.close()


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
                            timeout_graceful_shutdown=5, lifespan="on",
                            http=_header_deadline(settings.header_timeout),
                            limit_concurrency=settings.max_connections, h11_max_incomplete_event_size=16 << 10)
    scheme = "https" if certfile else "http"
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    if on_ready is not None:
        on_ready(f"{scheme}://{shown}:{bound}")
    uvicorn.Server(config).run(sockets=[sock])


def _header_deadline(seconds: float) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection that takes over `seconds` to send a request's headers.

    uvicorn times out idle keep-alive connections but not a request whose headers trickle in, so a few
    hundred slow clients would hold their connections for ever.
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadline(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None

        def _waiting(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _arm(self) -> None:
            if self._deadline is None:
                self._deadline = self.loop.call_later(seconds, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self._waiting() and not self.transport.is_closing():
                self.transport.close()

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._waiting():
                self._arm()
            super().data_received(data)
            if not self._waiting():
                self._disarm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderDeadline
