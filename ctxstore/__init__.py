"""ctxstore: a git-style, content-addressed history store for AI-agent conversations."""

from .errors import (
    AuthError,
    BadPack,
    CtxStoreError,
    DuplicateEntryId,
    EncodingError,
    InvalidInput,
    InvalidObject,
    InvalidRefName,
    MissingObject,
    ModelError,
    NonFastForward,
    NotARepository,
    RefError,
    RemoteError,
    RepositoryError,
    RepositoryExists,
    StoreError,
    SyncError,
    UnknownRef,
    UnknownRevision,
)

__version__ = "0.1.0"

__all__ = [
    "AuthError",
    "BadPack",
    "CtxStoreError",
    "DuplicateEntryId",
    "EncodingError",
    "InvalidInput",
    "InvalidObject",
    "InvalidRefName",
    "MissingObject",
    "ModelError",
    "NonFastForward",
    "NotARepository",
    "RefError",
    "RemoteError",
    "RepositoryError",
    "RepositoryExists",
    "StoreError",
    "SyncError",
    "UnknownRef",
    "UnknownRevision",
]
