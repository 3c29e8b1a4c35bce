"""Benchmark the framework integrations against the frameworks' own SQLite stores, in one run.

Run ``python tools/bench_integrations.py`` (``--quick``: fewer messages, under a minute); it replaces the
"Framework integrations" section of docs/benchmarks.md. Each figure is measured beside its baseline:

- LangGraph: `CtxStoreSaver` against `SqliteSaver`, a one-node graph invoked once per message (its
  input the message), with LangGraph's default `add_messages` channel and with a `DeltaChannel`
  (`_messages_delta_reducer`, a snapshot every 100 updates): bytes on disk, step latency p50 near the
  start and at the end (the growth ratio), and the time a new process takes to open the thread, read
  its state and take one more step. *Saver time* is what the step spent inside the checkpointer (its
  `put`, `put_writes`, `get_tuple`, `get_delta_channel_history`), the part the checkpointer answers for;
  the rest is LangGraph's own (its reducer and checkpoint building walk the message list every step).
- OpenAI Agents SDK (when `ctxstore.integrations.openai_agents` is there): `CtxStoreSession` against
  `SQLiteSession`, one `add_items` per message: bytes, add latency, and what a branch of the whole
  conversation costs (`AdvancedSQLiteSession.create_branch_from_turn` copies rows; ctxstore forks).
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Annotated, Any, TypedDict

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchdoc import dir_bytes, message, write_section
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import _messages_delta_reducer, add_messages

from ctxstore.integrations.langgraph import CtxStoreSaver

TITLE = "Framework integrations"
MESSAGES = 1000
QUICK = 200
WINDOW = 20
"""Steps each latency p50 is taken over: steps 1-20 (the start), and the last 20 (the end)."""
SAVER_METHODS = ("put", "put_writes", "get_tuple", "get_delta_channel_history")


class DefaultState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    turns: int


class DeltaState(TypedDict):
    messages: Annotated[list[BaseMessage], DeltaChannel(_messages_delta_reducer)]
    turns: int


def _count(state: dict[str, Any]) -> dict[str, Any]:
    return {"turns": state.get("turns", 0) + 1}


def _graph(saver: Any, delta: bool) -> Any:
    builder = StateGraph(DeltaState if delta else DefaultState)  # type: ignore[arg-type]
    builder.add_node("count", _count)
    builder.add_edge(START, "count")
    return builder.compile(checkpointer=saver)


def _message(n: int) -> BaseMessage:
    m = message(n)
    kind = HumanMessage if m["role"] == "user" else AIMessage
    return kind(str(m["content"]), id=f"m{n}")


def _saver(kind: str, path: Path) -> tuple[Any, Any]:
    """The checkpointer and what to close."""
    if kind == "ctxstore":
        saver = CtxStoreSaver.from_path(str(path))
        return saver, saver.repo
    conn = sqlite3.connect(str(path), check_same_thread=False)
    return SqliteSaver(conn), conn


def _pages_in_use(db: Path) -> int:
    """Bytes of an SQLite database's pages that hold data (its free list left out)."""
    with closing(sqlite3.connect(str(db))) as conn:
        pages, free, size = (conn.execute(f"PRAGMA {p}").fetchone()[0]
                             for p in ("page_count", "freelist_count", "page_size"))
    return int((pages - free) * size)


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def langgraph_runs(n: int, workdir: Path) -> dict[tuple[str, bool], dict[str, Any]]:
    """A thread of `n` steps per checkpointer and channel, each in a process of its own, one run after
    another (taken in turns, SqliteSaver's gigabyte of add_messages checkpoints slowed the others' CPU
    time through the shared caches); latencies, bytes and a resume in a new process."""
    children: dict[tuple[str, bool], tuple[subprocess.Popen[str], Path]] = {}
    for delta in (False, True):
        for kind in ("ctxstore", "sqlite"):
            path = workdir / f"lg-{kind}-{'delta' if delta else 'default'}{'' if kind == 'ctxstore' else '.sqlite'}"
            child = subprocess.Popen([sys.executable, __file__, "--steps", kind, "1" if delta else "0", str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
            children[(kind, delta)] = (child, path)
    runs: dict[tuple[str, bool], dict[str, Any]] = {key: {"steps": [], "inside": [], "cpu": []} for key in children}
    for key in children:
        for i in range(n):
            child = children[key][0]
            assert child.stdin is not None and child.stdout is not None
            child.stdin.write(f"{i}\n")
            wall, inside, cpu = (float(x) for x in child.stdout.readline().split())
            runs[key]["steps"].append(wall)
            runs[key]["inside"].append(inside)
            runs[key]["cpu"].append(cpu)
    for (kind, delta), (child, path) in children.items():
        child.communicate("end\n", timeout=600)
        runs[(kind, delta)]["bytes"] = dir_bytes(path)
        runs[(kind, delta)]["resume"] = _resume(kind, delta, path, n)
    return runs


def _steps_child(kind: str, delta: bool, path: Path) -> None:
    """Take a step for each message number read from stdin; print its wall, saver and saver CPU seconds."""
    saver, closer = _saver(kind, path)
    spent = [0.0, 0.0]
    for method_name in SAVER_METHODS:
        method = getattr(saver, method_name)

        @functools.wraps(method)
        def timed(*args: Any, _method: Any = method, **kwargs: Any) -> Any:
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start
                spent[1] += time.thread_time() - cpu

        setattr(saver, method_name, timed)
    graph = _graph(saver, delta)
    config = {"configurable": {"thread_id": "bench"}}
    for line in sys.stdin:
        if line.strip() == "end":
            break
        m = _message(int(line))
        spent[0] = spent[1] = 0.0
        start = time.perf_counter()
        graph.invoke({"messages": [m]}, config)
        print(time.perf_counter() - start, spent[0], spent[1], flush=True)
    closer.close()


def _resume(kind: str, delta: bool, path: Path, n: int) -> float:
    """Seconds a new process takes (imports done) to open the thread, read its state and take one step."""
    done = subprocess.run([sys.executable, __file__, "--resume", kind, "1" if delta else "0", str(path), str(n)],
                          capture_output=True, text=True, timeout=600, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def _resume_child(kind: str, delta: bool, path: Path, n: int) -> None:
    start = time.perf_counter()
    saver, closer = _saver(kind, path)
    graph = _graph(saver, delta)
    config = {"configurable": {"thread_id": "bench"}}
    assert len(graph.get_state(config).values["messages"]) == n
    graph.invoke({"messages": [_message(n)]}, config)
    elapsed = time.perf_counter() - start
    closer.close()
    print(elapsed)


# -- OpenAI Agents SDK --------------------------------------------------------------------------------

def _item(n: int) -> dict[str, Any]:
    m = message(n)
    return {"role": m["role"], "content": m["content"]}


async def _sessions_run(n: int, workdir: Path) -> dict[str, Any]:
    from agents.extensions.memory.advanced_sqlite_session import AdvancedSQLiteSession
    from agents.memory import SQLiteSession

    from ctxstore.integrations.openai_agents import CtxStoreSession

    items = [_item(i) for i in range(n)]
    out: dict[str, Any] = {}
    ours = CtxStoreSession.from_path("bench", workdir / "oa-ctxstore")
    db = workdir / "oa-sqlite.sqlite"
    theirs = SQLiteSession("bench", db)
    for name, session in (("ctxstore", ours), ("sqlite", theirs)):
        adds = []
        for item in items:
            start = time.perf_counter()
            await session.add_items([item])  # type: ignore[list-item]
            adds.append(time.perf_counter() - start)
        out[name] = {"adds": adds}
    assert len(await ours.get_items()) == len(await theirs.get_items()) == n
    theirs.close()
    out["ctxstore"]["bytes"] = dir_bytes(workdir / "oa-ctxstore")
    out["sqlite"]["bytes"] = dir_bytes(db)

    before = ours.repo.store.stats().file_bytes  # type: ignore[attr-defined]
    start = time.perf_counter()
    fork = ours.fork("bench-branch")
    out["ctxstore"]["branch_s"] = time.perf_counter() - start
    assert len(await fork.get_items()) == n
    out["ctxstore"]["branch_bytes"] = ours.repo.store.stats().file_bytes - before  # type: ignore[attr-defined]
    ours.close()

    advanced_db = workdir / "oa-advanced.sqlite"
    advanced = AdvancedSQLiteSession(session_id="bench", db_path=advanced_db, create_tables=True)
    await advanced.add_items(items)  # type: ignore[arg-type]
    before = _pages_in_use(advanced_db)
    start = time.perf_counter()
    await advanced.create_branch_from_turn((n + 1) // 2, "bench-branch")  # the last user turn: all before it
    out["sqlite"]["branch_s"] = time.perf_counter() - start
    out["sqlite"]["branch_copied"] = len(await advanced.get_items())
    advanced.close()
    out["sqlite"]["branch_bytes"] = _pages_in_use(advanced_db) - before
    return out


# -- the page --------------------------------------------------------------------------------------

def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _langgraph_rows(runs: dict[tuple[str, bool], dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    rows = []
    goals: dict[str, Any] = {}
    for delta in (False, True):
        base = runs[("sqlite", delta)]
        for kind in ("ctxstore", "sqlite"):
            run = runs[(kind, delta)]
            first, last = _p50(run["steps"][1:WINDOW + 1]), _p50(run["steps"][-WINDOW:])
            s_first, s_last = _p50(run["inside"][1:WINDOW + 1]), _p50(run["inside"][-WINDOW:])
            c_first, c_last = _p50(run["cpu"][1:WINDOW + 1]), _p50(run["cpu"][-WINDOW:])
            name = f"{'`CtxStoreSaver`' if kind == 'ctxstore' else '`SqliteSaver`'}, " \
                   f"{'DeltaChannel' if delta else 'add_messages'}"
            bytes_ratio = run["bytes"] / base["bytes"]
            rows.append(f"| {name} | {run['bytes']:,} | **{bytes_ratio:.2f}x** | {_ms(first)} | {_ms(last)} | "
                        f"{last / first:.2f}x | {_ms(s_first)} | {_ms(s_last)} | {s_last / s_first:.2f}x | "
                        f"{_ms(c_first)} | {_ms(c_last)} | **{c_last / c_first:.2f}x** | "
                        f"{run['resume']:.3f} s | {run['resume'] / base['resume']:.2f}x |")
            if kind == "ctxstore":
                label = "delta" if delta else "default"
                goals[label] = {"step_growth": last / first, "saver_growth": s_last / s_first,
                                "saver_cpu_growth": c_last / c_first, "bytes_vs_sqlite": bytes_ratio}
    header = ("| saver, messages channel | bytes on disk | / SqliteSaver | step, steps 1-20 | step, last 20 | "
              "growth | saver time, 1-20 | saver time, last 20 | growth | saver CPU, 1-20 | saver CPU, last 20 | "
              "growth | resume in a new process | / SqliteSaver |\n"
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    return header + "\n" + "\n".join(rows), goals


def _sessions_rows(oa: dict[str, Any]) -> str:
    ours, theirs = oa["ctxstore"], oa["sqlite"]
    rows = []
    for name, run in (("`CtxStoreSession`", ours), ("`SQLiteSession`", theirs)):
        first, last = _p50(run["adds"][1:WINDOW + 1]), _p50(run["adds"][-WINDOW:])
        rows.append(f"| {name} | {run['bytes']:,} | **{run['bytes'] / theirs['bytes']:.2f}x** | {_ms(first)} | "
                    f"{_ms(last)} | {last / first:.2f}x | {_ms(run['branch_s'])} | "
                    f"**{run['branch_s'] / theirs['branch_s']:.2f}x** | {max(run['branch_bytes'], 0):,} |")
    return ("| session | bytes on disk | / SQLiteSession | add_items p50, items 1-20 | add_items p50, last 20 | "
            "growth | branch the whole conversation | / SQLite | bytes the branch added (pages in use) |\n"
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n" + "\n".join(rows))


def main(quick: bool) -> None:
    n = QUICK if quick else MESSAGES
    with tempfile.TemporaryDirectory(prefix="bench-integrations-") as tmp:
        workdir = Path(tmp)
        runs = langgraph_runs(n, workdir)
        table, goals = _langgraph_rows(runs)
        oa = None
        if importlib.util.find_spec("ctxstore.integrations.openai_agents") is not None:
            oa = asyncio.run(_sessions_run(n, workdir))
    met = goals["default"]["saver_cpu_growth"] <= 1.5 and goals["delta"]["saver_cpu_growth"] <= 1.5
    body = f"""\
A {n:,}-message conversation, one step per message: each step is one `invoke` of a one-node graph whose
input is the message (300-700 characters, `tools/benchdoc.py`); both checkpointers durable on disk (LMDB
synced on commit; SQLite's default rollback journal, synced on commit), LangGraph's default durability
(checkpoints written in a background thread, waited for at the end of the step). Each run is a process
of its own, run alone, one after another. Figures are p50s:
*steps 1-20* near the start, *last 20* at the end; *growth* is the second over the first. *Saver time*
is the wall time spent inside the
checkpointer's methods (`put`, `put_writes`, `get_tuple`, `get_delta_channel_history`, summed over the
threads that ran them, so waits on the disk and on each other count); *saver CPU* is the CPU time of
those calls (`time.thread_time`), the checkpointer's own work without the disk's flush time, which
drifts by several times within minutes on this shared machine. The goal: the checkpointer's step at
{n:,} messages at most 1.5x its step at the start (**{'met' if met else 'not met'}**, judged on saver
CPU: {goals['default']['saver_cpu_growth']:.2f}x with add_messages, {goals['delta']['saver_cpu_growth']:.2f}x
with a DeltaChannel; saver wall time {goals['default']['saver_growth']:.2f}x and
{goals['delta']['saver_growth']:.2f}x), and bytes far below SqliteSaver's
({goals['default']['bytes_vs_sqlite']:.3f}x and {goals['delta']['bytes_vs_sqlite']:.2f}x).

{table}

The whole step grows with either checkpointer because LangGraph's own per-step work walks the message
list (`add_messages` and `_messages_delta_reducer` index every message by id on each update); what the
checkpointer adds does not grow with `CtxStoreSaver` (the latest checkpoint is read from the branch
head, a checkpoint found by its tag, and a put is one transaction adding the step's new entries), while
SqliteSaver serializes the whole message list into every checkpoint with add_messages. With a
DeltaChannel, SqliteSaver stores each step's writes and, every 100 updates, the whole list again;
`CtxStoreSaver` keeps the snapshot as the entries added since the last one, and its per-checkpoint
overhead (a tag and a writes ref, each with its reflog record) is what is left. *Resume* opens the store
in a new process (imports excluded), reads the thread's state (all {n:,} messages) and takes one step;
`CtxStoreSaver` reads the latest checkpoint's view, which holds every checkpoint entry of the line as
well as the messages.
"""
    if oa is not None:
        body += f"""
OpenAI Agents SDK, the same {n:,} messages as items, one `add_items` per item, then a branch of the
whole conversation (`AdvancedSQLiteSession.create_branch_from_turn` at the last user turn copies the
{oa['sqlite']['branch_copied']:,} rows before it; `CtxStoreSession.fork` writes one revision that
shares every entry):

{_sessions_rows(oa)}
"""
    write_section(TITLE, f"python tools/bench_integrations.py{' --quick' if quick else ''}", body)
    print(body)
    print(json.dumps(goals))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--steps":
        _steps_child(sys.argv[2], sys.argv[3] == "1", Path(sys.argv[4]))
    elif len(sys.argv) == 6 and sys.argv[1] == "--resume":
        _resume_child(sys.argv[2], sys.argv[3] == "1", Path(sys.argv[4]), int(sys.argv[5]))
    else:
        main("--quick" in sys.argv[1:])
