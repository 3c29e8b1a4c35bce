"""`ctxstore mcp` over real stdio: the installed script as a subprocess, driven by the mcp SDK's own client
(`stdio_client` + `ClientSession`). One read-only server and one `--write` server serve the whole module,
each over its own repository, so the read tests see a repository the write tests never touch."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import pytest
from conftest import killed_after

pytest.importorskip("mcp")

from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextResourceContents

from ctxstore import Repository
from ctxstore.integrations.mcp import conversation_uri

SCRIPT = shutil.which("ctxstore") or str(Path(sys.executable).with_name("ctxstore"))

MAIN = [
    {"id": "m1", "message": {"role": "user", "content": "How do I rotate the API keys?"},
     "meta": {"title": "Key rotation"}},
    {"id": "m2", "message": {"role": "assistant", "content": "Run `keys rotate --all` (then restart)."}},
    {"id": "m3", "message": {"role": "user", "content": "And the staging keys?"}},
    {"id": "m4", "message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "lookup_docs", "input": {"q": "staging keys"}}]}},
    {"id": "m5", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Staging keys rotate nightly."}]}},
    {"id": "m6", "message": {"role": "assistant", "content": "Staging keys rotate nightly on their own."}},
]
SUPPORT = [  # compacted later: a summary replaces s1 and s2
    {"id": "s1", "message": {"role": "user", "content": "My invoice is wrong"}},
    {"id": "s2", "message": {"role": "assistant", "content": "Which invoice number?"}},
    {"id": "s3", "message": {"role": "user", "content": "INV-7"}},
    {"id": "s4", "message": {"role": "assistant", "content": "Refunded INV-7."}},
]
NOTES = [  # a summary is added beside n1 and n2, which stay in the view
    {"id": "n1", "message": {"role": "user", "content": "note one"}},
    {"id": "n2", "message": {"role": "assistant", "content": "noted one"}},
    {"id": "n3", "message": {"role": "user", "content": "note three"}},
]


def _summary(entry_id: str, sources: list[str], text: str, replace: bool) -> dict[str, Any]:
    entry = {"id": entry_id, "kind": "summary", "sources": sources,
             "message": {"role": "user", "content": f"[Conversation summary]\n{text}"}}
    return {"op": "summary", "sourceIds": sources, "entry": entry, "replace": replace}


@pytest.fixture(scope="module")
def read_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp-read") / ".ctxstore"
    with Repository.init(path) as repo:
        repo.append("main", MAIN[:4])
        repo.append("main", MAIN[4:])
        repo.set_ref("refs/tags/v1", "main~1")
        support = repo.history("support/42").extend(SUPPORT)
        repo.commit("support/42", support.edit(_summary("sum1", ["s1", "s2"], "A wrong invoice.", True)))
        notes = repo.history("notes").extend(NOTES)
        repo.commit("notes", notes.edit(_summary("sum2", ["n1", "n2"], "Note one, noted.", False)))
    return path


@pytest.fixture(scope="module")
def write_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mcp-write") / ".ctxstore"
    with Repository.init(path) as repo:
        repo.append("main", [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}])
        repo.set_ref("refs/tags/frozen", "main")
    return path


@pytest.fixture(scope="module")
def script() -> str:
    if not Path(SCRIPT).exists():
        pytest.skip("the ctxstore script is not installed (pip install -e .)")
    return SCRIPT


@pytest.fixture(scope="module")
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal() as running:
        yield running


class Client:
    """A `ClientSession` driven from synchronous tests through the portal's event loop."""

    def __init__(self, portal: BlockingPortal, session: ClientSession, errlog: Path) -> None:
        self.portal = portal
        self.session = session
        self.errlog = errlog

    def call(self, tool: str, **arguments: Any) -> CallToolResult:
        return self.portal.call(partial(self.session.call_tool, tool, arguments))

    def ok(self, tool: str, **arguments: Any) -> dict[str, Any]:
        """A tool's structured result, which must not be an error; its text content is the same JSON."""
        result = self.call(tool, **arguments)
        assert not result.is_error, result.content
        assert result.structured_content is not None
        assert json.loads(result.content[0].text) == result.structured_content  # type: ignore[union-attr]
        return result.structured_content

    def error(self, tool: str, **arguments: Any) -> str:
        """The message of a tool's error result."""
        result = self.call(tool, **arguments)
        assert result.is_error, result.structured_content
        return " ".join(block.text for block in result.content)  # type: ignore[union-attr]


