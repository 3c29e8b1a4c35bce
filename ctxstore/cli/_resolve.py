"""Turning what people type (ref names, revision ids and prefixes, `REF~N`) into revisions and histories."""

from __future__ import annotations

import re
from typing import Any

from ..codec import from_hex, to_hex
from ..errors import CtxStoreError, InvalidRefName, UnknownRevision
from ..history import MessageHistory
from ..objects import Revision, parse_object
from ..refs import is_valid_ref_name, ref_candidates, resolve_ref_name
from ._common import EXIT_NOT_FOUND, EXIT_USAGE, fail
from ._graph import LogRevision

__all__ = [
    "full_ref_name",
    "history_at",
    "load_revision",
    "match_ref",
    "object_ids_with_prefix",
    "resolve",
    "store_of",
]

_HEX = re.compile(r"[0-9a-f]{4,64}")
_ANCESTOR = re.compile(r"^(.*)~(\d+)$")


def store_of(repo: Any) -> Any:
    """The repository's object store (what histories read objects through)."""
    return repo.store


def match_ref(repo: Any, name: str) -> str | None:
    """The full name of an existing ref that `name` stands for, or None."""
    try:
        candidates = ref_candidates(name)
    except InvalidRefName:
        return None
    existing = repo.refs()
    for candidate in candidates:
        if candidate in existing:
            return candidate
    return None


def full_ref_name(repo: Any, name: str) -> str:
    """The full name `name` means for writing: an existing ref it matches, else refs/heads/NAME."""
    if not is_valid_ref_name(name) and not name.startswith("refs/"):
        try:
            ref_candidates(name)
        except CtxStoreError as error:
            fail(str(error), EXIT_USAGE)
    existing = repo.refs()
    return resolve_ref_name(name, lambda n: n in existing)


def object_ids_with_prefix(repo: Any, prefix: str) -> list[str]:
    """Every stored object id (hex) starting with `prefix`."""
    prefix = prefix.lower()
    if len(prefix) == 64:
        return [prefix] if store_of(repo).has(from_hex(prefix)) else []
    return sorted(h for h in (to_hex(oid) for oid in store_of(repo)) if h.startswith(prefix))


def load_revision(repo: Any, revision_id: str) -> LogRevision:
    """A stored revision, as the log shows it."""
    store = store_of(repo)
    oid = from_hex(revision_id)
    if not store.has(oid):
        fail(f"revision {revision_id[:12]} is not in the repository; check the id with `ctxstore log`",
             EXIT_NOT_FOUND)
    obj = parse_object(store.get(oid), trusted=True)
    if not isinstance(obj, Revision):
        fail(f"object {revision_id[:12]} is a {type(obj).__name__.lower()}, not a revision", EXIT_USAGE)
    parent = to_hex(obj.parent) if obj.parent is not None else None
    return LogRevision(revision_id, parent, obj.created_at, obj.operation, obj.size)


def resolve(repo: Any, spec: str) -> str:
    """The revision id (hex) that a ref name, a revision id or unique prefix, or `SPEC~N` names."""
    ancestor = _ANCESTOR.match(spec)
    if ancestor:
        rid = resolve(repo, ancestor.group(1))
        for _ in range(int(ancestor.group(2))):
            parent = load_revision(repo, rid).parent
            if parent is None:
                fail(f"{spec}: the history is not that long", EXIT_NOT_FOUND)
            rid = parent
        return rid
    ref = match_ref(repo, spec)
    if ref is not None:
        return str(repo.refs()[ref])
    if _HEX.fullmatch(spec.lower()):
        found = [h for h in object_ids_with_prefix(repo, spec) if _is_revision(repo, h)]
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            fail(f"revision prefix {spec} is ambiguous ({len(found)} matches); give more digits", EXIT_USAGE)
    fail(f"no ref or revision named {spec!r}; list refs with `ctxstore refs`", EXIT_NOT_FOUND)


def _is_revision(repo: Any, hex_id: str) -> bool:
    try:
        return isinstance(parse_object(store_of(repo).get(from_hex(hex_id)), trusted=True), Revision)
    except CtxStoreError:
        return False


def history_at(repo: Any, spec: str) -> MessageHistory:
    """The history a ref name or revision spec shows (a ref loads through the repository)."""
    ref = match_ref(repo, spec)
    if ref is not None:
        return repo.history(ref)  # type: ignore[no-any-return]
    rid = resolve(repo, spec)
    try:
        return MessageHistory(source=store_of(repo), head=rid)
    except UnknownRevision as error:
        fail(str(error), EXIT_NOT_FOUND)
