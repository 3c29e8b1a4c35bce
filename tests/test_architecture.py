"""The package's shape, as docs/architecture.md states it: one subpackage per layer, imports only downwards,
no import cycle between modules, no module using another's private names, and a public surface that the docs
list. Imports are counted wherever they stand: at module level, inside functions, under TYPE_CHECKING, and as
`importlib.import_module("...")` strings.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import click

import ctxstore

PACKAGE = Path(ctxstore.__file__).parent
DOCS = PACKAGE.parent / "docs"

# Lower rank = lower layer. A module may import its own layer or lower ones. docs/architecture.md has the
# same table with what each layer owns; test_the_layer_table_is_the_documented_one keeps the two in step.
RANKS: dict[str, int] = {
    "errors": 0,
    "ids": 1,
    "report": 1,
    "format": 2,
    "store": 3,
    "pack": 4,
    "history": 5,
    "refs": 6,
    "repo": 7,
    "sync": 8,
    "interop": 9,
    "agents": 10,
    "integrations": 11,
    "cli": 12,
    "__init__": 13,
}

# Third-party packages that only these modules (or modules under these prefixes) may import.
OWNERS: dict[str, tuple[str, ...]] = {
    "lmdb": ("ctxstore.store.lmdb",),
    "anthropic": ("ctxstore.agents.anthropic",),
    "starlette": ("ctxstore.sync.server",),
    "uvicorn": ("ctxstore.sync.server",),
    "httpx2": ("ctxstore.sync.http",),
    "click": ("ctxstore.cli",),
    "langgraph": ("ctxstore.integrations.langgraph",),
    "langchain_core": ("ctxstore.integrations.langgraph",),
    "agents": ("ctxstore.integrations.openai_agents",),
    "mcp": ("ctxstore.integrations.mcp",),
    "psycopg": ("ctxstore.store.postgres",),
    "psycopg_pool": ("ctxstore.store.postgres",),
    "boto3": ("ctxstore.store.s3",),
    "botocore": ("ctxstore.store.s3",),
}

# Underscore names that are public API of the standard library (namedtuple's methods, sys internals).
STDLIB_UNDERSCORE = {"_asdict", "_replace", "_fields", "_make", "_field_defaults", "_exit", "_getframe"}


@dataclass(frozen=True)
class Import:
    """One import statement's target, resolved to a full module name, and the names it takes from it."""

    module: str
    names: tuple[str, ...]
    line: int


@cache
def modules() -> dict[str, Path]:
    """Every module of the package by full dotted name (a package is named by its `__init__`)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = ["ctxstore", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def is_package(name: str) -> bool:
    return modules()[name].name == "__init__.py"


def layer(name: str) -> str:
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text(encoding="utf-8"))


@cache
def imports(name: str) -> tuple[Import, ...]:
    """Every import in module `name`, wherever it stands, with relative imports resolved."""
    here = name.split(".") if is_package(name) else name.split(".")[:-1]
    found = []
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Import):
            found += [Import(alias.name, (), node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            found.append(Import(target, tuple(alias.name for alias in node.names), node.lineno))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append(Import(node.args[0].value, (), node.lineno))
    return tuple(found)


def edges(name: str) -> set[str]:
    """The package modules `name` imports: a `from pkg import sub` names the submodule, else the package."""
    out = set()
    for imp in imports(name):
        if imp.module != "ctxstore" and not imp.module.startswith("ctxstore."):
            continue
        subs = [f"{imp.module}.{n}" for n in imp.names if f"{imp.module}.{n}" in modules()]
        if subs:
            out.update(subs)
        if len(subs) < len(imp.names) or not imp.names:
            out.add(imp.module)
    return out - {name}


def test_every_module_is_in_a_layer_and_every_layer_is_a_module():
    """A new top-level module or subpackage must be placed in the layer table before it can land."""
    assert {layer(m) for m in modules()} == set(RANKS)


def test_modules_import_only_their_own_layer_or_lower():
    """No import, anywhere in a module, reaches a layer above the module's own."""
    bad = [f"{m} imports {t}" for m in modules() for t in sorted(edges(m)) if RANKS[layer(t)] > RANKS[layer(m)]]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def find_cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The cycles a depth-first walk of `graph` meets, each as the path that closes it."""
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, []):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for start in graph:
        if start not in state:
            visit(start)
    return cycles


def test_no_import_cycle_between_modules():
    """The module graph (every import counted, implicit parent-package imports aside) has no cycle."""
    graph = {m: sorted(t for t in edges(m) if t in modules()) for m in modules()}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_sees_function_level_imports_and_finds_cycles():
    """The checks are real: an import inside a function is an edge, and a three-module loop is reported."""
    assert "ctxstore.cli.tour" in edges("ctxstore.cli._repo")  # imported inside the `tour` command
    assert find_cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": ["b"], "b": [], "c": ["a", "b"]}) == []


def _defined_private_names(name: str) -> set[str]:
    """Underscore names a module defines: functions, classes, assignments, attributes it sets, parameters."""
    out = set()
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
    return {n for n in out if n.startswith("_")}


def test_no_module_uses_another_modules_private_names():
    """`obj._x` only where this module defines `_x`; `from m import _x` never; private modules only from their
    own package."""
    bad = []
    for name in modules():
        mine = _defined_private_names(name)
        # Third-party modules' own underscore names (py-lmdb's `lmdb._Database` handle type) are theirs to
        # publish; the rule is about ctxstore's modules.
        foreign = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree(name)) if isinstance(n, ast.Import)
                   for a in n.names if not a.name.startswith("ctxstore")}
        package = name if is_package(name) else name.rpartition(".")[0]
        for imp in imports(name):
            if not imp.module.startswith("ctxstore"):
                continue
            for taken in imp.names:
                full = f"{imp.module}.{taken}"
                if full in modules():
                    owner = full.rpartition(".")[0]
                    if taken.startswith("_") and not taken.startswith("__") and owner != package:
                        bad.append(f"{name}:{imp.line} imports private module {full}")
                elif taken.startswith("_") and not taken.startswith("__"):
                    bad.append(f"{name}:{imp.line} imports private name {taken} from {imp.module}")
            last = imp.module.rsplit(".", 1)[-1]
            if last.startswith("_") and not last.startswith("__") and imp.module.rpartition(".")[0] != package:
                bad.append(f"{name}:{imp.line} imports private module {imp.module}")
        for node in ast.walk(tree(name)):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr in STDLIB_UNDERSCORE or attr in mine:
                continue
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls", *foreign):
                continue
            bad.append(f"{name}:{node.lineno} uses {ast.unparse(node)}")
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


def test_third_party_packages_have_one_owner():
    """lmdb, anthropic, starlette, uvicorn, httpx2 and click are each imported by their one layer's module."""
    bad = []
    for name in modules():
        for imp in imports(name):
            top = imp.module.split(".")[0]
            if top in OWNERS and not name.startswith(OWNERS[top]):
                bad.append(f"{name}:{imp.line} imports {top}")
    assert not bad, bad


