"""A long stream keeps the UI responsive: 20,000 deltas at full speed, at most one batch (and so one repaint)
per frame, the event loop never stalls, and the text shown is exactly the text persisted."""

from __future__ import annotations

import asyncio
import time

import qasync

from app.conversation.markdown import MarkdownView
from app.conversation.markdown_stream import StreamingMarkdown
from app.core.bridge import FRAME
from runtime.providers.scripted import Reasoning, ScriptedModel
from tests.support.fast_model import FastModel
from tests.support.qt_helpers import MODEL, open_task, persisted_text, type_and_send, until, wait_turns

DELTAS = 20_000
MAX_LAG = 0.25  # generous: a frame is 16 ms, a stall a person notices is ~100 ms


async def test_runs_on_qasync():
    assert isinstance(asyncio.get_running_loop(), qasync.QEventLoop)


async def test_20000_deltas_keep_the_ui_responsive(launch):
    fast = FastModel()
    ctl = await launch(fast=fast)
    task = await ctl.bridge.create_task(title="Firehose", model="fast/x")
    panel = await open_task(ctl, task.id)

    lags: list[float] = []
    streaming = True
    live_views = []  # the text part's widget while it streams

    async def ticker():
        while streaming:
            t0 = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append(time.perf_counter() - t0 - 0.005)
            items = panel.conversation.assistant_items()
            if not live_views and items and items[-1].block.parts:
                live_views.append(items[-1].block.parts[0])

    tick = asyncio.ensure_future(ticker())
    t0 = time.perf_counter()
    type_and_send(panel, "go")
    observer = panel.observer
    await until(lambda: panel.conversation.assistant_items() and not ctl.rt.tasks.is_running(task.id)
                and panel.live_turn is None, timeout=60, what="turn end")
    elapsed = time.perf_counter() - t0
    streaming = False
    await tick

    messages = await ctl.rt.messages(task.id)
    turn_id = next(m.turn_id for m in messages if m.role == "assistant")
    expected = "".join(fast.chunks)
    await until(lambda: panel.turn_text(turn_id) == expected, what="all text shown")
    assert persisted_text(messages, turn_id) == expected

    frames = elapsed / FRAME
    assert observer.events >= 1
    assert observer.flushes <= frames + 2, (observer.flushes, frames)
    # While it streamed, each frame re-rendered only the last chunk (a settled chunk is rendered once)...
    view = live_views[0]
    assert isinstance(view, StreamingMarkdown) and view.markdown == expected
    assert len(view.views) > 10 and "".join(v.markdown for v in view.views).replace("\n", "") == \
        expected.replace("\n", "")
    assert view.renders <= observer.flushes + len(view.views) + 2
    # ...and once saved, the answer is one view over the whole text again.
    await until(lambda: isinstance(panel.conversation.turn_entry(turn_id).block.parts[0], MarkdownView),
                what="the saved answer shown")
    assert panel.conversation.turn_entry(turn_id).block.parts[0].markdown == expected
    worst = max(lags)
    print(f"\n{DELTAS} deltas in {elapsed:.2f} s: {observer.events} events, {observer.flushes} batches "
          f"({frames:.0f} frames), {view.renders} renders, worst loop lag {worst * 1000:.0f} ms")
    assert worst < MAX_LAG, f"the loop stalled for {worst:.3f} s"


async def test_deltas_of_several_parts_are_merged_per_part(launch):
    model = ScriptedModel([[Reasoning("think "), Reasoning("more"), "Hello ", "world", "!"]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Parts", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "hi")
    await wait_turns(ctl, panel)
    messages = await ctl.rt.messages(task.id)
    turn_id = next(m.turn_id for m in messages if m.role == "assistant")
    block = panel.conversation.turn_entry(turn_id).block
    assert block.text() == "Hello world!"
    assert block.text("reasoning") == "think more"
