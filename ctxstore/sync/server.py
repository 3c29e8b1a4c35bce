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
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

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
)
from ..repo.repository import Repository
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
    "HubSettings",
    "Token",
    "create_app",
    "load_tokens",
    "serve_http",
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
    """What a hub serves and how: the root, tokens and limits (each a `serve` option; docs/hub.md)."""

    root: Path
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
    """The request handlers, with the settings and the repositories opened so far."""

    def __init__(self, settings: HubSettings) -> None:
        self.settings = settings
        self.root = settings.root.resolve()
        self.single = (self.root / "format").is_file()
        self._repos: dict[Path, Repository] = {}
        self._lock = threading.Lock()
        self._jobs = _Jobs(settings.pack_jobs, settings.queue_timeout)

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
        settings = self.settings
        service = Service(repo.store, writable=True, max_push_size=settings.max_push_size,
                          max_push_objects=settings.max_push_objects)
        try:
            if op == "refs":
                return _frame_response((await run_in_threadpool(service.advertise)).to_message())
            body = await self._body(request, settings.max_body if op == "push" else MAX_FRAME + 4)
            if isinstance(body, Response):
                return body
            if op == "fetch":
                return await self._fetch(service, body)
            return await self._push(service, body)
        except CtxStoreError as exc:
            return _error(_status_of(exc), exc)

    async def _body(self, request: Request, limit: int) -> _Spool | Response:
        """The request body spooled (to disk past 1 MiB), or the 413/408 response.

        The whole body must arrive within the request timeout, and no pause between its chunks may pass
        the header timeout, so a trickling client holds nothing for long.
        """
        settings = self.settings
        too_big = _error(413, InvalidInput(f"the request body is over this hub's {limit}-byte limit; "
                                           "push fewer revisions at a time or ask for a larger --max-body"))
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return too_big
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
                        return too_big
                    spool.write(chunk)
        except TimeoutError:
            spool.close()
            return _error(408, InvalidInput(
                f"the request body took too long to arrive (over {settings.request_timeout:.0f} s in all, or "
                f"a pause over {settings.header_timeout:.0f} s); try again on a faster link"))
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
        with self._lock:
            for repo in self._repos.values():
                repo.close()
            self._repos.clear()


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
