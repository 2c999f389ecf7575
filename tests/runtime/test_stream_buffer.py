"""StreamBuffer: replay after any seq, coalescing, live subscribers, states and eviction."""

from __future__ import annotations

import asyncio

from runtime.engine.stream_buffer import REASONING_KIND, TEXT_KIND, BufferRegistry, BufferState, StreamBuffer
from runtime.events import EndReason, Status, TurnEnded


def _end(buf: StreamBuffer) -> None:
    buf.publish(TurnEnded(task_id=buf.task_id, turn_id=buf.turn_id, reason=EndReason.completed))


def test_replay_coalesces_runs_and_resumes_inside_them():
    buf = StreamBuffer("t", "u")
    buf.publish(Status(task_id="t", turn_id="u", phase="agent_running"))
    deltas = [f"<{i}>" for i in range(1000)]
    for d in deltas:
        buf.append_delta(TEXT_KIND, 0, d)
    buf.append_delta(REASONING_KIND, 1, "hm")
    buf.append_delta(TEXT_KIND, 2, "tail")
    _end(buf)
    events = buf.read(0)
    assert [e.type for e in events] == ["status", "text_delta", "reasoning_delta", "text_delta", "turn_ended"]
    assert events[1].text == "".join(deltas) and events[1].seq == 1001
    for k in (1, 2, 500, 999, 1000, 1001):
        rest = buf.read(k)
        text = "".join(e.text for e in rest if e.type == "text_delta" and e.part_id == 0)
        assert text == "".join(deltas[k - 1:])
    assert [e.seq for e in events] == [1, 1001, 1002, 1003, 1004]
    assert buf.read(1004) == []


async def test_live_subscribers_get_everything_and_end_after_the_terminal_event():
    buf = StreamBuffer("t", "u")
    got = [[] for _ in range(5)]

    async def sub(i):
        async for ev in buf.subscribe(0):
            got[i].append(ev)
            if i == 0:
                await asyncio.sleep(0.001)  # a slow observer never holds the producer back

    subs = [asyncio.ensure_future(sub(i)) for i in range(5)]
    await asyncio.sleep(0)
    for i in range(2000):
        buf.append_delta(TEXT_KIND, 0, str(i % 10))
        if i % 100 == 0:
            await asyncio.sleep(0)
    _end(buf)
    await asyncio.wait_for(asyncio.gather(*subs), 5)
    expected = "".join(str(i % 10) for i in range(2000))
    for events in got:
        assert "".join(e.text for e in events if e.type == "text_delta") == expected
        assert events[-1].type == "turn_ended"


async def test_events_after_the_terminal_one_are_dropped():
    buf = StreamBuffer("t", "u")
    _end(buf)
    _end(buf)
    assert [e.type for e in buf.read(0)] == ["turn_ended"]
    assert buf.state == BufferState.completed


def test_registry_states_and_eviction():
    reg = BufferRegistry(ttl_seconds=3600, budget_bytes=10_000)
    assert reg.state("a") == BufferState.missing
    a = reg.reset("a", "1")
    assert reg.state("a") == BufferState.active
    a.append_delta(TEXT_KIND, 0, "x" * 20_000)
    _end(a)
    b = reg.reset("b", "1")  # a is completed and over budget: evicted
    assert reg.state("a") == BufferState.missing
    b.append_delta(TEXT_KIND, 0, "y" * 20_000)
    reg.evict()
    assert reg.state("b") == BufferState.active  # never evict a running turn's buffer
    reg.ttl_seconds = 0
    _end(b)
    reg.evict()
    assert reg.get("b") is None
