"""Hearth's server host as real processes, for tests and benchmarks: `hearth serve` and `hearth worker` children on
one Redis and one PostgreSQL (tests/support/services.py), or the single box on a SQLite data folder, with a loopback
model server (tests/support/openai_server.py) as every turn's model.

    cluster = Cluster(tmp_path, model.base_url, database=pg_url, redis=redis_url)
    api = await cluster.api(); worker = await cluster.worker()
    token = await cluster.user("ada")
    async with api.client(token) as http: ...
    cluster.stop()

Each child writes its stderr to a log file of its own (`Child.log`); `started()` waits for its "ready" line
(`hearth serve: listening on …`, `hearth worker: ready …`) and fails with the log's end if it exits first. Children
die with the process that started them (PR_SET_PDEATHSIG). `Child.kill(signal)` and `Child.stopped()` for tests
that take processes away.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx_sse

from runtime.store.repo import Store
from tests.support.services import _die_with_parent

ROOT = Path(__file__).resolve().parents[2]
MODEL = "t/test-model"
START_TIMEOUT = 60.0


class Child:
    def __init__(self, argv: list[str], env: dict[str, str], log: Path, ready: str):
        self.log = log
        self._ready = ready
        with log.open("ab") as out:
            self.process = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                            stdout=subprocess.DEVNULL, stderr=out,
                                            preexec_fn=_die_with_parent(signal.SIGKILL))
        self.pid = self.process.pid

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def _ready_line(self, deadline: float) -> str | None:
        for line in self.text().splitlines():
            if line.startswith(self._ready):
                return line
        if self.process.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{self._ready!r} never came (exit {self.process.poll()}):\n{self.text()[-3000:]}")
        return None

    async def started(self, timeout: float = START_TIMEOUT) -> str:
        """The ready line, once the child wrote it."""
        deadline = time.monotonic() + timeout
        while (line := self._ready_line(deadline)) is None:
            await asyncio.sleep(0.05)
        return line

    def wait_started(self, timeout: float = START_TIMEOUT) -> str:
        """`started()` for a fixture outside the event loop."""
        deadline = time.monotonic() + timeout
        while (line := self._ready_line(deadline)) is None:
            time.sleep(0.05)
        return line

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)

    async def stopped(self, timeout: float = 30.0) -> int:
        """The child's exit status, once it exited."""
        deadline = asyncio.get_running_loop().time() + timeout
        while (code := self.process.poll()) is None:
            if asyncio.get_running_loop().time() > deadline:
                self.process.kill()
                raise AssertionError(f"the child did not stop in {timeout} s:\n{self.text()[-3000:]}")
            await asyncio.sleep(0.05)
        return code


class Api(Child):
    base_url = ""

    def _ready_line(self, deadline: float) -> str | None:
        line = super()._ready_line(deadline)
        if line is not None:
            found = re.search(r"http://[\d.]+:\d+", line)
            assert found, line
            self.base_url = found.group(0)
        return line

    def client(self, token: str | None = None, **kw: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.base_url, headers=headers,
                                 timeout=kw.pop("timeout", httpx.Timeout(30, read=60)), **kw)


class Cluster:
    """The processes of one server host. `database` and `redis` None: the single box on the data folder."""

    def __init__(self, folder: Path, model_url: str, *, database: str | None = None, redis: str | None = None,
                 env: dict[str, str] | None = None):
        self.folder = folder
        self.data = folder / "data"
        self.data.mkdir(parents=True, exist_ok=True)
        self.database = database
        self.redis = redis
        self.settings = folder / "settings.json"
        self.settings.write_text(json.dumps({
            "providers": [{"id": "t", "kind": "openai", "base_url": model_url, "context_window": 32768}],
            "default_model": MODEL, "memory": False}))
        self.env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
        self.env.pop("HEARTH_HOME", None)
        for name, value in (("HEARTH_DATABASE_URL", database), ("HEARTH_REDIS_URL", redis)):
            if value:
                self.env[name] = value
            else:
                self.env.pop(name, None)
        self.children: list[Child] = []
        self._count = 0

    @property
    def distributed(self) -> bool:
        return self.redis is not None

    def _argv(self, command: str, *extra: str) -> list[str]:
        return [sys.executable, "-m", "runtime.cli", command, "--data", str(self.data), "--settings",
                str(self.settings), *extra]

    def _log(self, kind: str) -> Path:
        self._count += 1
        return self.folder / f"{kind}-{self._count}.log"

    def launch_api(self, port: int = 0) -> Api:
        """An API instance starting (`started()` / `wait_started()` for when it listens), on `port` (0: any free
        one; a given one to start an instance again where its clients reconnect)."""
        child = Api(self._argv("serve", "--port", str(port)), self.env, self._log("api"), "hearth serve: listening")
        self.children.append(child)
        return child

    def launch_worker(self, env: dict[str, str] | None = None, concurrency: int = 4) -> Child:
        assert self.distributed, "the single box runs its turns itself"
        child = Child(self._argv("worker", "--concurrency", str(concurrency)), {**self.env, **(env or {})},
                      self._log("worker"), "hearth worker: ready")
        self.children.append(child)
        return child

    async def api(self) -> Api:
        child = self.launch_api()
        await child.started()
        return child

    async def worker(self, env: dict[str, str] | None = None, concurrency: int = 4) -> Child:
        child = self.launch_worker(env, concurrency)
        await child.started()
        return child

    async def store(self) -> Store:
        """The server's database, opened in the test's process (close it)."""
        return await Store.open_url(self.database or f"sqlite:///{self.data / 'hearth.sqlite3'}")

    async def user(self, name: str, quota_tokens: int | None = None) -> str:
        """A new user of the server; their API token."""
        store = await self.store()
        try:
            _, token = await store.add_user(name, quota_tokens)
        finally:
            await store.aclose()
        return token

    def stop(self) -> None:
        for child in self.children:
            child.kill(signal.SIGTERM)
        for child in self.children:
            try:
                child.process.wait(15)
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()


@dataclass
class Read:
    """What a request answered: its status, and its events (each the event's JSON plus `id`, the SSE id) or, for an
    answer that is not an event stream, its JSON body."""

    status: int
    events: list[dict[str, Any]] = field(default_factory=list)
    body: Any = None

    @property
    def text(self) -> str:
        return "".join(e["text"] for e in self.events if e["type"] == "text_delta")

    @property
    def last_id(self) -> str | None:
        return self.events[-1]["id"] if self.events else None


async def read_sse(client: httpx.AsyncClient, method: str, url: str, *, json: Any = None,
                   headers: dict[str, str] | None = None, stop_after: int | None = None) -> Read:
    """Read an SSE answer with a real SSE reader (httpx-sse) to its end, or until `stop_after` events came (then the
    connection is dropped)."""
    async with httpx_sse.aconnect_sse(client, method, url, json=json, headers=dict(headers or {})) as source:
        response = source.response
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
            return Read(response.status_code, body=response.json() if response.content else None)
        read = Read(response.status_code)
        async for event in events_of(source):
            read.events.append(event)
            if stop_after is not None and len(read.events) >= stop_after:
                break
        return read


async def events_of(source: httpx_sse.EventSource) -> AsyncIterator[dict[str, Any]]:
    """The events of an SSE answer, each with its `id`. A keep-alive comment makes httpx-sse hand out a message
    without data (it repeats the last id, which the SSE spec does not ask for): skipped."""
    async for message in source.aiter_sse():
        if message.data:
            yield {**message.json(), "id": message.id}
