"""Turning what people type (ref names, revision ids and prefixes, `REF~N`) into revisions and histories."""

from __future__ import annotations

from ..errors import InvalidRefName
from ..history.message_history import MessageHistory
from ..ids import from_hex, to_hex
from ..refs import ref_candidates
from ..repo.repository import Repository
from ._graph import LogRevision

__all__ = ["existing_history", "load_revision", "match_ref", "object_ids_with_prefix"]


def match_ref(repo: Repository, name: str) -> str | None:
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


def object_ids_with_prefix(repo: Repository, prefix: str) -> list[str]:
    """Every stored object id (hex) starting with `prefix`."""
    prefix = prefix.lower()
    if len(prefix) == 64:
        return [prefix] if repo.store.has(from_hex(prefix)) else []
    return sorted(h for h in (to_hex(oid) for oid in repo.store) if h.startswith(prefix))


def load_revision(repo: Repository, revision_id: str) -> LogRevision:
    """A stored revision, as the log shows it."""
    rev = next(iter(repo.iter_revisions(revision_id, limit=1)))
    return LogRevision(rev.id, rev.parent, rev.created_at, rev.operation, rev.size)


def existing_history(repo: Repository, spec: str) -> MessageHistory:
    """The history at an existing ref or revision; an unknown name is an error, not an empty history."""
    repo.resolve(spec)  # raises UnknownRevision (exit 3) for a name that is neither
    return repo.history(spec)
