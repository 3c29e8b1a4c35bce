"""Object stores: the protocols, the in-memory store and (imported on demand) the LMDB store.

`LmdbStore` is reached through a lazy attribute so that importing ctxstore does not load LMDB.
"""

from typing import Any

from .base import ObjectSource, ObjectStore, StoreStats, Transaction, TransactionalStore
from .memory import MemoryStore

__all__ = [
    "LmdbStore",
    "MemoryStore",
    "ObjectSource",
    "ObjectStore",
    "StoreStats",
    "Transaction",
    "TransactionalStore",
]


def __getattr__(name: str) -> Any:
    if name == "LmdbStore":
        from .lmdb import LmdbStore

        return LmdbStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
