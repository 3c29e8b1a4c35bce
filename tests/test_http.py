"""The HTTP hub: a real `serve --http` subprocess on 127.0.0.1, clients in other processes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import killed_after

from ctxstore import Repository, sync
from ctxstore.errors import AuthError, NonFastForward, NotARepository
from ctxstore.ids import from_hex
from ctxstore.pack.plan import plan_pack

READ = "r" * 24
WRITE = "w" * 24
CLI = [sys.executable, "-m", "ctxstore.cli"]


class Served:
    """A `ctxstore serve --http 127.0.0.1:0 ...` subprocess, with the URL it printed."""

    def __init__(self, *serve_args: str, env: dict[str, str] | None = None) -> None:
        argv = [*CLI, "serve", "--http", "127.0.0.1:0", *serve_args]
        self.proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True,
                                     env=None if env is None else {**os.environ, **env})
        assert self.proc.stderr is not None
        line = ""
        with killed_after(self.proc, 60):
            while "serving" not in line:
                line = self.proc.stderr.readline()
                if not line:
                    break
        assert "serving" in line, f"hub did not start: {line!r}"
        self.url = line.rsplit(" on ", 1)[1].strip()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Hub(Served):
    """A hub subprocess serving a directory of repositories, with a read and a write token."""

    def __init__(self, root: Path, *extra: str) -> None:
        tokens = root.parent / "tokens"
        tokens.write_text(f"# scope token name\nread {READ} reader\nwrite {WRITE} writer\n")
        super().__init__(str(root), "--tokens", str(tokens), *extra)


@pytest.fixture()
def hub(tmp_path: Path) -> Any:
    root = tmp_path / "hub"
    repo = Repository.init(root / "team" / "conv")
    repo.append("main", [{"role": "user", "content": "hello"}])
    repo.close()
    server = Hub(root, "--max-body", "200000")
    yield server, root
    server.stop()


def _raw_status(url: str, target: str, token: str) -> int:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(f"GET {target} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                     "Connection: close\r\n\r\n".encode())
        reply = conn.recv(1024)
    return int(reply.split(b" ", 2)[1])


def _state(path: Path) -> tuple[Any, ...]:
    with Repository.open(path) as repo, repo.store.transaction() as txn:
        return txn.refs("refs/"), len(repo.store)


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True,
                          text=True, timeout=120)


def test_status_codes_for_auth_paths_and_size(hub):
    server, _ = hub
    base = f"{server.url}/team/conv"
    with httpx2.Client(timeout=10) as client:
        assert client.get(f"{base}/refs").status_code == 401
        assert client.get(f"{base}/refs", headers={"Authorization": "Bearer " + "x" * 24}).status_code == 401
        assert client.get(f"{base}/refs", headers={"Authorization": f"Bearer {READ}"}).status_code == 200
        assert client.post(f"{base}/push", content=b"x",
                           headers={"Authorization": f"Bearer {READ}"}).status_code == 403
        auth = {"Authorization": f"Bearer {WRITE}"}
        for path in ("team/nope", "team", "..%2F..%2Fetc", ".hidden/conv", "team/conv%2F..%2F..%2F.."):
            assert client.get(f"{server.url}/{path}/refs", headers=auth).status_code == 404, path
        # Clients normalise dot segments; send them raw, as an attacker would.
        for raw in ("/../../etc/refs", "/team/../../hub/team/conv/refs", "/team/conv/../../../refs",
                    "/%2e%2e/%2e%2e/refs"):
            assert _raw_status(server.url, raw, WRITE) == 404, raw
        assert client.post(f"{base}/push", content=b"x" * 300_000, headers=auth).status_code == 413
        # A request frame cut short is the client's fault: 400, with an error frame saying so.
        for endpoint in ("push", "fetch"):
            answer = client.post(f"{base}/{endpoint}", content=b"\x00\x00", headers=auth)
            assert answer.status_code == 400, endpoint
            assert answer.headers["content-type"].startswith("application/x-ctxstore")


def test_clone_fetch_pull_push_between_processes(hub, tmp_path):
    server, root = hub
    url = f"{server.url}/team/conv"
    # Process A clones and pushes; this process then clones and sees A's message.
    done = _run("""
        import sys
        from ctxstore import sync
        repo = sync.clone(sys.argv[1], sys.argv[2], token=sys.argv[3])
        repo.append("main", [{"role": "user", "content": "from A"}])
        sync.push(repo, "origin", ["main"], token=sys.argv[3])
    """, url, str(tmp_path / "a"), WRITE)
    assert done.returncode == 0, done.stderr
    repo = sync.clone(url, tmp_path / "b", token=READ)
    assert [m["content"] for m in repo.history("main").render()] == ["hello", "from A"]
    # A no-op fetch is one round trip, no pack.
    assert sync.fetch(repo, "origin", token=READ).to_dict()["roundTrips"] == 1
    with pytest.raises(AuthError):
        repo.append("main", [{"role": "user", "content": "from B"}])
        sync.push(repo, "origin", ["main"], token=READ)
    with pytest.raises(AuthError):
        sync.fetch(repo, "origin")
    # Diverge, get refused, pull --rebase through the CLI, push.
    assert _run("""
        import sys
        from ctxstore import sync
        from ctxstore import Repository
        repo = Repository.open(sys.argv[1])
        sync.pull(repo, "origin", "main", token=sys.argv[2])
        repo.append("main", [{"role": "user", "content": "from A again"}])
        sync.push(repo, "origin", ["main"], token=sys.argv[2])
    """, str(tmp_path / "a"), WRITE).returncode == 0
    before = _state(root / "team" / "conv")
    with pytest.raises(NonFastForward):
        sync.push(repo, "origin", ["main"], token=WRITE)
    assert _state(root / "team" / "conv") == before
    with pytest.raises(NonFastForward):
        sync.push(repo, "origin", ["main"], token=WRITE, expect={"main": "00" * 32})
    pulled = subprocess.run([*CLI, "--repo", str(tmp_path / "b"), "pull", "origin", "main", "--rebase",
                             "--token", WRITE], capture_output=True, text=True, timeout=60)
    assert pulled.returncode == 0, pulled.stderr
    pushed = subprocess.run([*CLI, "--repo", str(tmp_path / "b"), "push", "origin", "main", "--token", WRITE],
                            capture_output=True, text=True, timeout=60)
    assert pushed.returncode == 0, pushed.stderr
    repo.close()
    with Repository.open(root / "team" / "conv") as hub_repo:
        assert [m["content"] for m in hub_repo.history("main").render()] == \
            ["hello", "from A", "from A again", "from B"]


def test_anonymous_read_flag_opens_fetch_but_never_push(tmp_path):
    root = tmp_path / "one"
    repo = Repository.init(root)
    repo.append("main", [{"role": "user", "content": "public"}])
    repo.close()
    server = Hub(root, "--allow-anonymous-read")
    try:
        clone = sync.clone(server.url, tmp_path / "anon")
        assert [m["content"] for m in clone.history("main").render()] == ["public"]
        clone.append("main", [{"role": "user", "content": "nope"}])
        with pytest.raises(AuthError):
            sync.push(clone, "origin", ["main"])
        clone.close()
        with pytest.raises(NotARepository):  # a 404 from a hub: no repository at that URL (exit 3)
            sync.clone(server.url + "/not-here", tmp_path / "missing")
    finally:
        server.stop()


WORKER = """
import sys
from ctxstore import sync
from ctxstore.errors import NonFastForward
url, path, token, name = sys.argv[1:5]
repo = sync.clone(url, path, token=token)
for i in range(5):
    repo.append("main", [{"role": "user", "content": f"{name}-{i}"}])
    for attempt in range(200):
        try:
            sync.push(repo, "origin", ["main"], token=token)
            break
        except NonFastForward:
            sync.pull(repo, "origin", "main", rebase=True, token=token)
    else:
        sys.exit("gave up")
