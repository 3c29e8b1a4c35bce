"""What every command shares: finding the repository, exit codes, JSON output, errors in one line."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn, TextIO, cast

import click

from ..errors import (
    BadPack,
    CtxStoreError,
    EncodingError,
    InvalidInput,
    InvalidObject,
    InvalidRefName,
    MissingObject,
    NonFastForward,
    NotARepository,
    RepositoryExists,
    UnknownRef,
    UnknownRevision,
    UnknownSetting,
)
from ..ids import OID_SIZE, to_hex
from ..repo.repository import Repository

__all__ = [
    "DIRNAME",
    "ENV_REPO",
    "EXIT_CODES",
    "EXIT_CORRUPT",
    "EXIT_ERROR",
    "EXIT_EXISTS",
    "EXIT_NON_FAST_FORWARD",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "Context",
    "Failure",
    "ProgressLine",
    "current_context",
    "emit",
    "exit_code_for",
    "fail",
    "failure",
    "find_repository",
    "jsonable",
    "reporting",
    "say",
    "stderr_is_terminal",
]

DIRNAME = ".ctxstore"
"""The repository directory that `ctxstore init DIR` creates inside DIR and other commands look for."""
ENV_REPO = "CTXSTORE_DIR"
"""The environment variable that stands for `--repo`."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_NON_FAST_FORWARD = 4
EXIT_EXISTS = 5
EXIT_CORRUPT = 6

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_ERROR: "any other error (the message on stderr says what happened and what to do)",
    EXIT_USAGE: "bad usage or bad input: unknown option, malformed JSON or message, invalid ref name",
    EXIT_NOT_FOUND: "not found: no repository, unknown ref, revision, entry or object, missing file",
    EXIT_NON_FAST_FORWARD: "a ref moved since it was read (non-fast-forward); rebase, retry or use --force",
    EXIT_EXISTS: "already exists: a repository or ref is in the way",
    EXIT_CORRUPT: "damage found: fsck reported problems, or a pack or stored object is corrupt",
}
"""Every exit code the CLI uses and what it means; scripts may rely on these."""


class Failure(click.ClickException):
    """An error the CLI reports in one line on stderr, exiting with the code its class carries.

    Click reads the exit code from the class, so make one with `failure(message, code)` (or raise it with
    `fail`); `Failure(message)` itself exits with EXIT_ERROR.
    """

    exit_code = EXIT_ERROR

    def show(self, file: Any = None) -> None:
        # One line: scripts grep it, people read it. Newlines inside messages would break both.
        text = " ".join(self.format_message().split())
        click.echo(f"ctxstore: error: {text}", err=True)


def _failure_class(code: int) -> type[Failure]:
    class CodedFailure(Failure):
        exit_code = code

    CodedFailure.__name__ = CodedFailure.__qualname__ = f"Failure{code}"
    return CodedFailure


_FAILURES: dict[int, type[Failure]] = {
    code: Failure if code == EXIT_ERROR else _failure_class(code) for code in EXIT_CODES if code != EXIT_OK
}

_EXIT_FOR_ERROR: tuple[tuple[type[CtxStoreError], int], ...] = (
    (NonFastForward, EXIT_NON_FAST_FORWARD),
    (UnknownRef, EXIT_NOT_FOUND),
    (UnknownRevision, EXIT_NOT_FOUND),
    (MissingObject, EXIT_NOT_FOUND),
    (UnknownSetting, EXIT_NOT_FOUND),
    (NotARepository, EXIT_NOT_FOUND),
    (RepositoryExists, EXIT_EXISTS),
    (InvalidRefName, EXIT_USAGE),
    (InvalidInput, EXIT_USAGE),
    (EncodingError, EXIT_USAGE),
    (BadPack, EXIT_CORRUPT),
    (InvalidObject, EXIT_CORRUPT),
    (CtxStoreError, EXIT_ERROR),
)
"""Which exit code each kind of ctxstore error gets: the first class in this list that the error is."""


