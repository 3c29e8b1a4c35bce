"""The revision syntax every command reads, git's: a name, then reflog and parent steps.

::

    spec    := base [ "@{" N "}" ] step*
    base    := ref name (short or full) | full revision id | unique revision id prefix (4+ hex digits)
    step    := "~" [N]          N parents back (``~`` alone: one)
             | "^" [N]          the Nth parent: ``^`` and ``^1`` one step back, ``^0`` the revision itself

``main@{2}`` is the revision ``main`` pointed at two moves ago (entry 2 of its reflog, newest first:
``@{0}`` is where it points now); ``main@{1}~3`` walks three parents back from there. Ref names cannot
hold ``~``, ``^`` or ``@{``, so the first of them ends the base. `parse` is the grammar alone (pure, for
tests and for callers that only need to know a spec is an expression); `resolve` looks the parts up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from ..errors import CtxStoreError, InvalidInput, UnknownRevision, shown
from ..format.objects import Revision
from ..ids import ObjectId, from_hex, short_hex, to_hex
from ..refs import Refs
from ..store.base import TransactionalStore
from .lineage import Lineage

__all__ = ["MIN_PREFIX", "RevSpec", "is_expression", "parse", "resolve"]

MIN_PREFIX: Final = 4
"""The fewest hex digits a revision id prefix may have."""

_STEP = re.compile(r"([~^])([0-9]*)")
_REFLOG = re.compile(r"@\{([0-9]+)\}")
_HEX = frozenset("0123456789abcdefABCDEF")


@dataclass(frozen=True, slots=True)
class RevSpec:
    """A parsed revision spec: the name it starts from, the reflog entry (or None), and parents back."""

    base: str
    reflog: int | None
    parents: int


def is_expression(spec: str) -> bool:
    """Whether `spec` uses the revision syntax beyond a plain name or id (``~``, ``^`` or ``@{``)."""
    return isinstance(spec, str) and ("~" in spec or "^" in spec or "@{" in spec)


def parse(spec: str) -> RevSpec:
    """Split a revision spec into its parts; `InvalidInput` names what is malformed."""
    if not isinstance(spec, str) or not spec:
        raise InvalidInput(f"not a ref or revision: {shown(spec)}; give a ref name, a revision id or REF~N")
    cut = min((i for i in (spec.find("~"), spec.find("^"), spec.find("@{")) if i >= 0), default=len(spec))
    base, rest = spec[:cut], spec[cut:]
    if not base:
        example = f"REF{rest}" if len(rest) <= 40 else "REF~N"
        raise InvalidInput(f"{shown(spec)} names no ref or revision before {shown(rest[0])}; write it as {example}")
    reflog: int | None = None
    if rest.startswith("@{"):
        entry = _REFLOG.match(rest)
        if entry is None:
            raise InvalidInput(f"{shown(spec)}: @{{...}} takes a reflog entry number, like {base}@{{1}}")
        reflog = int(entry.group(1))
        rest = rest[entry.end():]
    parents = 0
    pos = 0
    while pos < len(rest):
        step = _STEP.match(rest, pos)
        if step is None:
            raise InvalidInput(f"{shown(spec)}: cannot read {shown(rest[pos:])}; steps are ~N (N parents back) "
                               "and ^ (one parent back)")
        kind, digits = step.groups()
        count = int(digits) if digits else 1
        if kind == "^" and count > 1:
            raise InvalidInput(f"{shown(spec)}: a revision has one parent, so ^{count} names nothing; "
                               f"use ~{count} for {count} parents back")
        parents += count
        pos = step.end()
    return RevSpec(base, reflog, parents)


def resolve(store: TransactionalStore, refs: Refs, lineage: Lineage, spec: str) -> ObjectId:
    """The revision `spec` names in a store; `UnknownRevision` (or `UnknownRef`) says what is missing."""
    parsed = parse(spec)
    if parsed.reflog is not None:
        oid = _reflog_entry(refs, parsed.base, parsed.reflog, spec)
    else:
        oid = _base(store, refs, lineage, parsed.base, spec)
    for step in range(parsed.parents):
        parent = lineage.parent(oid)
        if parent is None:
            raise UnknownRevision(f"{shown(spec)}: {parsed.base} has only {step} ancestor(s), not {parsed.parents}; "
                                  f"see them with `ctxstore log {parsed.base}`")
        oid = parent
    return oid


def _reflog_entry(refs: Refs, name: str, n: int, spec: str) -> ObjectId:
    try:
        records = refs.reflog(name, n + 1)
    except CtxStoreError:
        records = []
    if not records:
        raise UnknownRevision(f"{shown(spec)}: {name} has no reflog; list refs with `ctxstore refs`")
    if len(records) <= n:
        raise UnknownRevision(f"{shown(spec)}: the reflog of {name} has only {len(records)} entries "
                              f"(@{{0}} to @{{{len(records) - 1}}}); see `ctxstore reflog {name}`")
    new = records[n].new
    if new is None:
        raise UnknownRevision(f"{shown(spec)}: at that entry {name} was deleted; see `ctxstore reflog {name}`")
    return new


def _base(store: TransactionalStore, refs: Refs, lineage: Lineage, name: str, spec: str) -> ObjectId:
    hexlike = all(c in _HEX for c in name)
    if hexlike and len(name) == 64:
        oid = from_hex(name)
        if store.has(oid):
            lineage.revision(oid)  # an id of something else is DamagedData, named
            return oid
    try:
        found = refs.get(name)
    except CtxStoreError:
        found = None
    if found is not None:
        return found
    if hexlike and MIN_PREFIX <= len(name) < 64:
        prefix = name.lower()
        revisions = [oid for oid in store if to_hex(oid).startswith(prefix)
                     and isinstance(lineage.object(oid), Revision)]
        if len(revisions) == 1:
            return revisions[0]
        if len(revisions) > 1:
            listed = ", ".join(short_hex(oid) for oid in sorted(revisions)[:4])
            raise UnknownRevision(f"revision prefix {shown(name)} is ambiguous ({len(revisions)} revisions match: "
                                  f"{listed}{', ...' if len(revisions) > 4 else ''}); give more digits")
    within = f" (in {shown(spec)})" if spec != name else ""
    raise UnknownRevision(f"no ref or revision named {shown(name)}{within}; list refs with `ctxstore refs` "
                          "and revisions with `ctxstore log`")