@asynccontextmanager
async def _session(script: str, repo: Path, errlog: TextIO, *flags: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=script, args=["mcp", "--repo", str(repo), *flags])
    async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def _client(portal: BlockingPortal, script: str, repo: Path, *flags: str) -> Iterator[Client]:
    errlog = repo.parent / "server.stderr"
    with errlog.open("w") as err, portal.wrap_async_context_manager(_session(script, repo, err, *flags)) as session:
        yield Client(portal, session, errlog)


@pytest.fixture(scope="module")
def reader(portal: BlockingPortal, script: str, read_repo: Path) -> Iterator[Client]:
    yield from _client(portal, script, read_repo)


@pytest.fixture(scope="module")
def writer(portal: BlockingPortal, script: str, write_repo: Path) -> Iterator[Client]:
    yield from _client(portal, script, write_repo, "--write")


# -- the session ---------------------------------------------------------------------------------------
def test_initialize_names_the_server_and_lists_every_tool_with_its_hints(reader: Client) -> None:
    init = reader.portal.call(reader.session.initialize)  # the result the handshake got
    assert init.server_info.name == "ctxstore"
    assert init.capabilities.tools is not None and init.capabilities.resources is not None
    assert "read-only" in (init.instructions or "")
    tools = {t.name: t for t in reader.portal.call(reader.session.list_tools).tools}
    assert set(tools) == {"list_conversations", "read_conversation", "grep", "diff", "append", "fork"}
    for name in ("list_conversations", "read_conversation", "grep", "diff"):
        assert tools[name].annotations is not None and tools[name].annotations.read_only_hint is True
    for name in ("append", "fork"):
        hints = tools[name].annotations
        assert hints is not None and hints.read_only_hint is False and hints.destructive_hint is False
        assert "--write" in (tools[name].description or "")
    assert tools["read_conversation"].input_schema["required"] == ["conversation"]
    assert "serving" in reader.errlog.read_text() and "read-only" in reader.errlog.read_text()


def test_the_integrations_page_documents_every_tool_and_argument(reader: Client) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = page.split("## MCP server: `ctxstore mcp`", 1)[1].split("\n## ", 1)[0]
    for tool in reader.portal.call(reader.session.list_tools).tools:
        row = next((line for line in section.splitlines() if line.startswith(f"| `{tool.name}`")), None)
        assert row is not None, tool.name
        assert all(f"`{argument}`" in row for argument in tool.input_schema["properties"]), (tool.name, row)


# -- reading -------------------------------------------------------------------------------------------
def test_list_conversations_gives_what_ls_gives(reader: Client, read_repo: Path) -> None:
    listed = reader.ok("list_conversations")
    by_ref = {c["ref"]: c for c in listed["conversations"]}
    assert list(by_ref) == ["refs/heads/main", "refs/heads/notes", "refs/heads/support/42", "refs/tags/v1"]
    assert listed["total"] == 4
    assert by_ref["refs/heads/main"]["title"] == "Key rotation"
    assert by_ref["refs/heads/main"]["messages"] == 6 and by_ref["refs/tags/v1"]["messages"] == 4
    assert by_ref["refs/heads/support/42"]["messages"] == 3  # the summary and what it did not replace
    with Repository.open(read_repo) as repo:
        head = repo.resolve("main")
        assert by_ref["refs/heads/main"]["revision"] == head
        assert by_ref["refs/heads/main"]["updated"] == next(repo.iter_revisions(head, limit=1)).created_at
    tags = reader.ok("list_conversations", prefix="refs/tags/")
    assert [c["ref"] for c in tags["conversations"]] == ["refs/tags/v1"]
    assert reader.ok("list_conversations", prefix="nothing-here/")["conversations"] == []
    newest = reader.ok("list_conversations", sort="updated", limit=1)
    assert newest["total"] == 4 and len(newest["conversations"]) == 1
    assert newest["conversations"][0]["updated"] == max(c["updated"] for c in listed["conversations"])


