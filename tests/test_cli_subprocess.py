"""The main flows as real processes of the installed `ctxstore` script: init, append, log, render, fork,
diff, export and import, with their exit codes and streams."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ClaudeTranscript

SCRIPT = shutil.which("ctxstore") or str(Path(sys.executable).with_name("ctxstore"))


def ctxstore(cwd: Path, *args: str, input: str | None = None, check: bool = True,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([SCRIPT, *args], cwd=cwd, input=input, capture_output=True, text=True,
                            env={**os.environ, **(env or {})}, timeout=60)
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def script() -> str:
    if not Path(SCRIPT).exists():
        pytest.skip("the ctxstore script is not installed (pip install -e .)")
    return SCRIPT


def test_main_flows_as_real_processes(script: str, tmp_path: Path) -> None:
    init = ctxstore(tmp_path, "init")
    assert json.loads(init.stdout)["repository"].endswith(".ctxstore")
    assert "Initialized" in init.stderr
    ctxstore(tmp_path, "append", "main", "--role", "user", "hello there")
    ctxstore(tmp_path, "append", "main", input=json.dumps({"role": "assistant", "content": "hi"}))
    assert json.loads(ctxstore(tmp_path, "render", "main").stdout) == [
        {"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}]
    ctxstore(tmp_path, "fork", "main~1", "alt")
    ctxstore(tmp_path, "append", "alt", "another way")
    changes = json.loads(ctxstore(tmp_path, "diff", "main", "alt").stdout)
    assert len(changes["added"]) == 1 and len(changes["removed"]) == 1
    graph = ctxstore(tmp_path, "log", "--graph").stdout
    assert "|/" in graph and "(alt)" in graph and "(main)" in graph
    assert len(json.loads(ctxstore(tmp_path, "log", "main").stdout)) == 3
    exported = ctxstore(tmp_path, "export", "--format", "snapshot", "main").stdout
    other = tmp_path / "other"
    other.mkdir()
    ctxstore(other, "init")
    ctxstore(other, "import", "--ref", "copy", "-", input=exported)
    assert ctxstore(other, "render", "copy").stdout == ctxstore(tmp_path, "render", "main").stdout


def test_claude_code_transcript_imports_as_a_real_process(script: str, tmp_path: Path,
                                                          claude_transcript: ClaudeTranscript) -> None:
    """`ctxstore import session.jsonl --ref cc/s`, the format told from the content."""
    ctxstore(tmp_path, "init")
    out = json.loads(ctxstore(tmp_path, "import", str(claude_transcript.path), "--ref", "cc/s").stdout)
    assert out["format"] == "claude" and out["ref"] == "refs/heads/cc/s"
    assert json.loads(ctxstore(tmp_path, "render", "cc/s").stdout) == claude_transcript.main_line
    refs = ctxstore(tmp_path, "refs").stdout
    again = ctxstore(tmp_path, "import", str(claude_transcript.path), "--ref", "cc/s")
    assert json.loads(again.stdout)["refs"] == {} and "nothing new" in again.stderr
    assert ctxstore(tmp_path, "refs").stdout == refs


def test_errors_are_one_line_on_stderr_with_documented_codes(script: str, tmp_path: Path) -> None:
    missing = ctxstore(tmp_path, "log", check=False)
    assert missing.returncode == 3 and missing.stdout == ""
    assert missing.stderr.startswith("ctxstore: error:") and missing.stderr.count("\n") == 1
    ctxstore(tmp_path, "init")
    assert ctxstore(tmp_path, "init", check=False).returncode == 5
    assert ctxstore(tmp_path, "render", "nothing", check=False).returncode == 3
    assert ctxstore(tmp_path, "append", "main", input="{not json", check=False).returncode == 2


def test_env_variable_names_the_repository(script: str, tmp_path: Path) -> None:
    ctxstore(tmp_path, "init")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"CTXSTORE_DIR": str(tmp_path / ".ctxstore")}
    ctxstore(elsewhere, "append", "main", "from afar", env=env)
    assert json.loads(ctxstore(tmp_path, "render", "main").stdout)[0]["content"] == "from afar"


def test_tour_runs_as_a_process(script: str, tmp_path: Path) -> None:
    result = ctxstore(tmp_path, "tour")
    assert "== 1." in result.stdout and "log --graph" in result.stdout and "Done." in result.stdout
