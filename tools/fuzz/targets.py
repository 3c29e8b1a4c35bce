"""Fuzz targets: every place input enters ctxstore, as a function of one byte string.

Each target feeds the bytes to one reader and returns normally or raises a `CtxStoreError` (a refusal);
any other exception is a bug. `seeds()` gives valid inputs of each kind for a fuzzer to start from.
Used by the atheris entry point (`fuzz_one.py`) and by the built-in mutation fuzzer of
`tools/attacks/fuzz.py`.
"""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ctxstore import MessageHistory, Repository  # noqa: E402
from ctxstore.format import codec  # noqa: E402
from ctxstore.interop import import_claude_code, import_file  # noqa: E402
from ctxstore.pack.staging import verify_pack  # noqa: E402
from ctxstore.sync import protocol  # noqa: E402

LIMIT = 1 << 20  # the most any target lets one input inflate to: each example stays small and fast


def codec_decode(data: bytes) -> None:
    """The canonical CBOR decoder, and the stored-value decompressor."""
    codec.decode(data)
    codec.decompress(data, max_size=LIMIT)


def pack_reader(data: bytes) -> None:
    """A received pack, verified whole (stream format, records, back-references, rebuilds, trailer)."""
    staged = verify_pack(io.BytesIO(data), max_object_size=LIMIT, max_total_size=LIMIT, max_objects=10_000)
    staged.close()


def snapshot_loader(data: bytes) -> None:
    """`MessageHistory.from_snapshot` of a JSON document (bytes that are not JSON are no snapshot)."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError):
        return
    MessageHistory.from_snapshot(value)


def importers(data: bytes) -> None:
    """`import_file` (format detection, JSON, JSONL, snapshots, transcripts) and Claude Code records."""
    repo = Repository.memory()
    import_file(repo, io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"), ref="fuzz")
    try:
        records = [json.loads(line) for line in data.splitlines() if line.strip()]
    except (ValueError, RecursionError):
        return
    import_claude_code(repo, records, ref="fuzz-cc", force=True)


def http_frames(data: bytes) -> None:
    """Protocol frames as a server reads them: one frame, then a whole request stream on a repository."""
    try:
        protocol.read_frame(io.BytesIO(data))
    finally:
        repo = Repository.memory()
        repo.append("main", [{"role": "user", "content": "hello"}])
        protocol.serve_stream(protocol.Service(repo.store), io.BytesIO(data), io.BytesIO())


TARGETS: dict[str, Callable[[bytes], None]] = {
    "codec_decode": codec_decode, "pack_reader": pack_reader, "snapshot_loader": snapshot_loader,
    "importers": importers, "http_frames": http_frames,
}


def seeds(name: str) -> list[bytes]:
    """Valid inputs for a target, to mutate."""
    repo = Repository.memory()
    history = MessageHistory().extend([{"role": "user", "content": f"message {i}"} for i in range(40)])
    repo.commit("main", history)
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}]
    if name == "codec_decode":
        return [codec.encode({"a": [1, -2, 3.5, None, True, b"\0" * 32], "text": "é"}), codec.compress(b"x" * 400)]
    if name == "pack_reader":
        return [b"".join(repo.changes_since("main"))]
    if name == "snapshot_loader":
        return [json.dumps(history.to_snapshot()).encode()]
    if name == "importers":
        transcript = [{"type": "user", "uuid": "u1", "parentUuid": None, "sessionId": "s",
                       "message": {"role": "user", "content": "hi"}},
                      {"type": "assistant", "uuid": "u2", "parentUuid": "u1", "sessionId": "s",
                       "message": {"role": "assistant", "content": [{"type": "text", "text": "ok"}]}}]
        return [json.dumps(messages).encode(), "".join(json.dumps(m) + "\n" for m in messages).encode(),
                "".join(json.dumps(r) + "\n" for r in transcript).encode()]
    if name == "http_frames":
        head = repo.refs("refs/")["refs/heads/main"]
        return [protocol.encode_frame({"op": "refs"}),
                protocol.encode_frame({"op": "fetch", **protocol.fetch_request([head], [])})]
    raise KeyError(name)
