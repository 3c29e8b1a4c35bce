"""Conversations drawn for a person on a terminal (rich): role headers, wrapped text, folded tool calls.

Commands print JSON unless stdout is a terminal (or they are asked with --pretty); this module is the
other side: it turns entries into lines a person reads. A tool call and its result take one line each,
named by the tool; images, documents and long blocks are placeholders with their size; a summary says
how many entries it stands for; each message is headed by its role and, when known, when it was said.
The OpenAI Agents SDK's items (`ctxstore.integrations.openai_agents`) are drawn the same way: their
text parts as text, a function call and its output as the tool lines, reasoning as thinking.
rich is imported only by the functions that draw, so the CLI starts without it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..history.entry import MessageHistoryEntry

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

__all__ = [
    "console",
    "entry_time",
    "fmt_time",
    "human_size",
    "one_line",
    "print_entries",
    "stdout_is_terminal",
    "want_pretty",
]

_LONG_TEXT = 4000
"""Characters of a text block shown before the rest is folded into a placeholder."""
_ROLE_STYLES = {"user": "bold green", "assistant": "bold cyan"}


def stdout_is_terminal() -> bool:
    """Whether a person is reading stdout (else the output is for a program: JSON)."""
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def want_pretty(json_flag: bool, pretty_flag: bool = False) -> bool:
    """Readable output: asked for with --pretty, or stdout is a terminal and --json was not given."""
    return pretty_flag or (not json_flag and stdout_is_terminal())


def console(*, soft_wrap: bool = False) -> Console:
    """The rich console commands draw on: stdout, its width when a terminal, else 100 columns."""
    from rich.console import Console

    return Console(file=sys.stdout, highlight=False, soft_wrap=soft_wrap,
                   width=None if stdout_is_terminal() else 100)


def human_size(n: float) -> str:
    """Bytes as a person reads them: 812 B, 4.2 KiB, 1.3 MiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def fmt_time(ms: int | None) -> str:
    """A time in ms since the epoch as ``2026-01-01 09:30`` (UTC), or empty."""
    if ms is None:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M")


def entry_time(entry: MessageHistoryEntry) -> str:
    """When the entry's message was said, from its metadata (a transcript's timestamp), or empty."""
    meta = entry.meta or {}
    info = meta.get("claudeCode")
    stamp = info.get("timestamp") if isinstance(info, Mapping) else meta.get("timestamp")
    if not isinstance(stamp, str):
        return ""
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    except ValueError:
        return ""


def one_line(text: str, width: int = 80) -> str:
    """Text folded to one line of at most `width` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _size_of(value: Any) -> int:
    return len(value.encode("utf-8")) if isinstance(value, str) else len(json.dumps(value, ensure_ascii=False))


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(b.get("text", f"[{b.get('type')}]") if isinstance(b, Mapping) else str(b) for b in content)
    return "" if content is None else json.dumps(content)


def _arguments(arguments: Any) -> Any:
    """A function call's arguments (a JSON string) as the value they spell, else as given."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _media(block: Mapping[str, Any]) -> str:
    source = block.get("source")
    kind, size = "", 0
    if isinstance(source, Mapping):
        kind = str(source.get("media_type") or source.get("type") or "")
        data = source.get("data") or source.get("url") or ""
        size = len(data) * 3 // 4 if source.get("type") == "base64" else _size_of(data)
    return f"[{block.get('type')}{' ' + kind if kind else ''}, {human_size(size)}]"


def _block_lines(block: Any, tools: dict[str, str]) -> Iterable[tuple[str, str]]:
    """(style, text) lines for one content block; tool names are remembered in `tools` by id."""
    if not isinstance(block, Mapping):
        yield "", str(block)
        return
    kind = block.get("type")
    if kind in ("input_text", "output_text"):  # the OpenAI Agents SDK's text parts (Responses items)
        kind, block = "text", {"text": block.get("text", "")}
    elif kind == "function_call":  # an Agents SDK item: a tool call, its output, reasoning
        kind, block = "tool_use", {"id": block.get("call_id"), "name": block.get("name"),
                                   "input": _arguments(block.get("arguments"))}
    elif kind == "function_call_output":
        kind, block = "tool_result", {"tool_use_id": block.get("call_id"), "content": block.get("output")}
    elif kind == "reasoning":
        summary = block.get("summary")
        kind, block = "thinking", {"thinking": _result_text(summary if isinstance(summary, list) else "")}
    if kind == "text":
        text = str(block.get("text", ""))
        if len(text) > _LONG_TEXT:
            rest = text[_LONG_TEXT:]
            yield "", text[:_LONG_TEXT]
            yield "dim", f"[… {human_size(_size_of(rest))} more text]"
        else:
            yield "", text
    elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
        name = str(block.get("name", "?"))
        tools[str(block.get("id"))] = name
        args = json.dumps(block.get("input", {}), ensure_ascii=False, separators=(",", ":"))
        yield "yellow", one_line(f"⚙ {name} {args}", 100)
    elif kind == "tool_result":
        name = tools.get(str(block.get("tool_use_id")), "tool")
        text = _result_text(block.get("content"))
        error = " (error)" if block.get("is_error") else ""
        yield "magenta", one_line(f"↳ {name}{error}: {text}", 100) + f"  [{human_size(_size_of(text))}]"
    elif kind in ("image", "document"):
        yield "dim", _media(block)
    elif kind in ("thinking", "redacted_thinking"):
        thought = str(block.get("thinking", block.get("data", "")))
        yield "dim italic", one_line(f"(thinking) {thought}", 100) + f"  [{human_size(_size_of(thought))}]"
    else:
        yield "dim", f"[{kind}, {human_size(_size_of(block))}]"


def _header(entry: MessageHistoryEntry, number: int, show_ids: bool) -> Text:
    from rich.text import Text

    role = str(entry.message.get("role", "?"))
    header = Text(f"── {role}", style=_ROLE_STYLES.get(role, "bold"))
    if entry.kind == "summary":
        count = len(entry.sources or [])
        header.append(f"  summary of {count} entr{'y' if count == 1 else 'ies'}", style="bold yellow")
    when = entry_time(entry)
    if when:
        header.append(f"  {when}", style="dim")
    if show_ids:
        header.append(f"  #{number} {entry.id}", style="dim")
    return header


def print_entries(entries: Sequence[MessageHistoryEntry], *, title: str | None = None, show_ids: bool = True,
                  out: Console | None = None) -> None:
    """Draw entries as a transcript: a header per message, then its blocks."""
    from rich.text import Text

    target = out or console()
    if title:
        target.print(Text(title, style="bold underline"))
    tools: dict[str, str] = {}
    for number, entry in enumerate(entries, 1):
        target.print(_header(entry, number, show_ids))
        content = entry.message.get("content")
        blocks: list[Any] = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
        for block in blocks:
            for style, line in _block_lines(block, tools):
                target.print(Text(line, style=style))
        target.print()
