"""Fuzzing: the targets of tools/fuzz/ (codec decode, pack reader, snapshot loader, importers, protocol
frames), each for a share of the time: coverage-guided with atheris when it is installed (the `fuzz`
extra), else with the built-in mutation fuzzer. Every refusal must be a `CtxStoreError`; no input may take
longer than the per-input budget (a hang) or need more than the memory cap.

Run alone: `python tools/attacks/fuzz.py --seconds 60`.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, Row, main, row

FUZZ = ROOT / "tools" / "fuzz"
sys.path.insert(0, str(FUZZ))

import targets  # noqa: E402

PER_INPUT = 5       # seconds one input may take
RSS_LIMIT_MB = 2048  # memory one fuzzing process may reach (libFuzzer's -rss_limit_mb; the built-in caps RLIMIT_AS)
ATHERIS_STARTUP = 4  # seconds of instrumented import before atheris runs a first input


def _atheris(name: str, seconds: float, work: Path) -> tuple[int, int, str]:
    corpus = work / f"corpus-{name}"
    corpus.mkdir(parents=True, exist_ok=True)
    for i, seed in enumerate(targets.seeds(name)):
        (corpus / f"seed{i}").write_bytes(seed)
    argv = [sys.executable, str(FUZZ / "fuzz_one.py"), name, str(corpus), f"-max_total_time={int(seconds)}",
            f"-timeout={PER_INPUT}", f"-rss_limit_mb={RSS_LIMIT_MB}", "-print_final_stats=1", "-max_len=65536",
            f"-artifact_prefix={work}/crash-{name}-"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120, cwd=work)
    except subprocess.TimeoutExpired:
        return 0, 1, f"{name}: the fuzzer itself did not stop"
    runs = int(m.group(1)) if (m := re.search(r"stat::number_of_executed_units:\s*(\d+)", done.stderr)) else 0
    if done.returncode == 0:
        return runs, 0, ""
    text = done.stderr
    if "ALARM: working on the last Unit" in text or "libFuzzer: timeout" in text:
        why = f"an input took over {PER_INPUT}s (hang)"
    elif "out-of-memory" in text:
        why = f"an input needed over {RSS_LIMIT_MB} MB"
    else:
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith(("#", "INFO", "MS:", "stat::"))]
        tail = [ln for ln in lines if "Error" in ln or "Exception" in ln]
        why = (tail or lines or [f"exit {done.returncode}"])[-1].strip()
    art = sorted(work.glob(f"crash-{name}-*"))
    return runs, 1, f"{name}: {why[:300]}" + (f" (input: {art[-1].read_bytes()[:60].hex()})" if art else "")


def _builtin(name: str, seconds: float, work: Path) -> tuple[int, int, str]:
    current = work / f"current-{name}"
    argv = [sys.executable, str(FUZZ / "fuzz_one.py"), name, "--builtin", str(seconds), str(current)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    last, size = time.monotonic(), -1
    deadline = time.monotonic() + seconds + 60
    while proc.poll() is None:
        time.sleep(0.5)
        try:
            stamp = current.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = -1
        if stamp != size:
            last, size = time.monotonic(), stamp
        elif time.monotonic() - last > PER_INPUT + 5 or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            data = current.read_bytes() if current.exists() else b""
            return 0, 1, f"{name}: an input took over {PER_INPUT}s (hang): {data[:80].hex()}"
    out, err = proc.communicate()
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return 0, 1, f"{name}: the fuzzer died (exit {proc.returncode}): {err.strip()[-300:]!r}"
    if proc.returncode != 0:
        crash = result["crash"].strip().splitlines()[-1]
        return result["runs"], 1, f"{name}: {crash[:300]} (input: {result['input'][:120]})"
    return result["runs"], 0, ""


def run(seconds: float, work: Path) -> list[Row]:
    share = seconds / len(targets.TARGETS)
    use_atheris = importlib.util.find_spec("atheris") is not None and share >= 1.5 * ATHERIS_STARTUP
    rows = []
    for name in targets.TARGETS:
        if use_atheris:
            runs, failed, details = _atheris(name, max(2.0, share - ATHERIS_STARTUP), work)
        else:
            runs, failed, details = _builtin(name, max(1.0, share - 2), work)
        engine = "atheris" if use_atheris else "built-in mutation fuzzer"
        rows.append(row(f"fuzz: {name} ({engine})", runs,
                        f"every refusal a CtxStoreError; no input over {PER_INPUT}s or over {RSS_LIMIT_MB} MB",
                        failed, details))
    return rows


if __name__ == "__main__":
    main(run)
