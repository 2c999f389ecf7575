"""Stop across processes: the abort bus on Redis.

A Stop is a flag (`hearth:abort:<task>`, with a TTL) and a message on the channel `hearth:<db>:abort` carrying the
task id, set and sent in one MULTI. The flag is what a run that starts later, or a listener that was reconnecting,
still finds; the message is what reaches a running turn at once. The API clears the flag before the busy check of
a send, so a Stop meant for an earlier turn never stops the new one, and one sent after it is honoured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import redis.asyncio
from redis.asyncio.client import PubSub

from .common import TRANSIENT, Outage, RedisUnavailable, channel, key, require_bytes, subscribe

log = logging.getLogger(__name__)

FLAG_TTL = 60 * 60


class AbortBus:
    """`request` (Stop), `clear` and `requested`. Each raises `RedisUnavailable` when Redis cannot be reached."""

    def __init__(self, client: redis.asyncio.Redis, *, flag_ttl: int = FLAG_TTL):
        require_bytes(client)
        self._client = client
        self._flag_ttl = flag_ttl
        self.channel = channel(client, "abort")

    async def request(self, task_id: str) -> int:
        """Set the task's Stop flag and tell every listener; how many listeners heard it (0: no worker listens now;
        the flag still stops a run of the task that starts within the flag's TTL, unless a send clears it first)."""
        try:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.set(key("abort", task_id), 1, ex=self._flag_ttl)
                pipe.publish(self.channel, task_id)
                _, heard = await pipe.execute()
        except TRANSIENT as error:
            raise RedisUnavailable("sending a Stop") from error
        return heard

    async def clear(self, task_id: str) -> None:
        try:
            await self._client.delete(key("abort", task_id))
        except TRANSIENT as error:
            raise RedisUnavailable("clearing a Stop") from error

    async def requested(self, task_id: str) -> bool:
        try:
            return bool(await self._client.exists(key("abort", task_id)))
        except TRANSIENT as error:
            raise RedisUnavailable("reading a Stop") from error


class _Watch:
    __slots__ = ("callback", "called")

    def __init__(self, callback: Callable[[], None]):
        self.callback = callback
        self.called = False


class AbortListener:
    """The one subscriber of a worker process to the abort channel, and the turns it watches.

    - `start()` subscribes and returns once Redis confirmed the subscription (`RedisUnavailable` otherwise). Use it as
      `async with AbortListener(client) as listener:`, or `start()` and `aclose()`.
    - `watch(task_id, callback)` registers the running turn's callback, then reads the task's flag: a Stop sent
      before the watch (its flag) and one sent after (its message) both reach the callback, which is called at most
      once per watch, in the listener's task (a plain function: the worker's calls `slot.abort(EndReason.aborted)`).
      A second watch of a task replaces the first. Raises `RedisUnavailable` when the flag cannot be read.
    - `unwatch(task_id)` when the turn is over.
    - The connection drops (Redis restarts): the listener subscribes again, trying with a growing delay, and once
      Redis confirms it reads the flags of every watched task, so a Stop sent meanwhile is not lost either.
    - `aclose()` stops listening; cancelling it is safe.
    """

    def __init__(self, client: redis.asyncio.Redis):
        self._bus = AbortBus(client)
        self._client = client
        self._watches: dict[str, _Watch] = {}
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        pubsub = await subscribe(self._client, self._bus.channel, "listening for Stop")
        self._task = asyncio.get_running_loop().create_task(self._listen(pubsub))

    async def __aenter__(self) -> AbortListener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def watch(self, task_id: str, callback: Callable[[], None]) -> None:
        watch = self._watches[task_id] = _Watch(callback)
        try:
            requested = await self._bus.requested(task_id)
        except BaseException:
            self._watches.pop(task_id, None)
            raise
        if requested:
            self._fire(task_id, watch)

    def unwatch(self, task_id: str) -> None:
        self._watches.pop(task_id, None)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait([self._task])
            self._task = None

    async def _listen(self, pubsub: PubSub) -> None:
        outage = Outage("listening for Stop")
        try:
            while True:
                try:
                    message = await pubsub.get_message(timeout=None)
                except TRANSIENT as error:
                    await outage.wait(error)  # the next get_message connects and subscribes again
                    continue
                outage.over()
                if message is None:
                    continue
                if message["type"] == "message":
                    self._fire(message["data"].decode(), None)
                elif message["type"] == "subscribe":  # subscribed again after a reconnect
                    await self._recheck()
        finally:
            await pubsub.aclose()

    async def _recheck(self) -> None:
        """Read the flag of every watched task: a Stop may have been sent while the listener was not subscribed."""
        tasks = list(self._watches)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for task_id in tasks:
                    pipe.exists(key("abort", task_id))
                flags = await pipe.execute()
        except TRANSIENT as error:
            log.warning("Stop flags could not be read after a reconnect: %s", error)
            return  # the connection is gone again; the next confirmation rechecks
        for task_id, flag in zip(tasks, flags, strict=True):
            if flag:
                self._fire(task_id, None)

    def _fire(self, task_id: str, watch: _Watch | None) -> None:
        watch = watch or self._watches.get(task_id)
        if watch is None or watch.called or self._watches.get(task_id) is not watch:
            return
        watch.called = True
        try:
            watch.callback()
        except Exception:
            log.exception("The Stop callback of task %s failed", task_id)
