"""The Python code blocks of docs/tutorial.md run, in order, in one namespace, as a reader would run them."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "tutorial.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def test_the_tutorial_has_examples() -> None:
    assert len(BLOCKS) >= 5


def test_tutorial_blocks_run_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the tutorial creates its repository in the current directory
    namespace: dict[str, object] = {"__name__": "__tutorial__"}
    for number, block in enumerate(BLOCKS, 1):
        exec(compile(block, f"{DOC.name} block {number}", "exec"), namespace)
    assert os.path.isdir(tmp_path / "tutorial-repo")
