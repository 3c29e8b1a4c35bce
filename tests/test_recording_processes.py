"""Recording across real processes: a run resumed in a new process, and two processes writing one ref."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from click.testing import CliRunner
from conftest import texts

from ctxstore import Repository

AGENT_RUN = textwrap.dedent('''
    """One agent run recorded into REF of the repository at PATH; prints what the model saw."""
    import asyncio
    import json
    import sys

    from ctxstore.agents.loop import Agent
    from ctxstore.agents.offline import OfflineModel, tool_call
    from ctxstore.agents.recording import repository_history_strategy
    from ctxstore import Repository


    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"


    path, ref, prompt, scripted = sys.argv[1:5]
    script = [tool_call("weather", {"city": "Oslo"}), "It is sunny in Oslo."] if scripted == "1" else []
    model = OfflineModel(script)
    with Repository.open(path) as repo:
        strategy = repository_history_strategy(repo, ref)
        result = asyncio.run(Agent(model, history=strategy, tools=[weather]).generate(prompt))
        print(json.dumps({"text": result.text, "seen": model.requests[0].messages,
                          "head": strategy.head, "steps": len(result.steps)}))
''')

WRITER = textwrap.dedent('''
    """Append COUNT messages tagged TAG to REF through a recording strategy, after GO exists."""
    import asyncio
    import os
    import sys
    import time

    from ctxstore.agents.recording import repository_history_strategy
    from ctxstore import Repository
    from ctxstore.agents.strategies import HistoryAppendContext, HistoryReadContext

    path, ref, tag, count, go = sys.argv[1:6]
    with Repository.open(path) as repo:
        strategy = repository_history_strategy(repo, ref)
        while not os.path.exists(go):  # start together, so the commits race
            time.sleep(0.001)

        async def main() -> None:
            for n in range(int(count)):
                await strategy.on_append({"role": "user", "content": f"{tag}-{n}"},
                                         HistoryAppendContext(None, 1000))
                if n % 5 == 0:
                    await strategy.on_read(HistoryReadContext(None, 1000))

        asyncio.run(main())
''')


def run_script(tmp_path: Path, name: str, source: str, *args: str) -> subprocess.CompletedProcess[str]:
    script = tmp_path / name
    script.write_text(source, encoding="utf-8")
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_run_with_a_tool_resumes_in_a_new_process_and_the_log_shows_it(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    Repository.init(path, durable=False).close()
    first = run_script(tmp_path, "agent_run.py", AGENT_RUN, str(path), "support", "Weather in Oslo?", "1")
    assert first.returncode == 0, first.stderr
    one = json.loads(first.stdout)
    assert one["text"] == "It is sunny in Oslo." and one["steps"] == 2

    second = run_script(tmp_path, "agent_run.py", AGENT_RUN, str(path), "support", "And tomorrow?", "0")
    assert second.returncode == 0, second.stderr
    two = json.loads(second.stdout)
    # The new process's model saw the first run's whole conversation, tool exchange included.
    assert texts(two["seen"]) == ["Weather in Oslo?", "tool_use", "tool_result", "It is sunny in Oslo.",
                                  "And tomorrow?"]
    assert two["text"] == "Offline answer to: And tomorrow?"

    with Repository.open(path) as repo:
        assert repo.head("support") == two["head"]
        assert texts(repo.history("support").render()) == [*texts(two["seen"]), two["text"]]
        revision_ids = [rev.id for rev in repo.iter_revisions("support")]
    assert one["head"] in revision_ids

    from ctxstore.cli import cli

    result = CliRunner().invoke(cli, ["--repo", str(path), "log", "support"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    log = json.loads(result.stdout)
    assert [r["id"] for r in log] == revision_ids
    assert len(log) == 7  # the root and six appends (four messages, then two)


def test_two_processes_recording_into_one_ref_both_keep_every_message(tmp_path: Path) -> None:
    path = tmp_path / "repo"
    Repository.init(path, durable=False).close()
    go = tmp_path / "go"
    script = tmp_path / "writer.py"
    script.write_text(WRITER, encoding="utf-8")
    count = 40
    writers = [subprocess.Popen([sys.executable, str(script), str(path), "chat", tag, str(count), str(go)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for tag in ("left", "right")]
    go.touch()
    for writer in writers:
        _out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    with Repository.open(path) as repo:
        final = texts(repo.history("chat").render())
        reflog = repo.reflog("chat")
    for tag in ("left", "right"):
        assert [t for t in final if t.startswith(tag)] == [f"{tag}-{n}" for n in range(count)]
    assert len(final) == 2 * count
    assert len(reflog) == 2 * count  # one commit per append
