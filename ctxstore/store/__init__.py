"""Object stores: the protocol, the in-memory store and (imported on demand) the LMDB store."""

from .base import ObjectSource, ObjectStore
from .memory import MemoryStore

__all__ = ["MemoryStore", "ObjectSource", "ObjectStore"]
