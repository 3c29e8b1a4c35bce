"""Durations on the command line: ``now``, a number of seconds, or a number with a unit (``90d``)."""

from __future__ import annotations

import re

import click

from ..errors import shown

__all__ = ["Duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_FORM = re.compile(r"(\d+(?:\.\d+)?)([smhdw]?)")


class Duration(click.ParamType[float, object]):
    """A length of time in seconds: ``now`` (0), ``3600``, ``45s``, ``30m``, ``12h``, ``90d`` or ``2w``."""

    name = "duration"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, int | float):
            return float(value)
        text = str(value).strip().lower()
        if text == "now":
            return 0.0
        match = _FORM.fullmatch(text)
        if match is None:
            self.fail(f"{shown(value)} is not a duration; give now, seconds, or a number with s, m, h, d or w "
                      "(e.g. 90d)", param, ctx)
        return float(match.group(1)) * _UNITS[match.group(2) or "s"]
