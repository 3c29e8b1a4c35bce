"""`Repository`: a store, its refs and config; commit and rebase, receiving packs, fsck, gc and stats."""

from .reports import FsckReport, GcReport, RepoStats, RevisionDiff
from .repository import Repository

__all__ = ["FsckReport", "GcReport", "RepoStats", "Repository", "RevisionDiff"]
