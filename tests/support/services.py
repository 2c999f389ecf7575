"""A real Redis and a real PostgreSQL server, private to the test run, for the server host's tests.

    with RedisServer.start() as redis: redis.url            # redis://127.0.0.1:PORT/0
    redis.restart(keep_data=True, downtime=0.5)              # the same port again, with or without its data
    with PostgresCluster.start() as pg: pg.url(pg.create_database())

Fixtures (register them in a conftest with an import): `redis_server` and `postgres_server` start once per session
on first use; `redis_url` is the server flushed after each test (`redis_client`: an asyncio client of it;
`own_redis`: a server of the test's own, to restart or stop);
`postgres_url` is a fresh empty database per test, dropped after it (CREATE DATABASE copies the empty template in a
few milliseconds).

Both listen on 127.0.0.1 on a free port and keep their files in a folder of their own made by `tempfile`, removed
when they stop. PostgreSQL refuses to run as root: as root its cluster belongs to the `postgres` user, who runs
`initdb` and the server. Each server is stopped at teardown, and dies with the process that started it if that one
is killed before it could stop it (PR_SET_PDEATHSIG). Durability is off (nothing here must survive a crash).

A missing binary skips the tests that need it on a developer's machine, with what to install; in CI (`CI` set, as
.ci/run is run) it fails them, so a missing install step cannot pass as a green run.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child between fork and exec must not load anything
STOP_WAIT = 30.0  # seconds a server may take to shut down cleanly before it is killed


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(found: Any, what: str, install: str) -> None:
    """Skip (on a developer's machine) or fail (in CI) the test when `found` is empty: `what` is not installed."""
    if found:
        return
    message = f"{what} is not installed; the server host's tests need it (Debian: apt-get install {install})"
    if in_ci():
        pytest.fail(message + ". CI must install it (.ci/run).", pytrace=False)
    pytest.skip(message)


def redis_binary() -> str | None:
    return shutil.which("redis-server")


def postgres_bindir() -> Path | None:
    """The folder of `initdb` and `postgres`: Debian keeps them off PATH, in /usr/lib/postgresql/N/bin."""
    candidates: list[Path] = []
    if pg_config := shutil.which("pg_config"):
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            candidates.append(Path(done.stdout.strip()))
    versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
    candidates += sorted(versions, key=lambda p: int(p.parent.name), reverse=True)
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    return next((d for d in candidates if (d / "initdb").is_file() and (d / "postgres").is_file()), None)


def free_port() -> int:
    """A port nobody listens on now (the kernel's pick); the server may still lose it to a race, so callers retry."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent(sig: int) -> Callable[[], None]:
    def set_signal() -> None:
        # Runs in the child after fork, after the switch of user (which would clear it), before exec.
        _libc.prctl(_PR_SET_PDEATHSIG, sig)

    return set_signal


def _owner() -> pwd.struct_passwd | None:
    """The user PostgreSQL runs as: `postgres` when we are root (it refuses root), else ourselves (None)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError("PostgreSQL refuses to run as root and there is no 'postgres' user to run it as; "
                           "Debian's postgresql package creates one") from None


def _spawn(argv: list[str], log: Path, *, owner: pwd.struct_passwd | None = None, stop_signal: int,
           cwd: Path) -> subprocess.Popen:
    as_owner: dict[str, Any] = {}
    if owner is not None:
        as_owner = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, cwd=cwd,
                                env={**os.environ, "LC_ALL": "C", "LANG": "C"},
                                preexec_fn=_die_with_parent(stop_signal), **as_owner)


