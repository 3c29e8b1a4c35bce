"""Stateless hubs over PostgreSQL: real `ctxstore serve --http --store` processes on 127.0.0.1, two on one
database, clients in other processes. What one hub took in, the other serves at once; races between them
end in 409 and a retry, never a 500 or a lost message; a hub killed mid-push leaves the database whole.

The 8-client race runs 3 pushes per client; CTXSTORE_LONG_TESTS=1 makes it 12.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
from test_http import Served

from ctxstore import Repository, sync
from ctxstore.errors import AuthError, NonFastForward, NotARepository, RefMoved
from ctxstore.ids import from_hex
from ctxstore.pack.plan import pack
from ctxstore.sync.http import HttpTransport
from ctxstore.sync.protocol import RefUpdate, encode_frame, push_request, read_frame

if TYPE_CHECKING:
    from ctxstore.store.postgres import PostgresDatabase

CLI = [sys.executable, "-m", "ctxstore.cli"]
READ = "r" * 24
WRITE = "w" * 24
ADMIN = "a" * 24
LONG = os.environ.get("CTXSTORE_LONG_TESTS") == "1"


class Hub(Served):
    """A `ctxstore serve --http 127.0.0.1:0 --store URL` subprocess."""

    def __init__(self, store: str, tokens: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        super().__init__("--store", store, "--tokens", str(tokens), *extra, env=env)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tokens") / "tokens"
    path.write_text(f"read {READ} reader\nwrite {WRITE} writer\nadmin {ADMIN} operator\n")
    return path


@pytest.fixture(scope="module")
def database(postgres_url: str) -> Iterator[PostgresDatabase]:
    pytest.importorskip("psycopg")
    from ctxstore.store.postgres import PostgresDatabase

    db = PostgresDatabase(postgres_url)
    yield db
    db.close()


@pytest.fixture(scope="module")
def hubs(postgres_url: str, tokens: Path, database: PostgresDatabase) -> Iterator[tuple[Hub, Hub]]:
    """Two hubs on one database."""
    one, two = Hub(postgres_url, tokens), Hub(postgres_url, tokens)
    yield one, two
    one.stop()
    two.stop()


def _name() -> str:
    return f"t{uuid.uuid4().hex[:10]}/conv"


def _seeded(database: PostgresDatabase, **heads: str) -> str:
    """A new repository in the database, each head holding one message; returns its name."""
    name = _name()
    with Repository(database.create(name)) as repo:
        for head, text in (heads or {"main": "hello"}).items():
            repo.append(head, [{"role": "user", "content": text}])
    return name


def _served(database: PostgresDatabase, name: str) -> Repository:
    return Repository(database.open(name))


def _state(database: PostgresDatabase, name: str) -> tuple[Any, ...]:
    with _served(database, name) as repo, repo.store.transaction() as txn:
        return txn.refs("refs/"), len(repo.store), {n: txn.reflog(n) for n in txn.reflog_names()}


def _msgs(repo: Repository, ref: str = "main") -> list[str]:
    return [m["content"] for m in repo.history(ref).render()]


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


# -- the sync operations, through two hubs on one database ------------------------------------------------

def test_a_push_through_one_hub_is_fetched_through_the_other_at_once(hubs, database, tmp_path):
    one, two = hubs
    name = _seeded(database)
    mine = sync.clone(f"{one.url}/{name}", tmp_path / "mine", token=WRITE)
    theirs = sync.clone(f"{two.url}/{name}", tmp_path / "theirs", token=WRITE)
    assert _msgs(mine) == _msgs(theirs) == ["hello"]
    mine.append("main", [{"role": "user", "content": "through one"}])
    sync.push(mine, "origin", ["main"], token=WRITE)
    assert sync.pull(theirs, "origin", "main", token=READ).how == "fast-forward"
    assert _msgs(theirs) == ["hello", "through one"]
    # The other way, diverged: refused through one, then pull --rebase and push through the other.
    theirs.append("main", [{"role": "user", "content": "through two"}])
    sync.push(theirs, "origin", ["main"], token=WRITE)
    mine.append("main", [{"role": "user", "content": "mine again"}])
    before = _state(database, name)
    with pytest.raises(NonFastForward):
        sync.push(mine, "origin", ["main"], token=WRITE)
    assert _state(database, name) == before
    assert sync.pull(mine, "origin", "main", rebase=True, token=WRITE).how == "rebase"
    sync.push(mine, "origin", ["main"], token=WRITE)
    with _served(database, name) as served:
        assert _msgs(served) == ["hello", "through one", "through two", "mine again"]
        assert served.fsck().ok
    mine.close()
    theirs.close()


def test_the_lease_and_scopes_over_a_database_hub(hubs, database, tmp_path):
    one, two = hubs
    name = _seeded(database)
    mine = sync.clone(f"{one.url}/{name}", tmp_path / "mine", token=READ)
    mine.append("main", [{"role": "user", "content": "ours"}])
    with pytest.raises(AuthError):
        sync.push(mine, "origin", ["main"], token=READ)
    before = _state(database, name)
    with pytest.raises(NonFastForward):
        sync.push(mine, "origin", ["main"], token=WRITE, expect={"main": "ab" * 32})
    assert _state(database, name) == before
    with _served(database, name) as served:
        held = served.head("main")
    sync.push(mine, "origin", ["main"], token=ADMIN, expect={"main": held})  # admin may push too
    assert sync.clone(f"{two.url}/{name}", tmp_path / "other", token=READ).head("main") == mine.head("main")
    with pytest.raises(NotARepository):
        sync.clone(f"{two.url}/nobody/here", tmp_path / "missing", token=READ)
    mine.close()


def test_multi_ref_push_is_all_or_nothing(hubs, database, tmp_path):
    one, two = hubs
    name = _seeded(database, main="hello", side="side")
    mine = sync.clone(f"{one.url}/{name}", tmp_path / "mine", token=WRITE)
    with _served(database, name) as served:
        served.append("side", [{"role": "user", "content": "theirs"}])
    mine.append("main", [{"role": "user", "content": "ours main"}])
    mine.append("side", [{"role": "user", "content": "ours side"}])
    before = _state(database, name)
    with pytest.raises(NonFastForward):
        sync.push(mine, "origin", ["main", "side"], token=WRITE)
    assert _state(database, name) == before
    mine.remote_add("two", f"{two.url}/{name}")
    sync.push(mine, "two", ["main"], token=WRITE)
    with _served(database, name) as served:
        assert _msgs(served) == ["hello", "ours main"] and _msgs(served, "side") == ["side", "theirs"]
    mine.close()


def test_bad_packs_leave_the_database_unchanged(hubs, database, tmp_path):
    one, _ = hubs
    name = _seeded(database)
    local = Repository.init(tmp_path / "local")
    local.append("main", [{"role": "user", "content": f"m{i} " + "x" * 100} for i in range(50)])
    head = local.head("main")
    good = b"".join(pack(local.store, [from_hex(head)], []))
    frame = encode_frame(push_request([RefUpdate("refs/heads/main", None, head, "force")]))
    before = _state(database, name)
    bodies = [good[: len(good) // 2], good[:-8] + b"\x00" * 8, good[:40] + bytes([good[40] ^ 1]) + good[41:],
              b"not a pack at all"]
    with httpx2.Client(timeout=30) as client:
        for body in bodies:
            answer = client.post(f"{one.url}/{name}/push", content=frame + body,
                                 headers={"Authorization": f"Bearer {WRITE}"})
            assert answer.status_code == 400, answer.content
            assert read_frame(io.BytesIO(answer.content))["error"]["message"]
            assert _state(database, name) == before
    local.close()


def test_a_lost_compare_and_swap_is_409_ref_moved_then_retried(hubs, database, tmp_path):
    """The ref moved through the other hub between our advertisement and our push: 409, RefMoved."""
    one, two = hubs
    name = _seeded(database)
    mine = sync.clone(f"{one.url}/{name}", tmp_path / "mine", token=WRITE)
    racer = sync.clone(f"{two.url}/{name}", tmp_path / "racer", token=WRITE)
    mine.append("main", [{"role": "user", "content": "ours"}])
    transport = HttpTransport(f"{one.url}/{name}", token=WRITE)
    try:
        seen = transport.advertise().refs["refs/heads/main"]
        racer.append("main", [{"role": "user", "content": "raced in"}])
        sync.push(racer, "origin", ["main"], token=WRITE)
        with pytest.raises(RefMoved):
            transport.push([RefUpdate("refs/heads/main", seen, mine.head("main"), "ff")],
                           pack(mine.store, [from_hex(mine.head("main"))], [from_hex(seen)]))
    finally:
        transport.close()
    sync.pull(mine, "origin", "main", rebase=True, token=WRITE)
    sync.push(mine, "origin", ["main"], token=WRITE)
    with _served(database, name) as served:
        assert _msgs(served) == ["hello", "raced in", "ours"]
    mine.close()
    racer.close()


WORKER = """
import sys
from ctxstore import sync
from ctxstore.errors import NonFastForward
url, path, token, name, count = sys.argv[1:6]
repo = sync.clone(url, path, token=token)
for i in range(int(count)):
    repo.append("main", [{"role": "user", "content": f"{name}-{i}"}])
    for attempt in range(500):
        try:
            sync.push(repo, "origin", ["main"], token=token)
            break
        except NonFastForward:  # RefMoved too: a lost race is retried after a rebase
            sync.pull(repo, "origin", "main", rebase=True, token=token)
    else:
        sys.exit("gave up")
