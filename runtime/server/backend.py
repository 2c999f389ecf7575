"""What an API instance stands on (`Backend`), opened for one of the three ways `hearth serve` runs
(runtime/ARCHITECTURE.md, "Server host"):

- no database and no Redis: the single box. The data folder's SQLite database and the desktop's in-process ports;
  the turns run in this process, behind the quota check, and so do its tasks' wake-ups (services/wakeups.py);
- a database alone: the same on that database (one process owns it: startup recovery and wake-ups as on the
  desktop);
- a database and Redis: the tasks' host is `ServerHost` (turns run in `hearth worker`s), every instance and worker
  shares the database and the data folder, and this instance runs the lease reaper too.

The HTTP layer (server/app.py) calls `rt.tasks` in all three; `users` (the store) finds the caller by token;
`events` is each user's feed; `health` reaches the database and Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arq.connections import ArqRedis, RedisSettings, create_pool
from sqlalchemy import text

from ..api import Runtime
from ..config import Settings, read_settings
from ..engine.host import TurnHost
from ..errors import ConfigError
from ..events import Event
from ..store.repo import Store
from .host import QUEUE_NAME, ServerHost, ServerParts
from .quota import QuotaGate
from .reaper import EVERY, reaping
from .redis.common import TRANSIENT, RedisUnavailable

FEED_TYPES = frozenset({"turn_started", "turn_ended", "title"})
UNREACHABLE: tuple[type[Exception], ...] = (*TRANSIENT, OSError)


def settings_file(path: str | None) -> Settings | None:
    """The --settings file (None: the data folder's settings.json); ConfigError when it is not there."""
    if path is None:
        return None
    file = Path(path).expanduser()
    if not file.is_file():
        raise ConfigError(f"There is no settings file {file}.")
    return read_settings(file)


async def connect_redis(url: str) -> ArqRedis:
    """A client of the Redis at `url` (arq's pool, on Hearth's queue). ConfigError for a URL that is not one,
    RedisUnavailable when it cannot be reached."""
    try:
        settings = RedisSettings.from_dsn(url)
    except (RuntimeError, ValueError):
        raise ConfigError(f"{url!r} is not a Redis URL (redis://HOST:PORT/DB).") from None
    settings.conn_retries = 2
    # arq logs each failed try with redis-py's raw message; what cannot be reached is said once, as a sentence.
    logging.getLogger("arq.connections").setLevel(logging.ERROR)
    try:
        return await create_pool(settings, default_queue_name=QUEUE_NAME)
    except UNREACHABLE as error:
        raise RedisUnavailable("connecting") from error


def gated_host(*args: Any, **kwargs: Any) -> TurnHost:
    """The single box's tasks' host: the desktop's, its turns behind the quota check."""
    store, agent, *rest = args
    assert isinstance(store, Store)
    return TurnHost(store, QuotaGate(agent, store), *rest, **kwargs)


@dataclass
class Backend:
    rt: Runtime
    users: Store
    parts: ServerParts | None = None  # None: the single box (no Redis)
    chores: list[asyncio.Task[Any]] = field(default_factory=list)
    _owners: dict[str, str | None] = field(default_factory=dict)

    async def events(self, user_id: str) -> AsyncGenerator[Event, None]:
        """The user's tasks' turn_started / turn_ended / title events from now on: the user's Redis feed, or in a
        single box the runtime's feed of every task, kept to the user's."""
        if self.parts is not None:
            async for event in self.parts.feed.follow(user_id):
                yield event
            return
        async for event in self.rt.events():
            if event.type in FEED_TYPES and await self._owner(event.task_id) == user_id:
                yield event

    async def _owner(self, task_id: str) -> str | None:
        if task_id not in self._owners:
            task = await self.users.get_task(task_id)
            self._owners[task_id] = task["owner_id"] if task else None
        return self._owners[task_id]

    async def health(self) -> None:
        """Raises StorageUnavailable or RedisUnavailable when this instance cannot reach its database or Redis."""
        async with self.users.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        if self.parts is not None:
            try:
                await self.parts.client.ping()
            except TRANSIENT as error:
                raise RedisUnavailable("checking the connection") from error

    async def aclose(self, *, client: bool = True) -> None:
        """Stop the reaper, close the runtime and (unless arq closes it) the Redis client."""
        for chore in self.chores:
            chore.cancel()
        await asyncio.gather(*self.chores, return_exceptions=True)
        await self.rt.aclose()
        if self.parts is not None:
            await self.parts.reader.aclose()
        if self.parts is not None and client:
            await self.parts.client.aclose()


async def open_backend(data: str | None, database: str | None, redis: str | None, settings: Settings | None, *,
                       lease_seconds: float | None = None) -> Backend:
    """The backend of an API instance or (with `lease_seconds`, the TTL of the leases it takes) a worker."""
    if redis is None:
        rt = await Runtime.open_server(data, database=database, settings=settings, task_hosts=gated_host)
        rt.wakeups.start()  # one process owns the folder and runs the turns: its tasks' wake-ups too
        return Backend(rt, rt.core.store)
    if database is None:
        raise ConfigError("With --redis, the turns run in workers, which share one database: give --database too "
                          "(or $HEARTH_DATABASE_URL).")
    client = await connect_redis(redis)
    try:
        parts = ServerParts.on(client, running_ttl=lease_seconds)
        rt = await Runtime.open_server(data, database=database, settings=settings,
                                       task_hosts=functools.partial(ServerHost, parts=parts), alone=False)
    except BaseException:
        with contextlib.suppress(*TRANSIENT):
            await client.aclose()
        raise
    every = EVERY if lease_seconds is None else min(EVERY, lease_seconds / 4)
    return Backend(rt, rt.core.store, parts, [reaping(rt.core.store, parts, every)])
