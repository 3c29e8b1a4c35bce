"""The budget helpers: estimate_tokens, cost_of, PRICING, max_tokens and max_cost (seed examples first)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ctxstore.history.budget import PRICING, Pricing, cost_of, estimate_tokens, max_cost, max_tokens


def test_seed_estimate_tokens_is_characters_over_four_rounded_up() -> None:
    """Seed: estimateTokens([{role: 'user', content: 'four chars per token, roughly'}])."""
    text = "four chars per token, roughly"
    assert estimate_tokens([{"role": "user", "content": text}]) == math.ceil(len(text) / 4) == 8


def test_estimate_tokens_counts_block_content_as_compact_json() -> None:
    blocks = [{"type": "text", "text": "héllo"}]
    compact = '[{"type":"text","text":"héllo"}]'
    assert estimate_tokens([{"role": "user", "content": blocks}]) == math.ceil(len(compact) / 4)


def test_estimate_tokens_sums_over_messages_before_rounding() -> None:
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert estimate_tokens(messages) == 1
    assert estimate_tokens([]) == 0


def test_seed_cost_of_sonnet_with_cache_reads() -> None:
    """Seed: costOf({1.2M input, 80k output, 400k cache read}, 'claude-sonnet-4-6')."""
    usage = {"input_tokens": 1_200_000, "output_tokens": 80_000, "cache_read_input_tokens": 400_000}
    assert cost_of(usage, "claude-sonnet-4-6") == pytest.approx(3.6 + 1.2 + 0.12)


def test_seed_pricing_custom_table_prices_a_local_model() -> None:
    """Seed: a Pricing table for 'my-local-model' at 0.2 / 0.8 per 1M."""
    pricing = {"my-local-model": Pricing(input_per_1m=0.2, output_per_1m=0.8)}
    usd = cost_of({"input_tokens": 1_000_000, "output_tokens": 250_000}, "my-local-model", pricing)
    assert usd == pytest.approx(0.2 + 0.2)


def test_custom_table_replaces_the_builtin_one() -> None:
    pricing = {"my-local-model": Pricing(0.2, 0.8)}
    assert cost_of({"input_tokens": 1_000_000, "output_tokens": 0}, "claude-sonnet-4-6", pricing) == 0


def test_unknown_model_costs_nothing() -> None:
    assert cost_of({"input_tokens": 10**9, "output_tokens": 10**9}, "no-such-model") == 0


def test_cache_traffic_is_billed_only_when_rate_and_figure_are_present() -> None:
    no_rates = {"m": Pricing(1, 1)}
    usage = {"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": 1_000_000,
             "cache_creation_input_tokens": 1_000_000}
    assert cost_of(usage, "m", no_rates) == 0
    assert cost_of(usage, "claude-haiku-4-5") == pytest.approx(0.1 + 1.25)
    assert cost_of({"input_tokens": 0, "output_tokens": 0, "cache_read_input_tokens": None},
                   "claude-haiku-4-5") == 0


def test_cost_of_accepts_objects_such_as_the_sdk_usage() -> None:
    from anthropic.types import Usage

    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_creation_input_tokens=1_000_000)
    assert cost_of(usage, "claude-opus-4-8") == pytest.approx(5 + 25 + 6.25)
    assert cost_of(SimpleNamespace(input_tokens=2_000_000, output_tokens=0), "claude-fable-5") == 20


def test_pricing_table_has_the_documented_rates() -> None:
    assert PRICING["claude-sonnet-4-6"] == Pricing(3, 15, 0.3, 3.75)
    assert PRICING["claude-haiku-4-5"] == Pricing(1, 5, 0.1, 1.25)
    assert PRICING["claude-fable-5"] == Pricing(10, 50, 1, 12.5)
    for name in ("claude-opus-4-8", "claude-opus-4-7", "claude-opus-4-6"):
        assert PRICING[name] == Pricing(5, 25, 0.5, 6.25)


def test_max_tokens_stops_once_input_plus_output_reach_n() -> None:
    """Seed: maxTokens(50000) as a stop predicate."""
    stop = max_tokens(50_000)
    assert not stop({"usage": {"input_tokens": 40_000, "output_tokens": 9_999}}, None)
    assert stop({"usage": {"input_tokens": 40_000, "output_tokens": 10_000}}, None)
    assert stop(SimpleNamespace(usage=SimpleNamespace(input_tokens=60_000, output_tokens=0)))
    assert not stop(SimpleNamespace(usage=None))


def test_max_cost_stops_once_cost_reaches_usd_and_treats_missing_as_zero() -> None:
    """Seed: maxCost(2.50) as a stop predicate."""
    stop = max_cost(2.50)
    assert not stop({"cost": 2.49}, None)
    assert stop({"cost": 2.50}, None)
    assert not stop({}, None)
    assert not stop(SimpleNamespace(cost=None))


def test_estimate_tokens_counts_numbers_as_javascript_prints_them() -> None:
    """JSON.stringify writes [1,2,3,4] (9 characters: 3 tokens), not Python's [1.0, ...] (17: 5)."""
    assert estimate_tokens([{"role": "user", "content": [1.0, 2.0, 3.0, 4.0]}]) == 3
    # 1e-7 is "1e-7" in JavaScript: [1e-7,1e-7,1e-7,1e-7] is 21 characters, 6 tokens (not 7).
    assert estimate_tokens([{"role": "user", "content": [1e-7] * 4}]) == 6
    assert estimate_tokens([{"role": "user", "content": [{"a": 1, "b": True}]}]) == 5  # [{"a":1,"b":true}]


def test_estimate_tokens_counts_utf16_code_units() -> None:
    """A character outside the Basic Multilingual Plane is two UTF-16 code units, as JavaScript counts."""
    assert estimate_tokens([{"role": "user", "content": "\U0001F600" * 3}]) == 2  # 6 units
    assert estimate_tokens([{"role": "user", "content": [{"type": "text", "text": "é\U0001F600"}]}]) == 8


def test_js_number_follows_number_to_string() -> None:
    from ctxstore.history.budget import js_number

    cases = {1.0: "1", 0.1: "0.1", 1e21: "1e+21", 1e-7: "1e-7", 1.5e-7: "1.5e-7", 0.000001: "0.000001",
             1e16: "10000000000000000", -2.5: "-2.5", 123456789012345680000.0: "123456789012345680000",
             float("nan"): "null", -0.0: "0"}
    for value, text in cases.items():
        assert js_number(value) == text


def test_cost_of_sums_terms_as_the_reference_does() -> None:
    """Each term is tokens / 1e6 * rate: 17.201077199999997, where one division at the end gives 17.2010772."""
    usage = {"input_tokens": 799309, "output_tokens": 804424, "cache_read_input_tokens": 2209,
             "cache_creation_input_tokens": 729634}
    assert cost_of(usage, "claude-sonnet-4-6") == 17.201077199999997