def test_read_conversation_windows_by_offset_and_limit_or_the_last_n(reader: Client) -> None:
    first = reader.ok("read_conversation", conversation="main", offset=0, limit=4)
    assert first["total"] == 6 and first["offset"] == 0 and first["nextOffset"] == 4
    assert [m["id"] for m in first["messages"]] == ["m1", "m2", "m3", "m4"]
    assert [m["index"] for m in first["messages"]] == [0, 1, 2, 3]
    assert first["messages"][0]["message"] == MAIN[0]["message"] and first["messages"][0]["meta"] == MAIN[0]["meta"]
    rest = reader.ok("read_conversation", conversation="main", offset=first["nextOffset"], limit=4)
    assert [m["id"] for m in rest["messages"]] == ["m5", "m6"] and rest["nextOffset"] is None
    last = reader.ok("read_conversation", conversation="main", last=2)
    assert [m["id"] for m in last["messages"]] == ["m5", "m6"] and last["offset"] == 4
    assert reader.ok("read_conversation", conversation="main", last=50)["offset"] == 0
    older = reader.ok("read_conversation", conversation="main~1")
    assert [m["id"] for m in older["messages"]] == ["m1", "m2", "m3", "m4"]
    assert older["revision"] == reader.ok("read_conversation", conversation="v1")["revision"]
    assert reader.ok("read_conversation", conversation="main", offset=10)["messages"] == []


def test_read_conversation_shows_the_compacted_view_and_the_full_one(reader: Client) -> None:
    support = reader.ok("read_conversation", conversation="support/42")
    assert [(m["id"], m["kind"]) for m in support["messages"]] == [("sum1", "summary"), ("s3", "turn"),
                                                                    ("s4", "turn")]
    assert support["messages"][0]["sources"] == ["s1", "s2"]
    assert reader.ok("read_conversation", conversation="support/42", view="compacted")["messages"] == \
        support["messages"]
    full = reader.ok("read_conversation", conversation="support/42", view="full")
    assert [m["message"] for m in full["messages"]] == [e["message"] for e in SUPPORT]
    assert full["total"] == 4
    notes = reader.ok("read_conversation", conversation="notes")
    assert [m["id"] for m in notes["messages"]] == ["n1", "n2", "n3", "sum2"]
    compacted = reader.ok("read_conversation", conversation="notes", view="compacted")
    assert [m["id"] for m in compacted["messages"]] == ["n3", "sum2"] and compacted["total"] == 2
    assert [m["index"] for m in compacted["messages"]] == [0, 1]
    assert reader.ok("read_conversation", conversation="notes", view="compacted", last=1)["messages"][0]["id"] == \
        "sum2"


def test_grep_searches_text_tools_and_metadata_across_conversations(reader: Client) -> None:
    found = reader.ok("grep", pattern="staging", ignore_case=True)
    assert [(m["ref"], m["entryId"]) for m in found["matches"]] == [
        ("refs/heads/main", "m3"), ("refs/heads/main", "m5"), ("refs/heads/main", "m6"), ("refs/tags/v1", "m3")]
    assert found["truncated"] is False
    assert all("staging" in m["snippet"].lower() for m in found["matches"])
    tools = reader.ok("grep", pattern="lookup_docs", fields=["tool"])
    assert [(m["ref"], m["entryId"], m["field"]) for m in tools["matches"]] == [
        ("refs/heads/main", "m4", "tool"), ("refs/tags/v1", "m4", "tool")]
    meta = reader.ok("grep", pattern="Key rotation", fields=["meta"], conversations=["main"])
    assert [(m["ref"], m["entryId"]) for m in meta["matches"]] == [("main", "m1")]
    assert reader.ok("grep", pattern="INV-7", conversations=["main"])["matches"] == []
    plain = reader.ok("grep", pattern="--all` (then", fixed=True, conversations=["main"])
    assert [m["entryId"] for m in plain["matches"]] == ["m2"]
    capped = reader.ok("grep", pattern="e", limit=2)
    assert len(capped["matches"]) == 2 and capped["truncated"] is True
    assert "not a regular expression" in reader.error("grep", pattern="--all` (then")


