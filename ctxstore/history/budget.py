"""Token estimate, pricing and stop predicates: the budget helpers of `fino:ai/context`."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..errors import InvalidInput

__all__ = ["PRICING", "Pricing", "cost_of", "estimate_tokens", "js_number", "max_cost", "max_tokens"]


def estimate_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Approximate tokens for messages: characters of content over four, rounded up.

    As the reference counts: string content counts its length, any other content the length of its
    JSON text as JavaScript's `JSON.stringify` writes it (no spaces, integral numbers without `.0`),
    both in UTF-16 code units (a character outside the Basic Multilingual Plane counts 2). Use a model's
    own token counter where exact figures matter.
    """
    chars = 0
    for message in messages:
        content = message.get("content", "")
        chars += _utf16_length(content) if isinstance(content, str) else _json_length(content)
    return math.ceil(chars / 4)


_SHORT_ESCAPES = frozenset('"\\\b\f\n\r\t')


def _utf16_length(text: str) -> int:
    if text.isascii():
        return len(text)
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def _string_json_length(text: str) -> int:
    """Length of `JSON.stringify(text)`: quotes, two-character and six-character escapes."""
    length = _utf16_length(text) + 2
    for c in text:
        code = ord(c)
        if c in _SHORT_ESCAPES:
            length += 1
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            length += 5  # \u00XX, or a lone surrogate written as \uDXXX
    return length


def js_number(value: float) -> str:
    """A number as JavaScript prints it (`Number.prototype.toString`); non-finite ones as `null`,
    which is what `JSON.stringify` writes for them."""
    if value != value or value in (math.inf, -math.inf):
        return "null"
    if value == 0:
        return "0"
    sign, digits, exponent = Decimal(repr(float(value))).as_tuple()
    text = "".join(map(str, digits)).rstrip("0")
    assert isinstance(exponent, int)
    exponent += len(digits) - len(text)
    k, n = len(text), exponent + len(text)
    if k <= n <= 21:
        out = text + "0" * (n - k)
    elif 0 < n <= 21:
        out = f"{text[:n]}.{text[n:]}"
    elif -6 < n <= 0:
        out = "0." + "0" * -n + text
    else:
        e = n - 1
        out = (text if k == 1 else f"{text[0]}.{text[1:]}") + ("e+" if e > 0 else "e-") + str(abs(e))
    return ("-" if sign else "") + out


def _json_length(value: Any) -> int:
    """Length in UTF-16 code units of `JSON.stringify(value)`, without building the text."""
    if value is None or value is True:
        return 4
    if value is False:
        return 5
    if isinstance(value, str):
        return _string_json_length(value)
    if isinstance(value, int):
        return len(str(value)) if abs(value) < 2**53 else len(js_number(float(value)))
    if isinstance(value, float):
        return len(js_number(value))
    if isinstance(value, Mapping):
        items = list(value.items())
        return 2 + max(0, len(items) - 1) + sum(_string_json_length(str(k)) + 1 + _json_length(v) for k, v in items)
    if isinstance(value, list | tuple):
        return 2 + max(0, len(value) - 1) + sum(_json_length(v) for v in value)
    raise InvalidInput(f"cannot estimate tokens of a {type(value).__name__} in message content; use JSON-like data")


@dataclass(frozen=True, slots=True)
class Pricing:
    """USD per million tokens. Cache traffic is billed only where a cache rate is given."""

    input_per_1m: float
    output_per_1m: float
    cache_read_per_1m: float | None = None
    cache_write_per_1m: float | None = None


PRICING: Mapping[str, Pricing] = {
    "claude-opus-4-8": Pricing(5, 25, 0.5, 6.25),
    "claude-opus-4-7": Pricing(5, 25, 0.5, 6.25),
    "claude-opus-4-6": Pricing(5, 25, 0.5, 6.25),
    "claude-sonnet-4-6": Pricing(3, 15, 0.3, 3.75),
    "claude-haiku-4-5": Pricing(1, 5, 0.1, 1.25),
    "claude-fable-5": Pricing(10, 50, 1, 12.5),
}
"""Built-in rates for bundled model ids. A table passed to `cost_of` replaces it; it is not merged."""


def _figure(usage: Any, name: str) -> float | None:
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
    return None if value is None else float(value)


def cost_of(usage: Any, model_name: str, pricing: Mapping[str, Pricing] | None = None) -> float:
    """Approximate USD cost of reported usage; 0 for a model the table does not price.

    `usage` is an anthropic `Usage`, or any object or mapping with `input_tokens`, `output_tokens`
    and optionally `cache_read_input_tokens` and `cache_creation_input_tokens`.
    """
    rates = (PRICING if pricing is None else pricing).get(model_name)
    if rates is None:
        return 0.0
    # Each term as the reference writes it, tokens / 1e6 * rate, summed in its order: equal to the digit.
    cost = (_figure(usage, "input_tokens") or 0) / 1_000_000 * rates.input_per_1m
    cost += (_figure(usage, "output_tokens") or 0) / 1_000_000 * rates.output_per_1m
    cache_read = _figure(usage, "cache_read_input_tokens")
    if rates.cache_read_per_1m is not None and cache_read is not None:
        cost += cache_read / 1_000_000 * rates.cache_read_per_1m
    cache_write = _figure(usage, "cache_creation_input_tokens")
    if rates.cache_write_per_1m is not None and cache_write is not None:
        cost += cache_write / 1_000_000 * rates.cache_write_per_1m
    return cost


StopPredicate = Callable[..., bool]


def _field(state: Any, name: str) -> Any:
    return state.get(name) if isinstance(state, Mapping) else getattr(state, name, None)


def max_tokens(n: int) -> StopPredicate:
    """A stop predicate: true once accumulated input plus output tokens reach `n`."""

    def stop(state: Any, info: Any = None) -> bool:
        usage = _field(state, "usage")
        if usage is None:
            return False
        return (_figure(usage, "input_tokens") or 0) + (_figure(usage, "output_tokens") or 0) >= n

    return stop


def max_cost(usd: float) -> StopPredicate:
    """A stop predicate: true once accumulated cost reaches `usd` (a missing cost counts as 0)."""

    def stop(state: Any, info: Any = None) -> bool:
        return float(_field(state, "cost") or 0) >= usd

    return stop
