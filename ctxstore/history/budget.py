"""Token estimate, pricing and stop predicates: the budget helpers of `fino:ai/context`."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["PRICING", "Pricing", "cost_of", "estimate_tokens", "max_cost", "max_tokens"]


def estimate_tokens(messages: Iterable[Mapping[str, Any]]) -> int:
    """Approximate tokens for messages: characters of content over four, rounded up.

    String content counts its length; any other content counts the length of its compact JSON text.
    Use a model's own token counter where exact figures matter.
    """
    chars = 0
    for message in messages:
        content = message.get("content", "")
        if isinstance(content, str):
            chars += len(content)
        else:
            chars += len(json.dumps(content, separators=(",", ":"), ensure_ascii=False))
    return math.ceil(chars / 4)


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
    cost = (_figure(usage, "input_tokens") or 0) * rates.input_per_1m
    cost += (_figure(usage, "output_tokens") or 0) * rates.output_per_1m
    cache_read = _figure(usage, "cache_read_input_tokens")
    if rates.cache_read_per_1m is not None and cache_read is not None:
        cost += cache_read * rates.cache_read_per_1m
    cache_write = _figure(usage, "cache_creation_input_tokens")
    if rates.cache_write_per_1m is not None and cache_write is not None:
        cost += cache_write * rates.cache_write_per_1m
    return cost / 1_000_000


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
