"""Recovery with leases, not by restart: the reaper ends the turns whose worker died.

A worker holds its task's lease while the turn runs and renews it; a worker that dies (killed, its machine gone)
stops renewing, and the lease runs out within its TTL. Every worker and every API instance of a distributed server
looks every few seconds (`reap`): a turn still `running` in the database whose task has no lease is over. It is
recovered alone (`store.interrupt_turn`: the turn `interrupted`, its checkpointed text kept, its side-effecting calls
"outcome unknown", the task free for its next input); the one reaper that claimed it then ends the turn's stream
(`turn_ended`, interrupted) for its readers, tells the owner's feed, and takes the dead worker's job off the queue.
Nothing is recovered at start-up: a process starting never marks another live worker's turn interrupted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from arq.constants import in_progress_key_prefix, job_key_prefix

from ..engine.stream_buffer import BufferState
from ..errors import HearthError
from ..events import EndReason, TurnEnded
from ..store.repo import Store
from .host import QUEUE_NAME, ServerParts
from .redis.common import TRANSIENT
from .redis.stream import RedisStreamWriter

log = logging.getLogger(__name__)

EVERY = 5.0
# What a round of reaping may meet and the next round tries again: the database or Redis unreachable.
PASSING: tuple[type[Exception], ...] = (HearthError, *TRANSIENT)


async def reap(store: Store, parts: ServerParts) -> list[str]:
    """End every running turn whose task has no lease; the turns this call ended."""
    ended = []
    for turn in await store.running_turns():
        if await parts.leases.holder(turn.owner_id) is not None:
            continue
        if not await store.interrupt_turn(turn.owner_id, turn.turn_id):
            continue  # finalized meanwhile, or another reaper was first
        ended.append(turn.turn_id)
        log.warning("Task %s: turn %s lost its worker; it ended interrupted", turn.owner_id, turn.turn_id)
        event = TurnEnded(task_id=turn.owner_id, turn_id=turn.turn_id, reason=EndReason.interrupted)
        writer = RedisStreamWriter(parts.client, turn.owner_id, turn.turn_id)
        if await writer.attach() == BufferState.active:  # the dead worker's stream: its readers learn the end
            writer.publish(event)
            await writer.aclose()
        task = await store.get_task(turn.owner_id)
        await parts.tell(task["owner_id"] if task else None, event)
        job = f"run:{turn.turn_id}"  # the dead worker's job: no worker need look at it again
        await parts.client.zrem(QUEUE_NAME, job)
        await parts.client.delete(job_key_prefix + job, in_progress_key_prefix + job)
    return ended


async def keep_reaping(store: Store, parts: ServerParts, every: float = EVERY) -> None:
    """`reap` every `every` seconds until cancelled; an unreachable database or Redis is logged and tried again."""
    while True:
        await asyncio.sleep(every)
        try:
            await reap(store, parts)
        except PASSING as error:
            log.warning("Looking for turns whose worker died failed: %s", error)


def reaping(store: Store, parts: ServerParts, every: float = EVERY) -> asyncio.Task[Any]:
    return asyncio.get_running_loop().create_task(keep_reaping(store, parts, every), name="hearth-reaper")
