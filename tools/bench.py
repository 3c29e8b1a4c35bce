"""Benchmark ctxstore against what people use today, for real, and write the figures and plots into the docs.

Run ``python tools/bench.py`` (a full run, about 15 minutes on two cores) or ``python tools/bench.py
--quick`` (every system at a tenth of the sizes, under two minutes). It replaces the "Against competitors"
section of docs/benchmarks.md, writes the plots docs/img/bench-*.png that section shows, and the raw
figures as docs/img/bench.json. ``--smoke`` runs ctxstore alone at toy sizes into ``--out`` (for the test
suite); ``--no-write`` leaves the docs alone.

Competitors come from their own packages (``pip install -e '.[bench]'``): JSONL files with fsync, stdlib
SQLite, the OpenAI Agents SDK's ``SQLiteSession``, LangGraph's ``SqliteSaver`` and git. One that is not
installed is reported as "not installed". ctxstore is measured through its public API only, whatever
the tree holds when this runs. Every measurement runs in a fresh process (tools/bench/measure.py), the
systems in turns where times are compared, and times are medians.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent
sys.path.insert(0, str(TOOLS))

from bench.systems import COMPETITORS, SYSTEMS, CtxStore  # noqa: E402
from benchdoc import byte_compile  # noqa: E402

FLOOR = "floor"
IMG = ROOT / "docs" / "img"


@dataclass(frozen=True)
class Sizes:
    """The sizes of one kind of run."""

    chat: int  # chat messages recorded one durable append each
    agent: int  # agent messages recorded one each
    bulk: tuple[int, ...]  # bulk imports (and renders) at these sizes; the last is the row's
    append: tuple[int, int]  # durable append latency at these two sizes
    fork_base: int
    forks: int
    fork_each: int
    fork_sample: int  # forks x messages run by the systems that re-serialize the view per commit
    sync: int
    repeat: int  # bulk imports, renders and pulls to take the median of
    rounds: int  # append turns
    append_budget: float  # seconds one (system, size) may spend on appends
    cli_repeat: int
    scale: float  # against a full run: caps the systems that cannot record a full run (LangGraph, git)


FULL = Sizes(chat=1_000, agent=10_000, bulk=(100, 1_000, 10_000, 100_000), append=(100, 100_000),
             fork_base=10_000, forks=50, fork_each=20, fork_sample=2, sync=1_000, repeat=3, rounds=200,
             append_budget=8.0, cli_repeat=5, scale=1.0)
QUICK = Sizes(chat=100, agent=1_000, bulk=(100, 1_000, 10_000), append=(100, 10_000),
              fork_base=1_000, forks=10, fork_each=10, fork_sample=2, sync=100, repeat=3, rounds=60,
              append_budget=1.0, cli_repeat=2, scale=0.1)
SMOKE = Sizes(chat=20, agent=30, bulk=(50, 200), append=(50, 200), fork_base=50, forks=3, fork_each=2,
              fork_sample=2, sync=10, repeat=1, rounds=5, append_budget=1.0, cli_repeat=1, scale=0.02)


def child(name: str, **arguments: Any) -> Any:
    """Run one measurement of tools/bench/measure.py in a fresh process; its JSON result."""
    out = subprocess.run([sys.executable, __file__, "--child", name, json.dumps(arguments)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise Failed(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Failed(RuntimeError):
    """A measurement process that failed; the run goes on and the report names it."""


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def run(sizes: Sizes, systems: list[str], work: Path) -> dict[str, Any]:
    """Every measurement, every system; the figures as one JSON-able dict.

    A measurement that fails is logged and listed under "errors", and the run goes on without that
    system for what depended on it.
    """
    fig: dict[str, Any] = {"record": {}, "bulk": {}, "render": {}, "appends": {}, "forks": {}, "errors": []}

    def attempt(what: str, who: str, name: str, **arguments: Any) -> Any:
        log(f"{what}: {who}")
        try:
            return child(name, **arguments)
        except Failed as exc:
            log(f"  {who} failed: {exc}")
            fig["errors"].append({"system": who, "what": what, "error": str(exc)})
            return None

    stores = [s for s in systems if s != FLOOR]
    for kind, n in (("chat", sizes.chat), ("agent", sizes.agent)):
        for system in stores:
            path = work / f"record-{kind}-{system}"
            result = attempt(f"record {n:,} {kind} messages", system, "record", system=system, kind=kind, n=n,
                             path=str(path), scale=sizes.scale)
            if result is not None:
                fig["record"].setdefault(kind, {})[system] = result
            shutil.rmtree(path, ignore_errors=True)

    kept: dict[tuple[str, int], Path] = {}
    largest, smaller = sizes.bulk[-1], list(sizes.bulk[:-1])
    alive = list(systems)
    if smaller:  # the stores of the smaller sizes, one process per system (not timed)
        for system in list(alive):
            paths = [work / f"bulk-{system}-{size}" for size in smaller]
            results = attempt(f"bulk imports of {', '.join(f'{s:,}' for s in smaller)} chat messages", system,
                              "builds", system=system, kind="chat", sizes=smaller, paths=[str(p) for p in paths])
            if results is None:
                alive.remove(system)
                continue
            for size, path, result in zip(smaller, paths, results, strict=True):
                fig["bulk"].setdefault(str(size), {})[system] = [result]
                kept[system, size] = path
    for rep in range(sizes.repeat):  # in turns: one import of each system, then again
        for system in list(alive):
            path = work / f"bulk-{system}-{largest}-{rep}"
            result = attempt(f"bulk import {largest:,} chat messages (turn {rep + 1} of {sizes.repeat})", system,
                             "bulk", system=system, kind="chat", n=largest, path=str(path))
            if result is None:
                alive.remove(system)
                continue
            fig["bulk"].setdefault(str(largest), {}).setdefault(system, []).append(result)
            if rep == 0:
                kept[system, largest] = path
            else:
                shutil.rmtree(path, ignore_errors=True)
    for size in sizes.bulk:
        reps = sizes.repeat if size == largest else 1
        for rep in range(reps):
            for system in alive:
                if (system, size) not in kept:
                    continue
                result = attempt(f"open + render {size:,} messages in a new process (turn {rep + 1} of {reps})",
                                 system, "render", system=system, path=str(kept[system, size]))
                if result is not None and result["messages"] != size:
                    fig["errors"].append({"system": system, "what": f"render {size:,}",
                                          "error": f"read {result['messages']:,} messages"})
                elif result is not None:
                    fig["render"].setdefault(str(size), {}).setdefault(system, []).append(result)

    append_stores = {system: {str(size): str(kept[system, size]) for size in sizes.append}
                     for system in alive if all((system, size) in kept for size in sizes.append)}
    fig["appends"] = attempt(f"durable appends at {sizes.append[0]:,} and {sizes.append[1]:,} messages, in turns",
                             ", ".join(append_stores), "appends", stores=append_stores, rounds=sizes.rounds,
                             budget=sizes.append_budget) or {}
    for path in kept.values():
        shutil.rmtree(path, ignore_errors=True)

    for system in stores:
        path = work / f"forks-{system}"
        result = attempt(f"{sizes.forks} forks of {sizes.fork_each} off {sizes.fork_base:,} agent messages",
                         system, "forks", system=system, base=sizes.fork_base, count=sizes.forks,
                         each=sizes.fork_each, path=str(path), sample=sizes.fork_sample)
        if result is not None:
            fig["forks"][system] = result
        shutil.rmtree(path, ignore_errors=True)

    git = "git" in systems
    pair = "ctxstore, git" if git else "ctxstore"
    fig["sync"] = attempt(f"sync: pull {sizes.sync:,} new messages, in turns", pair, "sync", n=sizes.sync,
                          path=str(work / "sync"), repeat=sizes.repeat, git=git) or {}
    fig["cli"] = attempt("CLI start: fetch with nothing new, render, in turns", pair, "cli",
                         path=str(work / "cli"), repeat=sizes.cli_repeat, git=git) or {}
    return fig


def versions(systems: list[str]) -> dict[str, str]:
    out = {"python": f"{platform.python_implementation()} {platform.python_version()}"}
    for system in systems:
        if system != FLOOR:
            out.update({k: v or "not installed" for k, v in SYSTEMS[system].versions().items()})
    import sqlite3

    out["sqlite"] = sqlite3.sqlite_version
    try:  # which ctxstore: the tree's commit, and whether the package had changes not yet committed
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "ctxstore"],
                               capture_output=True, text=True, check=True).stdout.strip()
        out["ctxstore tree"] = head + (" with uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        import lmdb

        out["lmdb (py-lmdb)"] = lmdb.__version__
    except ImportError:
        pass
    return out


def machine() -> str:
    import os

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="every system at a tenth of the sizes (< 2 min)")
    mode.add_argument("--smoke", action="store_true", help="ctxstore alone at toy sizes; implies --no-write")
    parser.add_argument("--out", type=Path, help="write bench.json and the plots here instead of docs/img")
    parser.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md alone")
    parser.add_argument("--only", help="comma-separated systems to run (default: all installed)")
    parser.add_argument("--report", type=Path, metavar="BENCH_JSON",
                        help="measure nothing: write the section and plots again from a saved bench.json")
    args = parser.parse_args()
    if args.report:
        report(json.loads(args.report.read_text()), args.out or IMG, write=not args.no_write)
        return
    sizes = SMOKE if args.smoke else QUICK if args.quick else FULL
    command = "python tools/bench.py" + (" --quick" if args.quick else "")

    missing = [cls.name for cls in COMPETITORS if not cls.installed()]
    if args.smoke:
        systems = [CtxStore.name]
    elif args.only:
        systems = [s.strip() for s in args.only.split(",")]
    else:
        systems = [cls.name for cls in COMPETITORS if cls.installed()] + [CtxStore.name, FLOOR]
    for name in missing:
        log(f"{name}: not installed ({', '.join(SYSTEMS[name].packages) or name}); reported as such")

    out_dir = args.out or IMG
    out_dir.mkdir(parents=True, exist_ok=True)
    byte_compile()
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="ctxstore-bench-"))
    try:
        figures = run(sizes, systems, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    result = {"mode": "smoke" if args.smoke else "quick" if args.quick else "full", "command": command,
              "machine": machine(), "versions": versions(systems), "systems": systems,
              "not_installed": missing, "sizes": sizes.__dict__, "seconds": elapsed, "figures": figures}

    report(result, out_dir, write=not (args.smoke or args.no_write))
    log(f"done in {elapsed:.0f} s")


def report(result: dict[str, Any], out_dir: Path, write: bool) -> None:
    """Judge the goals, draw the plots and save bench.json into `out_dir`; with `write`, the docs section."""
    from bench.report import plots, section

    out_dir.mkdir(parents=True, exist_ok=True)
    images = plots(result, out_dir)
    body, goals = section(result, images)
    result["goals"] = goals
    (out_dir / "bench.json").write_text(json.dumps(result, indent=1) + "\n")
    print(body)
    if write:
        from benchdoc import write_section

        write_section("Against competitors", result["command"], body)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        from bench.measure import child_main

        child_main(sys.argv[2], sys.argv[3])
    else:
        main()