def failure(message: str, code: int = EXIT_ERROR) -> Failure:
    """The CLI error for `message` that exits with `code` (one of EXIT_CODES)."""
    return _FAILURES[code](message)


def exit_code_for(error: CtxStoreError) -> int:
    """The documented exit code for an error ctxstore raised."""
    return next(code for kind, code in _EXIT_FOR_ERROR if isinstance(error, kind))


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Stop the command with a one-line error and an exit code."""
    raise failure(message, code)


@contextmanager
def reporting() -> Iterator[None]:
    """Turn ctxstore errors raised inside the block into one-line CLI failures."""
    try:
        yield
    except CtxStoreError as error:
        raise failure(str(error), exit_code_for(error)) from error


def stderr_is_terminal() -> bool:
    """Whether people are watching stderr (progress bars only then)."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressLine:
    """A one-line progress display on stderr, redrawn in place: done of total, percent and rate.

    Shown only when stderr is a terminal (and not --quiet), redrawn at most ten times a second, and
    ended with a newline by `close`. `update(done, total)` counts in `unit` (objects, refs, entries);
    `bytes_update(count, size)` is for streams of bytes (a pack, an export): how many `unit` they hold
    and the bytes moved so far, with the rate in bytes.
    """

    def __init__(self, what: str, unit: str, *, enabled: bool | None = None) -> None:
        self.what = what
        self.unit = unit
        self.enabled = stderr_is_terminal() if enabled is None else enabled
        self._start = time.monotonic()
        self._drawn = 0.0
        self._text = ""

    def update(self, done: int, total: int | None = None) -> None:
        """`done` of `total` `unit` so far (total None: not known)."""
        if not self._due(done == total):
            return
        rate = done / max(time.monotonic() - self._start, 1e-3)
        of = f"/{total:,}" if total else ""
        percent = f" ({100 * done // total}%)" if total else ""
        self._draw(f"{self.what}: {done:,}{of} {self.unit}{percent}, {rate:,.0f} {self.unit}/s")

    def bytes_update(self, objects: int, size: int, *, final: bool = False) -> None:
        """A stream moving: `objects` `unit` in it (0: not known yet), `size` bytes so far."""
        if not self._due(final):
            return
        rate = size / max(time.monotonic() - self._start, 1e-3)
        count = f"{objects:,} {self.unit}, " if objects else ""
        self._draw(f"{self.what}: {count}{_size(size)}, {_size(rate)}/s")

    def close(self) -> None:
        """End the line (if anything was drawn)."""
        if self._text:
            click.echo("", err=True)
            self._text = ""

    def _due(self, final: bool) -> bool:
        if not self.enabled:
            return False
        now = time.monotonic()
        if not final and now - self._drawn < 0.1:
            return False
        self._drawn = now
        return True

    def _draw(self, text: str) -> None:
        pad = " " * max(0, len(self._text) - len(text))
        click.echo(f"\r{text}{pad}", err=True, nl=False)
        self._text = text


class _CountedOutput(io.TextIOBase):
    """A text stream that passes writes to another and shows how much went through on a `ProgressLine`."""

    def __init__(self, inner: TextIO, line: ProgressLine, entries: int) -> None:
        super().__init__()
        self._inner = inner
        self._line = line
        self._entries = entries
        self.written = 0

    def write(self, text: str) -> int:
        self._inner.write(text)
        self.written += len(text.encode("utf-8", "surrogatepass"))
        self._line.bytes_update(self._entries, self.written)
        return len(text)

    def flush(self) -> None:
        self._inner.flush()
        self._line.bytes_update(self._entries, self.written, final=True)

    def writable(self) -> bool:
        return True


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def say(message: str) -> None:
    """A message for people: stderr, so stdout stays machine-readable."""
    click.echo(message, err=True)


