"""fetch, pull, push and clone over a local path and a real `serve --stdio` subprocess (and ssh://)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from ctxstore import Repository, sync
from ctxstore.errors import NonFastForward, UnknownRef
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
    from ctxstore.ids import from_hex
    from ctxstore.pack.plan import pack
    from ctxstore.sync.protocol import RefUpdate

    hub.append("main", [{"role": "user", "content": "theirs"}])
    mine.append("main", [{"role": "user", "content": "ours"}])
    current = from_hex(hub.head("main"))
    new = from_hex(mine.head("main"))
    before = _state(hub)
    transport = LocalTransport(hub.path)
    with pytest.raises(NonFastForward):
        transport.push([RefUpdate("refs/heads/main", current, new, "ff")], pack(mine.store, [new], []))
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