"""


def test_eight_clients_through_two_hubs_lose_nothing(hubs, database, tmp_path):
    """8 processes append to one conversation, alternately through each hub, retrying with pull --rebase."""
    one, two = hubs
    name = _seeded(database)
    count = 12 if LONG else 3
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, f"{(one, two)[k % 2].url}/{name}",
                               str(tmp_path / f"w{k}"), WRITE, f"p{k}", str(count)],
                              stderr=subprocess.PIPE, text=True) for k in range(8)]
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    with _served(database, name) as served:
        contents = _msgs(served)
        assert served.fsck().ok
    expected = {f"p{k}-{i}" for k in range(8) for i in range(count)}
    assert Counter(contents) == Counter(expected | {"hello"})


# -- a hub killed mid-push ------------------------------------------------------------------------------

def _raw_push(url: str, name: str, body: bytes, send: int) -> socket.socket:
    """A push whose headers and first `send` body bytes are on the wire (the rest never comes)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(f"POST /{name}/push HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
                 f"Authorization: Bearer {WRITE}\r\nContent-Type: application/x-ctxstore\r\n\r\n".encode())
    sock.sendall(body[:send])
    return sock


def _wait_for_the_write(postgres_url: str, sock: socket.socket) -> None:
    """Return once some session holds a repository's writer lock (a write transaction is under way), or
    the hub answered on `sock`."""
    import psycopg

    sock.settimeout(0.002)
    deadline = time.monotonic() + 60
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s "
                               "AND granted", (0x63747302,)).fetchone()
            if row and row[0]:
                return
            with contextlib.suppress(TimeoutError):
                if sock.recv(1, socket.MSG_PEEK):
                    return


