"""What an import reads: a file, a text stream or a string, decoded into JSON values.

Every way reading can go wrong (a missing file, bytes that are not UTF-8, a line that is not JSON) comes
out as `InvalidInput` naming the file or the line, so an import raises nothing but ctxstore errors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

from ..errors import InvalidInput

__all__ = ["Source", "json_lines", "numbered_json_lines", "parse_json", "read_text", "source_name"]

Source = str | os.PathLike[str] | IO[str]
"""A file to import: a path, or a text stream that is already open (stdin, an open file, StringIO)."""


def source_name(source: Source) -> str:
    """How messages and reflog entries name a source: its path, or the stream's name if it has one."""
    if isinstance(source, str | os.PathLike):
        return os.fspath(source)
    name = getattr(source, "name", None)
    return name if isinstance(name, str) else "the input"


def read_text(source: Source) -> str:
    """The whole text of a source, read as UTF-8."""
    try:
        if isinstance(source, str | os.PathLike):
            return Path(source).read_text(encoding="utf-8")
        text = source.read()
    except FileNotFoundError:
        raise InvalidInput(f"no file {source_name(source)}; check the path") from None
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{source_name(source)} is not UTF-8 text (byte {exc.start}: {exc.reason}); "
                           "save it as UTF-8 and import again") from None
    except OSError as exc:
        raise InvalidInput(f"cannot read {source_name(source)}: {exc.strerror or exc}") from None
    if not isinstance(text, str):
        raise InvalidInput(f"{source_name(source)} was opened in binary mode; open it as text (UTF-8)")
    return text


def parse_json(text: str, what: str) -> Any:
    """One JSON document; `what` names it in the error ("the snapshot", "the file")."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except RecursionError:
        raise InvalidInput(f"{what} nests JSON too deeply to read") from None


def json_lines(text: str, *, partial_tail: bool = False) -> list[Any]:
    """The values of JSON Lines text, blank lines skipped.

    With `partial_tail`, a last line that is not JSON is dropped rather than refused: a transcript that is
    still being written may end in half a record.
    """
    lines = text.splitlines()
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            if partial_tail and number == len(lines):
                break
            raise InvalidInput(f"line {number} is not JSON ({exc.msg}, column {exc.colno}); "
                               "fix or remove it") from None
        except RecursionError:
            raise InvalidInput(f"line {number} nests JSON too deeply to read") from None
    return out


def numbered_json_lines(text: str) -> tuple[list[tuple[int, Any]], list[int]]:
    """The values of JSON Lines text with their line numbers, and the numbers of the lines that are not JSON.

    A last line without its newline that is not JSON is half a record of a file still being written: it is
    left out and not counted as bad.
    """
    lines = text.split("\n")
    out: list[tuple[int, Any]] = []
    bad: list[int] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            out.append((number, json.loads(line)))
        except (ValueError, RecursionError):
            if number != len(lines):
                bad.append(number)
    return out, bad
