"""Turning what people type into revisions and histories: every command's REF or REVISION goes through here.

The syntax is git's (`ctxstore.repo.revspec`): a ref name, a revision id or unique prefix, then
``@{N}`` (the Nth reflog entry) and ``~N`` / ``^`` (parents back), as in ``main~2`` or ``main@{1}^``.
`resolve_revision` gives the revision id, `existing_history` the conversation there.
"""

from __future__ import annotations

from ..errors import InvalidRefName
from ..history.message_history import MessageHistory
from ..ids import HexId, from_hex, to_hex
from ..refs import ref_candidates
from ..repo.repository import Repository
from ._graph import LogRevision

__all__ = ["existing_history", "load_revision", "match_ref", "object_ids_with_prefix", "resolve_revision"]


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


def resolve_revision(repo: Repository, spec: str) -> HexId:
    """The revision id a spec names (``main``, ``3f2a``, ``main~2``, ``main@{1}``); unknown: exit 3."""
    return repo.resolve(spec)


def existing_history(repo: Repository, spec: str) -> MessageHistory:
    """The history at a revision spec; an unknown name is an error (exit 3), not an empty history."""
    return MessageHistory(source=repo.store, head=resolve_revision(repo, spec))