def test_sigkill_of_a_hub_mid_push_leaves_the_database_consistent(hubs, postgres_url, tokens, database, tmp_path):
    """Killed while a large pack arrives, once it arrived (while it is checked), and while its write
    transaction runs: the ref is where it was or fully moved, fsck is clean, and the other hub takes it."""
    _, two = hubs
    name = _seeded(database)
    with _served(database, name) as served:
        old = served.head("main")
    local = sync.clone(f"{two.url}/{name}", tmp_path / "local", token=READ)
    rng = __import__("random").Random(5)
    local.append("main", [{"role": "user", "content": rng.randbytes(1000).hex()} for _ in range(1200)])
    new = local.head("main")
    body = encode_frame(push_request([RefUpdate("refs/heads/main", old, new, "ff")])) + \
        b"".join(pack(local.store, [from_hex(new)], [from_hex(old)]))
    for when in ("uploading", "checking", "writing"):
        victim = Hub(postgres_url, tokens)
        sock = _raw_push(victim.url, name, body, len(body) // 2 if when == "uploading" else len(body))
        if when == "checking":
            time.sleep(0.1)
        elif when == "writing":
            _wait_for_the_write(postgres_url, sock)
        victim.kill()
        sock.close()
        with _served(database, name) as served:
            head = served.head("main")
            assert head in (old, new)
            report = served.fsck()
            assert report.ok, report
            if head == new:
                assert len(served.history("main").render()) == 1201
                break  # fully moved: nothing left to push
    else:
        sync.push(local, "origin", ["main"], token=WRITE)
    with _served(database, name) as served:
        assert served.head("main") == new and served.fsck().ok
    local.close()


# -- repositories and tokens: the admin API and `ctxstore hub` ----------------------------------------------

def test_the_admin_api_lists_and_creates_repositories_with_an_admin_token(hubs, tmp_path):
    one, two = hubs
    name = _name()
    with httpx2.Client(timeout=30) as client:
        url = f"{one.url}/.hub/repositories"
        assert client.get(url).status_code == 401
        for token in (READ, WRITE):
            refused = client.post(url, json={"name": name}, headers={"Authorization": f"Bearer {token}"})
            assert refused.status_code == 403 and "admin scope" in refused.json()["error"]["message"]
        admin = {"Authorization": f"Bearer {ADMIN}"}
        made = client.post(url, json={"name": name}, headers=admin)
        assert made.status_code == 201 and made.json() == {"created": name}
        assert client.post(url, json={"name": name}, headers=admin).status_code == 409
        for bad in ("../x", ".hidden", "a//b", "", "x" * 300, 7):
            assert client.post(url, json={"name": bad}, headers=admin).status_code == 400, bad
        assert client.post(url, content=b"{", headers=admin).status_code == 400
        listed = client.get(f"{two.url}/.hub/repositories", headers=admin)
        assert listed.status_code == 200 and name in listed.json()["repositories"]
        assert client.get(f"{one.url}/.hub/other", headers=admin).status_code == 404
    clone = sync.clone(f"{two.url}/{name}", tmp_path / "new", token=READ)
    assert clone.refs() == {}
    clone.close()


def test_hub_commands_create_list_and_keep_tokens_in_the_database(hubs, postgres_url, tmp_path):
    one, two = hubs
    name = _name()
    made = _cli("hub", "create", name, "--store", postgres_url)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == {"created": name} and f"created repository {name}" in made.stderr
    assert _cli("hub", "create", name, "--store", postgres_url).returncode == 5
    listed = _cli("hub", "list", env={"CTXSTORE_STORE": postgres_url})
    assert listed.returncode == 0 and name in json.loads(listed.stdout)
    # A token added to the database counts at once on both hubs, and stops counting once removed.
    who = f"ci-{uuid.uuid4().hex[:8]}"
    added = _cli("hub", "token", "add", who, "--scope", "read", "--store", postgres_url)
    assert added.returncode == 0, added.stderr
    secret = json.loads(added.stdout)["token"]
    assert _cli("hub", "token", "add", who, "--store", postgres_url).returncode == 5
    listing = json.loads(_cli("hub", "token", "list", "--store", postgres_url).stdout)
    assert {"name": who, "scope": "read"} in listing and secret not in json.dumps(listing)
    bearer = {"Authorization": f"Bearer {secret}"}
    with httpx2.Client(timeout=30) as client:
        for hub in (one, two):
            assert client.get(f"{hub.url}/{name}/refs", headers=bearer).status_code == 200
            assert client.post(f"{hub.url}/{name}/push", content=b"x", headers=bearer).status_code == 403
        removed = _cli("hub", "token", "remove", who, "--store", postgres_url)
        assert removed.returncode == 0, removed.stderr
        for hub in (one, two):
            assert client.get(f"{hub.url}/{name}/refs", headers=bearer).status_code == 401
    assert _cli("hub", "token", "remove", who, "--store", postgres_url).returncode == 3
    fsck = _cli("hub", "fsck", name, "--store", postgres_url)
    assert fsck.returncode == 0 and json.loads(fsck.stdout)["ok"] is True
    assert _cli("hub", "fsck", "no/such", "--store", postgres_url).returncode == 3


def test_bad_and_unreachable_store_urls_are_clear_errors(tmp_path):
    pytest.importorskip("psycopg")
    bad = _cli("hub", "list", "--store", "mysql://db/x")
    assert bad.returncode == 2 and "postgresql://" in bad.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused, and no other
        port = probe.getsockname()[1]  # process can take the port while the commands try it
        url = f"postgresql://someone:hunter2@127.0.0.1:{port}/nothing"
        for argv in (["hub", "list", "--store", url], ["serve", "--http", "127.0.0.1:0", "--store", url]):
            down = _cli(*argv)
            assert down.returncode == 1, down.stderr
            assert f"127.0.0.1:{port}" in down.stderr and "hunter2" not in down.stderr
            assert down.stderr.startswith("ctxstore: error: ") and "Traceback" not in down.stderr
    assert _cli("serve", "--http", "127.0.0.1:0", "--store", url, str(tmp_path)).returncode == 2


def test_the_admin_api_over_a_directory_creates_lmdb_repositories(tmp_path):
    """The same endpoints on a hub serving a directory: a new repository is an LMDB one at its path."""
    from starlette.testclient import TestClient

    from ctxstore.sync.server import HubSettings, create_app, load_tokens

    tokens = tmp_path / "tokens"
    tokens.write_text(f"admin {ADMIN} operator\nwrite {WRITE} writer\n")
    Repository.init(tmp_path / "root" / "old" / "conv").close()
    app = create_app(HubSettings(tmp_path / "root", load_tokens(tokens)))
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with TestClient(app) as client:
        assert client.post("/.hub/repositories", json={"name": "team/new"},
                           headers={"Authorization": f"Bearer {WRITE}"}).status_code == 403
        assert client.post("/.hub/repositories", json={"name": "team/new"}, headers=admin).status_code == 201
        assert client.post("/.hub/repositories", json={"name": "team/new"}, headers=admin).status_code == 409
        assert client.post("/.hub/repositories", json={"name": "old/conv/inner"}, headers=admin).status_code == 400
        assert client.get("/.hub/repositories", headers=admin).json() == {"repositories": ["old/conv", "team/new"]}
        assert client.get("/team/new/refs", headers=admin).status_code == 200
    with Repository.open(tmp_path / "root" / "team" / "new") as repo:
        assert repo.refs() == {}


# -- blobs in S3, through two hubs ------------------------------------------------------------------------

def test_a_blob_pushed_through_one_hub_is_served_by_the_other(postgres_url, s3_endpoint, tokens, tmp_path):
    pytest.importorskip("boto3")
    bucket = f"s3://ctxstore-hub-{uuid.uuid4().hex[:8]}/blobs"
    env = {"AWS_ACCESS_KEY_ID": s3_endpoint.key, "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret,
           "AWS_DEFAULT_REGION": "us-east-1"}
    extra = ("--blobs", bucket, "--s3-endpoint", s3_endpoint.url)
    one, two = Hub(postgres_url, tokens, *extra, env=env), Hub(postgres_url, tokens, *extra, env=env)
    try:
        name = _name()
        with httpx2.Client(timeout=30) as client:
            assert client.post(f"{one.url}/.hub/repositories", json={"name": name},
                               headers={"Authorization": f"Bearer {ADMIN}"}).status_code == 201
        big = __import__("random").Random(3).randbytes(400_000).hex()  # 800 kB of text: past the threshold
        mine = sync.clone(f"{one.url}/{name}", tmp_path / "mine", token=WRITE)
        mine.append("main", [{"role": "user", "content": big}, {"role": "assistant", "content": "small"}])
        sync.push(mine, "origin", ["main"], token=WRITE)
        from ctxstore.store.s3 import S3Bucket

        kept = S3Bucket(bucket, endpoint_url=s3_endpoint.url, access_key=s3_endpoint.key,
                        secret_key=s3_endpoint.secret)
        assert len(list(kept.keys(f"{name}/"))) == 1  # the large message's blob, and only it
        kept.close()
        theirs = sync.clone(f"{two.url}/{name}", tmp_path / "theirs", token=READ)
        assert _msgs(theirs) == [big, "small"]
        assert theirs.fsck().ok
        mine.close()
        theirs.close()
    finally:
        one.stop()
        two.stop()


def test_a_blobs_url_that_is_not_s3_is_refused_at_start(postgres_url):
    """A wrong --blobs is refused when the hub starts, not at the first large message."""
    pytest.importorskip("psycopg")
    bad = _cli("serve", "--http", "127.0.0.1:0", "--store", postgres_url, "--blobs", "http://not-s3/x")
    assert bad.returncode == 2 and "s3://" in bad.stderr

