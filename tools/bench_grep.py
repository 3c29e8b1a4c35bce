"""Benchmark: `ctxstore grep` over a repository of 1,000 conversations, against `grep -r` over the same
conversations exported as JSONL files, measured in the same run.

    .venv/bin/python tools/bench_grep.py [--conversations 1000] [--messages 20] [--runs 3]
    .venv/bin/python tools/bench_grep.py --quick     # 200 conversations, one run; docs left alone

Writes the section "grep across conversations" of docs/benchmarks.md. Beside the searches it measures
what bounds them: reading every entry object of every view from the store as bytes (what any search
must look at) and the start-up of a `ctxstore` process that does nothing.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchdoc import byte_compile, message, write_section

from ctxstore import Repository
from ctxstore.format import seq
from ctxstore.format.objects import Revision, SeqNode, parse_object
from ctxstore.ids import ObjectId, from_hex
from ctxstore.interop.browse import grep
from ctxstore.interop.formats import export_ref

PATTERNS = ("rollback plan", "needle-[0-9]+", "Bash", "[0-9]{3}x")
"""A common phrase, a rare regular expression (one conversation in 50), a tool name, and a regular
expression with no literal part (no entry can be skipped unread) that matches nothing."""


def build(path: Path, conversations: int, messages: int) -> None:
    rng = random.Random(7)
    with Repository.init(path) as repo:
        for c in range(conversations):
            batch = []
            for n in range(messages):
                m = message(c * messages + n, rng)
                if n == messages // 2 and c % 50 == 0:
                    m = {**m, "content": f"{m['content']} needle-{c}"}
                if n == 3:
                    m = {"role": "assistant", "content": [
                        {"type": "text", "text": "Running it."},
                        {"type": "tool_use", "id": f"toolu_{c}", "name": "Bash", "input": {"command": "ls"}}]}
                if n == 4:
                    m = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{c}",
                                                      "content": "a.py b.py"}]}
                batch.append(m)
            repo.commit(f"conv/{c:04d}", repo.history(f"conv/{c:04d}").extend(batch))


def entry_oids(repo: Repository) -> list[ObjectId]:
    """The entry objects of every view."""
    def nodes(oids: list[ObjectId]) -> list[SeqNode]:
        return [node for node in map(lambda d: parse_object(d, trusted=True), repo.store.get_many(oids))
                if isinstance(node, SeqNode)]

    out: list[ObjectId] = []
    for revision in repo.refs().values():
        rev = parse_object(repo.store.get(from_hex(revision)), trusted=True)
        assert isinstance(rev, Revision)
        out += [oid for _, oid in seq.items_batched(rev.seq, nodes) if oid is not None]
    return out


def read_all(repo: Repository, oids: list[ObjectId]) -> int:
    """Read every entry object as bytes, in batches of 1,024: the floor under any search."""
    for start in range(0, len(oids), 1024):
        repo.store.get_many(oids[start:start + 1024])
    return len(oids)


def best_of(runs: int, work: Callable[[], int]) -> tuple[float, int]:
    times, found = [], 0
    for _ in range(runs):
        start = time.perf_counter()
        found = work()
        times.append(time.perf_counter() - start)
    return min(times), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="200 conversations, one run, and docs/benchmarks.md left as it is")
    args = parser.parse_args()
    if args.quick:
        args.conversations, args.runs = 200, 1
    # Byte-compiled first, as tools/bench.py does: under PYTHONDONTWRITEBYTECODE every timed `ctxstore`
    # process would otherwise compile each changed module again.
    byte_compile()
    root = Path(tempfile.mkdtemp(prefix="bench-grep-"))
    try:
        repo_path, files = root / "repo", root / "jsonl"
        started = time.perf_counter()
        build(repo_path, args.conversations, args.messages)
        built = time.perf_counter() - started
        files.mkdir()
        with Repository.open(repo_path) as repo:
            for name in repo.refs():
                short = name.removeprefix("refs/heads/").replace("/", "_")
                (files / f"{short}.jsonl").write_text(export_ref(repo, name, format="jsonl"))
        script = shutil.which("ctxstore") or str(Path(sys.executable).with_name("ctxstore"))
        with Repository.open(repo_path, readonly=True) as repo:
            oids = entry_oids(repo)
            floor, _ = best_of(args.runs, lambda: read_all(repo, oids))
        startup, _ = best_of(args.runs, lambda: subprocess.run([script, "--version"], capture_output=True,
                                                               check=True).returncode)
        rows = []
        for pattern in PATTERNS:
            with Repository.open(repo_path, readonly=True) as repo:
                library, hits = best_of(args.runs, lambda p=pattern: sum(1 for _ in grep(repo, p)))  # type: ignore[misc]
            cli, _ = best_of(args.runs, lambda p=pattern: subprocess.run(  # type: ignore[misc]
                [script, "--repo", str(repo_path), "grep", "--json", "--", p],
                capture_output=True, check=False).returncode)
            plain, _ = best_of(args.runs, lambda p=pattern: subprocess.run(  # type: ignore[misc]
                ["grep", "-r", "-E", "-c", p, str(files)], capture_output=True, check=False).returncode)
            rows.append((pattern, hits, library, cli, plain))
        total = args.conversations * args.messages
        lines = [
            f"{args.conversations:,} conversations of {args.messages} messages ({total:,} entries; built in "
            f"{built:.1f} s). `ctxstore grep` reads each view's entry objects in batches and decodes only "
            "those whose stored bytes hold the pattern's literal part (all of them for a pattern without "
            "one), then searches text, tool names and metadata; `grep -r -E -c` reads the same conversations "
            f"exported as JSONL files (one per conversation) from the page cache. Best of {args.runs} runs.",
            "",
            "| pattern | matches | library `grep()` | `ctxstore grep` (process) | `grep -r` | process / grep -r |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for pattern, hits, library, cli, plain in rows:
            lines.append(f"| `{pattern}` | {hits:,} | {library * 1000:.0f} ms | {cli * 1000:.0f} ms | "
                         f"{plain * 1000:.0f} ms | {cli / plain:.1f}x |")
        per_entry = statistics.mean(r[2] for r in rows[:3]) / total * 1e6
        lines += ["", f"Per entry, the library search of a pattern with a literal part costs {per_entry:.1f} µs. "
                      f"What bounds it: reading every entry object of every view from the store as bytes "
                      f"(`get_many`: lookup, decompression, hash check) takes {floor * 1000:.0f} ms "
                      f"({floor / total * 1e6:.1f} µs per entry), and a `ctxstore` process that does nothing "
                      f"(`ctxstore --version`) {startup * 1000:.0f} ms."]
        body = "\n".join(lines)
        print(body)
        if not args.quick:
            write_section("grep across conversations", "python tools/bench_grep.py", body)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
