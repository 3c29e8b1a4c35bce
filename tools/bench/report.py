"""The page and the plots of tools/bench.py: every figure, every ratio against each competitor, the goals."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .systems import SYSTEMS

FLOOR = "floor"
LABELS = {**{name: cls.label for name, cls in SYSTEMS.items()}, FLOOR: "raw LMDB floor"}
ORDER = ["ctxstore", "jsonl", "sqlite", "agents", "langgraph", "git", FLOOR]
COLORS = {"ctxstore": "#d62728", "jsonl": "#1f77b4", "sqlite": "#2ca02c", "agents": "#9467bd",
          "langgraph": "#ff7f0e", "git": "#8c564b", FLOOR: "#7f7f7f"}


def _mb(n: float) -> str:
    return f"{n / 1e6:,.2f} MB" if n < 1e9 else f"{n / 1e9:,.1f} GB"


def _s(x: float) -> str:
    if x < 0.1:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def _median(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def _rows(result: dict[str, Any]) -> list[tuple[str, str, dict[str, tuple[float, str]]]]:
    """(key, what, {system: (value, shown)}) for every row of the main table; lower is better in all."""
    fig, sizes = result["figures"], result["sizes"]
    rows: list[tuple[str, str, dict[str, tuple[float, str]]]] = []
    for kind, what in (("chat", "chat messages"), ("agent", "agent messages (tool results 2–8 KB, 20% repeated)")):
        rec = fig["record"].get(kind, {})
        cells = {}
        for system, r in rec.items():
            shown = _mb(r["disk"])
            if "disk_loose" in r:
                shown += f" after gc ({_mb(r['disk_loose'])} loose)"
            if r["capped"]:
                shown += f" *at {r['n']:,} only*"
            cells[system] = (r["disk"] if not r["capped"] else float("nan"), shown)
        n = sizes["chat"] if kind == "chat" else sizes["agent"]
        rows.append((f"disk_recorded_{kind}", f"disk, {n:,} {what} recorded one append + commit each", cells))
    for kind in ("chat", "agent"):
        rec = fig["record"].get(kind, {})
        n = sizes["chat"] if kind == "chat" else sizes["agent"]
        rows.append((f"p50_recording_{kind}", f"durable append p50 while recording those {n:,} {kind} messages",
                     {s: (r["p50"] if not r["capped"] else float("nan"),
                          _s(r["p50"]) + (f" *at {r['n']:,}*" if r["capped"] else ""))
                      for s, r in rec.items()}))
    largest = str(sizes["bulk"][-1])
    renders = fig["render"].get(largest, {})
    rows.append(("render_time", f"open + render the latest view, {int(largest):,} chat messages, new process",
                 {s: (_median(r, "seconds"), _s(_median(r, "seconds"))) for s, r in renders.items()}))
    rows.append(("render_rss", "resident memory that render added",
                 {s: (_median(r, "rss_delta"), f"+{_median(r, 'rss_delta') / 1e6:,.0f} MB")
                  for s, r in renders.items()}))
    bulks = fig["bulk"].get(largest, {})
    rows.append(("disk_bulk", f"disk, the same {int(largest):,} messages bulk-imported in one commit",
                 {s: (r[0]["disk"], _mb(r[0]["disk"])) for s, r in bulks.items()}))
    rows.append(("bulk_time", f"bulk import of {int(largest):,} chat messages (one durable commit)",
                 {s: (_median(r, "seconds"), _s(_median(r, "seconds"))) for s, r in bulks.items()}))
    small, large = (str(x) for x in sizes["append"])
    for size in (small, large):
        rows.append((f"append_p50_{size}", f"durable append p50 at {int(size):,} messages (in turns)",
                     {s: (a[size]["p50"], _s(a[size]["p50"]) + (f" (n={a[size]['samples']})"
                                                                 if a[size]["samples"] < 20 else ""))
                      for s, a in fig["appends"].items()}))
    forks = fig["forks"]
    shape = f"{sizes['forks']} forks × {sizes['fork_each']} off {sizes['fork_base']:,} agent messages"
    rows.append(("fork_bytes", f"disk added by {shape}, a durable commit per message",
                 {s: (f["added"], _mb(f["added"]) + (" (est.)" if f["estimated"] else "")
                      + (f" after gc ({_mb(f['added_loose'])} loose)" if "added_loose" in f else ""))
                  for s, f in forks.items()}))
    rows.append(("fork_time", f"time for those {sizes['forks'] * sizes['fork_each']:,} fork messages",
                 {s: (f["seconds"], _s(f["seconds"]) + (" (est.)" if f["estimated"] else ""))
                  for s, f in forks.items()}))
    sync = fig.get("sync", {})
    if sync:
        rows.append(("sync_bytes", f"bytes received pulling {sync['n']:,} new messages (ctxstore pull; git fetch)",
                     {"ctxstore": (sync["ctxstore_bytes"], f"{sync['ctxstore_bytes'] / 1e3:,.0f} KB"),
                      **({"git": (sync["git_bytes"], f"{sync['git_bytes'] / 1e3:,.0f} KB")} if "git_s" in sync
                         else {})}))
        rows.append(("sync_time", "time of that pull / fetch",
                     {"ctxstore": (sync["ctxstore_s"], _s(sync["ctxstore_s"])),
                      **({"git": (sync["git_s"], _s(sync["git_s"]))} if "git_s" in sync else {})}))
    cli = fig.get("cli", {})
    if cli:
        rows.append(("cli_fetch_wall", "wall time of a fetch with nothing new (`ctxstore fetch`; `git fetch`)",
                     {"ctxstore": (cli["fetch_wall_s"], _s(cli["fetch_wall_s"])),
                      **({"git": (cli["git_fetch_wall_s"], _s(cli["git_fetch_wall_s"]))}
                         if "git_fetch_wall_s" in cli else {})}))
    return rows


def _ratio(ours: float, theirs: float) -> str:
    if ours != ours or theirs != theirs or not theirs:  # NaN: measured at another size
        return "–"
    r = ours / theirs
    return f"{r:.2f}x" if r >= 0.1 else f"{r:.2g}x"


def _goals(result: dict[str, Any], rows: dict[str, dict[str, tuple[float, str]]]) -> dict[str, Any]:
    """Each goal of issue 13: the ratio measured, its target, and whether this run meets it."""
    goals: dict[str, Any] = {}

    def ratio(key: str, other: str) -> float | None:
        cells = rows.get(key, {})
        if "ctxstore" not in cells or other not in cells or not cells[other][0]:
            return None
        value = cells["ctxstore"][0] / cells[other][0]
        return None if value != value else value

    def goal(name: str, what: str, value: float | None, target: float, strict: bool = False) -> None:
        met = None if value is None else (value < target if strict else value <= target)
        goals[name] = {"what": what, "value": value, "target": target, "strict": strict, "met": met}

    goal("disk_recorded_chat", "disk recorded one commit per message, chat: ctxstore / JSONL",
         ratio("disk_recorded_chat", "jsonl"), 0.6)
    goal("disk_recorded_agent", "disk recorded one commit per message, agent run: ctxstore / JSONL",
         ratio("disk_recorded_agent", "jsonl"), 0.6)
    goal("disk_bulk", "disk bulk-imported: ctxstore / JSONL", ratio("disk_bulk", "jsonl"), 0.6)
    goal("render_time", "open + render in a new process: ctxstore / SQLite select",
         ratio("render_time", "sqlite"), 1.0, strict=True)
    goal("render_rss", "render's added memory: ctxstore / JSONL", ratio("render_rss", "jsonl"), 1.5)
    small, large = (str(x) for x in result["sizes"]["append"])
    vs_sqlite = ratio(f"append_p50_{large}", "sqlite")
    vs_floor = ratio(f"append_p50_{large}", FLOOR)
    goal("append_p50_vs_sqlite", f"durable append p50 at {int(large):,}: ctxstore / SQLite FULL", vs_sqlite, 1.0)
    goal("append_p50_vs_floor", f"durable append p50 at {int(large):,}: ctxstore / raw LMDB durable put "
         "(the alternative goal)", vs_floor, 1.2)
    cells = rows.get(f"append_p50_{large}", {})
    growth = (cells["ctxstore"][0] / rows[f"append_p50_{small}"]["ctxstore"][0]) if "ctxstore" in cells else None
    goal("append_growth", f"durable append p50 at {int(large):,} / at {int(small):,}", growth, 1.5)
    cli = result["figures"].get("cli", {})
    goal("cli_fetch_import", "import time of `ctxstore fetch` with nothing new (s)", cli.get("fetch_import_s"), 0.1,
         strict=True)
    goal("cli_render_import", "import time of `ctxstore render` of 20 messages (s)", cli.get("render_import_s"),
         0.1, strict=True)
    goal("bulk_time", "bulk import: ctxstore / raw pipeline floor", ratio("bulk_time", FLOOR), 1.25)
    # Against the stores the issue names for forks; git's packed deltas are shown in the table beside them.
    fork_ratios = [r for other in ("jsonl", "sqlite", "agents", "langgraph")
                   if (r := ratio("fork_bytes", other)) is not None]
    goal("fork_bytes", "fork disk: ctxstore / the smallest of JSONL, SQLite, Agents, LangGraph",
         max(fork_ratios) if fork_ratios else None, 1.0, strict=True)
    goal("sync_bytes", "sync bytes: ctxstore pull / git fetch", ratio("sync_bytes", "git"), 1.0, strict=True)
    goal("sync_time", "sync time: ctxstore pull / git fetch", ratio("sync_time", "git"), 1.0, strict=True)
    return goals


def section(result: dict[str, Any], images: list[str]) -> tuple[str, dict[str, Any]]:
    """The markdown of the section, and the goals it judged."""
    rows = _rows(result)
    present = [s for s in ORDER if any(s in cells for _, _, cells in rows)]
    competitors = [s for s in present if s != "ctxstore"]
    lines = [
        "Every system recorded the same messages in one run, on this machine, from its own package "
        "(the `bench` extra), durably: JSONL with an fsync per message and a file per branch; stdlib SQLite "
        "with a row per message, WAL and `synchronous=FULL`, a fork copying rows; the OpenAI Agents SDK's "
        "`SQLiteSession` (its own settings: WAL, SQLite's default `synchronous`), a fork re-adding the items "
        "to a new session; LangGraph's `SqliteSaver` under a `StateGraph` with an `add_messages` channel, one "
        "checkpoint per message (recording runs a node that appends the next scripted message; appends to a "
        "stored state and forks use `update_state`, a fork starting from a checkpoint id); git with a "
        "transcript file, a commit per message with `core.fsync=committed`, a fork a branch; ctxstore "
        "through `Repository` and `MessageHistory` with durable commits. The raw LMDB floor is ctxstore's "
        "engine with no object model: canonical CBOR + blake3 + zstd + LMDB put.",
        "",
        f"Machine: {result['machine']}. Run: `{result['mode']}`, {result['seconds'] / 60:.1f} minutes. "
        "Versions: " + ", ".join(f"{k} {v}" for k, v in result["versions"].items()) + ".",
        "",
    ]
    if result["not_installed"]:
        lines += ["Not installed, so not measured: " + ", ".join(result["not_installed"]) + ".", ""]
    lines += ["| work | " + " | ".join(LABELS[s] for s in present) + " |",
              "|---|" + "---:|" * len(present)]
    for _key, what, cells in rows:
        lines.append(f"| {what} | " + " | ".join(cells[s][1] if s in cells else "" for s in present) + " |")
    if competitors:
        lines += ["", "ctxstore's figure over each competitor's, row by row (below 1.00x: ctxstore is smaller or "
                  "faster; – where one of them was measured at a smaller size):", "",
                  "| work | " + " | ".join(f"vs {LABELS[s]}" for s in competitors) + " |",
                  "|---|" + "---:|" * len(competitors)]
    for _key, what, cells in rows:
        if "ctxstore" not in cells or not competitors:
            continue
        ours = cells["ctxstore"][0]
        lines.append(f"| {what} | " + " | ".join(_ratio(ours, cells[s][0]) if s in cells else ""
                                                  for s in competitors) + " |")
    cli = result["figures"].get("cli", {})
    if cli:
        lines += ["", "CLI start (`python -X importtime`, top-level imports summed; medians): "
                  f"`ctxstore fetch` with nothing new {_s(cli['fetch_import_s'])} of imports "
                  f"({_s(cli['fetch_ctxstore_import_s'])} of them ctxstore's), {_s(cli['fetch_wall_s'])} wall; "
                  f"`ctxstore render` of 20 messages {_s(cli['render_import_s'])} of imports, "
                  f"{_s(cli['render_wall_s'])} wall; a bare `python -c pass` {_s(cli['python_wall_s'])} wall"
                  + (f"; `git fetch` with nothing new {_s(cli['git_fetch_wall_s'])} wall."
                     if "git_fetch_wall_s" in cli else ".")]
    goals = _goals(result, {key: cells for key, _, cells in rows})
    lines += ["", "Goals of issue 13, judged in this run:", "", "| goal | measured | target | met |",
              "|---|---:|---:|---|"]
    for g in goals.values():
        value = ("not measured" if g["value"] is None else f"{g['value']:.2f}" if g["value"] >= 0.1
                 else f"{g['value']:.2g}")
        met = "–" if g["met"] is None else "yes" if g["met"] else "**no**"
        lines.append(f"| {g['what']} | {value} | {'<' if g['strict'] else '≤'} {g['target']} | {met} |")
    lines += ["", NOTES, ""]
    lines += [f"![{name}](img/{name})" for name in images]
    return "\n".join(lines), goals


NOTES = """\
How to read it. Disk is what the store's directory holds on disk (allocated blocks; for SQLite the
database and its WAL, for git `.git` only). LangGraph and git store the whole transcript again at every
checkpoint or commit, so recording n messages one at a time costs them O(n²) bytes and time: they record
at most 1,000 chat and 300 agent messages in a full run, a tenth in a quick one (*at N only*, and no
ratio), and their fork rows run 2 forks of 2 messages and scale the bytes and time to the full shape
(*est.*). git's recorded disk is shown after `git gc` (deltas), with its loose objects beside it; the
fork goal is judged against the stores the issue names (git after `git gc` stores a fork message as a
small delta, and the table shows it). The open + render row is one fresh process per system per turn;
its time excludes interpreter start and the system's imports, and *memory added* is the process's peak
resident size minus its size before opening. Append latencies are measured in turns, one append of each
system at each size per round, on stores bulk-imported to that size; the recording rows' p50 is each
system's own run. Times are medians of the turns; the machine has two cores shared with other work, so
single figures move by 10–30% from run to run, ratios less."""


def plots(result: dict[str, Any], out: Path) -> list[str]:
    """The PNG plots (bytes against messages, append latency, render time, forks, sync); their file names."""
    try:
        import matplotlib
    except ImportError:
        return []
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig_data, names = result["figures"], []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        names.append(name)

    fig, ax = plt.subplots(figsize=(8, 5))
    for kind, style in (("chat", "-"), ("agent", "--")):
        for system, r in fig_data["record"].get(kind, {}).items():
            xs, ys = zip(*r["samples"], strict=True) if r["samples"] else ((), ())
            ax.plot(xs, ys, style, color=COLORS[system], marker=".",
                    label=f"{LABELS[system]}, {kind} recorded")
    for system in ORDER:
        points = [(int(size), by[system][0]["disk"]) for size, by in fig_data["bulk"].items() if system in by]
        if points:
            xs, ys = zip(*sorted(points), strict=True)
            ax.plot(xs, ys, ":", color=COLORS[system], marker="s", markersize=4,
                    label=f"{LABELS[system]}, chat bulk-imported")
    ax.set(xscale="log", yscale="log", xlabel="messages", ylabel="bytes on disk",
           title="Bytes on disk against messages (solid: chat, dashed: agent run, one commit each; dotted: bulk)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, "bench-disk.png")

    fig, ax = plt.subplots(figsize=(8, 5))
    for kind, style in (("chat", "-"), ("agent", "--")):
        for system, r in fig_data["record"].get(kind, {}).items():
            if r["latency"]:
                xs, ys = zip(*r["latency"], strict=True)
                ax.plot(xs, [y * 1e3 for y in ys], style, color=COLORS[system], marker=".",
                        label=f"{LABELS[system]}, recording {kind}")
    for system, by_size in fig_data["appends"].items():
        points = sorted((int(size), a["p50"] * 1e3) for size, a in by_size.items())
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, "o:", color=COLORS[system], label=f"{LABELS[system]}, on a stored conversation")
    ax.set(xscale="log", yscale="log", xlabel="messages in the conversation", ylabel="durable append p50 (ms)",
           title="Durable append latency against conversation size")
    ax.legend(fontsize=6, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    save(fig, "bench-append.png")

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    for system in ORDER:
        points = sorted((int(size), _median(by[system], "seconds"), _median(by[system], "rss_delta"))
                        for size, by in fig_data["render"].items() if system in by)
        if points:
            xs = [p[0] for p in points]
            left.plot(xs, [p[1] for p in points], marker="o", color=COLORS[system], label=LABELS[system])
            right.plot(xs, [max(p[2], 1) / 1e6 for p in points], marker="o", color=COLORS[system],
                       label=LABELS[system])
    left.set(xscale="log", yscale="log", xlabel="messages", ylabel="seconds",
             title="Open + render the latest view (new process)")
    right.set(xscale="log", yscale="log", xlabel="messages", ylabel="MB", title="Resident memory added")
    for a in (left, right):
        a.grid(True, which="both", alpha=0.3)
        a.title.set_fontsize(9)
    left.legend(fontsize=7)
    save(fig, "bench-render.png")

    forks = fig_data["forks"]
    systems = [s for s in ORDER if s in forks]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.5))
    for a, key, unit, scale in ((left, "added", "MB added", 1e6), (right, "seconds", "seconds", 1.0)):
        bars = a.bar([LABELS[s].split(" (")[0] for s in systems], [forks[s][key] / scale for s in systems],
                     color=[COLORS[s] for s in systems])
        for bar, s in zip(bars, systems, strict=True):
            if forks[s]["estimated"]:
                bar.set_hatch("//")
        a.set(yscale="log", ylabel=unit)
        a.tick_params(axis="x", labelrotation=30, labelsize=7)
    sz = result["sizes"]
    left.set_title(f"Fork cost: {sz['forks']} × {sz['fork_each']} off {sz['fork_base']:,} (hatched: est.)",
                   fontsize=9)
    right.set_title("Time for the fork messages", fontsize=9)
    save(fig, "bench-forks.png")

    sync = fig_data.get("sync", {})
    if sync:
        systems = ["ctxstore"] + (["git"] if "git_s" in sync else [])
        fig, (left, right) = plt.subplots(1, 2, figsize=(8, 4))
        left.bar(systems, [sync[f"{s}_bytes"] / 1e3 for s in systems], color=[COLORS[s] for s in systems])
        left.set(ylabel="KB received", title=f"Sync of {sync['n']:,} new messages: bytes")
        right.bar(systems, [sync[f"{s}_s"] for s in systems], color=[COLORS[s] for s in systems])
        right.set(ylabel="seconds", title="time (ctxstore pull, git fetch)")
        for a in (left, right):
            a.title.set_fontsize(9)
        save(fig, "bench-sync.png")
    return names
