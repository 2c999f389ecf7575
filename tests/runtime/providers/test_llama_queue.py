"""The order in which requests get a loaded llama.cpp model (providers/llama/queue.py): turns first, in FIFO order
each, a side request that holds the model preempted by a turn, a cancelled wait handing nothing to nobody.
The same order on the real bundled model is in test_llama_cpp.py."""

from __future__ import annotations

import asyncio
import contextlib
import threading

from runtime.providers.llama.queue import ModelQueue


async def grants(queue: ModelQueue, waits: list[tuple[str, bool]]) -> tuple[list[str], list[asyncio.Task]]:
    """Queue `waits` (name, urgent) in this order; the list their grants will be appended to, and their tasks."""
    order: list[str] = []

    async def wait(name: str, urgent: bool) -> None:
        ticket = await queue.acquire(urgent)
        order.append(name)
        queue.release(ticket)

    tasks = []
    for name, urgent in waits:
        tasks.append(asyncio.create_task(wait(name, urgent)))
        await asyncio.sleep(0)  # queued in this order
    return order, tasks


async def test_turns_go_before_side_requests_each_in_order():
    queue = ModelQueue()
    side = await queue.acquire(urgent=False)
    order, tasks = await grants(queue, [("title", False), ("turn 1", True), ("memory", False), ("turn 2", True)])
    queue.release(side)
    await asyncio.gather(*tasks)
    assert order == ["turn 1", "turn 2", "title", "memory"]


async def test_a_turn_preempts_the_side_request_that_holds_the_model_but_not_another_turn():
    queue = ModelQueue()
    side = await queue.acquire(urgent=False)
    side.stop = threading.Event()  # its generation runs
    turn = asyncio.create_task(queue.acquire(urgent=True))
    await asyncio.sleep(0)
    assert side.preempted and side.stop.is_set() and queue.turn_ahead()
    queue.release(side)  # its thread has stopped
    first = await turn
    assert queue.holder is first and not first.preempted

    second = asyncio.create_task(queue.acquire(urgent=True))
    await asyncio.sleep(0)
    assert not first.preempted  # a turn waits for a turn's whole generation
    queue.release(first)
    queue.release(await second)
    assert queue.holder is None and not queue.turn_ahead()


async def test_a_side_request_granted_but_not_started_learns_it_was_preempted():
    queue = ModelQueue()
    holder = await queue.acquire(urgent=True)
    side = asyncio.create_task(queue.acquire(urgent=False))
    await asyncio.sleep(0)
    queue.release(holder)  # granted: the side request's task has not run yet
    turn = asyncio.create_task(queue.acquire(urgent=True))
    await asyncio.sleep(0)
    ticket = await side
    assert ticket.preempted  # so the provider hands the model on instead of starting it
    queue.release(ticket)
    queue.release(await turn)
    assert queue.holder is None


async def test_a_cancelled_wait_is_skipped_and_a_cancelled_grant_is_handed_on():
    queue = ModelQueue()
    holder = await queue.acquire(urgent=True)
    gone = asyncio.create_task(queue.acquire(urgent=True))
    after = asyncio.create_task(queue.acquire(urgent=False))
    await asyncio.sleep(0)
    gone.cancel()  # cancelled while it waits: never granted
    queue.release(holder)
    with contextlib.suppress(asyncio.CancelledError):
        await gone
    ticket = await after
    assert queue.holder is ticket

    late = asyncio.create_task(queue.acquire(urgent=True))
    await asyncio.sleep(0)
    queue.release(ticket)  # granted ...
    late.cancel()  # ... and cancelled before its task ran: the model must not stay taken
    with contextlib.suppress(asyncio.CancelledError):
        await late
    assert queue.holder is None
    assert (await queue.acquire(urgent=False)) is queue.holder
