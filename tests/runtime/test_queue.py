"""Queued follow-ups live in SQLite: never lost, never reordered, never overtaken, idempotent on their id."""

from __future__ import annotations

import asyncio

import pytest

from runtime.providers.scripted import Delay, ScriptedModel
from tests.support.helpers import MODEL, open_runtime


def _inputs(request) -> list[str]:
    return [m["content"] for m in request.messages if m["role"] == "user"]


async def test_queued_inputs_survive_a_clean_quit_and_run_in_order_on_send_now(home):
    model = ScriptedModel([["busy ", Delay(30)]])
    rt = await open_runtime(home, model)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "first")
    handles = [await rt.send(task.id, f"queued {i}", queue=True) for i in range(3)]
    assert all(h.queued and h.turn_id is None for h in handles)
    await rt.aclose()  # the running turn ends interrupted; the queued inputs stay

    model = ScriptedModel()
    rt = await open_runtime(home, model)
    try:
        queued = await rt.tasks.queued(task.id)
        assert [m.text for m in queued] == ["queued 0", "queued 1", "queued 2"]
        assert not rt.tasks.is_running(task.id)  # nothing runs by itself after a restart
        await asyncio.sleep(0.05)
        assert model.requests == []
        handle = await rt.tasks.run_queued(task.id)
        await rt.wait_idle(task.id)
        assert [_inputs(r)[-1] for r in model.requests] == ["queued 0", "queued 1", "queued 2"]
        # Each input sits right before its answer (it moved there when its turn started), for the model too.
        messages = await rt.messages(task.id)
        assert [m.text if m.role == "user" else m.role for m in messages][2:] == [
            "queued 0", "assistant", "queued 1", "assistant", "queued 2", "assistant"]
        assert handle is not None and handle.message_id == messages[2].id
        assert [m["role"] for m in model.requests[-1].messages][-5:] == ["user", "assistant", "user", "assistant",
                                                                         "user"]
        assert await rt.tasks.queued(task.id) == []
        assert await rt.tasks.run_queued(task.id) is None
    finally:
        await rt.aclose()


async def test_a_new_input_never_overtakes_an_older_queued_one(home):
    model = ScriptedModel([["busy ", Delay(30)]])
    rt = await open_runtime(home, model)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "first")
    await rt.send(task.id, "older", queue=True)
    await rt.aclose()

    model = ScriptedModel()
    rt = await open_runtime(home, model)
    try:
        handle = await rt.send(task.id, "newer")
        assert handle.queued and handle.turn_id is None
        await rt.wait_idle(task.id)
        assert [_inputs(r)[-1] for r in model.requests] == ["older", "newer"]
        # The model saw both inputs, in the order they were sent.
        assert _inputs(model.requests[-1])[-2:] == ["older", "newer"]
    finally:
        await rt.aclose()


async def test_discard_removes_a_queued_input_before_it_runs(home):
    model = ScriptedModel([["busy ", Delay(30)]])
    rt = await open_runtime(home, model)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "first")
    keep = await rt.send(task.id, "keep", queue=True)
    drop = await rt.send(task.id, "drop", queue=True)
    await rt.aclose()
    model = ScriptedModel()
    rt = await open_runtime(home, model)
    try:
        assert await rt.tasks.discard_queued(task.id, drop.message_id)
        assert not await rt.tasks.discard_queued(task.id, drop.message_id)
        await rt.tasks.run_queued(task.id)
        await rt.wait_idle(task.id)
        assert [_inputs(r)[-1] for r in model.requests] == ["keep"]
        assert [m.text for m in await rt.messages(task.id) if m.role == "user"] == ["first", "keep"]
        assert keep.message_id in [m.id for m in await rt.messages(task.id)]
        # Ids only grow: the answer written after the discard does not take the discarded input's id.
        assert (await rt.messages(task.id))[-1].id > drop.message_id
    finally:
        await rt.aclose()


async def test_a_thousand_queued_sends_with_one_id_give_one_message_and_no_error(home):
    model = ScriptedModel([["busy ", Delay(30)]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "first")
        handles = await asyncio.gather(
            *(rt.send(task.id, "again", client_msg_id="same", queue=True) for _ in range(1000))
        )
        assert len({h.message_id for h in handles}) == 1
        assert sum(not h.duplicate for h in handles) == 1
        assert all(h.queued for h in handles)
        assert [m.text for m in await rt.tasks.queued(task.id)] == ["again"]
    finally:
        await rt.aclose()


@pytest.mark.parametrize("n", [5])
async def test_queued_inputs_in_one_sitting_run_in_order(home, n):
    model = ScriptedModel([["busy ", Delay(0.2)]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "first")
        for i in range(n):
            await rt.send(task.id, f"q{i}", queue=True)
        await rt.wait_idle(task.id)
        assert [_inputs(r)[-1] for r in model.requests] == ["first", *(f"q{i}" for i in range(n))]
        texts = [m.text for m in await rt.messages(task.id) if m.role == "user"]
        roles = [m.role for m in await rt.messages(task.id)]
        assert texts == ["first", *(f"q{i}" for i in range(n))] and roles == ["user", "assistant"] * (n + 1)
    finally:
        await rt.aclose()


async def test_inputs_sent_back_to_back_are_written_and_run_in_the_order_they_were_sent(home):
    """The first send is still being written when the next ones queue behind it: none of them overtakes."""
    model = ScriptedModel([["busy ", Delay(0.2)]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        for _ in range(20):
            sends = [asyncio.ensure_future(rt.send(task.id, "first", queue=True))]
            sends += [asyncio.ensure_future(rt.send(task.id, f"q{i}", queue=True)) for i in range(3)]
            await asyncio.gather(*sends)
            await rt.wait_idle(task.id)
        runs = [_inputs(r)[-1] for r in model.requests]
        assert runs == ["first", "q0", "q1", "q2"] * 20
        users = [m.text for m in await rt.messages(task.id) if m.role == "user"]
        assert users == ["first", "q0", "q1", "q2"] * 20
    finally:
        await rt.aclose()
