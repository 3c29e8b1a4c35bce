"""Sync: fetch, pull, push and clone between repositories, over a path, stdio/ssh or HTTP.

The negotiation (`protocol`) is the same on every transport: the server advertises its refs, the
client states wants and haves, and only what the other side lacks moves, as a pack. `server` is the
HTTP hub (Starlette on uvicorn); `transport` and `http` are the client sides.
"""

from .client import FetchResult, Progress, PullResult, PushResult, clone, fetch, pull, push
from .protocol import PROTOCOL_VERSION, Advertisement, RefUpdate, Service
from .transport import LocalTransport, StdioTransport, Transport, open_transport

__all__ = [
    "PROTOCOL_VERSION",
    "Advertisement",
    "FetchResult",
    "LocalTransport",
    "Progress",
    "PullResult",
    "PushResult",
    "RefUpdate",
    "Service",
    "StdioTransport",
    "Transport",
    "clone",
    "fetch",
    "open_transport",
    "pull",
    "push",
]
