"""Benchmark sync over loopback HTTP and write the figures into docs/benchmarks.md.

Run: ``python tools/bench_sync.py`` (about a minute). It builds a hub repository whose conversation has
N new messages beyond what a client holds, starts `ctxstore serve --http 127.0.0.1:0` in a subprocess,
and measures:

- wire bytes of pulling the N messages, against the zstd size (level 9, one frame) of the same
  messages' canonical CBOR: the goal is at most 1.2x;
- the time of that pull against a local `unpack` of the same pack into a copy of the client: goal <= 2x;
- HTTP round trips of a fetch with nothing new (goal: 1).

Two shapes are measured: N appends of one message each (N revisions, each rewriting the tree's right
spine), and one append of N messages (one revision).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import zstandard

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ctxstore import codec, sync  # noqa: E402
from ctxstore.codec import from_hex  # noqa: E402
from ctxstore.packwalk import pack, unpack  # noqa: E402
from ctxstore.repo import Repository  # noqa: E402
from ctxstore.sync.http import HttpTransport  # noqa: E402

TOKEN = "bench-token-" + "x" * 20
START, END = "<!-- bench_sync:start -->", "<!-- bench_sync:end -->"


def _message(i: int) -> dict[str, object]:
    role = "user" if i % 2 == 0 else "assistant"
    text = (f"Message {i}: please look at step {i % 97} of the plan and report "
            f"what changed in module_{i % 13}.py since revision {i * 7919 % 100000}.")
    return {"role": role, "content": text}


def _build(root: Path, n: int, one_revision: bool) -> tuple[Path, Path, list[Any], list[Any]]:
    hub_path, client_path = root / "hub", root / "client"
    hub = Repository.init(hub_path, durable=False)
    hub.append("main", [_message(-1)])
    client = sync.clone(str(hub_path), client_path)
    client.close()
    messages = [_message(i) for i in range(n)]
    history = hub.history("main")
    if one_revision:
        history = history.extend(messages)
    else:
        for m in messages:
            history = history.append(m)
    hub.commit("main", history)
    entries = [e.to_dict() for e in hub.history("main").refs()][1:]
    hub.close()
    return hub_path, client_path, messages, entries


def _serve(root: Path) -> tuple[subprocess.Popen[str], str]:
    tokens = root / "tokens"
    tokens.write_text(f"write {TOKEN}\n")
    proc = subprocess.Popen([sys.executable, "-m", "ctxstore.cli", "serve", "--http", "127.0.0.1:0",
                             str(root / "hub"), "--tokens", str(tokens)], stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    if "serving" not in line:
        proc.kill()
        raise SystemExit(f"hub did not start: {line}")
    return proc, line.rsplit(" on ", 1)[1].strip()


def measure(n: int, one_revision: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        hub_path, client_path, messages, entries = _build(root, n, one_revision)
        zstd = zstandard.ZstdCompressor(level=9)
        baseline = len(zstd.compress(codec.encode(messages)))
        with_ids = len(zstd.compress(codec.encode(entries)))
        spare = root / "spare"
        shutil.copytree(client_path, spare)
        proc, url = _serve(root)
        try:
            client = Repository.open(client_path)
            transport = HttpTransport(url, token=TOKEN)
            started = time.perf_counter()
            result = sync.pull(client, "origin", "main", transport=transport)
            pull_s = time.perf_counter() - started
            assert [m["content"] for m in client.history("main").render()][-1] == messages[-1]["content"]
            noop = HttpTransport(url, token=TOKEN)
            sync.fetch(client, "origin", transport=noop)
            noop_trips = noop.round_trips
            transport.close()
            noop.close()
            client.close()
        finally:
            proc.terminate()
            proc.wait()
        with Repository.open(hub_path) as hub, Repository.open(spare) as other:
            head = from_hex(hub.head("main"))
            base = from_hex(other.head("main"))
            data = b"".join(pack(hub.store, [head], [base]))
            started = time.perf_counter()
            unpack(other.store, data, {"refs/heads/main": (base, head)})
            unpack_s = time.perf_counter() - started
    wire = result.fetch.bytes
    return {"n": n, "objects": result.fetch.objects, "wire": wire, "baseline": baseline,
            "ratio": wire / baseline, "with_ids": with_ids, "ratio_ids": wire / with_ids,
            "pull_s": pull_s, "unpack_s": unpack_s, "time_ratio": pull_s / unpack_s,
            "noop_trips": noop_trips}


def _section(rows: list[tuple[str, dict[str, float]]]) -> str:
    lines = [START, "## Sync (tools/bench_sync.py)", "",
             "Pulling N new messages from a `ctxstore serve --http` hub on loopback into a clone that has "
             "the conversation's first message. *Wire* is the pack's bytes; *zstd CBOR* is the N messages' "
             "canonical CBOR as one zstd frame (level 9): the goal is wire <= 1.2x that. *Pull* is the "
             "whole pull (advertisement, fetch, verify, write, fast-forward); *unpack* is a local unpack of "
             "the same pack into a copy of the clone: the goal is pull <= 2x unpack.", "",
             "| shape | N | objects | wire bytes | zstd CBOR bytes | wire / zstd | pull s | unpack s "
             "| pull / unpack | no-op fetch round trips | entries zstd bytes | wire / entries |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for shape, r in rows:
        lines.append(f"| {shape} | {r['n']:,} | {r['objects']:,} | {r['wire']:,} | {r['baseline']:,} "
                     f"| {r['ratio']:.2f}x | {r['pull_s']:.2f} | {r['unpack_s']:.2f} "
                     f"| {r['time_ratio']:.2f}x "
                     f"| {r['noop_trips']} | {r['with_ids']:,} | {r['ratio_ids']:.2f}x |")
    lines += ["", "*Entries zstd* is the same N messages as stored entries (with their generated ids and "
              "kind) in one zstd frame: entry ids are random and so incompressible, which no pack can avoid.",
              "", f"Measured {time.strftime('%Y-%m-%d')} on {sys.platform}, Python "
              f"{sys.version.split()[0]}.", END]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10_000, help="new messages to pull (default 10000)")
    parser.add_argument("--no-write", action="store_true", help="print the section, leave the docs alone")
    args = parser.parse_args()
    rows = [("N appends (N revisions)", measure(args.n, False)),
            ("one append of N (1 revision)", measure(args.n, True))]
    section = _section(rows)
    print(section)
    if args.no_write:
        return
    doc = ROOT / "docs" / "benchmarks.md"
    text = doc.read_text() if doc.exists() else "# Benchmarks\n"
    if START in text and END in text:
        text = re.sub(re.escape(START) + ".*?" + re.escape(END), lambda _: section, text, flags=re.S)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    doc.write_text(text)


if __name__ == "__main__":
    main()
