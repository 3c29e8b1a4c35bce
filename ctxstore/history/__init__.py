"""`MessageHistory`, the seed's immutable conversation graph, and what it is built from.

Modules, lowest first: `budget` (token estimate, pricing, stop predicates), `entry_ids` (generated
entry ids), `workspace` (the objects a family of histories shares; its documented members are the
contract with the repository that commits a history), `intake` (user input to stored form and back),
`entry` (`MessageHistoryEntry`), `graph` (the revisions a history knows and entry-id lookup over them:
the package-internal interface its other modules work through), `patches` (edits applied to a view),
`snapshot` (snapshots and deltas, working on a `Graph`), and `message_history` (`MessageHistory`, a
`Graph` and a head revision).
"""

from .message_history import MessageHistory, MessageHistoryEntry

__all__ = ["MessageHistory", "MessageHistoryEntry"]
