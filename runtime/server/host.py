"""The tasks' host of a server whose turns run in `hearth worker`s (runtime/ARCHITECTURE.md, "Server host").

`ServerHost` is engine/host.TurnHost with the few methods that say where a turn runs replaced; `rt.tasks` calls it
exactly as it calls the desktop's, so the send keeps every guarantee TurnHost.send has (the input durable before
it returns; one row and one turn per client_msg_id however often and from however many instances it is sent; a
new input never overtakes queued ones; TaskBusy unless queued). What differs:

- who holds a task: its Redis lease (`TaskLeases.try_queue`, atomic across instances) instead of a slot in this
  process. A lease whose turn has already told its end (`turn_ended` is in the stream) is waited for a moment: its
  worker lets go right after, and an observer that saw the end may send at once, as on the desktop;
- a send repeated while its first send holds the task waits until that one's input is stored, and answers with it;
- the launch: the task's stream reset on Redis with `turn_started`, the same event on the owner's feed, and the run
  enqueued for a worker (`task.run`, job id `run:<turn>`, so it is enqueued once). A launch that fails lets go of
  the lease, so the reaper ends the stored turn `interrupted` within seconds;
- an input queued behind a running turn is dispatched by whoever finds the task free once it is stored
  (`dispatch_queued`): this instance, or the worker whose turn ends;
- `stop` is a Stop flag and a message on the abort bus (AbortBus), plus ending a wait for an answer as TurnHost
  does; `subscribe` reads the Redis stream (RedisStreamReader), the same reader for a live send and a reconnect;
  `wait_idle` waits for the lease to go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from arq.connections import ArqRedis

from ..engine.abort import TurnSlot
from ..engine.host import Holding, TurnHost, wait_ended_events
from ..engine.stream_buffer import BufferState
from ..errors import TaskBusy
from ..events import Event, TurnStarted
from ..infos import TurnHandle
from ..store.conversations import Started
from .redis.abort import AbortBus
from .redis.common import RedisUnavailable
from .redis.feed import RedisFeed
from .redis.lease import TaskLeases
from .redis.stream import RedisStreamReader, RedisStreamWriter

log = logging.getLogger(__name__)

RUN_JOB = "task.run"
QUEUE_NAME = "hearth:queue"
ENDING_WAIT = 5.0  # how long a send waits for the worker of a turn that told its end to let go of the task
DUPLICATE_WAIT = 10.0  # how long a repeated send waits for its first send's input to be stored
POLL = 0.02


@dataclass
class ServerParts:
    """The Redis side of a server host, on one client: arq's pool (a `redis.asyncio.Redis` that enqueues jobs, on
    Hearth's queue)."""

    client: ArqRedis
    leases: TaskLeases
    bus: AbortBus
    reader: RedisStreamReader
    feed: RedisFeed

    @classmethod
    def on(cls, client: ArqRedis, *, running_ttl: float | None = None) -> ServerParts:
        leases = TaskLeases(client) if running_ttl is None else TaskLeases(client, running_ttl=running_ttl)
        return cls(client, leases, AbortBus(client), RedisStreamReader(client), RedisFeed(client))

    async def enqueue_run(self, task_id: str, turn_id: str) -> None:
        await self.client.enqueue_job(RUN_JOB, task_id, turn_id, _job_id=f"run:{turn_id}", _queue_name=QUEUE_NAME)

    async def tell(self, user_id: str | None, event: Any) -> None:
        """Put a turn_started / turn_ended / title event on the user's feed (GET /api/events); a feed is best
        effort: a client that reconnects re-reads its tasks."""
        if user_id is None:
            return
        try:
            await self.feed.publish(user_id, event)
        except RedisUnavailable as error:
            log.warning("%s", error)


