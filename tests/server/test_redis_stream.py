"""The resumable stream buffer on a real redis-server: what readers rebuild is byte-identical to what the turn
produced, from any seq, for many readers at once, across turn switches, expiry and Redis restarts."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis.asyncio as aioredis

from runtime.engine.stream_buffer import REASONING_KIND, TEXT_KIND, BufferState, StreamBuffer
from runtime.events import EndReason, Phase, Status, ToolCall, ToolState, TurnEnded, TurnStarted
from runtime.server.redis.common import RedisUnavailable
from runtime.server.redis.stream import RedisStreamReader, RedisStreamWriter

TASK = "task1"
# Chunks a model may send: multi-byte UTF-8, JSON's escapes, a NUL, the separators JSON and SSE care about.
PIECES = ["tok ", "é", "日本語", "😀", "\n", '"', "\\", "\u2028", "\x00", "a|b", "}{", "  "]


def started(turn: str) -> TurnStarted:
    return TurnStarted(task_id=TASK, turn_id=turn, input_message_id=1)


def ended(turn: str, reason: EndReason = EndReason.completed) -> TurnEnded:
    return TurnEnded(task_id=TASK, turn_id=turn, reason=reason)


def status(turn: str, detail: str = "") -> Status:
    return Status(task_id=TASK, turn_id=turn, phase=Phase.agent_running, detail=detail)


class Turn:
    """Produces into any number of sinks (a RedisStreamWriter, a StreamBuffer) and remembers what it produced."""

    def __init__(self, *sinks):
        self.sinks = sinks
        self.texts: dict[tuple[int, int], str] = {}
        self.events: list[str] = []

    def delta(self, kind: int, part: int, text: str) -> None:
        for sink in self.sinks:
            sink.append_delta(kind, part, text)
        self.texts[kind, part] = self.texts.get((kind, part), "") + text

    def publish(self, event) -> None:
        for sink in self.sinks:
            sink.publish(event)
        self.events.append(event.model_dump_json())


def rebuild(events: list) -> tuple[dict[tuple[int, int], str], list[str]]:
    """Text per (kind, part) and the other events, as a client assembles them; seqs must rise strictly."""
    seqs = [e.seq for e in events]
    assert seqs == sorted(set(seqs)), seqs
    texts: dict[tuple[int, int], str] = {}
    others = []
    for e in events:
        if e.type in ("text_delta", "reasoning_delta"):
            k = (TEXT_KIND if e.type == "text_delta" else REASONING_KIND, e.part_id)
            texts[k] = texts.get(k, "") + e.text
        else:
            others.append(e.model_dump_json())
    return texts, others


async def produce(turn: Turn, turn_id: str, chunks: int, pause_every: int = 50) -> None:
    """A turn's worth of events, with awaits between bursts (a provider's reads) so the flusher writes many batches."""
    turn.publish(status(turn_id, "thinking"))
    for i in range(chunks // 4):
        turn.delta(REASONING_KIND, 0, PIECES[i % len(PIECES)])
        if i % pause_every == 0:
            await asyncio.sleep(0.002)
    turn.publish(ToolCall(task_id=TASK, turn_id=turn_id, part_id=1, call_id="c1", name="read_file",
                          state=ToolState.done, args={"path": "ä.txt"}, result="ok 😀"))
    for i in range(chunks):
        turn.delta(TEXT_KIND, 2, PIECES[(i * 7) % len(PIECES)] + str(i))
        if i % pause_every == 0:
            await asyncio.sleep(0.002)
    turn.delta(TEXT_KIND, 3, "the end")
    turn.publish(ended(turn_id))


async def read_all(reader: RedisStreamReader, **kw) -> list:
    return [e async for e in reader.subscribe(TASK, **kw)]


async def test_a_hundred_readers_rebuild_the_turn_byte_identical_whenever_they_start(redis_client):
    writer = RedisStreamWriter(redis_client, TASK, "t1")
    buffer = StreamBuffer(TASK, "t1")
    first = started("t1")
    await writer.reset(first)
    buffer.publish(first)
    turn = Turn(writer, buffer)
    turn.events.append(first.model_dump_json())
    reader = RedisStreamReader(redis_client)

    async def slow_reader() -> list:
        events = []
        async for e in reader.subscribe(TASK):
            events.append(e)
            await asyncio.sleep(0.01)  # far slower than the producer: it must not hold anything back
        return events

    readers = [asyncio.create_task(read_all(reader)) for _ in range(40)]
    readers += [asyncio.create_task(slow_reader()) for _ in range(10)]
    production = asyncio.create_task(produce(turn, "t1", 4000))
    await asyncio.sleep(0.05)
    readers += [asyncio.create_task(read_all(reader)) for _ in range(20)]  # mid-stream: replay, then live
    await production
    assert await writer.aclose() is True
    assert not all(r.done() for r in readers[40:50])  # the turn is in Redis while slow readers are still reading
    readers += [asyncio.create_task(read_all(reader)) for _ in range(30)]  # after the end: replay only
    results = await asyncio.gather(*readers)

    assert len(results) == 100
    memory = rebuild(buffer.read(0))
    for events in results:
        texts, others = rebuild(events)
        assert {k: v.encode() for k, v in texts.items()} == {k: v.encode() for k, v in turn.texts.items()}
        assert others == turn.events
        assert (texts, others) == memory  # the same turn the in-memory buffer replays
        assert events[-1].type == "turn_ended" and events[-1].seq == writer.seq == buffer.seq


async def test_resuming_after_any_seq_gives_exactly_what_the_in_memory_buffer_gives(redis_client):
    writer = RedisStreamWriter(redis_client, TASK, "t1", flush_seconds=0.002)
    buffer = StreamBuffer(TASK, "t1")
    await writer.reset(started("t1"))
    buffer.publish(started("t1"))
    await produce(Turn(writer, buffer), "t1", 160, pause_every=7)
    assert await writer.aclose() is True
    assert writer.seq == buffer.seq
    entries = await redis_client.xlen(f"hearth:stream:{TASK}")
    assert 10 < entries < writer.seq  # runs were cut by flushes: resuming lands inside merged deltas too
    reader = RedisStreamReader(redis_client)
    for after in range(writer.seq + 1):
        assert rebuild(await read_all(reader, after_seq=after)) == rebuild(buffer.read(after)), after
        assert rebuild(await read_all(reader, after_seq=after, turn_id="t1")) == rebuild(buffer.read(after)), after
        without = await read_all(reader, after_seq=after, deltas=False)
        assert [e.model_dump_json() for e in without] == [
            e.model_dump_json() for e in buffer.read(after, deltas=False)], after


async def test_the_deltas_of_one_part_in_a_batch_are_one_entry_with_the_seq_of_their_last_chunk(redis_client):
    writer = RedisStreamWriter(redis_client, TASK, "t1")
    await writer.reset(started("t1"))
    for i in range(500):
        writer.append_delta(TEXT_KIND, 0, f"{i:03x} ")
    for _ in range(300):
        writer.append_delta(REASONING_KIND, 1, "r")
    writer.publish(ended("t1"))
    assert await writer.aclose() is True
    entries = await redis_client.xrange(f"hearth:stream:{TASK}")
    assert [entry_id for entry_id, _ in entries] == [b"1-0", b"501-0", b"801-0", b"802-0"]
    fields = entries[1][1]
    assert fields[b"f"] == b"2" and len(fields[b"o"]) == 500 * 4  # first chunk's seq; an end offset per chunk
    assert [e.seq for e in await read_all(RedisStreamReader(redis_client))] == [1, 501, 801, 802]


async def test_an_older_turn_id_gets_the_current_turn_from_its_start(redis_client):
    old = RedisStreamWriter(redis_client, TASK, "t1")
    await old.reset(started("t1"))
    old.publish(status("t1"))
    old.publish(ended("t1"))
    assert await old.aclose()
    new = RedisStreamWriter(redis_client, TASK, "t2")
    await new.reset(started("t2"))
    new.append_delta(TEXT_KIND, 0, "hello")
    new.publish(ended("t2"))
    assert await new.aclose()
    reader = RedisStreamReader(redis_client)
    assert await reader.state(TASK) == (BufferState.completed, "t2")
    events = await read_all(reader, after_seq=2, turn_id="t1")
    assert [(e.turn_id, e.seq) for e in events] == [("t2", 1), ("t2", 2), ("t2", 3)]
    assert [(e.turn_id, e.seq) for e in await read_all(reader, after_seq=2, turn_id="t2")] == [("t2", 3)]


@pytest.mark.parametrize("new_entries", [3, 40])
async def test_a_reader_of_a_replaced_turn_goes_on_with_the_new_turn_from_its_start(redis_client, new_entries):
    """The first turn never ends (its worker died); the next turn resets the stream while a reader waits on it.
    With fewer entries than the reader's position only the reader's look at the meta can tell; with more, its read
    returns the new turn's entries above its position, which it must not take as the old turn's."""
    dead = RedisStreamWriter(redis_client, TASK, "t1")
    await dead.reset(started("t1"))
    for i in range(10):
        dead.publish(status("t1", str(i)))
    assert await dead.flush()
    poll = 0.2 if new_entries == 3 else 30.0
    reader = RedisStreamReader(redis_client, poll_seconds=poll)
    seen: list = []

    async def follow() -> None:
        async for e in reader.subscribe(TASK):
            seen.append(e)

    following = asyncio.create_task(follow())
    while len(seen) < 11:
        await asyncio.sleep(0.01)
    nxt = RedisStreamWriter(redis_client, TASK, "t2")
    await nxt.reset(started("t2"))
    for i in range(new_entries - 2):
        nxt.publish(status("t2", str(i)))
    nxt.publish(ended("t2"))
    assert await nxt.aclose()
    await asyncio.wait_for(following, 5)
    assert [(e.turn_id, e.seq) for e in seen] == [("t1", s) for s in range(1, 12)] + [
        ("t2", s) for s in range(1, new_entries + 1)]
    await dead.aclose()


async def test_states_active_completed_and_missing_once_it_expired(redis_client):
    reader = RedisStreamReader(redis_client)
    assert await reader.state(TASK) == (BufferState.missing, None)
    assert await read_all(reader) == []
    writer = RedisStreamWriter(redis_client, TASK, "t1", ttl=1)
    await writer.reset(started("t1"))
    assert await reader.state(TASK) == (BufferState.active, "t1")
    keys = [f"hearth:stream:{TASK}", f"hearth:stream:{TASK}:meta"]
    assert [await redis_client.ttl(k) for k in keys] == [-1, -1]  # an active turn's stream does not run out
    writer.publish(ended("t1"))
    writer.publish(status("t1"))  # after the end: dropped
    assert await writer.aclose()
    assert await reader.state(TASK) == (BufferState.completed, "t1")
    assert [await redis_client.ttl(k) for k in keys] == [1, 1]
    assert [e.type for e in await read_all(reader)] == ["turn_started", "turn_ended"]
    assert await read_all(reader, after_seq=2) == []  # nothing after its end: ends at once
    await asyncio.sleep(1.3)
    assert await reader.state(TASK) == (BufferState.missing, None)
    assert await read_all(reader) == []


async def test_a_writer_whose_stream_was_taken_over_writes_nothing_more(redis_client, caplog):
    stale = RedisStreamWriter(redis_client, TASK, "t1")
    await stale.reset(started("t1"))
    assert await stale.flush()
    current = RedisStreamWriter(redis_client, TASK, "t2")
    await current.reset(started("t2"))
    with caplog.at_level(logging.WARNING, "runtime.server.redis.stream"):
        stale.append_delta(TEXT_KIND, 0, "late")
        stale.publish(ended("t1"))
        assert await stale.flush() is False
    assert stale.detached and "no longer holds turn t1" in caplog.text
    assert await stale.aclose() is False
    entries = await redis_client.xrange(f"hearth:stream:{TASK}")
    assert [(entry_id, b'"turn_id":"t2"' in fields[b"e"]) for entry_id, fields in entries] == [(b"1-0", True)]
    assert await RedisStreamReader(redis_client).state(TASK) == (BufferState.active, "t2")
    await current.aclose()


async def test_attach_numbers_on_and_a_reaper_ends_a_dead_writers_turn(redis_client):
    api = RedisStreamWriter(redis_client, TASK, "t1")
    await api.reset(started("t1"))  # the API instance: the turn's stream with turn_started as seq 1
    worker = RedisStreamWriter(redis_client, TASK, "t1")
    assert await worker.attach() == BufferState.active and worker.seq == 1
    worker.append_delta(TEXT_KIND, 0, "half an ans")
    assert await worker.flush()  # ... and the worker dies here
    reader = RedisStreamReader(redis_client)
    following = asyncio.create_task(read_all(reader))
    await asyncio.sleep(0.1)
    assert not following.done()
    reaper = RedisStreamWriter(redis_client, TASK, "t1")
    assert await reaper.attach() == BufferState.active and reaper.seq == 2
    reaper.publish(ended("t1", EndReason.interrupted))
    assert await reaper.aclose()
    events = await asyncio.wait_for(following, 2)
    assert [(e.type, e.seq) for e in events] == [("turn_started", 1), ("text_delta", 2), ("turn_ended", 3)]
    assert events[-1].reason == EndReason.interrupted

    late = RedisStreamWriter(redis_client, TASK, "t1")
    assert await late.attach() == BufferState.completed and late.ended
    other = RedisStreamWriter(redis_client, TASK, "t0")
    assert await other.attach() == BufferState.missing and other.detached
    other.publish(ended("t0"))
    assert await other.aclose() is False
    assert await redis_client.xlen(f"hearth:stream:{TASK}") == 3


async def test_readers_waiting_share_one_blocked_read_and_leave_none_once_cancelled(redis_client):
    writer = RedisStreamWriter(redis_client, TASK, "t1")
    await writer.reset(started("t1"))
    reader = RedisStreamReader(redis_client, poll_seconds=30)
    readers = [asyncio.create_task(read_all(reader)) for _ in range(20)]

    async def blocked() -> int:
        return (await redis_client.execute_command("CLIENT", "LIST")).count(b"cmd=xread")

    async with asyncio.timeout(5):
        while await blocked() < 1:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        assert await blocked() == 1  # the turn's shared tail (redis/tail.py), not one per reader
        for task in readers:
            task.cancel()  # their clients went away
        await asyncio.wait(readers)
        while await blocked():
            await asyncio.sleep(0.01)
    writer.publish(ended("t1"))
    assert await writer.aclose()
    assert [e.type for e in await read_all(reader)] == ["turn_started", "turn_ended"]


async def test_a_lone_surrogate_does_not_stop_the_stream(redis_client):
    writer = RedisStreamWriter(redis_client, TASK, "t1")
    await writer.reset(started("t1"))
    writer.append_delta(TEXT_KIND, 0, "a\ud83d")  # half of an emoji, as a server may split it
    writer.append_delta(TEXT_KIND, 0, "b")
    writer.publish(ended("t1"))
    assert await writer.aclose()
    events = await read_all(RedisStreamReader(redis_client), after_seq=2)
    assert events[0].text == "b"  # the offsets still fit: the '?' took the surrogate's place
    assert [e.text for e in await read_all(RedisStreamReader(redis_client)) if e.type == "text_delta"] == ["a?b"]


async def test_a_redis_restart_that_keeps_its_data_loses_nothing(own_redis, caplog):
    caplog.set_level(logging.WARNING, "runtime.server.redis.common")
    client = aioredis.from_url(own_redis.url)
    writer = RedisStreamWriter(client, TASK, "t1")
    await writer.reset(started("t1"))
    turn = Turn(writer)
    reader = RedisStreamReader(client, patience=30)
    live = asyncio.create_task(read_all(reader))
    production = asyncio.create_task(produce(turn, "t1", 3000, pause_every=10))
    await asyncio.sleep(0.1)
    assert not production.done()
    await asyncio.to_thread(own_redis.restart, keep_data=True, downtime=0.5)
    await production  # the producer never noticed
    assert await writer.aclose(timeout=30) is True
    for events in (await asyncio.wait_for(live, 30), await read_all(reader)):
        texts, _ = rebuild(events)
        assert {k: v.encode() for k, v in texts.items()} == {k: v.encode() for k, v in turn.texts.items()}
        assert events[-1].type == "turn_ended"
    for doing in ("streaming task", "reading the stream of task"):  # both sides waited the restart out
        assert f"Redis cannot be reached ({doing} {TASK})" in caplog.text
        assert f"Redis answers again ({doing} {TASK})" in caplog.text
    await client.aclose()


async def test_a_redis_restart_that_lost_the_stream_ends_streaming_but_not_the_turn(own_redis, caplog):
    client = aioredis.from_url(own_redis.url)
    writer = RedisStreamWriter(client, TASK, "t1")
    await writer.reset(started("t1"))
    writer.append_delta(TEXT_KIND, 0, "before")
    assert await writer.flush()
    reader = RedisStreamReader(client, patience=30, poll_seconds=0.2)
    live = asyncio.create_task(read_all(reader))
    await asyncio.sleep(0.1)
    await asyncio.to_thread(own_redis.restart, keep_data=False, downtime=0.3)
    with caplog.at_level(logging.WARNING, "runtime.server.redis.stream"):
        writer.append_delta(TEXT_KIND, 0, " after")
        writer.publish(ended("t1"))
        assert await writer.aclose(timeout=10) is False
    assert "no longer holds turn t1" in caplog.text
    events = await asyncio.wait_for(live, 10)  # it saw what there was, then the stream was gone: it ended
    assert [e.type for e in events] == ["turn_started", "text_delta"]
    assert await reader.state(TASK) == (BufferState.missing, None)
    await client.aclose()


async def test_redis_gone_for_good_costs_the_producer_nothing_and_readers_get_a_sentence(own_redis):
    client = aioredis.from_url(own_redis.url)
    writer = RedisStreamWriter(client, TASK, "t1")
    await writer.reset(started("t1"))
    own_redis.stop()
    for i in range(1000):
        writer.append_delta(TEXT_KIND, 0, str(i))
    writer.publish(ended("t1"))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await writer.aclose(timeout=0.5) is False
    assert loop.time() - t0 < 1.5
    with pytest.raises(RedisUnavailable, match=r"Redis cannot be reached .*Check that redis-server is running"):
        await read_all(RedisStreamReader(client, patience=0.3))
    with pytest.raises(RedisUnavailable):
        await RedisStreamWriter(client, TASK, "t2").reset(started("t2"))
    await client.aclose()
