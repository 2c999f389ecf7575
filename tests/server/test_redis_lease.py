"""The task lease on a real redis-server: queued then taken by CAS, kept alive by its heartbeat, lost when it is
taken or runs out, and a killed worker's lease expiring instead of wedging the task."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from runtime.errors import TaskBusy
from runtime.server.redis.lease import Holder, LeaseGone, TaskLeases

ROOT = Path(__file__).resolve().parents[2]
LOCK = "hearth:lock:task1"

# A worker process that takes the task and keeps its lease alive until it is killed.
WORKER = """
import asyncio, sys
import redis.asyncio
from runtime.server.redis.lease import TaskLeases

async def main():
    leases = TaskLeases(redis.asyncio.from_url(sys.argv[1]), running_ttl=float(sys.argv[2]))
    await leases.acquire("task1", "t1")
    print("held", flush=True)
    await asyncio.sleep(120)

asyncio.run(main())
"""


async def test_queuing_tells_a_repeated_input_from_a_busy_task(redis_client):
    leases = TaskLeases(redis_client)
    assert await leases.try_queue("task1", "t1", "msg|1", ttl=600) is None
    assert 599_000 < await redis_client.pttl(LOCK) <= 600_000
    held = await leases.try_queue("task1", "t2", "msg|2")
    assert held == Holder("t1", "msg|1", "queued") and held.queued  # a '|' in the client's id is kept whole
    assert await leases.holder("task1") == held
    assert await leases.holder("other") is None
    assert await leases.try_queue("task2", "t3", None) is None
    assert await leases.holder("task2") == Holder("t3", "", "queued")


async def test_a_worker_takes_only_its_own_queued_turn_at_once(redis_client):
    leases = TaskLeases(redis_client, running_ttl=30)
    with pytest.raises(LeaseGone, match="no longer holds the task"):
        await leases.acquire("task1", "t1")  # nothing queued (it waited too long, or Redis lost it)
    await leases.try_queue("task1", "t1", "m1")
    with pytest.raises(TaskBusy) as busy:
        await leases.acquire("task1", "t0")  # another turn's hold
    assert type(busy.value) is TaskBusy and "already working on a turn" in str(busy.value)
    lease = await leases.acquire("task1", "t1")
    assert lease.holder.turn_id == "t1" and lease.holder.client_msg_id == "m1" and not lease.holder.queued
    assert await leases.holder("task1") == lease.holder
    assert 29_000 < await redis_client.pttl(LOCK) <= 30_000
    with pytest.raises(TaskBusy):
        await leases.acquire("task1", "t1")  # a second run of the same turn: it is running, not queued
    assert await leases.try_queue("task1", "t2", "m2") == lease.holder
    assert await leases.unqueue("task1", "t1") is False  # running, not queued: the API cannot free it
    assert await lease.release() is True
    assert await lease.release() is False
    assert await leases.holder("task1") is None


async def test_unqueue_frees_only_that_turns_queued_hold(redis_client):
    leases = TaskLeases(redis_client)
    await leases.try_queue("task1", "t1", "m1")
    assert await leases.unqueue("task1", "t2") is False
    assert await leases.unqueue("task1", "t1") is True
    assert await leases.holder("task1") is None


async def test_the_heartbeat_keeps_the_lease_past_its_ttl_and_release_stops_it(redis_client):
    leases = TaskLeases(redis_client, running_ttl=1.0)
    lost = []
    await leases.try_queue("task1", "t1", None)
    async with leases.acquire("task1", "t1", on_lost=lambda: lost.append(1)) as lease:
        await asyncio.sleep(2.5)  # 2.5 TTLs
        assert await leases.holder("task1") == lease.holder
        assert 0 < await redis_client.pttl(LOCK) <= 1000
    assert await leases.holder("task1") is None
    await asyncio.sleep(0.5)
    assert lost == [] and not lease.lost


async def test_the_async_with_form_releases_on_an_error_too(redis_client):
    leases = TaskLeases(redis_client)
    await leases.try_queue("task1", "t1", None)
    with pytest.raises(RuntimeError):
        async with leases.acquire("task1", "t1"):
            raise RuntimeError("the turn failed")
    assert await leases.holder("task1") is None


@pytest.mark.parametrize("how", ["gone", "taken"])
async def test_a_lease_found_gone_or_taken_calls_on_lost_once(redis_client, how):
    leases = TaskLeases(redis_client, running_ttl=0.6)
    await leases.try_queue("task1", "t1", None)
    lost = []
    lease = await leases.acquire("task1", "t1", on_lost=lambda: lost.append(time.monotonic()))
    t0 = time.monotonic()
    if how == "gone":
        await redis_client.delete(LOCK)
    else:
        await redis_client.set(LOCK, "t9||someone-else", px=60_000)
    await asyncio.sleep(1.0)
    assert len(lost) == 1 and lost[0] - t0 < 0.6  # at its next renewal, before the TTL would have run out
    assert lease.lost
    assert await lease.release() is False  # not ours: left alone
    if how == "taken":
        assert await redis_client.get(LOCK) == b"t9||someone-else"


async def test_a_killed_workers_lease_runs_out_within_its_ttl(redis_client, redis_url):
    ttl = 1.0
    leases = TaskLeases(redis_client)
    await leases.try_queue("task1", "t1", "m1")
    worker = await asyncio.create_subprocess_exec(sys.executable, "-c", WORKER, redis_url, str(ttl), cwd=ROOT,
                                                  stdout=asyncio.subprocess.PIPE)
    try:
        assert await worker.stdout.readline() == b"held\n"
        await asyncio.sleep(2 * ttl)
        held = await leases.holder("task1")
        assert held is not None and held.turn_id == "t1" and not held.queued  # its heartbeat kept it
        worker.kill()
        killed = time.monotonic()
        while await leases.holder("task1") is not None:
            assert time.monotonic() - killed < ttl + 0.5
            await asyncio.sleep(0.02)
    finally:
        if worker.returncode is None:
            worker.kill()
        await worker.wait()
    assert await leases.try_queue("task1", "t2", "m2") is None  # the task takes the next input


async def test_a_short_redis_restart_keeps_the_lease_and_a_long_outage_loses_it(own_redis):
    client = aioredis.from_url(own_redis.url)
    leases = TaskLeases(client, running_ttl=1.5)
    await leases.try_queue("task1", "t1", None)
    lost = []
    lease = await leases.acquire("task1", "t1", on_lost=lambda: lost.append(time.monotonic()))
    await asyncio.to_thread(own_redis.restart, keep_data=True, downtime=0.3)
    await asyncio.sleep(1.5)
    assert lost == [] and await leases.holder("task1") == lease.holder  # renewed once Redis was back
    own_redis.stop()
    stopped = time.monotonic()
    await asyncio.sleep(2.5)
    assert len(lost) == 1 and lost[0] - stopped <= 1.5 + 0.5  # no renewal for a whole TTL: given up
    assert await lease.release() is False  # Redis is gone: nothing raised
    await client.aclose()
