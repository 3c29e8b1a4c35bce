"""fetch, pull, push and clone over a local path and a real `serve --stdio` subprocess (and ssh://)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxstore import Repository, sync
from ctxstore.errors import InvalidInput, NonFastForward, RefMoved, RemoteError, SyncError, UnknownRef
from ctxstore.ids import OID_SIZE, from_hex
from ctxstore.pack.plan import pack
from ctxstore.sync.protocol import Advertisement, RefUpdate, decode_error, encode_error
from ctxstore.sync.transport import LocalTransport, StdioTransport, ssh_command

SERVE = [sys.executable, "-m", "ctxstore.cli", "serve", "--stdio"]


def _msgs(repo: Repository, ref: str = "main") -> list[str]:
    return [m["content"] for m in repo.history(ref).render()]


def _state(repo: Repository) -> tuple[Any, ...]:
    with repo.store.transaction() as txn:
        return txn.refs("refs/"), len(repo.store), {n: txn.reflog(n) for n in txn.reflog_names()}


@pytest.fixture()
def hub(tmp_path: Path) -> Repository:
    repo = Repository.init(tmp_path / "hub")
    repo.append("main", [{"role": "user", "content": "hello"}])
    repo.append("side", [{"role": "user", "content": "side"}])
    yield repo
    repo.close()


@pytest.fixture()
def mine(hub: Repository, tmp_path: Path) -> Repository:
    repo = sync.clone(str(hub.path), tmp_path / "mine")
    yield repo
    repo.close()


class CountingTransport:
    """A local transport that records how many packs it was asked for."""

    def __init__(self, path: Path) -> None:
        self.inner = LocalTransport(path)
        self.url = self.inner.url
        self.fetches = 0

    def advertise(self) -> Any:
        return self.inner.advertise()

    def fetch(self, wants: Any, haves: Any, receive: Any) -> Any:
        self.fetches += 1
        return self.inner.fetch(wants, haves, receive)

    def push(self, updates: Any, pack: Any) -> Any:
        return self.inner.push(updates, pack)

    def close(self) -> None:
        self.inner.close()


def test_clone_records_origin_and_creates_local_heads(hub, mine):
    assert mine.remotes() == {"origin": str(hub.path)}
    refs = mine.refs("refs/")
    for name in ("main", "side"):
        assert refs[f"refs/heads/{name}"] == refs[f"refs/remotes/origin/{name}"] == hub.head(name)
    assert _msgs(mine) == ["hello"]


def test_fetch_creates_the_remotes_new_tags_and_never_moves_a_local_one(hub, mine):
    hub.append("main", [{"role": "user", "content": "released"}])
    hub.set_ref("refs/tags/v1", hub.head("main"))
    hub.set_ref("refs/tags/v0", hub.head("side"))
    mine.set_ref("refs/tags/v0", mine.head("main"))  # a local tag of the same name, elsewhere
    result = sync.fetch(mine, "origin")
    assert mine.refs("refs/tags/") == {"refs/tags/v1": hub.head("main"), "refs/tags/v0": mine.head("main")}
    assert "refs/tags/v1" in result.updated and "refs/tags/v0" not in result.updated
    assert _msgs(mine, "refs/tags/v1") == ["hello", "released"]
    counting = CountingTransport(hub.path)
    assert sync.fetch(mine, "origin", transport=counting).updated == {} and counting.fetches == 0


def test_noop_fetch_asks_for_no_pack(hub, mine):
    counting = CountingTransport(hub.path)
    result = sync.fetch(mine, "origin", transport=counting)
    assert counting.fetches == 0 and result.objects == 0 and result.round_trips == 1
    hub.append("main", [{"role": "user", "content": "new"}])
    result = sync.fetch(mine, "origin", transport=counting)
    # The entry and the revision, and the leaf the append closed if it closed one (rebuilt, not sent).
    assert counting.fetches == 1 and 2 <= result.objects <= 5
    assert mine.head("refs/remotes/origin/main") == hub.head("main")
    counting.close()


def test_pull_fast_forwards_and_rebases(hub, mine):
    hub.append("main", [{"role": "user", "content": "theirs"}])
    assert sync.pull(mine, "origin", "main").how == "fast-forward"
    assert _msgs(mine) == ["hello", "theirs"]
    hub.append("main", [{"role": "user", "content": "theirs 2"}])
    mine.append("main", [{"role": "user", "content": "ours"}])
    with pytest.raises(NonFastForward):
        sync.pull(mine, "origin", "main")
    assert sync.pull(mine, "origin", "main", rebase=True).how == "rebase"
    assert _msgs(mine) == ["hello", "theirs", "theirs 2", "ours"]


def test_divergent_push_is_refused_and_server_unchanged(hub, mine):
    hub.append("main", [{"role": "user", "content": "theirs"}])
    mine.append("main", [{"role": "user", "content": "ours"}])
    before = _state(hub)
    with pytest.raises(NonFastForward):
        sync.push(mine, "origin", ["main"])
    assert _state(hub) == before
    # Force overrides.
    sync.push(mine, "origin", ["main"], force=True)
    assert hub.head("main") == mine.head("main")


def test_server_refuses_non_fast_forward_even_from_a_lying_client(hub, mine):
    """The server checks ancestry itself: a client claiming ff for a divergent head is refused."""
    hub.append("main", [{"role": "user", "content": "theirs"}])
    mine.append("main", [{"role": "user", "content": "ours"}])
    current = hub.head("main")
    new = mine.head("main")
    before = _state(hub)
    transport = LocalTransport(hub.path)
    with pytest.raises(NonFastForward):
        transport.push([RefUpdate("refs/heads/main", current, new, "ff")],
                       pack(mine.store, [from_hex(new)], []))
    transport.close()
    assert _state(hub) == before


def test_wrong_lease_is_refused_and_right_lease_replaces(hub, mine):
    mine.append("main", [{"role": "user", "content": "ours"}])
    before = _state(hub)
    with pytest.raises(NonFastForward):
        sync.push(mine, "origin", ["main"], expect={"main": "ab" * 32})
    assert _state(hub) == before
    sync.push(mine, "origin", ["main"], expect={"main": hub.head("main")})
    assert hub.head("main") == mine.head("main")


def test_multi_ref_push_where_one_fails_moves_none(hub, mine):
    hub.append("side", [{"role": "user", "content": "theirs"}])
    mine.append("main", [{"role": "user", "content": "ours main"}])
    mine.append("side", [{"role": "user", "content": "ours side"}])
    before = _state(hub)
    with pytest.raises(NonFastForward):
        sync.push(mine, "origin", ["main", "side"])
    assert _state(hub) == before
    sync.push(mine, "origin", ["main"])
    assert _msgs(hub) == ["hello", "ours main"]


def test_unknown_remote_is_a_clear_error(mine):
    with pytest.raises(UnknownRef, match="no remote named"):
        sync.fetch(mine, "nowhere")


@pytest.mark.parametrize("name", ["a.b", "a:b", "a b", "a\rb", "-a", "a/b", ""])
def test_fetch_push_and_remote_add_refuse_the_same_remote_names(mine, name):
    """One rule (`repo.config.check_remote_name`): a name `remote add` refuses is refused by fetch and push
    too, instead of a fetch suggesting a `remote add` that cannot work."""
    with pytest.raises(InvalidInput, match="invalid remote name"):
        mine.remote_add(name, "https://hub.example/r")
    with pytest.raises(InvalidInput, match="invalid remote name"):
        sync.fetch(mine, name)
    with pytest.raises(InvalidInput, match="invalid remote name"):
        sync.push(mine, name, ["main"])
    assert name not in mine.remotes()


def test_stdio_transport_through_a_real_subprocess(hub, tmp_path):
    repo = Repository.init(tmp_path / "via-stdio")
    repo.remote_add("origin", "stdio")
    conn = StdioTransport([*SERVE, str(hub.path)])
    try:
        result = sync.fetch(repo, "origin", transport=conn)
    finally:
        conn.close()
    assert result.objects > 0
    assert repo.head("refs/remotes/origin/main") == hub.head("main")
    sync.pull(repo, "origin", "main", transport=LocalTransport(hub.path))
    repo.append("main", [{"role": "user", "content": "over stdio"}])
    conn = StdioTransport([*SERVE, str(hub.path)])
    try:
        sync.push(repo, "origin", ["main"], transport=conn)
    finally:
        conn.close()
    assert _msgs(hub) == ["hello", "over stdio"]
    # A refused push over stdio arrives as NonFastForward and leaves the server as it was.
    hub.append("main", [{"role": "user", "content": "theirs"}])
    repo.append("main", [{"role": "user", "content": "diverged"}])
    before = _state(hub)
    conn = StdioTransport([*SERVE, str(hub.path)])
    try:
        with pytest.raises(NonFastForward):
            sync.push(repo, "origin", ["main"], transport=conn, force=False)
    finally:
        conn.close()
    assert _state(hub) == before
    repo.close()


def test_ssh_url_runs_serve_stdio_through_the_ssh_command(hub, tmp_path, monkeypatch):
    """ssh:// remotes run `ssh host ctxstore serve --stdio PATH`; a stand-in ssh runs it locally."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ssh"
    # Like ssh: drop options and the host, hand the rest to a shell; `ctxstore` is the sync entry point.
    fake.write_text(f"""#!/bin/sh
while [ "$1" != "--" ]; do shift; done
shift; shift
ctxstore() {{ "{sys.executable}" -m ctxstore.cli "$@"; }}
eval "$*"
""")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    url = f"ssh://someone@example.invalid{hub.path}"
    assert ssh_command(url)[-1] == f"'{hub.path}'"
    repo = sync.clone(url, tmp_path / "over-ssh")
    assert _msgs(repo) == ["hello"]
    repo.close()


