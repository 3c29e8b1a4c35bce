"""Every error ctxstore raises, as one tree.

Each error also subclasses the built-in a caller would expect, so ``except KeyError`` still catches an
unknown ref and ``except ValueError`` still catches bad input::

    CtxStoreError
    ├── EncodingError (ValueError)          bytes that are not canonical CBOR, or a value that cannot be
    ├── InvalidObject (ValueError)          an object whose shape or fields are wrong
    ├── MissingObject (KeyError)            an object id the store does not hold
    ├── InvalidInput (ValueError)           a message, entry input or patch that is malformed
    │   └── DuplicateEntryId                one entry id, two different contents
    ├── UnknownRevision (KeyError)          a revision id the history or repository does not know
    ├── RefError
    │   ├── InvalidRefName (ValueError)     a ref name that breaks the naming rules
    │   ├── UnknownRef (KeyError)           a ref that does not exist
    │   └── NonFastForward                  a ref moved since the writer loaded it
    ├── RepositoryError
    │   ├── NotARepository (FileNotFoundError)
    │   ├── RepositoryExists (FileExistsError)
    │   └── StoreError (OSError)            the storage engine failed (disk full, corrupt file, ...)
    ├── BadPack (ValueError)                a pack that is malformed, corrupt or over its limits
    ├── SyncError                           fetch, pull, push or clone failed
    │   ├── RemoteError                     the other side answered with an error
    │   └── AuthError (PermissionError)     missing or insufficient credentials
    └── ModelError                          a model call failed (the cause is attached)
"""

from __future__ import annotations

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


class CtxStoreError(Exception):
    """Base class of every error ctxstore raises."""

    def __str__(self) -> str:
        # KeyError quotes its argument; our messages are sentences, so print them plainly.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class EncodingError(CtxStoreError, ValueError):
    """A value cannot be encoded canonically, or bytes are not canonical CBOR."""


class InvalidObject(CtxStoreError, ValueError):
    """An object decodes but its type or fields are wrong."""


class MissingObject(CtxStoreError, KeyError):
    """An object id that the store does not hold."""


class InvalidInput(CtxStoreError, ValueError):
    """A message, entry input, patch or argument that is malformed."""


class DuplicateEntryId(InvalidInput):
    """An explicit entry id already names an entry with different content."""


class UnknownRevision(CtxStoreError, KeyError):
    """A revision id that the history or repository does not know."""


class RefError(CtxStoreError):
    """Base class of errors about refs."""


class InvalidRefName(RefError, ValueError):
    """A ref name that breaks the naming rules (empty part, '..', control characters, ...)."""


class UnknownRef(RefError, KeyError):
    """A ref that does not exist."""


class NonFastForward(RefError):
    """A ref moved since the writer loaded it; rebase onto the new head or force the update."""

    def __init__(self, message: str, *, ref: str = "", current: str | None = None,
                 expected: str | None = None) -> None:
        super().__init__(message)
        self.ref = ref
        self.current = current
        self.expected = expected


class RepositoryError(CtxStoreError):
    """Base class of errors about a repository as a whole."""


class NotARepository(RepositoryError, FileNotFoundError):
    """No repository at (or above) the given path."""


class RepositoryExists(RepositoryError, FileExistsError):
    """A repository already exists where one was to be created."""


class StoreError(RepositoryError, OSError):
    """The storage engine failed."""


class BadPack(CtxStoreError, ValueError):
    """A pack that is malformed, corrupt, incomplete or over its limits."""


class SyncError(CtxStoreError):
    """Fetch, pull, push or clone failed."""


class RemoteError(SyncError):
    """The other side answered with an error."""


class AuthError(SyncError, PermissionError):
    """Missing or insufficient credentials."""


class ModelError(CtxStoreError):
    """A model call failed; the underlying error is the ``__cause__``."""