def test_diff_shows_what_a_revision_added_with_the_entries(reader: Client) -> None:
    last = reader.ok("diff", revision="main")
    assert last["added"] == ["m5", "m6"] and last["removed"] == [] and last["moved"] == []
    assert [e["message"] for e in last["addedEntries"]] == [MAIN[4]["message"], MAIN[5]["message"]]
    assert last["operation"]["type"] == "append"
    between = reader.ok("diff", revision="support/42", base="support/42~1")
    assert between["added"] == ["sum1"] and between["removed"] == ["s1", "s2"]
    assert between["operation"]["type"] == "edit"
    across = reader.ok("diff", revision="main", base="v1")
    assert across["added"] == ["m5", "m6"] and across["a"] == reader.ok("read_conversation",
                                                                        conversation="v1")["revision"]


def test_resources_list_every_conversation_and_read_its_rendered_json(reader: Client, read_repo: Path) -> None:
    listed = reader.portal.call(reader.session.list_resources).resources
    uris = {str(r.uri): r for r in listed}
    assert set(uris) == {conversation_uri(r) for r in ("refs/heads/main", "refs/heads/notes",
                                                       "refs/heads/support/42", "refs/tags/v1")}
    main = uris["ctxstore://conversation/refs/heads/main"]
    assert main.mime_type == "application/json" and main.title == "Key rotation"
    templates = reader.portal.call(reader.session.list_resource_templates).resource_templates
    assert [t.uri_template for t in templates] == ["ctxstore://conversation/{+ref}"]
    with Repository.open(read_repo) as repo:
        rendered = repo.history("main").render()
        older = repo.history("main~1").render()
    for uri, expected in (("ctxstore://conversation/refs/heads/main", rendered),
                          ("ctxstore://conversation/main", rendered),
                          ("ctxstore://conversation/main~1", older)):
        contents = reader.portal.call(reader.session.read_resource, uri).contents
        assert len(contents) == 1 and isinstance(contents[0], TextResourceContents)
        assert contents[0].mime_type == "application/json"
        assert json.loads(contents[0].text) == expected
    with pytest.raises(MCPError, match="no ref or revision named 'nosuch'") as refused:
        reader.portal.call(reader.session.read_resource, "ctxstore://conversation/nosuch")
    assert refused.value.code == -32602


# -- errors: the server answers and keeps serving ----------------------------------------------------------
def test_a_bad_revision_is_a_tool_error_and_the_server_keeps_serving(reader: Client) -> None:
    assert "no ref or revision named 'nosuch'" in reader.error("read_conversation", conversation="nosuch")
    assert reader.error("read_conversation", conversation="main~x")  # malformed: refused, not a crash
    assert "nosuch" in reader.error("diff", revision="main", base="nosuch")
    assert "nosuch" in reader.error("grep", pattern="x", conversations=["nosuch"])
    assert reader.ok("list_conversations")["total"] == 4


def test_invalid_arguments_are_refused_with_the_field_named(reader: Client) -> None:
    assert "limit" in reader.error("read_conversation", conversation="main", limit=0)
    assert "conversation" in reader.error("read_conversation")
    assert "view" in reader.error("read_conversation", conversation="main", view="sideways")
    assert "either last, or offset and limit" in reader.error("read_conversation", conversation="main", last=1,
                                                              offset=2)
    assert "fields" in reader.error("grep", pattern="x", fields=["everywhere"])
    assert reader.ok("list_conversations")["total"] == 4


# -- writing -------------------------------------------------------------------------------------------------
def test_append_and_fork_are_refused_without_write(reader: Client, read_repo: Path) -> None:
    message = reader.error("append", conversation="main", messages=[{"role": "user", "content": "hi"}])
    assert "read-only" in message and "--write" in message
    assert "--write" in reader.error("fork", source="main", name="elsewhere")
    with Repository.open(read_repo) as repo:
        assert len(repo.history("main").render()) == 6 and repo.head("elsewhere") is None


