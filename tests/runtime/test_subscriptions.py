"""Task-level subscriptions (follow across queued turns), the all-tasks event feed, and message pages."""

from __future__ import annotations

import asyncio

from runtime.providers.scripted import Delay, ScriptedModel
from tests.support.helpers import MODEL, open_runtime


async def test_follow_goes_on_across_queued_turns_without_polling(home):
    model = ScriptedModel([["one ", Delay(0.1), "done"], ["two"], ["three"]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        seen: list = []

        async def watch():
            async for ev in rt.subscribe(task.id, follow=True):
                seen.append(ev)

        watcher = asyncio.ensure_future(watch())
        await rt.send(task.id, "first")
        await rt.send(task.id, "second", queue=True)
        await rt.send(task.id, "third", queue=True)
        await rt.wait_idle(task.id)
        await asyncio.sleep(0.05)
        ended = [e for e in seen if e.type == "turn_ended"]
        assert len(ended) == 3 and len({e.turn_id for e in ended}) == 3
        texts = {}
        for e in seen:
            if e.type == "text_delta":
                texts[e.turn_id] = texts.get(e.turn_id, "") + e.text
        assert list(texts.values()) == ["one done", "two", "three"]
        for turn in {e.turn_id for e in seen}:  # each turn numbered from 1, in order
            seqs = [e.seq for e in seen if e.turn_id == turn]
            assert seqs == sorted(seqs) and seqs[0] == 1
        assert not watcher.done()  # still following, for the next turn
        model.add_steps(["four"])
        await rt.send(task.id, "fourth")
        await rt.wait_idle(task.id)
        await asyncio.sleep(0.05)
        assert sum(e.type == "turn_ended" for e in seen) == 4
    finally:
        await rt.aclose()
    await asyncio.wait_for(watcher, 5)  # closing the runtime ends it


async def test_without_deltas_a_subscription_sees_only_the_rest(home):
    model = ScriptedModel([["a", "b", "c"]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "go")
        await rt.wait_idle(task.id)
        events = [e async for e in rt.subscribe(task.id, deltas=False)]
        assert events[0].type == "turn_started" and events[-1].type == "turn_ended"
        assert not any(e.type == "text_delta" for e in events)
    finally:
        await rt.aclose()


async def test_the_event_feed_carries_every_tasks_turns_but_no_deltas(home):
    model = ScriptedModel([["x"], ["y"]])
    rt = await open_runtime(home, model)
    seen: list = []

    async def watch():
        async for ev in rt.events():
            seen.append(ev)

    watcher = asyncio.ensure_future(watch())
    try:
        a = await rt.create_task(model=MODEL)
        b = await rt.create_task(model=MODEL)
        await asyncio.sleep(0)
        await rt.send(a.id, "go")
        await rt.send(b.id, "go")
        await rt.wait_idle(a.id)
        await rt.wait_idle(b.id)
        await asyncio.sleep(0.05)
        assert {e.task_id for e in seen if e.type == "turn_ended"} == {a.id, b.id}
        assert not any(e.type == "text_delta" for e in seen)
    finally:
        await rt.aclose()
    await asyncio.wait_for(watcher, 5)


async def test_messages_come_in_pages_from_either_end(home):
    rt = await open_runtime(home, ScriptedModel([[f"answer {i}"] for i in range(30)]))
    try:
        task = await rt.create_task(model=MODEL)
        for i in range(30):
            await rt.send(task.id, f"question {i}")
            await rt.wait_idle(task.id)
        everything = await rt.messages(task.id)
        assert len(everything) == 60
        last = await rt.messages(task.id, limit=10)
        assert [m.id for m in last] == [m.id for m in everything[-10:]]
        older = await rt.messages(task.id, before=last[0].id, limit=10)
        assert [m.id for m in older] == [m.id for m in everything[-20:-10]]
        first = await rt.messages(task.id, after=0, limit=5)
        assert [m.id for m in first] == [m.id for m in everything[:5]]
        newer = await rt.messages(task.id, after=everything[-3].id)
        assert [m.id for m in newer] == [m.id for m in everything[-2:]]
        turns = await rt.tasks.turns(task.id, turn_ids=[m.turn_id for m in last])
        assert {t["id"] for t in turns} == {m.turn_id for m in last}
    finally:
        await rt.aclose()
