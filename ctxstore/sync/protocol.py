"""The sync protocol: frames, the messages they carry, and the serving side that answers them.

Every transport carries the same messages (specified in ``docs/protocol.md``, section Negotiation): a
*frame* is a 4-byte big-endian length and one canonical CBOR map. The server speaks first with an
advertisement of its refs; a fetch request names wants and haves and is answered by a frame and, when
anything is to be sent, a pack; a push request names ref updates and is followed by a pack, and answered
by a result frame. Errors travel as ``{"error": {"type", "message", ...}}`` frames and become the same
`CtxStoreError` subclass on the client where that makes sense (`NonFastForward` above all).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Protocol, TypeVar, runtime_checkable

from ..errors import (
    AuthError,
    BadPack,
    CtxStoreError,
    DamagedData,
    EncodingError,
    InvalidInput,
    InvalidObject,
    InvalidRefName,
    MissingObject,
    NonFastForward,
    NotARepository,
    RemoteError,
    UnknownRef,
    shown,
)
from ..format import codec
from ..ids import OID_SIZE, HexId, ObjectId, from_hex, to_hex
from ..pack.stream import DEFAULT_MAX_OBJECTS, DEFAULT_MAX_TOTAL_SIZE, PackSource
from ..pack.stream import VERSION as PACK_VERSION
from ..refs import ANY, HEADS, TAGS, check_ref_name
from ..repo.reports import UnpackResult
from ..store.base import Transaction, TransactionalStore

if TYPE_CHECKING:  # planning and receiving packs load when one moves, not for an advertisement
    from ..pack.plan import PackPlan

__all__ = [
    "MAX_FRAME",
    "PROTOCOL_VERSION",
    "Advertisement",
    "BandReader",
    "ByteReader",
    "Mode",
    "Receive",
    "RefUpdate",
    "Service",
    "decode_error",
    "encode_error",
    "encode_frame",
    "fetch_request",
    "pack_bands",
    "push_request",
    "read_frame",
    "read_frame_or_eof",
    "read_request",
    "serve_stream",
]

PROTOCOL_VERSION = 2
MAX_FRAME = 16 << 20
"""Largest frame either side accepts: an advertisement of about 200,000 refs."""
MAX_BAND = 1 << 20
"""Largest band of a fetch answer's pack (see `pack_bands`)."""
_BAND_DATA = 0x01
_BAND_ERROR = 0x02
Mode = Literal["ff", "lease", "force"]
_MODES = ("ff", "lease", "force")

T = TypeVar("T")
Receive = Callable[[PackSource], T]
"""What a client hands a transport's fetch: it reads the pack the remote sends and returns the outcome."""


@runtime_checkable
class ByteReader(Protocol):
    """A binary stream frames are read from (a pipe, a socket's buffered body, a spooled file)."""

    def read(self, size: int = -1, /) -> bytes: ...


