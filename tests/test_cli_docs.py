"""docs/cli.md is the live `--help` of every command (regenerate: python tools/cli_reference.py)."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from ctxstore.cli import cli
from ctxstore.cli._reference import live_help, reference

DOC = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_reference_page_matches_the_live_help() -> None:
    assert DOC.read_text(encoding="utf-8") == reference(cli), (
        "docs/cli.md is stale: run `python tools/cli_reference.py`")


@pytest.mark.parametrize("name", cli.list_commands(click.Context(cli)))
def test_every_command_is_documented(name: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"\n## ctxstore {name}\n" in text
    assert live_help(cli, [name]) in text
