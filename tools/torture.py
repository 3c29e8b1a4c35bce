"""The torture suite: run every attack of tools/attacks/ and write what held into docs/reliability.md.

    python tools/torture.py --seconds 300     # the full run (default), figures into docs/reliability.md
    python tools/torture.py --quick           # the short run the test suite does (about a minute)
    python tools/torture.py --only crash,tamper --seconds 60

Each attack module (`tools/attacks/X.py`, names starting with `_` are helpers) has
`run(seconds, work) -> list[dict]` and runs alone as `python tools/attacks/X.py --seconds N`, printing
rows `{"attack", "runs", "held", "failed", "details"}` as JSON (a row may add `"figures"`: a map of
headline numbers). Here each module runs alone in its own process with a share of the time, so one that
crashes becomes a failed row instead of ending the run. The exit code is 1 if any row failed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ATTACKS = ROOT / "tools" / "attacks"
DOC = ROOT / "docs" / "reliability.md"

# Share of --seconds each module gets (modules not listed get the default share).
# The hub gets enough for its hostile cases (about a minute) and then a full minute of load.
WEIGHTS = {"crash": 0.3, "concurrency": 0.15, "hub": 0.42, "fuzz": 0.07, "tamper": 0.03, "diskfull": 0.03}
DEFAULT_WEIGHT = 0.1
# Seconds each module gets in the short run (--quick): a few kills per kind, 4 processes of concurrency.
QUICK = {"crash": 10, "concurrency": 8, "hub": 10, "fuzz": 6, "tamper": 1, "diskfull": 1}
QUICK_DEFAULT = 5

# Rows that fail until a defect of issue 12 is fixed (by other work), by the start of the row's name.
WAITING: dict[str, str] = {}


def modules(only: list[str] | None) -> list[str]:
    names = sorted(p.stem for p in ATTACKS.glob("*.py") if not p.stem.startswith("_"))
    if only:
        unknown = set(only) - set(names)
        if unknown:
            raise SystemExit(f"no attack module {', '.join(sorted(unknown))} in {ATTACKS}; "
                             f"there are {', '.join(names)}")
        names = [n for n in names if n in only]
    return names


def run_module(name: str, seconds: float, work: Path) -> tuple[list[dict[str, Any]], float]:
    """Run one attack module in its own process; a crash or a hang becomes a failed row."""
    started = time.monotonic()
    argv = [sys.executable, str(ATTACKS / f"{name}.py"), "--seconds", f"{seconds:g}", "--work", str(work)]
    # Its own process group: whatever it leaves running (a hub, a worker) is ended with it.
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=seconds * 3 + 600)
    except subprocess.TimeoutExpired:
        _end_group(proc.pid)
        proc.communicate()
        return [_row(f"{name}: the attack module", 0, "finishes", 1, "did not finish in time")], \
            time.monotonic() - started
    _end_group(proc.pid)
    elapsed = time.monotonic() - started
    at = out.find("\n[") + 1 if not out.startswith("[") else 0
    try:
        rows = json.loads(out[at:])
    except ValueError:
        tail = err.strip().splitlines()[-3:]
        return [_row(f"{name}: the attack module", 0, "runs and reports its rows", 1,
                     f"exit {proc.returncode}: {' | '.join(tail)[-500:]}")], elapsed
    return rows, elapsed


def _end_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _row(attack: str, runs: int, held: str, failed: int, details: str) -> dict[str, Any]:
    return {"attack": attack, "runs": runs, "held": held, "failed": failed, "details": details}


def waits_on(attack: str) -> str | None:
    return next((why for prefix, why in WAITING.items() if attack.startswith(prefix)), None)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(results: list[tuple[str, float, float, list[dict[str, Any]]]], seconds: float, quick: bool,
           wall: float) -> str:
    rows = [r for _, _, _, rs in results for r in rs]
    failed = [r for r in rows if r["failed"]]
    kills = sum(r["runs"] for r in rows if r["attack"].startswith("crash:"))
    kills_failed = sum(r["failed"] for r in rows if r["attack"].startswith("crash:"))
    command = "python tools/torture.py --quick" if quick else f"python tools/torture.py --seconds {seconds:g}"
    lines = [
        "# Reliability: the torture suite",
        "",
        "What `tools/torture.py` proves about ctxstore under attack, and the figures of its last full run.",
        "Each attack module of `tools/attacks/` runs alone too, with the command in its row. This page is",
        "written by the tool; edit `tools/torture.py`, not this file.",
        "",
        f"Last run: `{command}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {wall:.0f} s in all.",
        "",
        "## Figures",
        "",
        f"- **Kills survived:** {kills - kills_failed} of {kills} SIGKILLs of real processes (commit, import, "
        "unpack, gc, rebase, fsck, the hub and its client mid-push) left the repository opening, fsck clean, "
        "with every acknowledged write present and no ref at a missing object.",
    ]
    for r in rows:
        if r["attack"].startswith("concurrency:") and "operations in" in r["details"]:
            lines.append(f"- **Operations under load:** {r['details'].split('.')[0]} by "
                         f"{r['attack'].removeprefix('concurrency: ')}; {r['runs']} acknowledged writes, "
                         f"{'none' if not r['failed'] else r['failed']} lost or failed.")
        if r["attack"].startswith("concurrency: writer latency"):
            lines.append(f"- **Latency under load (ms):** {r['details']}.")
    hub = [r for r in rows if r["attack"].startswith("hub:") and not r["attack"].startswith("hub: load")]
    if hub:
        lines.append(f"- **Hostile requests refused:** {sum(r['runs'] for r in hub)} requests in {len(hub)} hostile "
                     f"cases against a real hub; {sum(1 for r in hub if r['failed'])} cases did not hold.")
    for r in rows:
        if r["attack"].startswith("hub: load"):
            lines.append(f"- **Hub under load:** {r['details']}")
    for r in rows:
        for key, value in (r.get("figures") or {}).items():
            lines.append(f"- **{key}:** {value}")
    lost = [r for r in failed if "present" in r["held"] or "lost" in r["held"]]
    lines.append(f"- **Nothing lost:** {'yes' if not lost else 'NO: ' + ', '.join(r['attack'] for r in lost)}"
                 " (every row whose check is that acknowledged writes are present held).")
    lines.append(f"- **Rows:** {len(rows)}, {len(rows) - len(failed)} held, {len(failed)} failed.")
    lines += ["", "## What ran", "",
              "| attack | runs | what held | failed | reproduce |", "|---|---:|---|---:|---|"]
    for name, share, _, rs in results:
        for r in rs:
            cmd = f"`python tools/attacks/{name}.py --seconds {share:g}`"
            lines.append(f"| {_cell(r['attack'])} | {r['runs']} | {_cell(r['held'])} | {r['failed']} | {cmd} |")
    if failed:
        lines += ["", "## What failed", ""]
        for r in failed:
            why = waits_on(r["attack"])
            lines.append(f"- **{_cell(r['attack'])}** ({r['failed']} of {r['runs']})"
                         + (f", waiting on issue 12 {why}" if why else "") + f": {_cell(r['details'])}")
    lines += ["", "## Details of every row", ""]
    for name, _, elapsed, rs in results:
        lines.append(f"- `{name}` ({elapsed:.0f} s):")
        for r in rs:
            if r["details"]:
                lines.append(f"  - {_cell(r['attack'])}: {_cell(r['details'])}")
    lines += ["", "## The attacks", ""]
    for name, _, _, _ in results:
        doc = (ATTACKS / f"{name}.py").read_text().split('"""')[1].strip().split("\n\nRun alone")[0]
        lines.append(f"- **{name}**: {' '.join(doc.split())}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=300, help="total time to share among the attacks")
    parser.add_argument("--quick", action="store_true", help="the short run of the test suite")
    parser.add_argument("--only", default="", help="comma-separated attack modules (default: all)")
    parser.add_argument("--skip", default="", help="comma-separated attack modules to leave out")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"where to write the report (default: {DOC.relative_to(ROOT)} for a full run, "
                             "nowhere for --quick)")
    parser.add_argument("--expected-only", action="store_true",
                        help="leave out rows that wait on an open defect (WAITING): the test suite's run")
    parser.add_argument("--json", type=Path, default=None, help="also write every row as JSON here")
    parser.add_argument("--work", type=Path, default=None, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    names = modules([n for n in args.only.split(",") if n] or None)
    skip = {n for n in args.skip.split(",") if n}
    names = [n for n in names if n not in skip]
    if args.quick:
        shares = {n: float(QUICK.get(n, QUICK_DEFAULT)) for n in names}
    else:
        total = sum(WEIGHTS.get(n, DEFAULT_WEIGHT) for n in names)
        shares = {n: round(args.seconds * WEIGHTS.get(n, DEFAULT_WEIGHT) / total, 1) for n in names}
    out = args.out if args.out is not None else (None if args.quick else DOC)
    started = time.monotonic()
    results = []
    with tempfile.TemporaryDirectory(prefix="ctxstore-torture-") as tmp:
        work = args.work or Path(tmp)
        for name in names:
            print(f"torture: {name} for {shares[name]:g}s ...", file=sys.stderr, flush=True)
            rows, elapsed = run_module(name, shares[name], work / name)
            if args.expected_only:
                for r in rows:
                    if waits_on(r["attack"]):
                        print(f"  not counted: {r['attack']} (waits on {waits_on(r['attack'])}): "
                              f"{'failed' if r['failed'] else 'held'}", file=sys.stderr)
                rows = [r for r in rows if not waits_on(r["attack"])]
            for r in rows:
                if r["failed"]:
                    why = waits_on(r["attack"])
                    r["waits"] = why
                    print(f"  FAILED {r['attack']}: {r['details'][:300]}" + (f" [waits on {why}]" if why else ""),
                          file=sys.stderr)
            print(f"  {len(rows)} rows, {sum(1 for r in rows if r['failed'])} failed, {elapsed:.0f}s",
                  file=sys.stderr, flush=True)
            results.append((name, shares[name], elapsed, rows))
    text = render(results, args.seconds, args.quick, time.monotonic() - started)
    if out is not None:
        out.write_text(text)
        print(f"torture: wrote {out}", file=sys.stderr)
    if args.json is not None:
        args.json.write_text(json.dumps([r for _, _, _, rs in results for r in rs], indent=2))
    return 1 if any(r["failed"] for _, _, _, rs in results for r in rs) else 0


if __name__ == "__main__":
    sys.exit(main())
