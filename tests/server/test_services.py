"""The private Redis and PostgreSQL the server tests use: real servers that answer, isolate each test, stop cleanly
and leave no process behind, and a missing install that fails CI instead of skipping."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from tests.support.services import PostgresCluster, RedisServer, postgres_bindir, redis_binary, require

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a parent to reap it is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _uid(pid: int) -> int:
    line = next(ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("Uid:"))
    return int(line.split()[1])


async def test_redis_answers_and_set_nx_px_holds_until_it_expires(redis_url):
    client = aioredis.from_url(redis_url)
    try:
        assert await client.ping() is True
        assert await client.set("lock:t1", "worker-a", nx=True, px=300) is True
        assert await client.set("lock:t1", "worker-b", nx=True, px=300) is None  # held: a second taker fails
        assert await client.get("lock:t1") == b"worker-a"
        assert 0 < await client.pttl("lock:t1") <= 300
        await asyncio.sleep(0.4)
        assert await client.get("lock:t1") is None  # expired: a dead holder does not wedge it
        assert await client.set("lock:t1", "worker-b", nx=True, px=300) is True
    finally:
        await client.aclose()


async def test_each_test_starts_with_an_empty_redis(redis_url):
    client = aioredis.from_url(redis_url)
    try:
        assert await client.dbsize() == 0  # the previous test's lock:t1 was flushed
        await client.set("left-behind", "x")
    finally:
        await client.aclose()


async def test_postgres_answers_through_sqlalchemy_async_and_asyncpg(postgres_url):
    assert postgres_url.startswith("postgresql+asyncpg://postgres@127.0.0.1:")
    engine = create_async_engine(postgres_url)
    try:
        async with engine.begin() as conn:
            assert "PostgreSQL 1" in (await conn.execute(text("select version()"))).scalar_one()
            assert await conn.scalar(text("select current_database()")) == postgres_url.rsplit("/", 1)[1]
            # A fresh database of its own: nothing another test made is here.
            assert await conn.scalar(text("select count(*) from pg_tables where schemaname = 'public'")) == 0
            await conn.execute(text("create table probe (id serial primary key, body text not null)"))
            ids = (await conn.execute(text("insert into probe (body) values ('a'), ('b') returning id"))).scalars()
            assert list(ids) == [1, 2]
        async with engine.connect() as conn:
            assert (await conn.execute(text("select body from probe order by id"))).scalars().all() == ["a", "b"]
    finally:
        await engine.dispose()


def test_servers_stop_cleanly_and_leave_nothing_behind():
    with RedisServer.start() as redis_server, PostgresCluster.start() as pg:
        pids = [redis_server.process.pid, pg.process.pid, *_children(pg.process.pid)]
        assert len(pids) > 3  # the postmaster's own workers (checkpointer, walwriter, ...)
        folders = [redis_server.folder, pg.folder]
        assert _alive(redis_server.process.pid) and _alive(pg.process.pid)  # (a short-lived worker may be gone)
        if os.geteuid() == 0:  # PostgreSQL refuses root: its cluster and processes belong to `postgres`
            assert _uid(pg.process.pid) != 0
            assert (pg.folder / "data").stat().st_uid == _uid(pg.process.pid)
        assert pg.sql("select 1") == "1"
    assert redis_server.process.returncode == 0 and pg.process.returncode == 0  # their own clean shutdown
    assert not any(_alive(pid) for pid in pids)
    assert not any(folder.exists() for folder in folders)


def test_servers_die_with_a_test_process_that_is_killed():
    """A test run killed before its teardown (a timeout's kill) leaves no server running."""
    script = ("import time\nfrom tests.support.services import PostgresCluster, RedisServer\n"
              "r, p = RedisServer.start(), PostgresCluster.start()\n"
              "print(r.process.pid, p.process.pid, r.folder, p.folder, flush=True)\ntime.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    folders: list[str] = []
    try:
        redis_pid, pg_pid, *folders = child.stdout.readline().split()
        pids = [int(redis_pid), int(pg_pid), *_children(int(pg_pid))]
        assert _alive(int(redis_pid)) and _alive(int(pg_pid))
        child.send_signal(signal.SIGKILL)
        child.wait()
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(pid) for pid in pids)
    finally:
        child.kill()
        child.wait()
        for folder in folders:
            subprocess.run(["rm", "-rf", folder], check=False)


def test_a_missing_server_fails_in_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=r"redis-server is not installed.*CI must install it"):
        require(None, "redis-server", "redis-server")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="apt-get install redis-server"):
        require(None, "redis-server", "redis-server")
    require("/usr/bin/redis-server", "redis-server", "redis-server")  # installed: nothing happens


def test_the_binaries_are_found_off_path(monkeypatch):
    """Debian keeps PostgreSQL's server binaries in /usr/lib/postgresql/N/bin, not on PATH."""
    require(redis_binary(), "redis-server", "redis-server")
    require(postgres_bindir(), "PostgreSQL's server (initdb, postgres)", "postgresql")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    bindir = postgres_bindir()
    assert bindir is not None and (bindir / "initdb").is_file()