def test_only_the_cli_prints_or_reads_the_environment():
    """Library modules neither print nor read os.environ; the CLI does both for them."""
    bad = []
    for name in modules():
        if layer(name) == "cli":
            continue
        for node in ast.walk(tree(name)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{name}:{node.lineno} print()")
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                bad.append(f"{name}:{node.lineno} os.{node.attr}")
    assert not bad, bad


def test_every_cli_command_is_named_in_the_main_group() -> None:
    """`COMMANDS` (looked up lazily) names every top-level command the CLI's modules define, and each
    name loads the command of that name: a module that fails to import fails here."""
    import importlib
    import pkgutil

    import click

    import ctxstore.cli as package
    from ctxstore.cli import COMMANDS, cli

    defined: dict[str, click.Command] = {}
    subcommands: set[int] = set()
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "__main__":
            continue  # runs the CLI
        module = importlib.import_module(f"ctxstore.cli.{info.name}")
        for value in vars(module).values():
            if isinstance(value, click.Command) and value.callback is not None and (
                    value.callback.__module__ == module.__name__):
                defined[f"{info.name}:{value.name}"] = value
                if isinstance(value, click.Group):
                    subcommands.update(id(c) for c in value.commands.values())
    top = {key.split(":")[1] for key, c in defined.items() if id(c) not in subcommands}
    assert top == set(COMMANDS)
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name, (module, attr) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.name == name
        assert command is getattr(importlib.import_module(f"ctxstore.cli.{module}"), attr)
    assert cli.get_command(ctx, "nosuch") is None


def test_a_command_module_that_cannot_import_fails_the_cli_loudly():
    """A broken import inside a command module stops its command (and the help that lists every command)
    with the ImportError, not a missing command; the other commands still run."""
    code = ("import sys; sys.modules['ctxstore.cli._sync'] = None\n"
            "from ctxstore.cli import cli\n"
            "for argv in (['fetch'], ['--help'], ['refs', '--help']):\n"
            "    try:\n        cli.main(argv, standalone_mode=False)\n"
            "    except ImportError as e:\n        print(argv[0], 'ImportError', e)\n"
            "    else:\n        print(argv[0], 'ran')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
    lines = [line for line in out.splitlines() if line.startswith(("fetch ", "--help ", "refs "))]
    assert [line.split()[:2] for line in lines] == [["fetch", "ImportError"], ["--help", "ImportError"],
                                                    ["refs", "ran"]], out


def test_all_is_sorted_and_matches_the_docs():
    """`ctxstore.__all__` is sorted, importable, and exactly the list in docs/api.md."""
    names = list(ctxstore.__all__)
    assert names == sorted(names)
    for name in names:
        assert hasattr(ctxstore, name), name
    documented = re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)`", (DOCS / "api.md").read_text(), flags=re.M)
    assert sorted(documented) == names


def test_error_tree_is_rooted():
    """Every exception class ctxstore exports derives from CtxStoreError."""
    for name in ctxstore.__all__:
        value = getattr(ctxstore, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, ctxstore.CtxStoreError), name


def test_the_layer_table_is_the_documented_one():
    """docs/architecture.md's layer table lists the layers of RANKS, lowest first."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| `([a-z_]+)(?:/|\.py)?` \|", text, flags=re.M)
    documented = {layer_name: int(rank) for rank, layer_name in rows}
    expected = {k: v for k, v in RANKS.items() if k != "__init__"}
    assert documented == expected


def test_no_test_or_doc_cites_a_design_file_outside_the_repository():
    """The repository's own docs are the authority: nothing refers to DESIGN.md or shared/."""
    root = PACKAGE.parent
    bad = []
    for path in [*root.glob("docs/*.md"), root / "README.md", *root.glob("tests/*.py"), *PACKAGE.rglob("*.py")]:
        if path.name == "test_architecture.py":
            continue
        text = path.read_text(encoding="utf-8")
        if "DESIGN.md" in text or "shared/" in text:
            bad.append(str(path.relative_to(root)))
    assert not bad, bad