def jsonable(value: Any) -> Any:
    """A plain JSON value for anything the library returns (object ids become hex)."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray):
        return to_hex(bytes(value)) if len(value) == OID_SIZE else bytes(value).hex()
    if isinstance(value, Path):
        return str(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict) and not isinstance(value, type):
        return jsonable(to_dict())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, Mapping):
        return {str(jsonable(k)): jsonable(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        return sorted((jsonable(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, list | tuple) or hasattr(value, "__iter__"):
        return [jsonable(v) for v in value]
    return str(value)


def emit(value: Any) -> None:
    """Machine-readable output: one JSON document on stdout."""
    click.echo(json.dumps(jsonable(value), indent=2, ensure_ascii=False))


def find_repository(start: Path) -> Path:
    """The `.ctxstore` directory in `start` or the nearest parent that has one."""
    here = start.resolve()
    for directory in (here, *here.parents):
        candidate = directory / DIRNAME
        if candidate.is_dir():
            return candidate
    fail(f"not a ctxstore repository (or any parent up to /): {here}; "
         f"run `ctxstore init` here, or pass --repo PATH or set {ENV_REPO}", EXIT_NOT_FOUND)


class Context:
    """Per-invocation state: where the repository is, and the open repository once a command needs it."""

    def __init__(self, repo_path: str | None, start: Path, *, quiet: bool = False) -> None:
        self.repo_path = repo_path
        self.start = start
        self.quiet = quiet
        self._repo: Repository | None = None

    def tell(self, message: str) -> None:
        """A message for people (stderr), unless --quiet."""
        if not self.quiet:
            say(message)

    @contextmanager
    def progress(self, what: str, unit: str) -> Iterator[Callable[[int, int], None] | None]:
        """A ``progress(done, total)`` callback drawing a `ProgressLine` on stderr for the block, or None
        when nobody watches (stderr not a terminal, or --quiet): pass it to the library call."""
        line = ProgressLine(what, unit, enabled=False if self.quiet else None)
        if not line.enabled:
            yield None
            return
        try:
            yield line.update
        finally:
            line.close()

    @contextmanager
    def progress_output(self, what: str, output: TextIO, entries: int) -> Iterator[TextIO]:
        """`output`, counted as it is written: a `ProgressLine` shows the bytes written and their rate
        (with `entries`, how many the export holds) while the block runs, when someone watches."""
        line = ProgressLine(what, "entries", enabled=False if self.quiet else None)
        if not line.enabled:
            yield output
            return
        counted = _CountedOutput(output, line, entries)
        try:
            yield cast(TextIO, counted)  # a text stream in all but typeshed's name
        finally:
            line.bytes_update(entries, counted.written, final=True)
            line.close()

    def location(self) -> Path:
        """The repository directory this invocation works on (not opened)."""
        if self.repo_path:
            return Path(self.repo_path)
        return find_repository(self.start)

    def repo(self) -> Repository:
        """The open repository (opened on first use, closed when the command ends)."""
        if self._repo is None:
            path = self.location()
            if not path.is_dir():
                fail(f"no ctxstore repository at {path}; create one with `ctxstore init` "
                     f"or fix --repo / {ENV_REPO}", EXIT_NOT_FOUND)
            with reporting():
                self._repo = Repository.open(path)
        return self._repo

    def close(self) -> None:
        if self._repo is not None:
            self._repo.close()
            self._repo = None


def current_context() -> Context:
    """The invocation's Context: the main group's, or (a command invoked on its own) one from the environment."""
    ctx = click.get_current_context()
    state = ctx.find_object(Context)
    if state is None:
        repo_path = environment_repo()
        state = Context(os.path.abspath(repo_path) if repo_path else None, Path.cwd())
        ctx.obj = state
        ctx.call_on_close(state.close)
    return state


def environment_repo() -> str | None:
    """`CTXSTORE_DIR`, when set and not empty."""
    return os.environ.get(ENV_REPO) or None
