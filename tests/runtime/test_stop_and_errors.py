"""Stop at any point, provider failures, and the verdict rules (abort wins, shutdown interrupts)."""

from __future__ import annotations

import asyncio
import random

import pytest

from runtime.events import EndReason
from runtime.providers.scripted import Call, Delay, Fail, ScriptedModel
from runtime.tools.base import Effect, FunctionTool
from tests.support.helpers import MODEL, collect, open_runtime, text_from

started = asyncio.Event


async def _slow(args, ctx):
    await asyncio.sleep(30)
    return "finished"


SLOW_WRITE = FunctionTool(
    name="slow_write", description="A slow side-effecting tool.",
    parameters={"type": "object", "properties": {}}, effect=Effect.workspace_write, fn=_slow,
)


async def _noisy_on_cancel(args, ctx):
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        raise RuntimeError("connection reset by peer") from None  # what a real library might do
    return "unreachable"


NOISY = FunctionTool(
    name="noisy", description="Raises its own error when cancelled.",
    parameters={"type": "object", "properties": {}}, effect=Effect.read_only, fn=_noisy_on_cancel,
)


@pytest.fixture
async def model():
    return ScriptedModel()


@pytest.fixture
async def rt(home, model):
    rt = await open_runtime(home, model, tools=[SLOW_WRITE, NOISY])
    yield rt
    await rt.aclose()


async def _assert_stopped_cleanly(rt, task_id, events):
    assert events[-1].type == "turn_ended" and events[-1].reason == EndReason.aborted
    assert any(e.type == "aborted" for e in events)
    await rt.wait_idle(task_id)
    assert not rt.core.locks.locked(task_id)
    info = await rt.get_task(task_id)
    assert info.state == "idle" and info.last_reason == "aborted"
    msgs = await rt.messages(task_id)
    for part in msgs[-1].parts:
        if part["type"] == "tool_call":
            assert part["state"] in ("done", "error", "denied", "interrupted")
    return msgs


async def test_stop_before_setup(rt, model):
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    await rt.stop(task.id)  # lands before the run registered its controller
    events = await collect(rt, task.id)
    await _assert_stopped_cleanly(rt, task.id, events)
    assert model.requests == []


async def test_stop_in_setup(rt, model):
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    events = []
    async for ev in rt.subscribe(task.id):
        events.append(ev)
        if ev.type == "status" and ev.phase == "context_building":
            await rt.stop(task.id)
    await _assert_stopped_cleanly(rt, task.id, events)
    assert model.requests == []


async def test_stop_mid_text_keeps_the_partial_text_before_turn_ended(rt, model):
    model.add_steps(["one ", "two ", Delay(30), "never"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    events = []
    async for ev in rt.subscribe(task.id):
        events.append(ev)
        if ev.type == "text_delta" and text_from(events) == "one two ":
            await rt.stop(task.id)
        if ev.type == "turn_ended":
            # Observable at the moment turn_ended arrives: the partial text is already persisted.
            assert (await rt.messages(task.id))[-1].text == "one two "
    msgs = await _assert_stopped_cleanly(rt, task.id, events)
    assert msgs[-1].text == "one two "


async def test_stop_mid_tool_interrupts_the_part_and_marks_outcome_unknown(rt, model):
    model.add_steps(["Writing.", Call("slow_write", {})])
    task = await rt.create_task(model=MODEL, approval="full_auto")
    await rt.send(task.id, "go")
    events = []
    async for ev in rt.subscribe(task.id):
        events.append(ev)
        if ev.type == "tool_call" and ev.state == "running":
            await rt.stop(task.id)
    msgs = await _assert_stopped_cleanly(rt, task.id, events)
    tool = [p for p in msgs[-1].parts if p["type"] == "tool_call"][0]
    assert tool["state"] == "interrupted" and "outcome unknown" in tool["note"]
    # The next turn tells the model to check before retrying.
    model.add_steps(["ok"])
    await rt.send(task.id, "continue")
    await rt.wait_idle(task.id)
    tool_msg = [m for m in model.requests[-1].messages if m["role"] == "tool"][0]
    assert "outcome unknown" in tool_msg["content"]


@pytest.mark.parametrize("seed", range(12))
async def test_stop_at_random_points(rt, model, seed):
    rng = random.Random(seed)
    model.add_steps(
        ["a", Delay(0.01), "b", Delay(0.01), Call("slow_write", {}), Call("slow_write", {})],
    )
    task = await rt.create_task(model=MODEL, approval="full_auto")
    await rt.send(task.id, "go")
    await asyncio.sleep(rng.uniform(0, 0.08))
    await rt.stop(task.id)
    await rt.stop(task.id)  # idempotent
    events = await collect(rt, task.id)
    msgs = await _assert_stopped_cleanly(rt, task.id, events)
    assert msgs[-1].text == text_from(events)
    # The task is usable again right away.
    model.add_steps(["again"])
    await rt.send(task.id, "again")
    await rt.wait_idle(task.id)
    assert (await rt.get_task(task.id)).last_reason == "completed"


async def test_provider_error_mid_stream_keeps_partial_text(rt, model):
    model.add_steps(["partial ", "answer", Fail("The model server closed the stream early.")])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    events = await collect(rt, task.id)
    assert events[-1].reason == EndReason.error
    assert events[-1].error == "The model server closed the stream early."
    await rt.wait_idle(task.id)
    info = await rt.get_task(task.id)
    assert info.last_reason == "error" and info.last_error == "The model server closed the stream early."
    assert (await rt.messages(task.id))[-1].text == "partial answer"


async def test_abort_wins_over_the_error_a_stop_provokes(rt, model):
    model.add_steps([Call("noisy", {})])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    async for ev in rt.subscribe(task.id):
        if ev.type == "tool_call" and ev.state == "running":
            await rt.stop(task.id)
        if ev.type == "turn_ended":
            assert ev.reason == EndReason.aborted and ev.error is None


async def test_shutdown_interrupts_running_turns(home, model):
    model.add_steps(["working ", Delay(30)])
    rt = await open_runtime(home, model)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    seen = []
    async for ev in rt.subscribe(task.id):
        seen.append(ev)
        if ev.type == "text_delta":
            break
    await rt.aclose()
    events = [e for e in rt.core.buffers.get(task.id).read(0)]
    assert events[-1].type == "turn_ended" and events[-1].reason == EndReason.interrupted
    assert not any(e.type == "aborted" for e in events)
    rt2 = await open_runtime(home, ScriptedModel())
    try:
        info = await rt2.get_task(task.id)
        assert info.state == "idle" and info.last_reason == "interrupted"
        assert (await rt2.messages(task.id))[-1].text == "working "
    finally:
        await rt2.aclose()
