"""The task lease on Redis (`hearth:lock:<task>`): at most one turn of a task is queued or running, across every API
instance and worker, and a dead worker's hold runs out instead of wedging the task.

The value is `<turn_id>|<client_msg_id>|<holder>`: `queued` while the turn waits for a worker (the API sets it with
SET NX and a long TTL when it enqueues the run), then the running worker's random token (its CAS from `queued`),
renewed by a heartbeat. Every change after the first is a compare-and-set in a Lua script, so a worker can only
renew or release its own hold.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import redis.asyncio

from ...errors import HearthError, TaskBusy
from .common import TRANSIENT, RedisUnavailable, key, require_bytes

log = logging.getLogger(__name__)

QUEUED = "queued"
QUEUED_TTL = 10 * 60.0
RUNNING_TTL = 30.0

# Set the value unless the key is there; the value that is there otherwise.
_QUEUE = """
local held = redis.call('GET', KEYS[1])
if held then return held end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""
# `<turn>|<msg>|queued` becomes `<turn>|<msg>|<token>`: {1, new value}; else {0, what is there} or false (nothing).
_TAKE = """
local held = redis.call('GET', KEYS[1])
if not held then return false end
local head = ARGV[1] .. '|'
if string.sub(held, 1, #head) == head and string.sub(held, -7) == '|queued' then
  local mine = string.sub(held, 1, #held - 6) .. ARGV[2]
  redis.call('SET', KEYS[1], mine, 'PX', ARGV[3])
  return {1, mine}
end
return {0, held}
"""
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_UNQUEUE = """
local held = redis.call('GET', KEYS[1])
if held and string.sub(held, 1, #ARGV[1] + 1) == ARGV[1] .. '|' and string.sub(held, -7) == '|queued' then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who has a task's lease: the turn, the input's client_msg_id ("" when it had none), and `queued` or a token."""

    turn_id: str
    client_msg_id: str
    holder: str

    @property
    def queued(self) -> bool:
        return self.holder == QUEUED

    @classmethod
    def parse(cls, raw: bytes) -> Holder:
        turn_id, rest = raw.decode().split("|", 1)
        client_msg_id, holder = rest.rsplit("|", 1)  # the client's id may hold a '|' itself; ours never do
        return cls(turn_id, client_msg_id, holder)


class LeaseGone(TaskBusy):
    """The turn's queued hold is not there any more (it waited longer than its TTL, or Redis lost it): the worker
    must not run the turn; the reaper ends it."""

    def __init__(self, task_id: str, turn_id: str):
        HearthError.__init__(self, f"Turn {turn_id!r} of task {task_id!r} no longer holds the task (it waited too "
                                   "long for a worker, or Redis lost it); it is not run.")
        self.task_id = task_id


class TaskLeases:
    """The task leases. `try_queue` (the API, before it enqueues a run), `unqueue` (the API, when it could not enqueue
    after all), `acquire` (the worker, at the start of the run), `holder`. A worker's lease is a `Lease`. Every call
    raises `RedisUnavailable` when Redis cannot be reached."""

    def __init__(self, client: redis.asyncio.Redis, *, running_ttl: float = RUNNING_TTL):
        require_bytes(client)
        self._client = client
        self.running_ttl = running_ttl
        self._queue = client.register_script(_QUEUE)
        self._take = client.register_script(_TAKE)
        self._renew = client.register_script(_RENEW)
        self._drop = client.register_script(_DROP)
        self._unqueue = client.register_script(_UNQUEUE)

    async def try_queue(self, task_id: str, turn_id: str, client_msg_id: str | None,
                        ttl: float = QUEUED_TTL) -> Holder | None:
        """Hold the task for this turn until a worker takes it (`ttl` seconds at most): None when this call got it;
        else who holds it (the same client_msg_id: a repeated send; another: the task is busy)."""
        value = f"{turn_id}|{client_msg_id or ''}|{QUEUED}"
        held = await self._call(self._queue, task_id, value, int(ttl * 1000), doing="queuing a turn")
        return None if held is None else Holder.parse(held)

    async def unqueue(self, task_id: str, turn_id: str) -> bool:
        """Let go of a queued hold this API instance made and could not follow up (the input was not stored, the
        run not enqueued): True when it was still queued for that turn and is gone now."""
        return bool(await self._call(self._unqueue, task_id, turn_id, doing="freeing a task"))

    def acquire(self, task_id: str, turn_id: str, *, on_lost: Callable[[], None] | None = None) -> _Acquiring:
        """Take the task for the run of `turn_id`: only from that turn's queued hold, at once or `TaskBusy`
        (`LeaseGone` when nothing holds it). `await` it for the `Lease`, or `async with` it (released on the way
        out). The lease renews itself every third of its TTL; `on_lost()` is called once if a renewal finds it
        gone or taken, or cannot reach Redis before it runs out: the worker must then abort the turn."""
        return _Acquiring(self, task_id, turn_id, on_lost)

    async def _acquire(self, task_id: str, turn_id: str, on_lost: Callable[[], None] | None) -> Lease:
        token = secrets.token_hex(8)
        got = await self._call(self._take, task_id, turn_id, token, int(self.running_ttl * 1000),
                               doing="taking a task")
        if got is None:
            raise LeaseGone(task_id, turn_id)
        if got[0] != 1:
            raise TaskBusy(task_id)
        return Lease(self, task_id, got[1], on_lost)

    async def holder(self, task_id: str) -> Holder | None:
        try:
            held = await self._client.get(key("lock", task_id))
        except TRANSIENT as error:
            raise RedisUnavailable("reading a task's lease") from error
        return None if held is None else Holder.parse(held)

    async def _call(self, script: Any, task_id: str, *args: Any, doing: str) -> Any:
        try:
            return await script(keys=[key("lock", task_id)], args=list(args))
        except TRANSIENT as error:
            raise RedisUnavailable(doing) from error


