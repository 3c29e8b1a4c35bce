"""The workloads every system records, from fixed seeds: a chat of short messages and a coding-agent run.

Both are plain message dicts in the Anthropic shape (``role`` and ``content``, a string or content blocks),
so every system stores exactly the same values.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

Message = dict[str, Any]

_WORDS = ("the deploy window is friday and the rollback plan needs a second reviewer before we merge "
          "database migration latency budget retry queue cache invalidation customer ticket summary "
          "tool result error stack trace config flag experiment metrics dashboard alert owner "
          "could you check why it fails on the staging box thanks looks good ship it").split()
_CODE = ("def class return import from self None True False if else elif for while in not and or "
         "with as try except raise yield lambda async await assert pass print len range dict list "
         "str int path config result value error items key data name args kwargs test fixture "
         "ctxstore repo history commit branch store render append fork").split()
_TOOLS = ("bash", "read_file", "grep", "edit_file", "run_tests")


def _vocabulary(size: int = 4000, seed: int = 3) -> tuple[list[str], list[float]]:
    """Words with Zipf weights, so text compresses about as English does (about 3x), not 10x."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ou", "ai", "ee")]
    words = list(_WORDS)
    while len(words) < size:
        words.append("".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    return words, list(itertools.accumulate(1 / (rank + 1) for rank in range(len(words))))


_VOCABULARY, _CUMULATIVE = _vocabulary()


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(_VOCABULARY, cum_weights=_CUMULATIVE, k=words))


def chat(count: int, seed: int = 13) -> list[Message]:
    """A chat of short messages (5 to 60 words, about 40 to 400 characters), alternating user and assistant."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        text = _text(rng, rng.randint(5, 60))
        out.append({"role": "user" if n % 2 == 0 else "assistant", "content": f"[{n}] {text}"})
    return out


def _tool_output(rng: random.Random) -> str:
    """A tool result of 2-8 KB that reads like source, a listing or a test log."""
    size = rng.randint(2048, 8192)
    lines: list[str] = []
    total = 0
    while total < size:
        indent = "    " * rng.randint(0, 3)
        line = indent + " ".join(rng.choice(_CODE) for _ in range(rng.randint(3, 12)))
        if rng.random() < 0.15:
            line = f"src/ctxstore/{rng.choice(_CODE)}.py:{rng.randint(1, 900)}: {line.strip()}"
        lines.append(line)
        total += len(line) + 1
    return "\n".join(lines)[:size]


def agent(count: int, seed: int = 29, repeated: float = 0.2) -> list[Message]:
    """A coding-agent run: a task, then rounds of assistant tool calls and tool results.

    Tool results are 2-8 KB; a fraction `repeated` of them repeats an earlier result exactly (the same
    file read twice, the same failing test log), as agents do.
    """
    rng = random.Random(seed)
    outputs: list[str] = []
    out: list[Message] = [{"role": "user", "content": "Fix the failing test in tests/test_repo.py and "
                                                      "explain the cause in one paragraph."}]
    call = 0
    while len(out) < count:
        call += 1
        tool_id = f"toolu_{seed:02d}{call:08d}"
        name = rng.choice(_TOOLS)
        thought = _text(rng, rng.randint(5, 30))
        out.append({"role": "assistant", "content": [
            {"type": "text", "text": thought},
            {"type": "tool_use", "id": tool_id, "name": name,
             "input": {"command": f"{name} {rng.choice(_CODE)}/{rng.choice(_CODE)}.py"}}]})
        if len(out) >= count:
            break
        if outputs and rng.random() < repeated:
            result = rng.choice(outputs)
        else:
            result = _tool_output(rng)
            outputs.append(result)
        out.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": result}]})
    return out[:count]


WORKLOADS = {"chat": chat, "agent": agent}


def workload(kind: str, count: int, offset: int = 0) -> list[Message]:
    """Messages `offset` .. `offset + count` of workload `kind` (a new seed per offset for the extras)."""
    if offset:
        return WORKLOADS[kind](count, seed=1000 + offset)
    return WORKLOADS[kind](count)