def _is_hex_id(value: object) -> bool:
    return isinstance(value, str) and len(value) == 2 * OID_SIZE and from_hex(value).hex() == value


def test_sync_results_spell_every_id_in_hex_and_keep_their_json_keys(hub, mine):
    """fetch, pull and push results carry hex ids (never raw bytes), and to_dict keeps its camelCase keys."""
    hub.append("main", [{"role": "user", "content": "theirs"}])
    fetched = sync.fetch(mine, "origin")
    assert fetched.updated == {"refs/remotes/origin/main": hub.head("main")}
    assert all(_is_hex_id(v) for v in fetched.updated.values())
    assert list(fetched.to_dict()) == ["remote", "updated", "objects", "newObjects", "bytes", "roundTrips"]
    old = mine.head("main")
    pulled = sync.pull(mine, "origin", "main")
    assert (pulled.old, pulled.new) == (old, hub.head("main")) and _is_hex_id(pulled.new)
    assert list(pulled.to_dict()) == ["ref", "old", "new", "how", "fetch"]
    assert pulled.to_dict()["fetch"]["remote"] == "origin"
    mine.append("main", [{"role": "user", "content": "ours"}])
    pushed = sync.push(mine, "origin", ["main"])
    assert pushed.updated == {"refs/heads/main": mine.head("main")} == {"refs/heads/main": hub.head("main")}
    assert list(pushed.to_dict()) == ["remote", "updated", "objects", "bytes"]


