"""What the Redis ports share: key names, the error that means Redis cannot be reached, and how an outage is waited
out (a growing delay between tries, one log line when it starts and one when it ends, an optional deadline)."""

from __future__ import annotations

import asyncio
import logging
import time

import redis.asyncio
import redis.exceptions
from redis.asyncio.client import PubSub

from ...errors import HearthError

log = logging.getLogger(__name__)

PREFIX = "hearth:"

# What a restart, a dropped connection or a server still loading its data raises (BusyLoadingError is a
# ConnectionError): worth trying again. Anything else is a mistake of ours or a full Redis, and is not retried.
TRANSIENT: tuple[type[Exception], ...] = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)


def key(*parts: str) -> str:
    """`hearth:` + the parts joined with `:` (`key("stream", task_id)` is `hearth:stream:<task>`)."""
    return PREFIX + ":".join(parts)


def channel(client: redis.asyncio.Redis, *parts: str) -> str:
    """A pub/sub channel: like `key`, with the database number in it, since channels are shared by every database of
    a Redis (two Hearths on databases 0 and 1 of one server must not hear each other)."""
    return key(str(client.connection_pool.connection_kwargs.get("db", 0)), *parts)


def require_bytes(client: redis.asyncio.Redis) -> None:
    """The ports read binary fields and compare raw values: a client that decodes replies to str cannot serve them."""
    if client.connection_pool.connection_kwargs.get("decode_responses"):
        raise ValueError("Hearth's Redis ports need a client that returns bytes: create it without decode_responses.")


class RedisUnavailable(HearthError):
    """Redis could not be reached for longer than the caller waits (the HTTP API answers 503)."""

    def __init__(self, doing: str):
        super().__init__(f"Redis cannot be reached ({doing}). Check that redis-server is running and that --redis "
                         "(or $HEARTH_REDIS_URL) points at it.")


class Outage:
    """One stretch of failed calls to Redis. `await wait(error)` sleeps before the next try (50 ms, doubling up to
    2 s) and raises `RedisUnavailable` once the stretch has lasted `patience` seconds (None: it never gives up);
    `over()` after a call that worked. The first failure is logged as a warning with the error, the recovery once."""

    def __init__(self, doing: str, patience: float | None = None):
        self.doing = doing
        self.patience = patience
        self.since: float | None = None
        self._delay = 0.05

    async def wait(self, error: BaseException) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
            log.warning("Redis cannot be reached (%s): %s; trying again", self.doing, error)
        if self.patience is not None and now - self.since >= self.patience:
            raise RedisUnavailable(self.doing) from error
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, 2.0)

    def over(self) -> None:
        if self.since is not None:
            log.warning("Redis answers again (%s) after %.1f s", self.doing, time.monotonic() - self.since)
            self.since = None
            self._delay = 0.05


async def subscribe(client: redis.asyncio.Redis, name: str, doing: str, timeout: float = 5.0) -> PubSub:
    """A pub/sub connection subscribed to `name`, returned once Redis confirmed it: from then on nothing published
    on `name` is missed. Raises `RedisUnavailable` (nothing left open) when Redis cannot be reached."""
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(name)
        async with asyncio.timeout(timeout):
            while (message := await pubsub.get_message(timeout=timeout)) is None or message["type"] != "subscribe":
                pass
    except BaseException as error:
        await pubsub.aclose()
        if isinstance(error, (*TRANSIENT, TimeoutError)):
            raise RedisUnavailable(doing) from error
        raise
    return pubsub
