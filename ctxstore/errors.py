"""Every error ctxstore raises, as one tree.

Each error also subclasses the built-in a caller would expect, so ``except KeyError`` still catches an
unknown ref and ``except ValueError`` still catches bad input. Which error means what:

- `NonFastForward` means "your update is not built on the ref's current head": rebase onto it (or
  ``commit(..., rebase=True)``) or force. Its subclass `RefMoved` means a compare-and-swap found the ref
  changed by another writer between the read and the write (``Refs.set_if_equals``, an ``unpack`` with
  ref updates, a commit or append that lost every retry): re-read and try again.
- `DamagedData` (an `InvalidObject`) means bytes in the store are readable but wrong; `StoreError` means
  the storage engine itself failed. Run ``ctxstore fsck`` for the first, check the disk for the second.

::

    CtxStoreError
    ├── EncodingError (ValueError)          bytes that are not canonical CBOR, or a value that cannot be
    ├── InvalidObject (ValueError)          an object whose shape or fields are wrong
    │   └── DamagedData                     stored data is damaged: a wrong kind of object where
    │                                       another belongs, a record that does not decode; run fsck
    ├── MissingObject (KeyError)            an object id the store does not hold
    ├── InvalidInput (ValueError)           a message, entry input or patch that is malformed
    │   └── DuplicateEntryId                one entry id, two different contents
    ├── UnknownRevision (KeyError)          a revision id the history or repository does not know
    ├── UnknownSetting (KeyError)           a config key that is not set
    ├── RefError
    │   ├── InvalidRefName (ValueError)     a ref name that breaks the naming rules
    │   ├── UnknownRef (KeyError)           a ref that does not exist
    │   └── NonFastForward                  the update does not descend from the ref's head: rebase
    │       └── RefMoved                    a compare-and-swap lost a race with another writer: the
    │                                       ref no longer holds what the update expected; retry
    ├── RepositoryError
    │   ├── NotARepository (FileNotFoundError)
    │   ├── RepositoryExists (FileExistsError)
    │   └── StoreError (OSError)            the storage engine failed (disk full, unreadable file,
    │                                       ...); never used for damaged data, see DamagedData
    ├── BadPack (ValueError)                a pack that is malformed, corrupt or over its limits
    ├── SyncError                           fetch, pull, push or clone failed
    │   ├── RemoteError                     the other side answered with an error
    │   └── AuthError (PermissionError)     missing or insufficient credentials
    └── ModelError                          a model call failed (the cause is attached)
"""

from __future__ import annotations

import reprlib
from typing import Any

__all__ = [
    "shown",
    "AuthError",
    "BadPack",
    "CtxStoreError",
    "DamagedData",
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
    "RefMoved",
    "RemoteError",
    "RepositoryError",
    "RepositoryExists",
    "StoreError",
    "SyncError",
    "UnknownRef",
    "UnknownRevision",
    "UnknownSetting",
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


class DamagedData(InvalidObject):
    """Stored data is damaged: an object of the wrong kind where another belongs, or an undecodable record.

    The storage engine read it fine (that would be a `StoreError`); what it holds is wrong. Run
    ``ctxstore fsck`` to list the damage.
    """


class MissingObject(CtxStoreError, KeyError):
    """An object id that the store does not hold."""


class InvalidInput(CtxStoreError, ValueError):
    """A message, entry input, patch or argument that is malformed."""


class DuplicateEntryId(InvalidInput):
    """An explicit entry id already names an entry with different content."""


class UnknownRevision(CtxStoreError, KeyError):
    """A revision id that the history or repository does not know."""


class UnknownSetting(CtxStoreError, KeyError):
    """A config key that is not set."""


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


class RefMoved(NonFastForward):
    """A compare-and-swap lost a race: another writer moved the ref after it was read; re-read and retry.

    Raised by ``Refs.set_if_equals`` and its kin, by ``Repository.unpack`` with ref updates, and by
    ``Repository.commit``/``append`` when the ref kept moving through every retry. A `NonFastForward`, so
    handlers that rebase on one also handle this.
    """


class RepositoryError(CtxStoreError):
    """Base class of errors about a repository as a whole."""


class NotARepository(RepositoryError, FileNotFoundError):
    """No repository at (or above) the given path."""


class RepositoryExists(RepositoryError, FileExistsError):
    """A repository already exists where one was to be created."""


class StoreError(RepositoryError, OSError):
    """The storage engine failed (a damaged value it read back is a `DamagedData`, not this)."""


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


_SHOWN = reprlib.Repr()
_SHOWN.maxlevel = 4
_SHOWN.maxtuple = _SHOWN.maxlist = _SHOWN.maxdict = _SHOWN.maxset = _SHOWN.maxfrozenset = _SHOWN.maxdeque = 8
_SHOWN.maxstring = _SHOWN.maxother = 120
_SHOWN.maxlong = 40


def shown(value: Any) -> str:
    """A value as an error message shows it: its repr, cut at a few levels of nesting and a few items,
    strings at 120 characters. Input quoted back in an error is input a caller may not trust: a value
    nested thousands deep must not make the message itself fail, nor a long one make it costly."""
    return _SHOWN.repr(value)
