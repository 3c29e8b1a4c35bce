"""How result types spell themselves as JSON: one rule for every report ctxstore returns."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["json_fields"]


def json_fields(report: Any, *, before: tuple[str, ...] = (), after: tuple[str, ...] = ()) -> dict[str, Any]:
    """A report dataclass as JSON-ready data: its fields under camelCase names (the spelling of every JSON
    document ctxstore writes), with the attributes named in `before` and `after` (properties) around them.

    Lists and maps are copied, so the data does not alias the report; a value with its own `to_dict`
    (a nested report) is given as that.
    """
    out: dict[str, Any] = {}
    for name in (*before, *(f.name for f in dataclasses.fields(report)), *after):
        value = getattr(report, name)
        if hasattr(value, "to_dict"):
            value = value.to_dict()
        elif isinstance(value, list | dict):
            value = type(value)(value)
        head, *rest = name.split("_")
        out[head + "".join(part.title() for part in rest)] = value
    return out
