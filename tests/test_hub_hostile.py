"""The hub under hostile clients: small frames that would freeze a decoder, random bodies, clients that
stop reading or trickle their headers, and a damaged store. Real `serve` processes on 127.0.0.1 where
the network matters; the ASGI app in-process for the property test."""

from __future__ import annotations

import base64
import contextlib
import io
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import cbor2
import httpx2
import pytest
from conftest import killed_after
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from ctxstore import Repository, sync
from ctxstore.errors import DamagedData, InvalidInput, RemoteError
from ctxstore.format import codec
from ctxstore.ids import from_hex
from ctxstore.sync.protocol import encode_frame, read_frame
from ctxstore.sync.server import HubSettings, Token, create_app

sys.path.insert(0, str(Path(__file__).parent))
from test_http import WRITE, Hub

CLI = [sys.executable, "-m", "ctxstore.cli"]


def hostile_frame(levels: int = 40) -> bytes:
    """A fetch request whose wants nest CBOR value-sharing tags: level k is 28([29(k-1), 29(k-1)]).

    Tags 28/29 make a DAG that a tree walk visits 2^levels times: 400 bytes that never finish.
    """
    items = [b"\xd8\x1c" + cbor2.dumps("x")]
    for k in range(levels - 1):
        ref = b"\xd8\x1d" + cbor2.dumps(k)
        items.append(b"\xd8\x1c\x82" + ref + ref)
    wants = bytes([0x98, len(items)]) + b"".join(items)
    body = b"\xa2" + cbor2.dumps("op") + cbor2.dumps("fetch") + cbor2.dumps("wants") + wants
    assert len(body) < 450
    return struct.pack(">I", len(body)) + body