def encode_frame(message: Mapping[str, Any]) -> bytes:
    """A message as a frame: 4-byte big-endian length, then canonical CBOR."""
    body = codec.encode(dict(message))
    if len(body) > MAX_FRAME:
        raise InvalidInput(f"a protocol message of {len(body)} bytes is over the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(4, "big") + body


def _read_exactly(stream: ByteReader, n: int, what: str) -> bytes:
    parts = []
    have = 0
    while have < n:
        got = stream.read(n - have)
        if not got:
            break
        parts.append(got)
        have += len(got)
    data = b"".join(parts)
    if len(data) != n:
        raise RemoteError(f"the connection closed in the middle of {what} ({len(data)} of {n} bytes); "
                          "the other side stopped or crashed, see its log")
    return data


def read_frame(stream: ByteReader) -> dict[str, Any]:
    """The next frame's message from a binary stream (the stream ending first is a `RemoteError`)."""
    return _read_frame(stream, stream.read(4))


def read_frame_or_eof(stream: ByteReader) -> dict[str, Any] | None:
    """The next frame's message, or None at a clean end of stream (the client hung up between requests)."""
    head = stream.read(4)
    return _read_frame(stream, head) if head else None


def _read_frame(stream: ByteReader, head: bytes) -> dict[str, Any]:
    if len(head) < 4:
        head += _read_exactly(stream, 4 - len(head), "a frame header")
    size = int.from_bytes(head, "big")
    if size > MAX_FRAME:
        raise RemoteError(f"the other side sent a {size}-byte frame, over the {MAX_FRAME}-byte limit; "
                          "it is not speaking the ctxstore protocol")
    body = _read_exactly(stream, size, "a frame")
    try:
        message = codec.decode(body)
    except EncodingError as exc:
        raise RemoteError(f"the other side sent a malformed frame: {exc}") from None
    if type(message) is not dict:
        raise RemoteError("the other side sent a frame that is not a map; "
                          "it is not speaking ctxstore's protocol")
    return message


def read_request(stream: ByteReader, limit: int = MAX_FRAME) -> dict[str, Any]:
    """A request frame as a server reads it: anything wrong with it is the client's `InvalidInput`.

    The length is checked against `limit` before the body is read, and the body goes only through the
    canonical decoder (`codec.decode`, linear in its size).
    """
    head = stream.read(4)
    if len(head) < 4:
        raise InvalidInput(f"malformed request: it ends after {len(head)} bytes, inside the 4-byte frame length")
    size = int.from_bytes(head, "big")
    if size > limit:
        raise InvalidInput(f"malformed request: its frame declares {size} bytes, over the {limit}-byte limit")
    body = stream.read(size) if size else b""
    if len(body) != size:
        raise InvalidInput(f"malformed request: its frame declares {size} bytes but the body holds "
                           f"{len(body)}")
    try:
        message = codec.decode(body)
    except EncodingError as exc:
        raise InvalidInput(f"malformed request: the frame is not canonical CBOR: {exc}") from None
    if type(message) is not dict:
        raise InvalidInput(f"malformed request: the frame holds a {type(message).__name__}, not a map")
    return message


# -- bands: a fetch answer's pack, with room for an error after it started ------------------------------
# A server finds a damaged object only when it reaches it, after the answer's head is sent; the pack
# therefore travels in bands (`docs/protocol.md`, Bands), so the client learns why a pack stops.

def pack_bands(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """A pack's chunks as data bands; an error raised while making them becomes a final error band."""
    try:
        for chunk in chunks:
            for at in range(0, len(chunk), MAX_BAND):
                piece = chunk[at:at + MAX_BAND]
                yield bytes([_BAND_DATA]) + len(piece).to_bytes(4, "big") + piece
    except CtxStoreError as exc:
        # Whatever stops a pack half-sent is this side's store failing, never the request.
        damage = exc if isinstance(exc, DamagedData | MissingObject) else DamagedData(
            f"the serving repository failed while sending the pack: {exc}; its operator should run "
            "`ctxstore fsck` there")
        body = codec.encode(encode_error(damage))
        yield bytes([_BAND_ERROR]) + len(body).to_bytes(4, "big") + body


class BandReader:
    """The pack inside a fetch answer's bands, as a binary file; an error band raises the error it carries."""

    def __init__(self, stream: ByteReader, where: str) -> None:
        self._stream = stream
        self._where = where
        self._left = 0

    def read(self, size: int = -1, /) -> bytes:
        if self._left == 0 and not self._next_band():
            return b""
        want = self._left if size < 0 else min(size, self._left)
        data = self._stream.read(want)
        self._left -= len(data)
        return data

    def _next_band(self) -> bool:
        head = self._stream.read(5)
        if not head:
            return False
        if len(head) < 5:
            head += _read_exactly(self._stream, 5 - len(head), "a band header")
        kind, size = head[0], int.from_bytes(head[1:], "big")
        if kind == _BAND_DATA and 0 < size <= MAX_BAND:
            self._left = size
            return True
        if kind == _BAND_ERROR and size <= MAX_FRAME:
            body = _read_exactly(self._stream, size, "an error band")
            try:
                message = codec.decode(body)
            except EncodingError:
                message = None
            if type(message) is dict:
                raise decode_error(message, self._where)
        raise RemoteError(f"{self._where} sent a malformed band (kind {kind}, {size} bytes) inside its pack; "
                          "it is not speaking this version of the ctxstore protocol")


# -- errors ------------------------------------------------------------------------------------------------

def _error_types() -> dict[str, type[CtxStoreError]]:
    # The errors a client re-raises as themselves; every NonFastForward kind keeps its class (a lost race
    # that is worth retrying stays distinct from a refusal that needs a pull first).
    kinds: list[type[CtxStoreError]] = [AuthError, InvalidRefName, UnknownRef, MissingObject, DamagedData,
                                        NotARepository]
    family: list[type[NonFastForward]] = [NonFastForward]
    while family:
        cls = family.pop()
        kinds.append(cls)
        family.extend(cls.__subclasses__())
    return {cls.__name__: cls for cls in kinds}


_ERROR_TYPES = _error_types()


def encode_error(exc: CtxStoreError) -> dict[str, Any]:
    """The error message for an exception raised while serving a request."""
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, NonFastForward):
        body.update({"ref": exc.ref, "current": exc.current, "expected": exc.expected})
    return {"error": body}


def _text_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def decode_error(message: Mapping[str, Any], where: str) -> CtxStoreError:
    """The exception a client raises for an error message from the server at `where`."""
    body = message.get("error")
    if not isinstance(body, dict):
        return RemoteError(f"{where} answered with a malformed error")
    kind = str(body.get("type", ""))
    text = f"{where}: {body.get('message', 'unknown error')}"
    if kind == "BadPack":
        return RemoteError(f"{text} (the pack we sent was refused; nothing changed there)")
    cls = _ERROR_TYPES.get(kind)
    if cls is not None and issubclass(cls, NonFastForward):
        return cls(text, ref=str(body.get("ref") or ""), current=_text_or_none(body.get("current")),
                   expected=_text_or_none(body.get("expected")))
    if cls is not None:
        return cls(text)
    return RemoteError(text)


# -- messages ----------------------------------------------------------------------------------------------
# Ids travel raw (32 bytes) in frames and as hex everywhere else: the conversion is in this section.

def _oid(value: Any, what: str) -> ObjectId:
    if type(value) is not bytes or len(value) != OID_SIZE:
        raise InvalidInput(f"{what} must be a {OID_SIZE}-byte object id")
    return ObjectId(value)


def _oid_list(value: Any, what: str) -> list[ObjectId]:
    if type(value) is not list:
        raise InvalidInput(f"{what} must be a list of object ids")
    return [_oid(v, what) for v in value]


def _raw_or_none(oid: HexId | None) -> ObjectId | None:
    return None if oid is None else from_hex(oid)


def fetch_request(wants: Sequence[HexId], haves: Sequence[HexId]) -> dict[str, Any]:
    """The message of a fetch request: the revisions wanted and those the client already has."""
    return {"wants": [from_hex(w) for w in wants], "haves": [from_hex(h) for h in haves]}


@dataclass(frozen=True)
class Advertisement:
    """What a server says first: its protocol and pack versions and the refs it has (full name: hex id)."""

    refs: dict[str, HexId]
    protocol: int = PROTOCOL_VERSION
    pack_versions: tuple[int, ...] = (PACK_VERSION,)

    def to_message(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "packVersions": list(self.pack_versions),
                "refs": {name: from_hex(oid) for name, oid in self.refs.items()}}

    @classmethod
    def from_message(cls, message: Mapping[str, Any], where: str) -> Advertisement:
        if "error" in message:
            raise decode_error(message, where)
        try:
            refs = message["refs"]
            if type(refs) is not dict:
                raise InvalidInput("refs must be a map")
            out = {str(k): to_hex(_oid(v, f"ref {k}")) for k, v in refs.items()}
            versions = tuple(int(v) for v in message.get("packVersions", [PACK_VERSION]))
            protocol = int(message.get("protocol", 0))
        except (KeyError, TypeError, ValueError, InvalidInput) as exc:
            raise RemoteError(f"{where} sent a malformed advertisement: {exc}") from None
        if protocol != PROTOCOL_VERSION or PACK_VERSION not in versions:
            raise RemoteError(f"{where} speaks protocol {protocol} with pack versions {list(versions)}; "
                              f"this ctxstore speaks protocol {PROTOCOL_VERSION}, "
                              f"pack version {PACK_VERSION}: "
                              "upgrade the older side")
        return cls(out, protocol, versions)


@dataclass(frozen=True)
class RefUpdate:
    """One ref a push moves: from `old` (what the pusher saw or expects) to `new` (None: delete), hex ids.

    `mode` says what the server checks: ``ff`` the ref still holds `old` and `new` descends from it;
    ``lease`` the ref holds `old` (a --force-with-lease); ``force`` nothing.
    """

    ref: str
    old: HexId | None
    new: HexId | None
    mode: Mode = "ff"

    def to_message(self) -> dict[str, Any]:
        return {"ref": self.ref, "old": _raw_or_none(self.old), "new": _raw_or_none(self.new),
                "mode": self.mode}

    @classmethod
    def from_message(cls, value: Any) -> RefUpdate:
        if type(value) is not dict:
            raise InvalidInput("a ref update must be a map")
        name = value.get("ref")
        if not isinstance(name, str):
            raise InvalidInput(f"a ref update names its ref as text, not {shown(name)}")
        ref = check_ref_name(name)
        mode = value.get("mode")
        if mode not in _MODES:
            raise InvalidInput(f"ref update mode must be one of {_MODES}, not {shown(mode)}")
        old = None if value.get("old") is None else to_hex(_oid(value["old"], "old"))
        new = None if value.get("new") is None else to_hex(_oid(value["new"], "new"))
        return cls(ref, old, new, mode)


def push_request(updates: Sequence[RefUpdate]) -> dict[str, Any]:
    """The message of a push request (the pack follows it)."""
    return {"updates": [u.to_message() for u in updates]}


# -- the serving side --------------------------------------------------------------------------------------

class Service:
    """Answers the protocol's requests for one repository's store (every transport's server side)."""

    def __init__(self, store: TransactionalStore, *, writable: bool = True,
                 max_push_size: int = DEFAULT_MAX_TOTAL_SIZE, max_push_objects: int = DEFAULT_MAX_OBJECTS) -> None:
        self.store = store
        self.writable = writable
        self.max_push_size = max_push_size
        """Largest inflated size of a pushed pack (its objects, decompressed), refused past it."""
        self.max_push_objects = max_push_objects
        """Most objects a pushed pack may carry (each costs the staging index some memory)."""

    def advertise(self) -> Advertisement:
        """The refs a client may fetch: heads and tags (remote-tracking refs are this side's business)."""
        with self.store.transaction() as txn:
            refs = {n: to_hex(o) for n, o in txn.refs("refs/").items() if n.startswith((HEADS, TAGS))}
        return Advertisement(refs)

    def plan_fetch(self, request: Mapping[str, Any]) -> PackPlan:
        """The pack a fetch request asks for (empty: nothing to send), checked before any is sent."""
        from ..pack.plan import PackPlan, plan_pack

        wants = _oid_list(request.get("wants", []), "wants")
        haves = _oid_list(request.get("haves", []), "haves")
        for want in wants:
            if not self.store.has(want):
                raise MissingObject(f"the server has no revision {to_hex(want)}; fetch the refs again")
        if not wants:
            return PackPlan([])
        try:
            return plan_pack(self.store, wants, haves)
        except DamagedData:
            raise
        except InvalidObject as exc:
            # The wants are revisions this side holds: a wrong object under them is this side's damage.
            raise DamagedData(f"the serving repository is damaged: {exc}") from None

    def send(self, plan: PackPlan) -> Iterator[bytes]:
        """The pack of a plan, as bytes chunks."""
        from ..pack.plan import pack_objects

        return pack_objects(self.store, plan)

    def send_bands(self, plan: PackPlan) -> Iterator[bytes]:
        """The pack of a plan in bands, as a fetch answer carries it over a stream (`pack_bands`)."""
        return pack_bands(self.send(plan))

    def receive_push(self, request: Mapping[str, Any], stream: PackSource) -> dict[str, Any]:
        """Verify and apply a push: its pack and ref updates land together or not at all."""
        from ..pack.plan import is_ancestor
        from ..repo.receive import unpack

        if not self.writable:
            raise AuthError("this server is read-only for you; push needs a token with write scope")
        raw = request.get("updates")
        if type(raw) is not list or not raw:
            raise InvalidInput("a push must name at least one ref update")
        updates = [RefUpdate.from_message(u) for u in raw]
        cas: dict[str, tuple[ObjectId | Any | None, ObjectId | None]] = {}
        for u in updates:
            if not u.ref.startswith((HEADS, TAGS)):
                raise InvalidRefName(f"a push may move refs/heads/* and refs/tags/*, not {u.ref}")
            if u.ref in cas:
                raise InvalidInput(f"ref {u.ref} is updated twice in one push")
            if u.mode == "ff" and u.new is None:
                raise NonFastForward(f"deleting {u.ref} is not a fast-forward; push the deletion with force",
                                     ref=u.ref)
            cas[u.ref] = (ANY if u.mode == "force" else _raw_or_none(u.old), _raw_or_none(u.new))

        def fast_forward(txn: Transaction) -> None:
            for u in updates:
                if u.mode == "ff" and u.old is not None and u.new is not None and \
                        not is_ancestor(txn, from_hex(u.old), from_hex(u.new)):
                    raise NonFastForward(
                        f"push to {u.ref} is not a fast-forward: {u.new[:12]} does not descend from "
                        f"{u.old[:12]}; pull (with rebase) first, or push with force",
                        ref=u.ref, current=u.old, expected=u.old)

        result: UnpackResult = unpack(self.store, stream, cas, message="push", check=fast_forward,
                                      max_total_size=self.max_push_size, max_objects=self.max_push_objects)
        return {"ok": True, "objects": result.objects, "newObjects": result.new_objects,
                "refs": {name: new for name, (_, new) in cas.items()}}  # raw ids on the wire


def serve_stream(service: Service, rfile: ByteReader, wfile: BinaryIO) -> None:
    """Serve one connection on a pair of binary streams (stdin/stdout of `ctxstore serve --stdio`)."""

    def send(message: Mapping[str, Any]) -> None:
        wfile.write(encode_frame(message))
        wfile.flush()

    send(service.advertise().to_message())
    while True:
        try:
            request = read_frame_or_eof(rfile)
        except RemoteError as exc:
            # A malformed request leaves the stream out of step: say why, then hang up.
            send(encode_error(InvalidInput(f"malformed request: {exc}")))
            return
        if request is None:
            return
        op = request.get("op")
        try:
            if op == "refs":
                send(service.advertise().to_message())
            elif op == "fetch":
                oids = service.plan_fetch(request)
                send({"ok": True, "objects": len(oids), "pack": bool(oids)})
                if oids:
                    for chunk in service.send_bands(oids):
                        wfile.write(chunk)
                    wfile.flush()
            elif op == "push":
                try:
                    send(service.receive_push(request, rfile))
                except BadPack as exc:
                    # The pack's end cannot be found in a broken stream: answer, then hang up.
                    send(encode_error(exc))
                    return
            else:
                raise InvalidInput(f"unknown request {shown(op)}; this server knows refs, fetch and push")
        except CtxStoreError as exc:
            send(encode_error(exc))
            if op == "push":
                return  # the pack may be unread: the stream is out of step
