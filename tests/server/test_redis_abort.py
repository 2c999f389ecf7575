"""The abort bus and the per-user feed on a real redis-server: a Stop reaches the watching turn whether it was sent
before or after the watch, once, and also when it was sent while the listener was reconnecting."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from runtime.events import EndReason, TitleChanged, TurnEnded, TurnStarted
from runtime.server.redis.abort import AbortBus, AbortListener
from runtime.server.redis.common import RedisUnavailable
from runtime.server.redis.feed import RedisFeed


async def until(check, timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_stop_sent_before_the_watch_is_honoured_at_once_and_once(redis_client):
    bus = AbortBus(redis_client)
    assert await bus.request("task1") == 0  # no listener yet: only the flag tells
    assert 3590 < await redis_client.ttl("hearth:abort:task1") <= 3600
    calls = []
    async with AbortListener(redis_client) as listener:
        await listener.watch("task1", lambda: calls.append("task1"))
        assert calls == ["task1"]
        assert await bus.request("task1") == 1
        await asyncio.sleep(0.2)
        assert calls == ["task1"]  # at most once per watch


async def test_a_stop_sent_after_the_watch_reaches_only_that_task(redis_client):
    bus = AbortBus(redis_client)
    calls = []
    async with AbortListener(redis_client) as listener:
        await listener.watch("task1", lambda: calls.append("task1"))
        await listener.watch("task2", lambda: calls.append("task2"))
        await listener.watch("task3", lambda: calls.append("task3"))
        listener.unwatch("task3")
        assert calls == []
        await bus.request("task3")
        await bus.request("task1")
        await until(lambda: calls)
        await asyncio.sleep(0.1)
        assert calls == ["task1"]
        assert await bus.requested("task1") and not await bus.requested("task2")


async def test_a_cleared_flag_does_not_stop_the_next_run(redis_client):
    bus = AbortBus(redis_client)
    await bus.request("task1")
    await bus.clear("task1")  # a send clears a Stop meant for an earlier turn
    assert not await bus.requested("task1")
    calls = []
    async with AbortListener(redis_client) as listener:
        await listener.watch("task1", lambda: calls.append(1))
        await asyncio.sleep(0.1)
    assert calls == []


async def test_every_worker_hears_a_stop_and_a_failing_callback_stops_nothing(redis_client):
    bus = AbortBus(redis_client)
    heard = []

    def broken() -> None:
        raise RuntimeError("a bug in a callback")

    async with AbortListener(redis_client) as one, AbortListener(redis_client) as two:
        await one.watch("task1", broken)
        await one.watch("task2", lambda: heard.append("one"))
        await two.watch("task2", lambda: heard.append("two"))
        assert await bus.request("task1") == 2
        assert await bus.request("task2") == 2
        await until(lambda: len(heard) == 2)
    assert sorted(heard) == ["one", "two"]


async def test_another_database_does_not_hear_the_stop(redis_client, redis_url):
    other = aioredis.from_url(redis_url.rsplit("/", 1)[0] + "/1")
    calls = []
    try:
        async with AbortListener(other) as listener:
            await listener.watch("task1", lambda: calls.append(1))
            assert await AbortBus(redis_client).request("task1") == 0
            await asyncio.sleep(0.1)
    finally:
        await other.aclose()
    assert calls == []


async def test_a_stop_whose_message_was_missed_during_a_reconnect_is_found_by_its_flag(own_redis):
    client = aioredis.from_url(own_redis.url)
    calls = []
    listener = AbortListener(client)
    await listener.start()
    await listener.watch("task1", lambda: calls.append(1))
    # The Stop's flag without its message: as when it was published while the listener was not subscribed.
    await client.set("hearth:abort:task1", 1)
    await asyncio.to_thread(own_redis.restart, keep_data=True, downtime=0.3)
    await until(lambda: calls, timeout=10)
    assert calls == [1]
    await AbortBus(client).request("task1")  # and it is subscribed again
    await listener.watch("task2", lambda: calls.append(2))
    await AbortBus(client).request("task2")
    await until(lambda: calls == [1, 2], timeout=5)
    await listener.aclose()
    await client.aclose()


async def test_the_listener_cannot_start_without_redis(own_redis):
    client = aioredis.from_url(own_redis.url)
    own_redis.stop()
    with pytest.raises(RedisUnavailable, match="listening for Stop"):
        await AbortListener(client).start()
    with pytest.raises(RedisUnavailable, match="sending a Stop"):
        await AbortBus(client).request("task1")
    await client.aclose()


def turn_ended(task: str) -> TurnEnded:
    return TurnEnded(task_id=task, turn_id="t1", seq=3, reason=EndReason.completed)


async def test_a_user_follows_their_own_tasks_events_in_order(redis_client):
    feed = RedisFeed(redis_client)
    got: list = []

    async def follow(user: str) -> None:
        async for event in feed.follow(user):
            got.append((user, event))

    followers = [asyncio.create_task(follow("alice")), asyncio.create_task(follow("bob"))]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while set(await redis_client.pubsub_channels()) != {b"hearth:0:feed:alice", b"hearth:0:feed:bob"}:
        assert loop.time() < deadline  # both subscribed
        await asyncio.sleep(0.01)
    sent = [TurnStarted(task_id="a1", turn_id="t1", seq=1, input_message_id=4), turn_ended("a1"),
            TitleChanged(task_id="a1", turn_id="t1", title="Groceries")]
    for event in sent:
        assert await feed.publish("alice", event) == 1
    await feed.publish("bob", turn_ended("b1"))
    await until(lambda: len(got) == 4)
    assert [(u, e.model_dump_json()) for u, e in got if u == "alice"] == [("alice", e.model_dump_json()) for e in sent]
    assert [(u, e.task_id) for u, e in got if u == "bob"] == [("bob", "b1")]
    for follower in followers:
        follower.cancel()
    await asyncio.wait(followers)
    assert await redis_client.pubsub_channels() == []  # cancelled: unsubscribed and closed


async def test_a_follower_whose_connection_drops_is_told(own_redis):
    client = aioredis.from_url(own_redis.url)

    async def follow() -> list:
        return [event async for event in RedisFeed(client).follow("alice")]

    following = asyncio.create_task(follow())
    while not await client.pubsub_channels():
        await asyncio.sleep(0.01)
    own_redis.stop()
    with pytest.raises(RedisUnavailable, match="following task events"):
        await asyncio.wait_for(following, 5)
    await client.aclose()