def _rss(pid: int) -> int:
    """Resident set size of a process, in bytes, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.fixture()
def hub(tmp_path: Path) -> Any:
    root = tmp_path / "hub"
    repo = Repository.init(root / "conv")
    repo.append("main", [{"role": "user", "content": "hello"}])
    repo.close()
    server = Hub(root, "--allow-anonymous-read", "--request-timeout", "20")
    yield server, root
    server.stop()


def _answered_while(url: str, hostile: threading.Thread, count: int = 5) -> list[float]:
    """Latencies of GET /refs from fresh clients while `hostile` runs."""
    latencies = []
    with httpx2.Client(timeout=10) as client:
        for _ in range(count):
            start = time.monotonic()
            assert client.get(f"{url}/conv/refs").status_code == 200
            latencies.append(time.monotonic() - start)
    assert hostile.is_alive() or latencies
    return latencies


def test_a_value_sharing_frame_is_refused_and_other_clients_are_answered(hub):
    """Tags 28/29 in a fetch request: 400 naming the tag, quickly; the hub answers others meanwhile."""
    server, _ = hub
    answer: dict[str, Any] = {}

    def attack() -> None:
        with httpx2.Client(timeout=30) as client:
            start = time.monotonic()
            answer["response"] = client.post(f"{server.url}/conv/fetch", content=hostile_frame())
            answer["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=attack)
    thread.start()
    latencies = _answered_while(server.url, thread)
    thread.join(30)
    assert max(latencies) < 5
    response = answer["response"]
    assert response.status_code == 400
    error = read_frame(io.BytesIO(response.content))["error"]
    assert error["type"] == "InvalidInput"
    assert "tag" in error["message"]
    assert answer["seconds"] < 5


def test_serve_stdio_refuses_a_value_sharing_frame(hub):
    """`serve --stdio` answers the hostile frame with an error frame and exits, instead of hanging."""
    _, root = hub
    proc = subprocess.Popen([*CLI, "serve", "--stdio", str(root / "conv")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        with killed_after(proc, 60):
            assert "refs" in read_frame(proc.stdout)
        out, _ = proc.communicate(hostile_frame(), timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    error = read_frame(io.BytesIO(out))["error"]
    assert error["type"] == "InvalidInput" and "tag" in error["message"]


# -- malformed bodies are the client's fault: 400 with the reason -----------------------------------------

@pytest.fixture(scope="module")
def app_client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("asgi") / "repo"
    repo = Repository.init(root)
    repo.append("main", [{"role": "user", "content": "hello"}])
    head = repo.head("main")
    repo.close()
    tokens = [Token("w", "write", __import__("blake3").blake3(WRITE.encode()).digest())]
    app = create_app(HubSettings(root, tokens, allow_anonymous_read=True, max_body=1 << 20))
    with TestClient(app, raise_server_exceptions=True) as client:
        yield client, root, head


def _frame_bodies() -> st.SearchStrategy[bytes]:
    """Random bodies, random frames of random CBOR, and frames of plausible but wrong requests."""
    cbor_values = st.recursive(
        st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8) | st.binary(max_size=40),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
        max_leaves=12)
    requests = st.fixed_dictionaries({}, optional={
        "op": st.sampled_from(["fetch", "push", "refs", "x"]) | st.integers(),
        "wants": cbor_values | st.lists(st.binary(min_size=32, max_size=32), max_size=3),
        "haves": cbor_values | st.lists(st.binary(min_size=32, max_size=32), max_size=3),
        "updates": cbor_values | st.lists(st.fixed_dictionaries({}, optional={
            "ref": st.sampled_from(["refs/heads/main", "refs/heads/../x", "main", ""]) | cbor_values,
            "old": st.none() | st.binary(min_size=32, max_size=32) | cbor_values,
            "new": st.none() | st.binary(min_size=32, max_size=32) | cbor_values,
            "mode": st.sampled_from(["ff", "lease", "force", "?"]) | cbor_values}), max_size=3),
    })

    def framed(value: Any, tail: bytes) -> bytes:
        body = cbor2.dumps(value, canonical=True)
        return struct.pack(">I", len(body)) + body + tail

    return st.one_of(
        st.binary(max_size=200),
        st.builds(framed, cbor_values, st.binary(max_size=60)),
        st.builds(framed, requests, st.binary(max_size=60)),
        st.builds(lambda v, cut: framed(v, b"")[:cut], requests, st.integers(0, 60)),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_frame_bodies(), endpoint=st.sampled_from(["fetch", "push"]))
def test_random_request_bodies_answer_400_with_a_reason_never_500(app_client, body, endpoint):
    """Whatever the body, the hub answers 200 or a 4xx with an error frame, and the repository is unchanged."""
    client, root, head = app_client
    response = client.post(f"/{endpoint}", content=body, headers={"Authorization": f"Bearer {WRITE}"})
    assert response.status_code < 500, response.content
    if response.status_code != 200:
        assert response.status_code in (400, 404, 409, 413)
        message = read_frame(io.BytesIO(response.content))
        assert message["error"]["message"]
    with Repository.open(root) as repo:
        assert repo.head("main") == head


def test_malformed_frames_over_a_real_server_answer_400(hub):
    """A few of the property test's shapes, against a real `serve --http` process."""
    server, _ = hub
    bodies = [b"", b"\x00", b"\x00\x00\x00\x05ab", b"\xff\xff\xff\xff", struct.pack(">I", 1) + b"\xff",
              encode_frame({"wants": "nope"}), encode_frame({"wants": [b"x" * 31]}),
              struct.pack(">I", 3) + cbor2.dumps([1, 2])[:3]]
    with httpx2.Client(timeout=10) as client:
        for body in bodies:
            response = client.post(f"{server.url}/conv/fetch", content=body)
            assert response.status_code == 400, (body, response.content)
            assert b"malformed request" in response.content or b"must be" in response.content


# -- memory and time stay bounded -------------------------------------------------------------------------

