"""tools/bench.py runs end to end at toy sizes, ctxstore alone, and produces the figures it promises.

No timing is asserted: the figures' structure is what this checks (a benchmark's numbers belong in
docs/benchmarks.md, not in pass/fail).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "tools" / "bench.py"


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, str(BENCH), "--smoke", "--out", str(out)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "bench.json").read_text()), out, done.stdout


def test_smoke_runs_ctxstore_alone_without_errors(smoke: tuple[dict, Path, str]) -> None:
    """The smoke run measures ctxstore only, and no measurement of it failed."""
    result, _, _ = smoke
    assert result["mode"] == "smoke"
    assert result["systems"] == ["ctxstore"]
    assert result["figures"]["errors"] == []


def test_smoke_figures_have_every_row(smoke: tuple[dict, Path, str]) -> None:
    """Every row of the page has its ctxstore figure: recording, bulk, render, appends, forks, sync, CLI."""
    result, _, _ = smoke
    fig, sizes = result["figures"], result["sizes"]
    for kind in ("chat", "agent"):
        rec = fig["record"][kind]["ctxstore"]
        assert rec["n"] == sizes[kind] and rec["disk"] > 0 and rec["samples"] and rec["latency"]
    for size in sizes["bulk"]:
        assert fig["bulk"][str(size)]["ctxstore"][0]["disk"] > 0
        assert all(r["messages"] == size for r in fig["render"][str(size)]["ctxstore"])
    assert set(fig["appends"]["ctxstore"]) == {str(s) for s in sizes["append"]}
    forks = fig["forks"]["ctxstore"]
    assert forks["forks"] == sizes["forks"] and forks["added"] > 0 and not forks["estimated"]
    assert fig["sync"]["n"] == sizes["sync"] and fig["sync"]["ctxstore_bytes"] > 0
    assert {"fetch_import_s", "render_import_s", "fetch_wall_s", "render_wall_s"} <= set(fig["cli"])


def test_smoke_judges_the_goals_and_draws_the_plots(smoke: tuple[dict, Path, str]) -> None:
    """The goals are judged (None where a competitor was not run), and each plot the page shows exists."""
    pytest.importorskip("matplotlib", reason="the plots need the bench extra: pip install -e '.[bench]'")
    result, out, page = smoke
    goals = result["goals"]
    assert {"disk_recorded_chat", "render_time", "append_growth", "cli_fetch_import", "bulk_time"} <= set(goals)
    assert goals["disk_recorded_chat"]["met"] is None  # JSONL was not run
    assert goals["append_growth"]["met"] in (True, False)
    for name in ("bench-disk.png", "bench-append.png", "bench-render.png", "bench-forks.png", "bench-sync.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"(img/{name})" in page
