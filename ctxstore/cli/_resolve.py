"""Turning what people type (ref names, revision ids and prefixes, `REF~N`) into revisions and histories."""

from __future__ import annotations

from typing import Any

from ..errors import InvalidRefName
from ..history.message_history import MessageHistory
from ..ids import from_hex, to_hex
from ..refs import ref_candidates
from ._graph import LogRevision

__all__ = ["existing_history", "load_revision", "match_ref", "object_ids_with_prefix"]


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


def object_ids_with_prefix(repo: Any, prefix: str) -> list[str]:
    """Every stored object id (hex) starting with `prefix`."""
    prefix = prefix.lower()
    if len(prefix) == 64:
        return [prefix] if repo.store.has(from_hex(prefix)) else []
    return sorted(h for h in (to_hex(oid) for oid in repo.store) if h.startswith(prefix))


def load_revision(repo: Any, revision_id: str) -> LogRevision:
    """A stored revision, as the log shows it."""
    rid, rev = next(iter(repo.iter_revisions(revision_id, limit=1)))
    parent = to_hex(rev.parent) if rev.parent is not None else None
    return LogRevision(rid, parent, rev.created_at, rev.operation, rev.size)


def existing_history(repo: Any, spec: str) -> MessageHistory:
    """The history at an existing ref or revision; an unknown name is an error, not an empty history."""
    repo.resolve(spec)  # raises UnknownRevision (exit 3) for a name that is neither
    return repo.history(spec)  # type: ignore[no-any-return]