def _big_repo(path: Path, messages: int = 1500) -> None:
    """A repository whose pack is several MB and incompressible, so a stalled reader really stalls."""
    repo = Repository.init(path)
    rng = __import__("random").Random(7)
    repo.append("main", [{"role": "user", "content": base64.b64encode(rng.randbytes(3000)).decode()}
                         for _ in range(messages)])
    repo.close()


def _stalled_fetch(url: str, want: bytes) -> socket.socket:
    """A fetch request on a socket that then never reads its answer (tiny receive buffer)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    body = encode_frame({"wants": [want], "haves": []})
    sock.sendall(f"POST /conv/fetch HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n"
                 "Content-Type: application/x-ctxstore\r\n\r\n".encode() + body)
    return sock


def test_clients_that_stop_reading_hold_bounded_memory_and_are_dropped(tmp_path):
    """40 stalled clones: hub RSS grows little, /refs stays fast, and after --send-timeout a clone works."""
    root = tmp_path / "hub"
    _big_repo(root / "conv")
    # The clone queues behind the 40 stalled fetches for a pack job; on a loaded machine making their
    # packs alone has taken over 30 s, so the queue timeout is not what this test measures.
    server = Hub(root, "--allow-anonymous-read", "--send-timeout", "4", "--queue-timeout", "120")
    try:
        with Repository.open(root / "conv") as repo:
            want = from_hex(repo.head("main"))
        before = _rss(server.proc.pid)
        stalled = [_stalled_fetch(server.url, want) for _ in range(40)]
        time.sleep(2)
        with httpx2.Client(timeout=10) as client:
            start = time.monotonic()
            assert client.get(f"{server.url}/conv/refs").status_code == 200
            assert time.monotonic() - start < 3
        peak = _rss(server.proc.pid)
        assert peak - before < 200 << 20, (before, peak)
        # The stalled answers are dropped after the send timeout, freeing their pack jobs: a clone works.
        clone = sync.clone(f"{server.url}/conv", tmp_path / "clone")
        assert len(clone.history("main").render()) == 1500
        clone.close()
        for sock in stalled:
            sock.close()
    finally:
        server.stop()


def test_headers_that_trickle_are_cut_off(tmp_path):
    """A connection that sends its headers a byte at a time is closed after --header-timeout."""
    root = tmp_path / "hub"
    Repository.init(root / "conv").close()
    server = Hub(root, "--allow-anonymous-read", "--header-timeout", "2")
    try:
        host, port = server.url.removeprefix("http://").split(":")
        socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(20)]
        request = f"GET /conv/refs HTTP/1.1\r\nHost: {host}\r\nX-Slow: ".encode()
        closed = 0
        deadline = time.monotonic() + 8
        for i in range(len(request) * 4):
            if time.monotonic() > deadline:
                break
            for sock in socks:
                with contextlib.suppress(OSError):
                    sock.sendall(request[i % len(request):][:1])
            time.sleep(0.25)
        for sock in socks:
            sock.settimeout(2)
            try:
                closed += sock.recv(1024) == b""
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
            except TimeoutError:
                pass
            sock.close()
        assert closed == len(socks)
        with httpx2.Client(timeout=10) as client:
            assert client.get(f"{server.url}/conv/refs").status_code == 200
    finally:
        server.stop()


def test_a_push_that_inflates_past_the_limit_is_refused_with_400(tmp_path):
    """A small body whose objects decompress past --max-push-size is refused and nothing is stored."""
    root = tmp_path / "hub"
    Repository.init(root / "conv").close()
    server = Hub(root, "--max-push-size", "1000000")
    try:
        local = Repository.init(tmp_path / "local")
        local.append("main", [{"role": "user", "content": f"{i} " + "a" * 200_000} for i in range(10)])
        before_rss = _rss(server.proc.pid)
        with pytest.raises(RemoteError, match="limit"):
            sync.push(local, "origin", ["main"], transport=sync.open_transport(f"{server.url}/conv", token=WRITE))
        assert _rss(server.proc.pid) - before_rss < 100 << 20
        with Repository.open(root / "conv") as served, served.store.transaction() as txn:
            assert txn.refs("refs/") == {} and len(served.store) == 0
        local.close()
    finally:
        server.stop()


# -- a damaged store says so over the wire ----------------------------------------------------------------

def test_a_damaged_hub_store_gives_damaged_data_over_http_not_a_dropped_connection(tmp_path):
    """An object edited under the hub: the clone fails with DamagedData (exit 6), not 'peer closed'."""
    root = tmp_path / "hub"
    repo = Repository.init(root / "conv")
    repo.append("main", [{"role": "user", "content": f"message {i} " + "x" * 500} for i in range(400)])
    repo.close()
    _damage_one_entry(root / "conv")
    server = Hub(root, "--allow-anonymous-read")
    try:
        with pytest.raises(DamagedData, match="fsck"):
            sync.clone(f"{server.url}/conv", tmp_path / "clone")
        done = subprocess.run([*CLI, "clone", f"{server.url}/conv", str(tmp_path / "clone2")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 6, done.stderr
        assert "peer closed" not in done.stderr and "fsck" in done.stderr
    finally:
        server.stop()


def _damage_one_entry(path: Path) -> None:
    """Store other valid bytes under one entry's id, as an edit on disk would: its id no longer matches."""
    from ctxstore.format import seq
    from ctxstore.format.objects import parse_object

    with Repository.open(path) as repo:
        rev = parse_object(repo.store.get(from_hex(repo.head("main"))))
        node = lambda oid: parse_object(repo.store.get(oid))  # noqa: E731
        entries = [oid for _, oid in seq.iter_items(rev.seq, node) if oid is not None]  # type: ignore[attr-defined]
        victim = entries[len(entries) // 2]
        repo.store.delete_many([victim])
        repo.store.put_many([(victim, codec.encode({"type": "blob", "data": "tampered"}))])


def test_invalid_input_type_is_what_malformed_requests_raise() -> None:
    """read_request names the problem with an InvalidInput (the hub maps it to 400)."""
    from io import BytesIO

    from ctxstore.sync.protocol import read_request

    with pytest.raises(InvalidInput, match="malformed request"):
        read_request(BytesIO(b"\x00\x00\x00\x09abc"))
    with pytest.raises(InvalidInput, match="over the 10-byte limit"):
        read_request(BytesIO(struct.pack(">I", 11) + b"x" * 11), 10)
    with pytest.raises(InvalidInput, match="not canonical"):
        read_request(BytesIO(encode_frame({"a": 1})[:4] + b"\xa1\x61\x61\x18\x01"))
    assert read_request(BytesIO(encode_frame({"a": 1}))) == {"a": 1}
    assert codec.decode(codec.encode({"a": 1})) == {"a": 1}
    assert os.sep


@settings(max_examples=100, deadline=None)
@given(chunks=st.lists(st.binary(max_size=3000), max_size=8))
def test_bands_carry_a_pack_unchanged(chunks):
    """Whatever the chunks, the bands read back as their concatenation, then end."""
    from ctxstore.sync.protocol import BandReader, pack_bands

    reader = BandReader(io.BytesIO(b"".join(pack_bands(chunks))), "test")
    got = b""
    while piece := reader.read(1000):
        got += piece
    assert got == b"".join(chunks)


def test_an_error_while_sending_a_pack_reaches_the_client_as_damaged_data():
    """A store failing half-way through a pack ends the bands with an error the reader raises."""
    from ctxstore.sync.protocol import BandReader, pack_bands

    def failing() -> Any:
        yield b"CTXP"
        raise InvalidInput("object 3f2a does not hash to its id; the store is corrupt")

    reader = BandReader(io.BytesIO(b"".join(pack_bands(failing()))), "http://hub")
    assert reader.read(4) == b"CTXP"
    with pytest.raises(DamagedData, match=r"http://hub: .*corrupt.*fsck"):
        reader.read(1)