def test_advertisement_and_ref_updates_are_hex_and_travel_raw():
    """The protocol's types speak hex; only their wire messages carry the 32-byte ids."""
    a, b = "ab" * 32, "cd" * 32
    update = RefUpdate("refs/heads/main", a, b, "lease")
    message = update.to_message()
    assert message["old"] == bytes.fromhex(a) and message["new"] == bytes.fromhex(b)
    assert RefUpdate.from_message(message) == update
    assert RefUpdate.from_message({**message, "old": None}).old is None
    advert = Advertisement({"refs/heads/main": a})
    assert advert.to_message()["refs"] == {"refs/heads/main": bytes.fromhex(a)}
    assert Advertisement.from_message(advert.to_message(), "hub") == advert
    with pytest.raises(InvalidInput):
        RefUpdate.from_message({**message, "ref": 7})
    with pytest.raises(RemoteError, match="malformed advertisement"):
        Advertisement.from_message({"refs": {"refs/heads/main": a}}, "hub")


def test_a_lost_race_crosses_the_wire_as_ref_moved():
    """The server's RefMoved (a compare-and-swap lost to another writer) arrives as RefMoved, fields kept."""
    error = decode_error(encode_error(RefMoved("moved", ref="refs/heads/main", current="ab" * 32,
                                               expected="cd" * 32)), "hub")
    assert type(error) is RefMoved
    assert (error.ref, error.current, error.expected) == ("refs/heads/main", "ab" * 32, "cd" * 32)
    assert type(decode_error(encode_error(NonFastForward("no", ref="r")), "hub")) is NonFastForward
    assert type(decode_error({"error": {"type": "ValueError", "message": "x"}}, "hub")) is RemoteError


