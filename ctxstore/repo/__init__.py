"""`Repository`: a store, its refs and config; commit and rebase, receiving packs, fsck, gc and stats.

`repository` is the facade (hex ids only); `commit` holds the commit transaction and the one
rebase-and-retry loop, `lineage` reads revisions, `maintenance` runs fsck, gc and stats over one
reachability walk, `diff` compares revisions, `config` holds settings and remotes, `receive` unpacks packs,
and `reports` the result types.
"""

from .config import Config
from .reports import (
    CommitResult,
    FsckReport,
    GcReport,
    ReflogEntry,
    RepoStats,
    RevisionDiff,
    RevisionInfo,
    UnpackResult,
)
from .repository import Repository

__all__ = [
    "CommitResult",
    "Config",
    "FsckReport",
    "GcReport",
    "ReflogEntry",
    "RepoStats",
    "Repository",
    "RevisionDiff",
    "RevisionInfo",
    "UnpackResult",
]
