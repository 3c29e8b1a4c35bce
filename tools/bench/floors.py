"""The raw floors: what LMDB, canonical CBOR, blake3 and zstd cost with no object model on top.

ctxstore's own engine pieces measured bare, so a figure of ctxstore's can be read against the least that
its storage design could cost: a bulk import (encode, hash, compress, put in one transaction), a read of
the latest view (random-key gets plus decode under one read transaction) and a durable single put.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import blake3
import cbor2
import lmdb
import zstandard

MAP_SIZE = 1 << 34


def _entry(n: int, message: dict[str, Any]) -> bytes:
    return cbor2.dumps({"type": "entry", "id": f"{n:026d}", "kind": "turn", "message": message}, canonical=True)


def bulk(path: Path, messages: list[dict[str, Any]]) -> None:
    """Canonical CBOR + blake3 + zstd + put, every message in one durable LMDB write transaction."""
    path.mkdir(parents=True, exist_ok=True)
    env = lmdb.open(str(path), map_size=MAP_SIZE, sync=True, metasync=True)
    cctx = zstandard.ZstdCompressor(level=3)
    keys = []
    with env.begin(write=True) as txn:
        for n, m in enumerate(messages):
            data = _entry(n, m)
            key = blake3.blake3(data).digest()
            txn.put(key, b"\x01" + cctx.compress(data))
            keys.append(key)
    env.close()
    (path / "keys").write_bytes(b"".join(keys))


def render(path: Path) -> int:
    """The decode floor: every key of the view read in random order under one transaction, then decoded."""
    raw = (path / "keys").read_bytes()
    keys = [raw[i:i + 32] for i in range(0, len(raw), 32)]
    order = list(range(len(keys)))
    random.Random(5).shuffle(order)
    env = lmdb.open(str(path), map_size=MAP_SIZE, readonly=True, lock=False)
    dctx = zstandard.ZstdDecompressor()
    view: list[Any] = [None] * len(keys)
    with env.begin(buffers=True) as txn:
        for i in order:
            view[i] = cbor2.loads(dctx.decompress(bytes(txn.get(keys[i]))[1:]))["message"]
    env.close()
    return len(view)


class DurablePut:
    """One small put per durable LMDB transaction into an environment already holding a bulk import."""

    def __init__(self, path: Path) -> None:
        self.env = lmdb.open(str(path), map_size=MAP_SIZE, sync=True, metasync=True)
        self.cctx = zstandard.ZstdCompressor(level=3)
        self.n = 10_000_000

    def append(self, message: dict[str, Any]) -> None:
        data = _entry(self.n, message)
        self.n += 1
        with self.env.begin(write=True) as txn:
            txn.put(blake3.blake3(data).digest(), b"\x01" + self.cctx.compress(data))

    def close(self) -> None:
        self.env.close()
