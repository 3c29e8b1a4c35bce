"""Hostile hub clients: tokens, scopes, ref names, path traversal, oversized and hostile frames, slow
headers and bodies, clients that stop reading, and load (200 concurrent connections) with peak RSS.

Every case runs against a real `ctxstore serve --http` process on 127.0.0.1. A case *holds* when the hub
refuses with the documented status (and an error frame), leaves its repository exactly as it was, and
keeps answering other clients. The load case records requests per second, p99 latency and the hub's
peak resident memory (from /proc), sampled each second, and checks it stays under 300 MB and flat
(the last quarter's peak within 25% + 20 MB of the first quarter's).

Run alone: `python tools/attacks/hub.py --seconds 90` (the load takes most of the budget, at most 60 s).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cbor2
import httpx2
from _common import READ_TOKEN, WRITE_TOKEN, Hub, Latencies, Row, first, main, row

from ctxstore import Repository
from ctxstore.ids import from_hex
from ctxstore.sync.protocol import encode_frame

PEAK_GOAL = 300 << 20
CONTENT = "application/x-ctxstore"


def rss(pid: int) -> int:
    """Resident memory of a process in bytes (VmRSS in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def hostile_frame(levels: int = 40) -> bytes:
    """A fetch request nesting value-sharing tags 28/29: 2^levels visits for a tree walk, ~400 bytes."""
    items = [b"\xd8\x1c" + cbor2.dumps("x")]
    for k in range(levels - 1):
        ref = b"\xd8\x1d" + cbor2.dumps(k)
        items.append(b"\xd8\x1c\x82" + ref + ref)
    body = (b"\xa2" + cbor2.dumps("op") + cbor2.dumps("fetch") + cbor2.dumps("wants")
            + bytes([0x98, len(items)]) + b"".join(items))
    return struct.pack(">I", len(body)) + body


def _state(path: Path) -> tuple[Any, ...]:
    with Repository.open(path) as repo:
        return tuple(sorted(repo.refs("refs/").items())), len(repo.store)


def _raw(url: str, data: bytes, timeout: float = 10) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as conn:
        conn.sendall(data)
        out = b""
        while chunk := conn.recv(65536):
            out += chunk
    return out


def _status(reply: bytes) -> int:
    parts = reply.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class _Cases:
    """Request cases and their expected statuses, counted into rows."""

    def __init__(self, hub: Hub, repo: Path) -> None:
        self.hub = hub
        self.repo = repo
        self.base = f"{hub.url}/conv"
        self.client = httpx2.Client(timeout=30)

    def check(self, name: str, held: str, cases: list[tuple[Callable[[], int], set[int]]]) -> Row:
        before = _state(self.repo)
        problems = []
        for make, wanted in cases:
            try:
                got = make()
            except (httpx2.HTTPError, OSError) as exc:
                problems.append(f"{type(exc).__name__}: {exc}")
                continue
            if got not in wanted:
                problems.append(f"status {got}, wanted {sorted(wanted)}")
        if _state(self.repo) != before:
            problems.append("the hub's repository changed")
        if self.client.get(f"{self.base}/refs", headers=_auth(READ_TOKEN)).status_code != 200:
            problems.append("the hub stopped answering /refs")
        return row(f"hub: {name}", len(cases), held, len(problems), first(problems))

    def post(self, endpoint: str, body: bytes, token: str | None = WRITE_TOKEN, path: str = "conv") -> int:
        return self.client.post(f"{self.hub.url}/{path}/{endpoint}", content=body,
                                headers=_auth(token)).status_code


def _auth(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def _requests(c: _Cases) -> list[Row]:
    head = from_hex(_head(c.repo))
    update = {"ref": "refs/heads/main", "old": head, "new": head, "mode": "force"}
    rows = [c.check("tokens", "401 for no, unknown, short or malformed tokens", [
        (lambda: c.client.get(f"{c.base}/refs").status_code, {401}),
        *[(lambda t=t: c.client.get(f"{c.base}/refs", headers={"Authorization": t}).status_code, {401})
          for t in ("Bearer " + "x" * 24, "Bearer", "Basic " + READ_TOKEN, "Bearer " + READ_TOKEN[:-1],
                    "Bearer " + READ_TOKEN + "x", READ_TOKEN)],
        (lambda: c.post("push", b"x", None), {401}),
    ])]
    rows.append(c.check("scopes", "403 for a read token pushing, whatever the body", [
        (lambda b=b: c.post("push", b, READ_TOKEN), {403})
        for b in (b"", b"x", encode_frame({"updates": [update]}))]))
    names = ["refs/heads/../x", "refs/heads/a..b", "refs/remotes/origin/main", "main", "refs/heads/",
             "refs/heads/x.lock", "refs/heads/a b", "refs/heads/\x00", "HEAD", "refs/heads/" + "x" * 5000]
    rows.append(c.check("ref names", "400 for every name the rules refuse; refs unchanged", [
        (lambda n=n: c.post("push", encode_frame({"updates": [{**update, "ref": n}]})), {400})
        for n in names]))
    raw = ["/../../etc/passwd/refs", "/conv/../../refs", "/%2e%2e/%2e%2e/refs", "/.hidden/refs",
           "/conv%2F..%2F..%2Frefs", "//etc/refs", "/conv/refs/../../x/refs", "/\\..\\refs"]
    rows.append(c.check("path traversal", "404 for every path outside the served directory", [
        *[(lambda p=p: _status(_raw(c.hub.url, f"GET {p} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                                    f"{READ_TOKEN}\r\nConnection: close\r\n\r\n".encode())), {404}) for p in raw],
    ]))
    rows.append(c.check("oversized", "413 past --max-body (declared or streamed); 400 for a frame over its limit", [
        (lambda: c.post("push", b"x" * (2 << 20)), {413}),
        (lambda: c.post("push", (b"x" * (1 << 16) for _ in range(40))), {413}),  # type: ignore[arg-type]
        (lambda: c.post("fetch", b"x" * (17 << 20)), {413}),
        (lambda: c.post("fetch", b"\xff\xff\xff\xff" + b"x" * 100), {400}),
        (lambda: c.post("push", struct.pack(">I", 16 << 20) + b"x"), {400}),
    ]))
    start = time.monotonic()
    hostile = c.check("hostile frames", "400 at once for CBOR value-sharing tags, a tag of any kind, deep nesting", [
        (lambda: c.post("fetch", hostile_frame()), {400}),
        (lambda: c.post("fetch", hostile_frame(200), None), {400, 401}),
        (lambda: c.post("fetch", encode_frame({"a": 1})[:4] + b"\xc1\x00"), {400}),
        (lambda: c.post("fetch", struct.pack(">I", 4000) + b"\x81" * 4000), {400}),
    ])
    hostile["details"] = (hostile["details"] + f" {time.monotonic() - start:.2f} s for all").strip()
    rows.append(hostile)
    rng = random.Random(12)
    bodies = [rng.randbytes(rng.randrange(0, 300)) for _ in range(200)]
    bodies += [struct.pack(">I", len(b)) + b for b in bodies[:100]]
    rows.append(c.check("random bodies", "never 5xx: a malformed frame is the client's 400", [
        (lambda b=b, e=e: c.post(e, b), {400, 404, 409})
        for b in bodies for e in ("fetch", "push")]))
    return rows


def _head(path: Path) -> str:
    with Repository.open(path) as repo:
        head = repo.head("main")
    assert head is not None
    return head


def _slow(hub: Hub, connections: int = 100, header_timeout: float = 3) -> list[Row]:
    """Connections trickling headers, and bodies trickling: all closed (or 408) soon after the timeout."""
    host, port = hub.url.removeprefix("http://").split(":")
    socks = [socket.create_connection((host, int(port)), timeout=10) for _ in range(connections)]
    text = f"GET /conv/refs HTTP/1.1\r\nHost: {host}\r\nX-Slow: {'y' * 100}".encode()
    deadline = time.monotonic() + header_timeout + 4
    i = 0
    while time.monotonic() < deadline:
        for s in socks:
            with contextlib.suppress(OSError):
                s.sendall(text[i % len(text):][:1])
        i += 1
        time.sleep(0.2)
    open_after = 0
    for s in socks:
        s.settimeout(1)
        try:
            open_after += s.recv(1024) != b""
        except (ConnectionResetError, BrokenPipeError):
            pass
        except TimeoutError:
            open_after += 1
        s.close()
    rows = [row("hub: slow headers", connections,
                f"every connection trickling its headers closed within --header-timeout ({header_timeout:g} s) + 4 s",
                open_after, f"{open_after} of {connections} still open")]
    body_socks = []
    for _ in range(20):
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(f"POST /conv/fetch HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {READ_TOKEN}\r\n"
                  "Content-Length: 1000\r\n\r\nab".encode())
        body_socks.append(s)
    bad = 0
    for s in body_socks:
        try:
            reply = s.recv(1024)
            bad += _status(reply) != 408
        except OSError:
            bad += 1
        s.close()
    rows.append(row("hub: slow bodies", len(body_socks), "408 for a body that pauses past --header-timeout",
                    bad, f"{bad} not answered 408"))
    return rows


def _stalled(hub: Hub, repo: Path, clients: int = 150) -> Row:
    """Clone requests that never read their answer: memory stays bounded and /refs stays fast."""
    host, port = hub.url.removeprefix("http://").split(":")
    want = from_hex(_head(repo))
    body = encode_frame({"wants": [want], "haves": []})
    before = rss(hub.pid)
    socks = []
    for _ in range(clients):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect((host, int(port)))
        s.sendall(f"POST /conv/fetch HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {READ_TOKEN}\r\n"
                  f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        socks.append(s)
    peak, slowest, problems = before, 0.0, []
    with httpx2.Client(timeout=30) as client:
        for _ in range(6):
            time.sleep(1)
            peak = max(peak, rss(hub.pid))
            start = time.monotonic()
            if client.get(f"{hub.url}/conv/refs", headers=_auth(READ_TOKEN)).status_code != 200:
                problems.append("/refs failed")
            slowest = max(slowest, time.monotonic() - start)
    for s in socks:
        s.close()
    if slowest > 2:
        problems.append(f"/refs took {slowest:.1f} s")
    if peak - before > 200 << 20:
        problems.append(f"RSS grew by {(peak - before) >> 20} MB")
    return row("hub: clients that stop reading", clients,
               "RSS grows < 200 MB with 150 stalled clones; /refs answered in < 2 s meanwhile",
               len(problems), f"RSS {before >> 20} -> {peak >> 20} MB; slowest /refs {slowest * 1000:.0f} ms"
               + (f"; {first(problems)}" if problems else ""))


def _load(hub: Hub, seconds: float, connections: int = 200) -> Row:
    """`connections` concurrent keep-alive clients for `seconds`: 9 of 10 requests /refs, 1 a clone of a
    50-message conversation (the stalled-reader case covers large packs)."""
    latencies = Latencies()
    errors: list[str] = []
    samples: list[int] = []
    stop = threading.Event()
    done = [0]

    def sample() -> None:
        while not stop.wait(1):
            samples.append(rss(hub.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()

    async def worker(client: httpx2.AsyncClient, k: int, end: float, fetch_body: bytes) -> None:
        n = 0
        while time.monotonic() < end:
            n += 1
            start = time.monotonic()
            try:
                if (n + k) % 10 == 0:
                    response = await client.post(f"{hub.url}/small/fetch", content=fetch_body)
                    op = "fetch"
                else:
                    response = await client.get(f"{hub.url}/conv/refs")
                    op = "refs"
                if response.status_code != 200:
                    errors.append(f"{op} {response.status_code}")
            except httpx2.HTTPError as exc:
                errors.append(f"{type(exc).__name__}")
                continue
            latencies.add(op, time.monotonic() - start)
            done[0] += 1

    async def drive(fetch_body: bytes) -> float:
        limits = httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)
        async with httpx2.AsyncClient(timeout=60, limits=limits, headers=_auth(READ_TOKEN)) as client:
            start = time.monotonic()
            end = start + seconds
            await asyncio.gather(*(worker(client, k, end, fetch_body) for k in range(connections)))
            return time.monotonic() - start

    want = from_hex(_head(Path(hub.root) / "small"))  # type: ignore[attr-defined]
    elapsed = asyncio.run(drive(encode_frame({"wants": [want], "haves": []})))
    stop.set()
    sampler.join()
    peak = max(samples or [rss(hub.pid)])
    quarter = max(1, len(samples) // 4)
    early, late = max(samples[:quarter] or [peak]), max(samples[-quarter:] or [peak])
    problems = list(dict.fromkeys(errors))[:3]
    if peak > PEAK_GOAL:
        problems.append(f"peak RSS {peak >> 20} MB over {PEAK_GOAL >> 20} MB")
    if late > early * 1.25 + (20 << 20):
        problems.append(f"RSS not flat: {early >> 20} MB early, {late >> 20} MB late")
    summary = latencies.summary()
    p99 = {op: s["p99"] for op, s in summary.items()}
    details = (f"{connections} connections for {elapsed:.0f} s: {done[0] / elapsed:.0f} requests/s, "
               f"p99 {', '.join(f'{op} {v:.0f} ms' for op, v in p99.items())}; {len(errors)} errors; "
               f"peak RSS {peak >> 20} MB (first quarter {early >> 20} MB, last {late >> 20} MB)")
    if problems:
        details += f"; {first(problems)}"
    return row("hub: load", done[0] + len(errors),
               "every request answered; peak RSS < 300 MB and flat over the run", len(errors) + (len(problems) > len(
                   list(dict.fromkeys(errors))[:3])), details)


def _make_repo(path: Path, messages: int) -> None:
    repo = Repository.init(path)
    rng = random.Random(3)
    # Incompressible content, so a clone's pack is several MB and a client that stops reading stalls it.
    repo.append("main", [{"role": "user", "content": base64.b64encode(rng.randbytes(2000)).decode()}
                         for _ in range(messages)])
    repo.close()


def run(seconds: float, work: Path) -> list[Row]:
    """Every hostile-client case against real hubs; the load takes what the budget leaves (5 to 60 s)."""
    started = time.monotonic()
    root = work / "hub"
    _make_repo(root / "conv", 3000)
    _make_repo(root / "small", 50)
    hub = Hub(root, "--max-body", str(1 << 20), "--header-timeout", "3", "--send-timeout", "10")
    hub.root = root  # type: ignore[attr-defined]
    rows: list[Row] = []
    try:
        cases = _Cases(hub, root / "conv")
        rows += _requests(cases)
        cases.client.close()
        rows += _slow(hub)
        rows.append(_stalled(hub, root / "conv"))
        time.sleep(11)  # the send timeout drops the stalled answers
        left = seconds - (time.monotonic() - started)
        rows.append(_load(hub, min(60.0, max(5.0, left))))
    finally:
        hub.stop()
    return rows


if __name__ == "__main__":
    main(run, default_seconds=90)