class ServerHost(TurnHost):
    def __init__(self, *args: Any, parts: ServerParts, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.parts = parts

    # -- who holds a task: its lease --

    async def _claim(self, slot: TurnSlot) -> Holding | None:
        leases = self.parts.leases
        while True:
            held = await leases.try_queue(slot.task_id, slot.turn_id, slot.client_msg_id)
            if held is None or held.queued or held.client_msg_id == slot.client_msg_id:
                return held
            if not await self._ended(slot.task_id, held.turn_id) or not await self._let_go(slot.task_id, held):
                return held

    async def _ended(self, task_id: str, turn_id: str) -> bool:
        state, current = await self.parts.reader.state(task_id)
        return current == turn_id and state == BufferState.completed

    async def _let_go(self, task_id: str, held: Holding) -> bool:
        """Wait a moment for the worker of a turn that has ended to release the task: True once it did."""
        try:
            async with asyncio.timeout(ENDING_WAIT):
                while (now := await self.parts.leases.holder(task_id)) is not None and now.turn_id == held.turn_id:
                    await asyncio.sleep(POLL)
        except TimeoutError:
            return False
        return True

    async def _unclaim(self, slot: TurnSlot) -> None:
        try:
            await self.parts.leases.unqueue(slot.task_id, slot.turn_id)
        except RedisUnavailable as error:
            log.warning("Task %s stays held until its lease runs out: %s", slot.task_id, error)

    async def _held_duplicate(self, owner_id: str, held: Holding) -> TurnHandle:
        """The first send of this input holds the task: its input is stored before its turn starts."""
        assert held.client_msg_id is not None
        try:
            async with asyncio.timeout(DUPLICATE_WAIT):
                while (seen := await self.store.find_client_message(owner_id, held.client_msg_id)) is None:
                    await asyncio.sleep(POLL)
        except TimeoutError:
            raise TaskBusy(owner_id, self.noun) from None
        return self.duplicate(seen)

    # -- the turn runs in a worker --

    async def _launch(self, slot: TurnSlot, owner: dict, started: Started) -> None:
        slot.input_message_id, slot.output_message_id = started.input_id, started.output_id
        user_id = owner.get("owner_id")
        if started.ended_wait is not None:  # the input ended a wait for an answer: the turn that waited is over
            await self.parts.tell(user_id, wait_ended_events(slot.task_id, started.ended_wait)[-1])
        event = TurnStarted(task_id=slot.task_id, turn_id=slot.turn_id, input_message_id=slot.input_message_id)
        try:
            await RedisStreamWriter(self.parts.client, slot.task_id, slot.turn_id).reset(event)
            await self.parts.enqueue_run(slot.task_id, slot.turn_id)
        except BaseException:
            await self._unclaim(slot)  # the stored turn has no lease now: the reaper ends it `interrupted`
            raise
        await self.parts.tell(user_id, event)

    async def _queued(self, owner_id: str) -> None:
        await self.dispatch_queued(owner_id)

    async def dispatch_queued(self, owner_id: str) -> TurnHandle | None:
        """Start the task's oldest queued input if the task is free; None when it is not, or nothing is queued. Run
        by whoever stored a queued input and by the worker whose turn ended: if both look at once, one of them
        finds the task free and the input stored."""
        while True:
            slot = TurnSlot(owner_id, uuid.uuid4().hex, None)
            if await self.parts.leases.try_queue(owner_id, slot.turn_id, None) is not None:
                return None  # a turn holds the task: its worker dispatches when it ends
            try:
                owner = await self._owner_row(owner_id)
                started = await self.store.start_queued_turn(owner_id, slot.turn_id)
            except BaseException:
                await self._unclaim(slot)
                raise
            if started is not None:
                await self._launch(slot, owner, started)
                return TurnHandle(owner_id, slot.turn_id, started.input_id)
            await self._unclaim(slot)
            # An input queued while this looked finds the task held; this one looks again now that it let go.
            if not await self.store.has_queued(owner_id):
                return None

    async def run_queued(self, owner_id: str) -> TurnHandle | None:
        self._writable()
        await self._owner_row(owner_id)
        return await self.dispatch_queued(owner_id)

    async def stop(self, owner_id: str) -> None:
        """Stop the turn running (or queued) in a worker, wherever it is; or end a wait for an answer."""
        await self.parts.bus.request(owner_id)
        if not await self.store.is_waiting(owner_id):
            return
        self._writable()
        slot = TurnSlot(owner_id, uuid.uuid4().hex, None)
        if await self.parts.leases.try_queue(owner_id, slot.turn_id, None) is not None:
            return  # an input started a turn meanwhile: it ended the wait itself
        try:
            ended = await self.store.end_wait(owner_id)
        finally:
            await self._unclaim(slot)
        if ended is not None:
            # Told on the turn's stream, started anew: observers of that turn and of the owner's feed learn that
            # nothing waits any more.
            events = wait_ended_events(owner_id, ended)
            await RedisStreamWriter(self.parts.client, owner_id, ended.turn_id).reset(*events)
            await self.parts.tell((await self._owner_row(owner_id)).get("owner_id"), events[-1])

    async def wait_idle(self, owner_id: str) -> None:
        while await self.parts.leases.holder(owner_id) is not None:
            await asyncio.sleep(POLL * 2)

    async def clear_stop(self, owner_id: str) -> None:
        await self.parts.bus.clear(owner_id)

    # -- reading a turn: the Redis stream --

    async def stream_state(self, owner_id: str) -> BufferState:
        return (await self.parts.reader.state(owner_id))[0]

    async def subscribe(self, owner_id: str, after_seq: int = 0, turn_id: str | None = None,
                        follow: bool = False, deltas: bool = True) -> AsyncGenerator[Event, None]:
        reader = self.parts.reader
        state, current = await reader.state(owner_id)
        if state == BufferState.missing:
            await self._owner_row(owner_id)
        if turn_id is not None and turn_id != current:
            await self._started(owner_id, turn_id)
        while True:
            async for event in reader.subscribe(owner_id, after_seq, turn_id, deltas):
                turn_id, after_seq = event.turn_id, event.seq
                yield event
            if not follow:
                return
            while (now := (await reader.state(owner_id))[1]) in (None, turn_id):
                await asyncio.sleep(POLL * 10)
            turn_id, after_seq = now, 0

    async def _started(self, owner_id: str, turn_id: str) -> None:
        """A turn that holds the task but whose stream is not reset yet (its send is still launching it): wait for
        its stream, so a reader of it never gets the turn before it."""
        held = await self.parts.leases.holder(owner_id)
        if held is None or held.turn_id != turn_id:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(DUPLICATE_WAIT):
                while (await self.parts.reader.state(owner_id))[1] != turn_id:
                    await asyncio.sleep(POLL)

