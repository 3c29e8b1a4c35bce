"""Messages checked as the Anthropic Messages API would check them, before an import or append stores them.

`MessageHistory` itself stays lenient (the seed's API stores any dict with a string role); what comes in
from outside (a file, stdin, a transcript) is checked here first, so a conversation in a repository can be
sent to a model as it is: roles `user` and `assistant` only, content a string or a list of content blocks
of types the API knows, tool uses only from the assistant, tool results only from the user and each one
answering a tool use of the assistant message before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from ..errors import InvalidInput, shown

__all__ = ["BLOCK_TYPES", "ROLES", "check_message", "check_messages", "message_of", "tool_use_ids"]

ROLES: Final = ("user", "assistant")
"""The roles of the Messages API (a system prompt is a request parameter, not a message)."""

BLOCK_TYPES: Final = frozenset({
    "text", "image", "document", "search_result", "tool_use", "tool_result", "thinking", "redacted_thinking",
    "server_tool_use", "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
    "bash_code_execution_tool_result", "text_editor_code_execution_tool_result", "mcp_tool_use",
    "mcp_tool_result", "container_upload", "tool_reference",
})
"""Content block types the Messages API accepts in a message."""

_ASSISTANT_ONLY: Final = frozenset({"tool_use", "thinking", "redacted_thinking", "server_tool_use", "mcp_tool_use"})
_USER_ONLY: Final = frozenset({"tool_result"})
_REQUIRED: Final[Mapping[str, tuple[str, ...]]] = {
    "text": ("text",), "tool_use": ("id", "name"), "tool_result": ("tool_use_id",), "thinking": ("thinking",),
}


def message_of(item: Any) -> Any:
    """The message an entry input holds (``{"message": ...}``), or the item itself when it is a message."""
    if isinstance(item, Mapping) and "message" in item and "role" not in item:
        return item["message"]
    return item


def check_message(message: Any, where: str = "the message") -> None:
    """Raise `InvalidInput` naming `where` unless `message` is one the Messages API accepts on its own."""
    if not isinstance(message, Mapping):
        raise InvalidInput(f"{where} is not a JSON object; give e.g. {{\"role\": \"user\", \"content\": \"hi\"}}")
    role = message.get("role")
    if not isinstance(role, str) or role not in ROLES:
        hint = " (a system prompt is not a message: pass it to the model separately)" if role == "system" else ""
        raise InvalidInput(f"{where} has role {shown(role)}; messages are from 'user' or 'assistant'{hint}")
    content = message.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise InvalidInput(f"{where} has no content: give a string or a list of content blocks")
    for number, block in enumerate(content, 1):
        _check_block(block, role, f"{where}, block {number}")


def _check_block(block: Any, role: str, where: str) -> None:
    if not isinstance(block, Mapping):
        raise InvalidInput(f"{where} is not an object with a 'type'")
    kind = block.get("type")
    if not isinstance(kind, str) or kind not in BLOCK_TYPES:
        raise InvalidInput(f"{where} has unknown type {shown(kind)}; known types: {', '.join(sorted(BLOCK_TYPES))}")
    if role == "user" and kind in _ASSISTANT_ONLY:
        raise InvalidInput(f"{where} is a {kind} block, which only an assistant message holds")
    if role == "assistant" and kind in _USER_ONLY:
        raise InvalidInput(f"{where} is a {kind} block, which only a user message holds")
    for key in _REQUIRED.get(kind, ()):
        if not isinstance(block.get(key), str):
            raise InvalidInput(f"{where} ({kind}) needs a string {shown(key)}")


def tool_use_ids(message: Mapping[str, Any]) -> set[str]:
    """The ids of the tool uses an assistant message makes (empty for any other message)."""
    content = message.get("content")
    if message.get("role") != "assistant" or not isinstance(content, list):
        return set()
    return {b["id"] for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use"
            and isinstance(b.get("id"), str)}


def _tool_result_ids(message: Mapping[str, Any]) -> list[str]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b["tool_use_id"] for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"
            and isinstance(b.get("tool_use_id"), str)]


def check_messages(messages: Iterable[Any], *, before: Sequence[Mapping[str, Any]] = (),
                   what: str = "message") -> None:
    """Check each message (or entry input) and that every tool result answers a tool use.

    A tool result must name a tool use of the nearest assistant message before it; `before` are the
    messages already in the view the new ones follow (only its last assistant message matters).
    """
    open_uses: set[str] = set()
    for prior in reversed(before):
        if prior.get("role") == "assistant":
            open_uses = tool_use_ids(prior)
            break
    for number, item in enumerate(messages, 1):
        if type(item) is dict and type(item.get("content")) is str:  # text: the common case, checked fast
            role = item.get("role")
            if role == "user":
                continue
            if role == "assistant":
                open_uses = set()
                continue
        message = message_of(item)
        where = f"{what} {number}"
        check_message(message, where)
        if message["role"] == "assistant":
            open_uses = tool_use_ids(message)
            continue
        for use_id in _tool_result_ids(message):
            if use_id not in open_uses:
                raise InvalidInput(f"{where} has a tool_result for {shown(use_id)}, but the assistant message "
                                   "before it made no tool_use with that id")
