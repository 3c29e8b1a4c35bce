"""`MessageHistory`, the seed's immutable conversation graph, and what it is built from: entry intake
(`intake`), the object workspace behind a family of histories (`workspace`), snapshots and deltas
(`snapshot`), and the token estimate, pricing and stop predicates (`budget`).
"""

from .message_history import MessageHistory, MessageHistoryEntry

__all__ = ["MessageHistory", "MessageHistoryEntry"]
