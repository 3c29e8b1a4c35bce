"""The HTTP client transport: the protocol's frames and packs over a hub's three endpoints, streamed.

``GET <url>/refs`` answers the advertisement; ``POST <url>/fetch`` takes a fetch request frame and
answers a frame and, when anything is new, the pack; ``POST <url>/push`` takes a push request frame
followed by the pack and answers a result frame. A bearer token authenticates (``Authorization: Bearer``).
"""

from __future__ import annotations

import functools
import io
import ssl
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import httpx2

from ..errors import AuthError, CtxStoreError, InvalidInput, NotARepository, RemoteError, SyncError, shown
from ..ids import HexId
from .protocol import (
    Advertisement,
    BandReader,
    Receive,
    RefUpdate,
    decode_error,
    encode_frame,
    fetch_request,
    push_request,
    read_frame,
)

__all__ = ["CONTENT_TYPE", "HttpTransport"]

T = TypeVar("T")

CONTENT_TYPE = "application/x-ctxstore"


class _ChunkReader(io.RawIOBase):
    """A binary file over an iterator of bytes chunks, so frames and packs are read as the body streams."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._buf:
            try:
                self._buf = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._buf))
        buffer[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _tls(url: str, verify: bool | str) -> ssl.SSLContext | str | bool:
    """What to verify a hub's certificate with: nothing for plain http (loading the CA bundle costs about
    30 ms per client), else one default context per process, or the CA file the caller named."""
    if url.lower().startswith("http://"):
        return False
    return _default_context() if verify is True else verify


@functools.cache
def _default_context() -> ssl.SSLContext:
    return ssl.create_default_context()


class HttpTransport:
    """A repository on a `ctxstore serve --http` hub."""

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 300.0,
                 verify: bool | str = True) -> None:
        self.url = url.rstrip("/")
        headers = {"User-Agent": "ctxstore", "Accept": CONTENT_TYPE}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        limits = httpx2.Timeout(timeout, connect=min(timeout, 30.0))
        self._client = httpx2.Client(headers=headers, timeout=limits, verify=_tls(self.url, verify), trust_env=False)
        self.round_trips = 0
        """HTTP requests made so far (for benchmarks and tests)."""

    def _fail(self, response: httpx2.Response, body: bytes) -> CtxStoreError:
        where = f"{self.url} (HTTP {response.status_code})"
        if response.headers.get("content-type", "").startswith(CONTENT_TYPE):
            try:
                message = read_frame(io.BytesIO(body))
            except SyncError:
                message = None
            if message is not None and "error" in message:
                error = decode_error(message, where)
                if response.status_code in (401, 403) and not isinstance(error, AuthError):
                    return AuthError(str(error))
                return error
        text = body[:200].decode("utf-8", "replace").strip()
        if response.status_code in (401, 403):
            return AuthError(f"{where}: {text or 'not allowed'}; give a token with the right scope")
        if response.status_code == 404:
            return NotARepository(f"{where}: no ctxstore repository there; check the URL "
                                  "(`ctxstore remote` lists them)")
        return RemoteError(f"{where}: {text or response.reason_phrase}")

    def _send(self, method: str, path: str, content: Iterable[bytes] | bytes | None = None) -> httpx2.Response:
        self.round_trips += 1
        try:
            request = self._client.build_request(method, f"{self.url}/{path}", content=content,
                                                 headers={"Content-Type": CONTENT_TYPE} if content else None)
            return self._client.send(request, stream=True)
        except httpx2.InvalidURL as exc:
            raise InvalidInput(f"not a hub URL: {shown(self.url)} ({exc})") from None
        except httpx2.HTTPError as exc:
            raise RemoteError(f"cannot reach {self.url}: {exc}") from None

    def _frame_response(self, response: httpx2.Response) -> tuple[dict[str, Any], io.BufferedReader[_ChunkReader]]:
        try:
            if response.status_code != 200:
                body = response.read()
                raise self._fail(response, body)
            reader = io.BufferedReader(_ChunkReader(response.iter_bytes()), buffer_size=1 << 16)
            message = read_frame(reader)
            if "error" in message:
                raise decode_error(message, self.url)
            return message, reader
        except httpx2.HTTPError as exc:
            raise RemoteError(f"the connection to {self.url} failed: {exc}") from None

    def advertise(self) -> Advertisement:
        response = self._send("GET", "refs")
        try:
            message, _ = self._frame_response(response)
        finally:
            response.close()
        return Advertisement.from_message(message, self.url)

    def fetch(self, wants: Sequence[HexId], haves: Sequence[HexId], receive: Receive[T]) -> T | None:
        response = self._send("POST", "fetch", encode_frame(fetch_request(wants, haves)))
        try:
            head, reader = self._frame_response(response)
            if not head.get("pack"):
                return None
            try:
                return receive(BandReader(reader, self.url))
            except httpx2.HTTPError as exc:
                raise RemoteError(f"the pack from {self.url} was cut short: {exc}") from None
        finally:
            response.close()

    def push(self, updates: Sequence[RefUpdate], pack: Iterable[bytes]) -> dict[str, Any]:
        def body() -> Iterator[bytes]:
            yield encode_frame(push_request(updates))
            yield from pack

        response = self._send("POST", "push", body())
        try:
            message, _ = self._frame_response(response)
        finally:
            response.close()
        return message

    def close(self) -> None:
        self._client.close()