"""


def test_four_processes_pushing_to_one_conversation_lose_nothing(hub, tmp_path):
    server, root = hub
    url = f"{server.url}/team/conv"
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, url, str(tmp_path / f"w{k}"), WRITE, f"p{k}"],
                              stderr=subprocess.PIPE, text=True) for k in range(4)]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    with Repository.open(root / "team" / "conv") as repo:
        contents = [m["content"] for m in repo.history("main").render()]
    expected = {f"p{k}-{i}" for k in range(4) for i in range(5)}
    counts = Counter(contents)
    assert set(contents) == expected | {"hello"}
    assert all(counts[c] == 1 for c in expected)


def test_pushing_ten_messages_onto_ten_thousand_sends_only_those(hub, tmp_path):
    """Over the real server: the entries and revisions of the ten appends, and no tree nodes."""
    server, root = hub
    repo = sync.clone(f"{server.url}/team/conv", tmp_path / "c", token=WRITE)
    repo.append("main", [{"role": "user", "content": f"old message {i}"} for i in range(10_000)])
    sync.push(repo, "origin", ["main"], token=WRITE)
    for i in range(10):
        repo.append("main", [{"role": "assistant", "content": f"new {i}"}])
    head = repo.head("main")
    plan = plan_pack(repo.store, [from_hex(head)], [from_hex(repo.head("refs/remotes/origin/main"))])
    assert len(plan) == 20 and len(plan.rebuildable) == 10
    result = sync.push(repo, "origin", ["main"], token=WRITE)
    # The hub stored the 20 objects sent and the nodes the appends closed (about one leaf in 32 appends),
    # which it rebuilt: a revision holds its spine, so an append sends no node.
    assert 20 <= result.objects <= 20 + 10
    assert result.bytes < 1_000
    with Repository.open(root / "team" / "conv") as served:
        assert served.head("main") == head
        assert served.history("main").render()[-1]["content"] == "new 9"
        assert served.fsck().ok
