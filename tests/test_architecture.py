"""The package's shape: layers import only downwards, and the public surface is what the docs list."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ctxstore

PACKAGE = Path(ctxstore.__file__).parent

# Lower rank = lower layer. A module may import modules of its own rank or lower. This is DESIGN.md's
# layer table, with one refinement: the pack *format* (pack.py) needs only codec, objects and the store
# protocol, so it sits just above the store, where the repository can use it.
RANKS: dict[str, int] = {
    "errors": 0,
    "codec": 1,
    "objects": 2, "seq": 2,
    "store": 3,
    "pack": 4, "_packform": 4,
    "_workspace": 5, "_intake": 5, "_snapshot": 5, "history": 5, "budget": 5,
    "refs": 6,
    "_repo_values": 7, "repo": 7, "transfer": 7, "packwalk": 7,
    "sync": 8,
    "signals": 9, "strategies": 9, "recording": 9,
    "models": 10, "offline": 10, "agent": 10,
    "tour": 11, "cli": 11, "cli_sync": 11, "cli_agent": 11, "__init__": 11, "__main__": 11,
}

# Repository.fetch/pull/push/clone are the seed-facing spelling of the sync functions; they import
# the sync layer inside the method, the one sanctioned upward step.
ALLOWED_UPWARD = {("repo", "sync")}

# Third-party packages that one module alone may import.
OWNERS = {"lmdb": {"store.lmdb"}, "anthropic": {"models"}}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        out[".".join(rel.parts)] = path
    return out


def _layer(module: str) -> str:
    top = module.split(".")[0]
    if top == "__init__":
        return "__init__"
    return top


def _imports(module: str, path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    package_parts = module.split(".")[:-1]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append(node.module or "")
                continue
            base = package_parts[: len(package_parts) - (node.level - 1)]
            target = ".".join([*base, node.module]) if node.module else ".".join(base)
            if node.module is None:
                found.extend(f"{target}.{a.name}".lstrip(".") for a in node.names)
            else:
                found.append("ctxstore." + target if target else "ctxstore")
            continue
    return [("ctxstore." + f) if not f.startswith("ctxstore") and f in _modules_flat() else f for f in found]


def _modules_flat() -> set[str]:
    return set(_modules())


def test_every_module_has_a_layer():
    """A new module must be placed in the layer table before it can land."""
    missing = sorted({_layer(m) for m in _modules()} - RANKS.keys())
    assert not missing, f"modules without a layer in RANKS: {missing}"


def test_modules_import_only_lower_layers():
    """No module imports from a layer above its own."""
    bad = []
    for module, path in _modules().items():
        mine = _layer(module)
        for imported in _imports(module, path):
            if not imported.startswith("ctxstore"):
                continue
            parts = imported.split(".")[1:]
            if not parts:
                continue
            theirs = parts[0]
            if theirs not in RANKS or (mine, theirs) in ALLOWED_UPWARD:
                continue
            if RANKS[theirs] > RANKS[mine]:
                bad.append(f"{module} imports {imported}")
    assert not bad, "upward imports:\n" + "\n".join(bad)


def test_third_party_owners():
    """lmdb is imported by the LMDB store alone, anthropic by the model adapter alone."""
    bad = []
    for module, path in _modules().items():
        for imported in _imports(module, path):
            top = imported.split(".")[0]
            if top in OWNERS and module not in OWNERS[top]:
                bad.append(f"{module} imports {top}")
    assert not bad, bad


def test_only_the_cli_prints_or_reads_the_environment():
    """Library modules neither print nor read os.environ; the CLI does both for them."""
    bad = []
    for module, path in _modules().items():
        if _layer(module) in ("cli", "cli_sync", "cli_agent", "__main__"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                bad.append(f"{module}:{node.lineno} print()")
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv") and \
                    isinstance(node.value, ast.Name) and node.value.id == "os":
                bad.append(f"{module}:{node.lineno} os.{node.attr}")
    assert not bad, bad


def test_all_is_sorted_and_matches_the_docs():
    """`ctxstore.__all__` is sorted, importable, and exactly the list in docs/api.md."""
    names = list(ctxstore.__all__)
    assert names == sorted(names)
    for name in names:
        assert hasattr(ctxstore, name), name
    doc = (PACKAGE.parent / "docs" / "api.md").read_text()
    documented = re.findall(r"^- `([A-Za-z_][A-Za-z0-9_]*)`", doc, flags=re.M)
    assert sorted(documented) == names


def test_error_tree_is_rooted():
    """Every exception class ctxstore exports derives from CtxStoreError."""
    for name in ctxstore.__all__:
        value = getattr(ctxstore, name)
        if isinstance(value, type) and issubclass(value, BaseException):
            assert issubclass(value, ctxstore.CtxStoreError), name
