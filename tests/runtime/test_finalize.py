"""Finalize cannot half-fail, and tool states reach SQLite when they change, not only at the end."""

from __future__ import annotations

import asyncio
import json
import sqlite3

import pytest

import runtime.engine.turn
from runtime.events import EndReason
from runtime.providers.scripted import Call, Delay, ScriptedModel
from runtime.store.repo import DB_NAME
from runtime.tools.base import Effect, FunctionTool
from tests.support.helpers import MODEL, collect, open_runtime


def _db_parts(home, message_id: int) -> list[dict]:
    db = sqlite3.connect(home / DB_NAME)
    try:
        (raw,) = db.execute("select parts from messages where id = ?", (message_id,)).fetchone()
    finally:
        db.close()
    return json.loads(raw)


async def _hang(args, ctx):
    await asyncio.sleep(30)
    return "never"


HANG_WRITE = FunctionTool(name="hang_write", description="A side effect that takes a while.",
                          parameters={"type": "object", "properties": {}}, effect=Effect.workspace_write, fn=_hang)


@pytest.fixture
async def model():
    return ScriptedModel()


@pytest.fixture
async def rt(home, model):
    seen = []

    async def look(args, ctx):
        # What the database says about this very call while it runs.
        seen.append(await asyncio.to_thread(_db_parts, home, rt.core.aborts.get(ctx.task_id).output_message_id))
        return "looked"

    tool = FunctionTool(name="look", description="Reads its own saved state.",
                        parameters={"type": "object", "properties": {}}, effect=Effect.external, fn=look)
    rt = await open_runtime(home, model, tools=[tool, HANG_WRITE])
    rt.seen = seen
    yield rt
    await rt.aclose()


async def test_a_side_effecting_call_is_saved_running_before_it_starts(rt, model):
    model.add_steps(["Calling.", Call("look", {})], ["ok"])
    task = await rt.create_task(model=MODEL, approval="full_auto")
    await rt.send(task.id, "go")
    await rt.wait_idle(task.id)
    (parts,) = rt.seen
    tool = [p for p in parts if p["type"] == "tool_call"][0]
    assert tool["state"] == "running" and tool["effect"] == "external"


async def test_a_finished_tool_state_is_checkpointed_at_once(rt, model, home):
    model.add_steps([Call("look", {})], ["almost ", Delay(30)])
    task = await rt.create_task(model=MODEL, approval="full_auto")
    handle = await rt.send(task.id, "go")
    async for ev in rt.subscribe(task.id):
        if ev.type == "text_delta":
            break
    out_id = rt.core.aborts.get(task.id).output_message_id
    for _ in range(100):  # well under the text checkpoint interval would be 0.4 s; allow the write itself
        parts = await asyncio.to_thread(_db_parts, home, out_id)
        if any(p.get("state") == "done" for p in parts):
            break
        await asyncio.sleep(0.01)
    assert [p["state"] for p in parts if p["type"] == "tool_call"] == ["done"]
    await rt.stop(task.id)
    assert handle.turn_id


async def test_when_the_commit_fails_the_settled_parts_are_still_saved(rt, model, monkeypatch):
    model.add_steps(["partial text ", Call("hang_write", {})])
    task = await rt.create_task(model=MODEL, approval="full_auto")

    async def broken(record):
        raise OSError("disk I/O error")

    monkeypatch.setattr(rt.core.store, "finalize_turn", broken)
    await rt.send(task.id, "go")
    async for ev in rt.subscribe(task.id):
        if ev.type == "tool_call" and ev.state == "running":
            await rt.stop(task.id)
        if ev.type == "turn_ended":
            assert ev.reason == EndReason.error and "could not be saved" in ev.error
    await rt.wait_idle(task.id)
    msgs = await rt.messages(task.id)
    assert msgs[-1].status == "complete" and msgs[-1].text == "partial text "
    (tool,) = [p for p in msgs[-1].parts if p["type"] == "tool_call"]
    assert tool["state"] == "interrupted" and "outcome unknown" in tool["note"]
    info = await rt.get_task(task.id)
    assert info.state == "idle" and info.last_reason == "error"


async def test_when_finalize_itself_raises_observers_still_get_turn_ended(rt, model, monkeypatch):
    async def exploding(services, ctx):
        raise RuntimeError("bug in finalize")

    monkeypatch.setattr(runtime.engine.turn, "finalize", exploding)
    model.add_steps(["hello"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    events = await asyncio.wait_for(collect(rt, task.id), 10)
    assert events[-1].type == "turn_ended" and events[-1].reason == EndReason.error
    await asyncio.wait_for(rt.wait_idle(task.id), 5)
    assert not rt.core.locks.locked(task.id)


async def test_a_stop_during_the_commit_never_reads_aborted_then_completed(rt, model, monkeypatch):
    real = rt.core.store.finalize_turn

    async def slow_commit(record):
        await rt.stop(record["task_id"])  # the worst moment: the verdict is taken, the commit not done
        await asyncio.sleep(0.05)
        await real(record)

    monkeypatch.setattr(rt.core.store, "finalize_turn", slow_commit)
    model.add_steps(["hello"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    events = await collect(rt, task.id)
    assert not any(e.type == "aborted" for e in events)
    assert events[-1].reason == EndReason.completed
    assert (await rt.get_task(task.id)).last_reason == "completed"


async def test_auxiliary_records_failing_do_not_fail_the_turn(rt, model, monkeypatch):
    async def broken(record):
        raise OSError("no room for steps")

    monkeypatch.setattr(rt.core.store, "write_turn_records", broken)
    model.add_steps(["hello"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    events = await collect(rt, task.id)
    assert events[-1].reason == EndReason.completed
    assert (await rt.messages(task.id))[-1].text == "hello"
