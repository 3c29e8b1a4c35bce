"""Transports: how a client reaches a remote repository (a local path, a stdio subprocess, ssh).

A `Transport` gives the client side of the protocol: `advertise` (the remote's refs), `fetch` (a pack
of what the client lacks, or nothing) and `push` (ref updates with a pack). `open_transport(url)` picks
one for a URL: ``http(s)://`` (see `sync.http`), ``ssh://[user@]host[:port]/path`` (runs
``ssh host ctxstore serve --stdio path``), ``file://path`` or a plain path (in-process).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import SplitResult, unquote, urlsplit

from ..errors import InvalidInput, RemoteError, SyncError, shown
from ..ids import HexId
from ..repo.repository import Repository
from .protocol import (
    Advertisement,
    BandReader,
    Receive,
    RefUpdate,
    Service,
    decode_error,
    encode_frame,
    fetch_request,
    push_request,
    read_frame,
)

__all__ = ["LocalTransport", "StdioTransport", "Transport", "open_transport", "ssh_command"]

T = TypeVar("T")


class Transport(Protocol):
    """The client side of one connection to a remote repository."""

    url: str

    def advertise(self) -> Advertisement:
        """The remote's refs (heads and tags) and versions."""
        ...

    def fetch(self, wants: Sequence[HexId], haves: Sequence[HexId], receive: Receive[T]) -> T | None:
        """Ask for what `wants` reach and `haves` do not; `receive` reads the pack (None: nothing sent)."""
        ...

    def push(self, updates: Sequence[RefUpdate], pack: Iterable[bytes]) -> dict[str, Any]:
        """Send ref updates and the pack they need; returns the server's result message."""
        ...

    def close(self) -> None:
        """End the connection."""
        ...


class LocalTransport:
    """A repository on this machine, served in-process (the ``file://`` and plain-path remotes)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.url = os.fspath(path)
        self._repo = Repository.open(path)
        self._service = Service(self._repo.store)

    def advertise(self) -> Advertisement:
        return self._service.advertise()

    def fetch(self, wants: Sequence[HexId], haves: Sequence[HexId], receive: Receive[T]) -> T | None:
        oids = self._service.plan_fetch(fetch_request(wants, haves))
        return receive(self._service.send(oids)) if oids else None

    def push(self, updates: Sequence[RefUpdate], pack: Iterable[bytes]) -> dict[str, Any]:
        return self._service.receive_push(push_request(updates), pack)

    def close(self) -> None:
        self._repo.close()


class StdioTransport:
    """A `ctxstore serve --stdio` subprocess (the server side of an ssh remote, or any command)."""

    def __init__(self, argv: Sequence[str], *, url: str | None = None) -> None:
        import subprocess  # here, not at the top: a local or HTTP remote never starts a process

        self.url = url or " ".join(argv)
        try:
            self._proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        except OSError as exc:
            raise SyncError(f"cannot start {shown(argv[0])} to reach {self.url}: {exc}") from None
        # Popen with both pipes requested always makes them; the check only narrows their type.
        if self._proc.stdin is None or self._proc.stdout is None:
            raise SyncError(f"cannot talk to {shown(argv[0])}: it was started without pipes")
        self._in = self._proc.stdin
        self._out = self._proc.stdout
        self._advert: Advertisement | None = None

    def _request(self, message: dict[str, Any]) -> None:
        try:
            self._in.write(encode_frame(message))
            self._in.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise RemoteError(f"{self.url} closed the connection; see its error output above") from None

    def _answer(self) -> dict[str, Any]:
        message = read_frame(self._out)
        if "error" in message:
            raise decode_error(message, self.url)
        return message

    def advertise(self) -> Advertisement:
        if self._advert is None:
            self._advert = Advertisement.from_message(read_frame(self._out), self.url)
        return self._advert

    def fetch(self, wants: Sequence[HexId], haves: Sequence[HexId], receive: Receive[T]) -> T | None:
        self.advertise()
        self._request({"op": "fetch", **fetch_request(wants, haves)})
        head = self._answer()
        return receive(BandReader(self._out, self.url)) if head.get("pack") else None

    def push(self, updates: Sequence[RefUpdate], pack: Iterable[bytes]) -> dict[str, Any]:
        self.advertise()
        self._request({"op": "push", **push_request(updates)})
        # The server may refuse before reading the pack and hang up: its answer says why.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for chunk in pack:
                self._in.write(chunk)
            self._in.flush()
        return self._answer()

    def close(self) -> None:
        import subprocess

        with contextlib.suppress(OSError):
            self._in.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        with contextlib.suppress(OSError):
            self._out.close()


def ssh_command(url: str) -> list[str]:
    """The command an ``ssh://[user@]host[:port]/path`` remote runs: the system ssh and serve --stdio."""
    parts = _split(url)
    try:
        port = parts.port
    except ValueError:
        raise InvalidInput(f"not an ssh remote URL: {shown(url)}; its port must be a number") from None
    if not parts.hostname or not parts.path:
        raise InvalidInput(f"not an ssh remote URL: {shown(url)}; write ssh://[user@]host[:port]/path")
    argv = ["ssh"]
    if port:
        argv += ["-p", str(port)]
    host = f"{parts.username}@{parts.hostname}" if parts.username else parts.hostname
    # ssh hands the remote command to a shell: the path goes as one quoted word.
    path = unquote(parts.path)
    if path.startswith("/~"):
        path = path[1:]
    quoted = "'" + path.replace("'", "'\\''") + "'"
    return [*argv, "--", host, "ctxstore", "serve", "--stdio", quoted]


def _split(url: str) -> SplitResult:
    try:
        return urlsplit(url)
    except ValueError as exc:  # an unclosed [ipv6] host, for one
        raise InvalidInput(f"not a remote URL: {shown(url)} ({exc})") from None


def open_transport(url: str, *, token: str | None = None, timeout: float = 300.0) -> Transport:
    """A transport for a remote URL: http(s), ssh, file:// or a plain path."""
    if not isinstance(url, str) or not url:
        raise InvalidInput(f"a remote URL must be a non-empty string, not {shown(url)}")
    scheme = _split(url).scheme.lower()
    if scheme in ("http", "https"):
        from .http import HttpTransport

        return HttpTransport(url, token=token, timeout=timeout)
    if scheme == "ssh":
        return StdioTransport(ssh_command(url), url=url)
    if scheme == "file":
        return LocalTransport(unquote(urlsplit(url).path))
    if scheme and len(scheme) > 1:
        raise InvalidInput(f"unknown remote URL scheme {shown(scheme)} in {shown(url)}; "
                           "use http(s)://, ssh:// or a path")
    return LocalTransport(url)
