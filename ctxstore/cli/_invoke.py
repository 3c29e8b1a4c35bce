"""Running a `ctxstore` command in this process and capturing what it prints (for the tour)."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

import click

from ..errors import CtxStoreError

__all__ = ["Invoker", "invoker"]

Invoker = Callable[[Sequence[str]], str]


def invoker(cli: click.Command) -> Invoker:
    """A function that runs `ctxstore ARGS...` (the group `cli`) in-process and returns its stdout.

    A command that exits non-zero raises `CtxStoreError` with what it printed on stderr.
    """
    from click.testing import CliRunner

    def run(args: Sequence[str]) -> str:
        result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
        if result.exit_code != 0:
            raise CtxStoreError(f"`ctxstore {shlex.join(args)}` exited {result.exit_code}: "
                                f"{result.stderr.strip()}")
        return result.stdout

    return run