class StaleTransport(CountingTransport):
    """Advertises, then lets another writer move the hub's main before the push lands."""

    def __init__(self, path: Path, hub: Repository) -> None:
        super().__init__(path)
        self.hub = hub

    def advertise(self) -> Any:
        advert = self.inner.advertise()
        self.hub.append("main", [{"role": "user", "content": "raced in"}])
        return advert


def test_a_push_that_loses_the_race_raises_ref_moved_and_changes_nothing(hub, mine, tmp_path):
    """The remote ref moved between the advertisement and the push: RefMoved, retryable after a pull."""
    mine.append("main", [{"role": "user", "content": "ours"}])
    transport = StaleTransport(hub.path, hub)
    try:
        with pytest.raises(RefMoved) as caught:
            sync.push(mine, "origin", ["main"], transport=transport)
    finally:
        transport.close()
    assert caught.value.current == hub.head("main") and "raced in" in _msgs(hub)[-1]
    assert "ours" not in _msgs(hub)
    sync.pull(mine, "origin", "main", rebase=True)
    sync.push(mine, "origin", ["main"])
    assert _msgs(hub) == ["hello", "raced in", "ours"]


def test_a_lease_that_is_not_a_hex_id_is_invalid_input(hub, mine):
    mine.append("main", [{"role": "user", "content": "ours"}])
    for bad in ("main", b"\x00" * 32, 7):
        with pytest.raises(InvalidInput):
            sync.push(mine, "origin", ["main"], expect={"main": bad})  # type: ignore[dict-item]


def test_a_stdio_server_that_dies_or_never_starts_is_a_sync_error(tmp_path):
    """A peer that exits before speaking is a RemoteError; a command that cannot run is a SyncError."""
    conn = StdioTransport([sys.executable, "-c", "pass"])
    try:
        with pytest.raises(RemoteError, match="connection closed"):
            conn.advertise()
    finally:
        conn.close()
    with pytest.raises(SyncError, match="cannot start"):
        StdioTransport([str(tmp_path / "no-such-command")])


