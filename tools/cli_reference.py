"""Regenerate docs/cli.md from the live `--help` of every command: `python tools/cli_reference.py`."""

from __future__ import annotations

from pathlib import Path

from ctxstore.cli import cli
from ctxstore.cli._reference import reference

if __name__ == "__main__":
    target = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
    target.write_text(reference(cli))
    print(f"wrote {target}")
