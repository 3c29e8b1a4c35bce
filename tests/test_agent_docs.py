"""The Python examples in docs/agents.md run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "agents.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_example_runs(index: int) -> None:
    exec(compile(EXAMPLES[index], f"{DOC.name} example {index + 1}", "exec"), {"__name__": "__docs__"})


def test_the_page_states_the_built_in_rates_as_pricing_has_them() -> None:
    """The rates table in the page is PRICING, row for row: the page itself states the rates."""
    from ctxstore.history.budget import PRICING, Pricing

    text = DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w.-]+)` \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", text, flags=re.M)
    documented = {name: Pricing(*(float(x) for x in rates)) for name, *rates in rows}
    assert documented == dict(PRICING)