def test_append_with_write_creates_the_ref_and_another_process_sees_it(writer: Client, write_repo: Path) -> None:
    messages = [{"role": "user", "content": "remember: the deploy key is in vault"},
                {"role": "assistant", "content": "Noted."}]
    done = writer.ok("append", conversation="team/memory", messages=messages)
    assert done["ref"] == "refs/heads/team/memory" and len(done["entryIds"]) == 2 and done["size"] == 2
    more = writer.ok("append", conversation="team/memory",
                     messages=[{"id": "e3", "message": {"role": "user", "content": "and the token?"},
                                "meta": {"source": "mcp-test"}}])
    assert more["entryIds"] == ["e3"] and more["size"] == 3
    with Repository.open(write_repo) as repo:
        assert repo.history("team/memory").render() == [*messages, {"role": "user", "content": "and the token?"}]
        assert repo.resolve("team/memory") == more["revision"]
        assert repo.reflog("team/memory")[0].message == "append (mcp)"
    assert writer.ok("grep", pattern="deploy key")["matches"][0]["ref"] == "refs/heads/team/memory"


def test_append_checks_messages_as_the_cli_does(writer: Client, write_repo: Path) -> None:
    assert "role 'system'" in writer.error("append", conversation="main",
                                           messages=[{"role": "system", "content": "be nice"}])
    orphan = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]
    assert "made no tool_use" in writer.error("append", conversation="main", messages=orphan)
    assert "is a tag" in writer.error("append", conversation="refs/tags/frozen",
                                      messages=[{"role": "user", "content": "x"}])
    assert "messages" in writer.error("append", conversation="main", messages=[])
    assert "invalid ref name" in writer.error("append", conversation="bad name",
                                              messages=[{"role": "user", "content": "x"}])
    use = [{"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "ls", "input": {}}]}]
    writer.ok("append", conversation="tools", messages=use)
    answer = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "a.py"}]}]
    assert writer.ok("append", conversation="tools", messages=answer)["size"] == 2  # answers the stored tool use
    with Repository.open(write_repo) as repo:
        assert len(repo.history("main").render()) == 2  # nothing refused reached it


def test_fork_makes_a_new_ref_from_any_revision(writer: Client, write_repo: Path) -> None:
    forked = writer.ok("fork", source="main", name="main-fork")
    assert forked["ref"] == "refs/heads/main-fork"
    with Repository.open(write_repo) as repo:
        assert forked["from"] == repo.resolve("main")
        assert repo.resolve("main-fork") == forked["revision"]
        assert repo.history("main-fork").render() == repo.history("main").render()
    writer.ok("append", conversation="main-fork", messages=[{"role": "user", "content": "only on the fork"}])
    assert writer.ok("read_conversation", conversation="main")["total"] == 2
    assert writer.ok("read_conversation", conversation="main-fork")["total"] == 3
    assert writer.ok("diff", revision="main-fork", base="main")["added"] != []
    assert "already exists" in writer.error("fork", source="main", name="main-fork")
    assert "nosuch" in writer.error("fork", source="nosuch", name="other")
    older = writer.ok("fork", source="main-fork~1", name="from-a-spec")
    assert older["from"] == forked["revision"]


# -- the process ---------------------------------------------------------------------------------------------
def test_stdout_carries_only_the_protocol(script: str, read_repo: Path) -> None:
    """A raw client: every line the server writes to stdout is a JSON-RPC message; its notice goes to stderr."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}}
    with subprocess.Popen([script, "mcp", "--repo", str(read_repo)], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as server:
        assert server.stdin is not None and server.stdout is not None
        server.stdin.write(json.dumps(init) + "\n")
        server.stdin.flush()
        with killed_after(server, 60):
            answer = json.loads(server.stdout.readline())
            server.stdin.close()
            rest = server.stdout.read()
        assert server.wait(timeout=60) == 0
        assert server.stderr is not None and "serving" in server.stderr.read()
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "ctxstore"
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines())


def test_the_cli_starts_without_the_mcp_sdk(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ctxstore.cli", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "  mcp " in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if "import time:" in line}
    assert "ctxstore.cli._mcp" in imported
    assert not {m for m in imported if m == "mcp" or m.startswith(("mcp.", "ctxstore.integrations"))}


def test_no_repository_is_a_one_line_error(script: str, tmp_path: Path) -> None:
    done = subprocess.run([script, "mcp", "--repo", str(tmp_path / "none")], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=60)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.startswith("ctxstore: error: no ctxstore repository at")