def test_cli_fetch_pull_push_print_hex_ids_under_the_same_json_keys(hub, tmp_path):
    """The CLI's sync commands print each result's to_dict(): camelCase keys, hex ids."""
    import json

    from click.testing import CliRunner

    from ctxstore.cli import cli

    runner = CliRunner()
    where = tmp_path / "work"
    cloned = runner.invoke(cli, ["clone", str(hub.path), str(where)])
    assert cloned.exit_code == 0, cloned.output
    hub.append("main", [{"role": "user", "content": "theirs"}])

    def run(*args: str) -> Any:
        result = runner.invoke(cli, ["-C", str(where), *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout[result.stdout.index("{"):])

    fetched = run("fetch", "origin")
    assert fetched["updated"] == {"refs/remotes/origin/main": hub.head("main")} and fetched["roundTrips"] == 2
    pulled = run("pull", "origin", "main")
    assert (pulled["how"], pulled["new"]) == ("fast-forward", hub.head("main"))
    assert _is_hex_id(pulled["old"]) and set(pulled["fetch"]) == set(fetched)
    with Repository.open(where / ".ctxstore") as repo:
        repo.append("main", [{"role": "user", "content": "ours"}])
        head = repo.head("main")
    pushed = run("push", "origin", "main", "--force-with-lease", "main")
    assert pushed["updated"] == {"refs/heads/main": head} == {"refs/heads/main": hub.head("main")}
    assert list(pushed) == ["remote", "updated", "objects", "bytes"]


@pytest.mark.parametrize("url", ["http://[::1]:x/r", "http://ex\x00ample.com/r", "http://[::1/r",
                                 "ssh://host:port/p", "ssh://[::1/p", "gopher://host/p"])
def test_a_malformed_remote_url_is_invalid_input_not_a_bare_value_error(url):
    """Whatever urllib or the HTTP client make of a URL, the caller sees InvalidInput."""
    with pytest.raises(InvalidInput):
        conn = sync.open_transport(url)
        try:
            conn.advertise()
        finally:
            conn.close()


# -- git's habits: progress, pull_all, push --delete, local remote paths ------------------------------------

def test_fetch_progress_reports_the_packs_object_count_and_bytes(hub: Repository, mine: Repository) -> None:
    hub.append("main", [{"role": "user", "content": f"message {n} " + "x" * 300} for n in range(400)])
    seen: list[tuple[str, int, int]] = []
    result = sync.fetch(mine, "origin", progress=lambda stage, objects, size: seen.append((stage, objects, size)))
    declared = seen[-1][1]
    assert seen[-1] == ("received", declared, result.bytes)
    assert 400 < declared <= result.objects  # the pack's count (the receiver rebuilds some objects more)
    moving = [s for s in seen if s[0] == "receiving"]
    assert moving and all(objects == declared for _, objects, _ in moving)  # the total, known up front
    sizes = [size for _, _, size in moving]
    assert sizes == sorted(sizes) and sizes[-1] <= result.bytes


def test_push_progress_reports_the_packs_object_count(hub: Repository, mine: Repository) -> None:
    mine.append("main", [{"role": "user", "content": "pushed"}])
    seen: list[tuple[str, int, int]] = []
    result = sync.push(mine, "origin", ["main"], progress=lambda *call: seen.append(call))
    assert seen[-1][0] == "sent" and seen[-1][2] == result.bytes and 0 < seen[-1][1] <= result.objects


def test_pull_all_brings_every_tracked_head_and_reports_a_diverged_one(hub: Repository,
                                                                       mine: Repository) -> None:
    hub.append("main", [{"role": "user", "content": "theirs"}])
    hub.append("side", [{"role": "user", "content": "theirs on side"}])
    mine.append("main", [{"role": "user", "content": "ours"}])
    mine.set_ref("untracked", mine.resolve("side"))
    results = sync.client.pull_all(mine, "origin")
    assert {r.ref: r.how for r in results} == {"refs/heads/main": "diverged", "refs/heads/side": "fast-forward"}
    diverged = results[0]
    assert diverged.new == hub.head("main") and diverged.old == mine.head("main")
    assert _msgs(mine)[-1] == "ours" and _msgs(mine, "side")[-1] == "theirs on side"
    assert _msgs(mine, "untracked") == ["side"]
    rebased = sync.client.pull_all(mine, "origin", rebase=True)
    assert {r.ref: r.how for r in rebased} == {"refs/heads/main": "rebase", "refs/heads/side": "up-to-date"}
    assert _msgs(mine) == ["hello", "theirs", "ours"]


def test_push_delete_is_a_compare_and_swap_on_the_remote(hub: Repository, mine: Repository) -> None:
    result = sync.push(mine, "origin", ["side"], delete=True)
    assert result.updated == {"refs/heads/side": None}
    assert hub.head("side") is None and mine.head("refs/remotes/origin/side") is None
    assert mine.head("side") is not None
    with pytest.raises(UnknownRef, match="no ref refs/heads/side to delete"):
        sync.push(mine, "origin", ["side"], delete=True)
    with pytest.raises(InvalidInput, match="name the remote refs"):
        sync.push(mine, "origin", [], delete=True)


def test_a_relative_remote_path_is_recorded_absolute(hub: Repository, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub.path is not None
    monkeypatch.chdir(hub.path.parent)
    repo = sync.clone("hub", tmp_path / "rel" / ".ctxstore")
    try:
        assert repo.remotes()["origin"] == str(hub.path)
        monkeypatch.chdir(tmp_path / "rel")  # somewhere the relative path means nothing
        hub.append("main", [{"role": "user", "content": "later"}])
        sync.pull(repo, "origin", "main")
        assert _msgs(repo)[-1] == "later"
        repo.remote_add("plain", "some/where")
        assert repo.remotes()["plain"] == str(tmp_path / "rel" / "some" / "where")
    finally:
        repo.close()


def test_remote_url_finds_a_working_directorys_repository(tmp_path: Path) -> None:
    Repository.init(tmp_path / "work" / ".ctxstore").close()
    Repository.init(tmp_path / "bare").close()
    assert sync.client.remote_url(str(tmp_path / "work")) == str(tmp_path / "work" / ".ctxstore")
    assert sync.client.remote_url("bare", base=tmp_path) == str(tmp_path / "bare")
    assert sync.client.remote_url("../work/", base=tmp_path / "bare") == str(tmp_path / "work" / ".ctxstore")
    for url in ("http://hub:8765/team/conv", "ssh://host/srv/conv", "file:///srv/conv"):
        assert sync.client.remote_url(url) == url
    with pytest.raises(InvalidInput):
        sync.client.remote_url("")
