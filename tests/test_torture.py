"""The torture suite's short run: `tools/torture.py --quick` (real processes SIGKILLed, 4 concurrent
processes on a repository and a hub, a full tmpfs when root, tampering, fuzzing) finds nothing wrong among
the checks expected to hold. Rows that wait on an open defect of issue 12 (`WAITING` in the tool) are
left out here and reported as failed rows in docs/reliability.md until fixed. The hostile-hub module's
short run takes over a minute on its own (fixed timeouts it waits out), so it is left to the full run and to
the hub's own tests, keeping this one within its minute."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs fork, SIGKILL and tmpfs")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], list[Any], str]:
    out = tmp_path_factory.mktemp("torture")
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "torture.py"), "--quick", "--expected-only",
                           "--skip", "hub", "--json", str(out / "rows.json"), "--out", str(out / "reliability.md")],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, stdin=subprocess.DEVNULL)
    rows = json.loads((out / "rows.json").read_text()) if (out / "rows.json").exists() else []
    doc = (out / "reliability.md").read_text() if (out / "reliability.md").exists() else ""
    return done, rows, doc


def test_no_row_expected_to_hold_failed(quick_run) -> None:
    done, rows, _ = quick_run
    failed = [f"{r['attack']}: {r['details']}" for r in rows if r["failed"]]
    assert not failed, "\n".join(failed) + "\n" + done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]


def test_every_kind_of_crash_was_killed_a_few_times(quick_run) -> None:
    _, rows, _ = quick_run
    kills = {r["attack"]: r["runs"] for r in rows if r["attack"].startswith("crash: SIGKILL during")}
    assert set(kills) == {f"crash: SIGKILL during {k}" for k in ("commit", "import", "unpack", "gc", "rebase",
                                                                  "fsck")}
    assert min(kills.values()) >= 2, kills


def test_concurrency_ran_with_four_processes_and_recorded_latencies(quick_run) -> None:
    _, rows, _ = quick_run
    load = next(r for r in rows if r["attack"].startswith("concurrency: 4 processes"))
    assert load["runs"] > 0
    deadlock = next(r for r in rows if r["attack"] == "concurrency: no deadlock (watchdog)")
    assert deadlock["runs"] == 4


def test_every_attack_module_reported_and_the_table_was_written(quick_run) -> None:
    _, rows, doc = quick_run
    modules = {p.stem for p in (ROOT / "tools" / "attacks").glob("*.py") if not p.stem.startswith("_")} - {"hub"}
    reported = {r["attack"].split(":")[0] for r in rows}
    assert {"crash", "concurrency", "tamper", "fuzz"} <= reported
    assert not [r for r in rows if r["attack"].endswith(": the attack module")], "an attack module crashed"
    assert "| attack | runs | what held | failed | reproduce |" in doc
    for name in modules:
        assert f"`python tools/attacks/{name}.py --seconds" in doc, name
