"""What the operating system says about a store's files, as `StoreError`s: above all, a full disk.

The LMDB backend's files (LMDB's data and lock files, the commit log) fail the same few ways; a full disk
is named as one, whatever call found it, so the user knows to free space rather than suspect damage.
"""

from __future__ import annotations

import errno
import os

from ..errors import StoreError

__all__ = ["NO_SPACE", "disk_full", "disk_full_error", "file_error"]

_FULL_BELOW = 256 * 1024
"""Free bytes under which a failed write is put down to a full disk."""
NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
"""The errnos of a write that found no room."""


def disk_full(path: str) -> bool:
    """Whether the file system holding `path` (or its nearest existing parent) has next to no room left."""
    probe = path
    while probe and not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        st = os.statvfs(probe or ".")
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < _FULL_BELOW


def disk_full_error(path: str, doing: str) -> StoreError:
    """The `StoreError` for a write that found no space left on the disk holding `path`."""
    return StoreError(f"the disk is full (no space left on device) while {doing} in {path}; free some space "
                      "and retry: nothing stored was changed")


def file_error(path: str, doing: str, exc: OSError) -> StoreError:
    """The `StoreError` for an `OSError` while `doing` something to a file of the store at `path`."""
    if exc.errno in NO_SPACE:
        return disk_full_error(path, doing)
    return StoreError(f"{doing} in {path} failed: {exc.strerror or exc}; check disk space and permissions, "
                      "and run `ctxstore fsck` if it persists")