def _stop(process: subprocess.Popen, sig: int) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(STOP_WAIT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until(ready: Callable[[], bool], process: subprocess.Popen, timeout: float) -> bool:
    """True once `ready()`; False when the process ended or `timeout` passed first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def _tail(log: Path, lines: int = 15) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


class RedisServer:
    process: subprocess.Popen

    def __init__(self, binary: str, port: int, folder: Path):
        self.binary, self.port, self.folder = binary, port, folder

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @classmethod
    def start(cls, binary: str | None = None) -> RedisServer:
        binary = binary or redis_binary()
        if binary is None:
            raise RuntimeError("redis-server is not installed")
        folder = Path(tempfile.mkdtemp(prefix="hearth-redis-"))
        for _ in range(3):
            server = cls(binary, free_port(), folder)
            if server._run():
                return server
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"redis-server did not start:\n{_tail(folder / 'redis.log')}")

    def _run(self) -> bool:
        """Start redis-server on this port and folder (it loads the folder's dump.rdb if there is one); True once
        it answers, else it is stopped again."""
        argv = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.folder)]
        self.process = _spawn(argv, self.folder / "redis.log", stop_signal=signal.SIGTERM, cwd=self.folder)
        if _wait_until(self.ping, self.process, timeout=10):
            return True
        _stop(self.process, signal.SIGTERM)
        return False

    def restart(self, *, keep_data: bool, downtime: float = 0.0) -> None:
        """Stop the server and start it again on the same port after `downtime` seconds: with `keep_data` it saves
        its data on the way down and loads it back (a restart with persistence), else it comes back empty."""
        if keep_data:
            with self._client() as client:
                client.shutdown(save=True)
            self.process.wait(STOP_WAIT)
        else:
            _stop(self.process, signal.SIGTERM)
            (self.folder / "dump.rdb").unlink(missing_ok=True)
        time.sleep(downtime)
        if not self._run():
            raise RuntimeError(f"redis-server did not start again:\n{_tail(self.folder / 'redis.log')}")

    def _client(self):
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def ping(self) -> bool:
        import redis

        try:
            with self._client() as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def flush(self) -> None:
        """Forget every key of every database (between tests)."""
        with self._client() as client:
            client.flushall()

    def stop(self) -> None:
        """SIGTERM (Redis's own clean shutdown), wait, then remove its folder."""
        _stop(self.process, signal.SIGTERM)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class PostgresCluster:
    def __init__(self, process: subprocess.Popen, port: int, folder: Path, bindir: Path):
        self.process, self.port, self.folder, self.bindir = process, port, folder, bindir

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    @classmethod
    def start(cls, bindir: Path | None = None) -> PostgresCluster:
        bindir = bindir or postgres_bindir()
        if bindir is None:
            raise RuntimeError("PostgreSQL's server binaries are not installed")
        owner = _owner()
        folder = Path(tempfile.mkdtemp(prefix="hearth-postgres-"))
        try:
            if owner is not None:
                os.chown(folder, owner.pw_uid, owner.pw_gid)
            log = folder / "postgres.log"
            initdb = subprocess.run(
                [str(bindir / "initdb"), "-D", str(folder / "data"), "-U", "postgres", "--auth=trust", "--no-sync",
                 "--encoding=UTF8", "--locale=C"], capture_output=True, text=True, check=False, cwd=folder,
                env={**os.environ, "LC_ALL": "C", "LANG": "C"},
                **({"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []} if owner else {}))
            if initdb.returncode:
                raise RuntimeError(f"initdb failed:\n{initdb.stdout}{initdb.stderr}")
            for _ in range(3):
                port = free_port()
                # The socket goes in our own folder: the default (/var/run/postgresql) may not exist or be writable.
                process = _spawn([str(bindir / "postgres"), "-D", str(folder / "data"), "-k", str(folder),
                                  "-p", str(port), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                                  "-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                                 log, owner=owner, stop_signal=signal.SIGINT, cwd=folder)
                cluster = cls(process, port, folder, bindir)
                if _wait_until(cluster.ready, process, timeout=30):
                    return cluster
                _stop(process, signal.SIGINT)
            raise RuntimeError(f"postgres did not start:\n{_tail(log)}")
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise

    def ready(self) -> bool:
        done = subprocess.run([str(self.bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port),
                               "-U", "postgres", "-d", "postgres"], check=False)
        return done.returncode == 0

    def sql(self, statement: str, database: str = "postgres") -> str:
        """Run one statement through psql; its output, unaligned, without headers."""
        done = subprocess.run(
            [str(self.bindir / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1",
             "-p", str(self.port), "-U", "postgres", "-d", database, "-c", statement],
            capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"psql failed on {statement!r}: {done.stderr.strip()}")
        return done.stdout.strip()

    def create_database(self, template: str = "template1") -> str:
        """A new empty database (a copy of `template`); its name."""
        name = f"test_{uuid.uuid4().hex[:12]}"
        self.sql(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        return name

    def drop_database(self, name: str) -> None:
        # FORCE ends the sessions a test left open (a pool not disposed) instead of failing on them.
        self.sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """SIGINT, PostgreSQL's fast shutdown: it ends open sessions, checkpoints and exits (SIGTERM's smart
        shutdown would wait forever for a session a test left open); wait, then remove the cluster."""
        _stop(self.process, signal.SIGINT)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    require(redis_binary(), "redis-server", "redis-server")
    with RedisServer.start() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    yield redis_server.url
    redis_server.flush()


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Any]:
    """An asyncio client of the test's Redis (bytes replies, as the server's ports want)."""
    import redis.asyncio

    client = redis.asyncio.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A Redis of the test's own, to restart or stop."""
    require(redis_binary(), "redis-server", "redis-server")
    with RedisServer.start() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresCluster]:
    require(postgres_bindir(), "PostgreSQL's server (initdb, postgres)", "postgresql")
    with PostgresCluster.start() as cluster:
        yield cluster


@pytest.fixture
def postgres_url(postgres_server: PostgresCluster) -> Iterator[str]:
    name = postgres_server.create_database()
    yield postgres_server.url(name)
    postgres_server.drop_database(name)