class Lease:
    """A worker's hold on a task while its turn runs. A heartbeat renews it (CAS on its own value) every third of the
    TTL; when a renewal finds it gone or another's, or no renewal has worked for a whole TTL (Redis unreachable: the
    key has run out there, or soon will), it calls `on_lost()` once and stops. `release()` deletes it if it is still
    this worker's (idempotent; False when it was not, or Redis could not be reached: it then runs out by itself
    within the TTL) and stops the heartbeat. Cancelling `release()` may leave the key to run out the same way."""

    def __init__(self, leases: TaskLeases, task_id: str, value: bytes, on_lost: Callable[[], None] | None):
        self.task_id = task_id
        self.value = value
        self.holder = Holder.parse(value)
        self.lost = False
        self._leases = leases
        self._on_lost = on_lost
        self._renewed = time.monotonic()
        self._heartbeat: asyncio.Task | None = asyncio.get_running_loop().create_task(self._beat())

    async def _beat(self) -> None:
        ttl = self._leases.running_ttl
        pause = ttl / 3
        while True:
            await asyncio.sleep(pause)
            try:
                async with asyncio.timeout(ttl / 3):  # a call that hangs counts as a failed one
                    renewed = await self._leases._call(self._leases._renew, self.task_id, self.value,
                                                       int(ttl * 1000), doing="renewing a task's lease")
            except (RedisUnavailable, TimeoutError):
                if time.monotonic() - self._renewed < ttl:
                    pause = ttl / 15  # try again soon: the key runs out at the end of the TTL
                    continue
                log.warning("Task %s: the lease could not be renewed for %.0f s; the turn is given up", self.task_id,
                            ttl)
            else:
                if renewed:
                    self._renewed = time.monotonic()
                    pause = ttl / 3
                    continue
                log.warning("Task %s: the lease is gone or taken; the turn is given up", self.task_id)
            self._lose()
            return

    def _lose(self) -> None:
        self.lost = True
        self._heartbeat = None
        if self._on_lost is not None:
            try:
                self._on_lost()
            except Exception:
                log.exception("Task %s: on_lost failed", self.task_id)

    async def release(self) -> bool:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            self._heartbeat = None
        try:
            return bool(await self._leases._call(self._leases._drop, self.task_id, self.value,
                                                 doing="releasing a task"))
        except RedisUnavailable:
            log.warning("Task %s: the lease could not be released; it runs out by itself", self.task_id)
            return False


class _Acquiring:
    """`await leases.acquire(...)` gives the Lease; `async with leases.acquire(...) as lease:` releases it after."""

    def __init__(self, leases: TaskLeases, task_id: str, turn_id: str, on_lost: Callable[[], None] | None):
        self._args = (task_id, turn_id, on_lost)
        self._leases = leases
        self._lease: Lease | None = None

    def __await__(self) -> Generator[Any, None, Lease]:
        return self._leases._acquire(*self._args).__await__()

    async def __aenter__(self) -> Lease:
        self._lease = await self._leases._acquire(*self._args)
        return self._lease

    async def __aexit__(self, *exc: object) -> None:
        assert self._lease is not None
        await self._lease.release()
