"""A task's turns end to end on a real SQLite file, driven by the scripted model."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from runtime.engine.stream_buffer import BufferState
from runtime.errors import TaskBusy, TaskNotFound
from runtime.events import EndReason
from runtime.providers.scripted import Call, Delay, Reasoning, ScriptedModel
from tests.support.helpers import ECHO, MODEL, collect, open_runtime, text_from


@pytest.fixture
async def model():
    return ScriptedModel()


@pytest.fixture
async def rt(home, model):
    rt = await open_runtime(home, model, tools=[ECHO])
    yield rt
    await rt.aclose()


async def test_turn_streams_persists_and_completes(rt, model):
    model.add_steps([Reasoning("thinking"), "Hel", "lo", " world"])
    task = await rt.create_task(model=MODEL)
    handle = await rt.send(task.id, "hi")
    events = await collect(rt, task.id)
    types = [e.type for e in events]
    assert types[0] == "turn_started" and types[1] == "status" and types[-1] == "turn_ended"
    assert events[0].input_message_id == handle.message_id
    assert [e.phase for e in events if e.type == "status"] == [
        "agent_building", "context_building", "mcp_connecting", "agent_running",
    ]
    assert [e.seq for e in events] == sorted({e.seq for e in events})
    assert all(e.turn_id == handle.turn_id and e.task_id == task.id for e in events)
    assert text_from(events) == "Hello world"
    assert events[-1].reason == EndReason.completed
    await rt.wait_idle(task.id)
    msgs = await rt.messages(task.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert msgs[0].text == "hi" and msgs[1].text == "Hello world"
    assert msgs[1].parts[0] == {"type": "reasoning", "text": "thinking", "step": 0}
    info = await rt.get_task(task.id)
    assert info.state == "idle" and info.last_reason == "completed"
    assert info.input_tokens > 0 and info.output_tokens > 0
    turns = await rt.tasks.turns(task.id)
    assert turns[0]["status"] == "ended" and turns[0]["reason"] == "completed"
    steps = await rt.core.store.steps(handle.turn_id)
    assert len(steps) == 1 and steps[0]["finish_reason"] == "stop"


async def test_an_untitled_task_is_named_by_its_first_input_at_once(rt, model):
    model.add_steps(["slow ", Delay(0.5), "answer"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "Plan   my\nweek in Lisbon")
    assert (await rt.get_task(task.id)).title == "Plan my week in Lisbon"  # before the turn has ended
    await rt.send(task.id, "and Porto", queue=True)
    await rt.wait_idle(task.id)
    assert (await rt.get_task(task.id)).title == "Plan my week in Lisbon"
    named = await rt.create_task(title="Mine", model=MODEL)
    await rt.send(named.id, "something else")
    assert (await rt.get_task(named.id)).title == "Mine"


async def test_tool_call_result_goes_back_to_the_model(rt, model):
    model.add_steps(["Echoing.", Call("echo", {"text": "ping"})], ["It said ping."])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "echo ping")
    events = await collect(rt, task.id)
    states = [(e.name, e.state) for e in events if e.type == "tool_call"]
    assert states == [("echo", "pending"), ("echo", "running"), ("echo", "done")]
    second = model.requests[1].messages
    assert second[-2]["tool_calls"][0]["function"]["name"] == "echo"
    assert second[-1]["role"] == "tool" and "echo: ping" in second[-1]["content"]
    msgs = await rt.messages(task.id)
    tool = [p for p in msgs[1].parts if p["type"] == "tool_call"][0]
    assert tool["state"] == "done" and tool["result"] == "echo: ping" and tool["args"] == {"text": "ping"}


async def test_step_limit_ends_the_turn_with_a_warning(rt, model):
    rt.settings.max_steps = 2
    model.add_steps(*[[Call("echo", {"text": str(i)})] for i in range(5)])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "loop")
    events = await collect(rt, task.id)
    assert any(e.type == "warning" and "2 model steps" in e.message for e in events)
    assert events[-1].reason == EndReason.completed
    assert len(model.requests) == 2


async def test_unknown_tool_and_bad_arguments_are_errors_the_model_sees(rt, model):
    model.add_steps([Call("nope", {}), Call("echo", raw="{not json")], ["ok"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "x")
    events = await collect(rt, task.id)
    errors = [e.result for e in events if e.type == "tool_call" and e.state == "error"]
    assert "no tool named 'nope'" in errors[0] and "Invalid JSON" in errors[1]
    assert events[-1].reason == EndReason.completed


async def test_subscribers_mid_turn_after_end_and_many_rebuild_the_persisted_text(rt, model):
    pieces = [f"w{i} " for i in range(300)]
    model.add_steps([*pieces[:150], Delay(0.2), *pieces[150:]])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    many = [asyncio.ensure_future(collect(rt, task.id)) for _ in range(5)]
    await asyncio.sleep(0.1)  # mid-turn: the first half is buffered, the rest is live
    assert await rt.tasks.stream_state(task.id) == BufferState.active
    mid = asyncio.ensure_future(collect(rt, task.id))
    results = await asyncio.gather(*many, mid)
    await rt.wait_idle(task.id)
    after = await collect(rt, task.id)
    assert await rt.tasks.stream_state(task.id) == BufferState.completed
    persisted = (await rt.messages(task.id))[1].text
    assert persisted == "".join(pieces)
    for events in [*results, after]:
        assert text_from(events) == persisted
        assert events[-1].type == "turn_ended"
    # Replay coalesces: one text event for the whole part, not 300.
    assert sum(e.type == "text_delta" for e in after) == 1


async def test_resume_after_any_seq_gives_the_exact_rest(rt, model):
    model.add_steps(["a", "b", "c", Call("echo", {"text": "x"})], ["d", "e"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    full = await collect(rt, task.id)
    last = full[-1].seq
    for k in range(last + 1):
        rest = await collect(rt, task.id, after_seq=k)
        expected = [e for e in full if e.seq > k and e.type != "text_delta"]
        assert [e for e in rest if e.type != "text_delta"] == expected
    run_end = next(e.seq for e in full if e.type == "text_delta")  # "a", "b", "c" are seqs run_end-2..run_end
    for j in range(4):
        rest = await collect(rt, task.id, after_seq=run_end - 3 + j)
        assert text_from(rest) == "abc"[j:] + "de"


async def test_a_subscriber_never_sees_the_previous_turn(rt, model):
    model.add_steps(["first answer"], ["second answer"])
    task = await rt.create_task(model=MODEL)
    first = await rt.send(task.id, "one")
    await rt.wait_idle(task.id)
    old_seq = (await collect(rt, task.id))[-1].seq
    second = await rt.send(task.id, "two")
    events = await collect(rt, task.id, after_seq=old_seq, turn_id=first.turn_id)
    assert {e.turn_id for e in events} == {second.turn_id}
    assert text_from(events) == "second answer"


async def test_two_hundred_concurrent_sends_start_one_turn(rt, model):
    model.add_steps(["slow", Delay(0.3)])
    task = await rt.create_task(model=MODEL)
    results = await asyncio.gather(*(rt.send(task.id, f"msg {i}") for i in range(200)), return_exceptions=True)
    handles = [r for r in results if not isinstance(r, Exception)]
    busy = [r for r in results if isinstance(r, TaskBusy)]
    assert len(handles) == 1 and len(busy) == 199
    await rt.wait_idle(task.id)
    msgs = await rt.messages(task.id)
    assert [m.role for m in msgs] == ["user", "assistant"]
    assert len(await rt.tasks.turns(task.id)) == 1


async def test_same_client_msg_id_twice_gives_one_message_and_one_turn(rt, model):
    task = await rt.create_task(model=MODEL)
    a, b = await asyncio.gather(
        rt.send(task.id, "hello", client_msg_id="m-1"), rt.send(task.id, "hello", client_msg_id="m-1")
    )
    assert a.turn_id == b.turn_id and (a.duplicate or b.duplicate)
    await rt.wait_idle(task.id)
    c = await rt.send(task.id, "hello", client_msg_id="m-1")
    assert c.duplicate and c.turn_id == a.turn_id
    await rt.wait_idle(task.id)
    assert len([m for m in await rt.messages(task.id) if m.role == "user"]) == 1
    assert len(await rt.tasks.turns(task.id)) == 1


async def test_queued_input_runs_after_the_current_turn(rt, model):
    model.add_steps(["first", Delay(0.2)], ["second"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "one")
    queued = await rt.send(task.id, "two", queue=True)
    assert queued.queued and queued.turn_id is None
    await rt.wait_idle(task.id)
    msgs = await rt.messages(task.id)
    assert [(m.role, m.text) for m in msgs] == [
        ("user", "one"), ("assistant", "first"), ("user", "two"), ("assistant", "second"),
    ]
    assert all(m.status == "complete" for m in msgs)


async def test_unknown_task_and_stop_when_idle(rt):
    with pytest.raises(TaskNotFound):
        await rt.send("nope", "hi")
    with pytest.raises(TaskNotFound):
        await collect(rt, "nope")
    task = await rt.create_task(model=MODEL)
    await rt.stop(task.id)  # nothing runs: a no-op
    assert (await rt.get_task(task.id)).state == "idle"


async def test_run_context_is_garbage_after_finalize(rt, model, monkeypatch):
    import runtime.engine.turn

    made = []

    class Watched(runtime.engine.turn.TurnContext):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(weakref.ref(self))

    monkeypatch.setattr(runtime.engine.turn, "TurnContext", Watched)
    model.add_steps(["some text", Call("echo", {"text": "a"})], ["done"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    await rt.wait_idle(task.id)
    gc.collect()
    assert len(made) == 1 and made[0]() is None


async def test_turn_ended_is_only_observable_after_its_commit(rt, model):
    order = []
    real = rt.core.store.finalize_turn

    async def instrumented(record):
        order.append("commit-start")
        await asyncio.sleep(0.05)  # give an early announcement every chance to show up
        await real(record)
        order.append("commit-done")

    rt.core.store.finalize_turn = instrumented
    model.add_steps(["hi"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    async for ev in rt.subscribe(task.id):
        if ev.type == "turn_ended":
            order.append("turn_ended")
            row = (await rt.tasks.turns(task.id))[0]
            assert row["status"] == "ended"
    assert order == ["commit-start", "commit-done", "turn_ended"]


async def test_failed_commit_ends_the_turn_error_and_says_so(rt, model):
    async def broken(record):
        raise OSError("disk full")

    rt.core.store.finalize_turn = broken
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "go")
    ended = (await collect(rt, task.id))[-1]
    assert ended.reason == EndReason.error and "could not be saved" in ended.error
    await rt.wait_idle(task.id)
    info = await rt.get_task(task.id)
    assert info.state == "idle" and info.last_reason == "error"
