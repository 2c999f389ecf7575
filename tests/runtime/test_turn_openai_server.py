"""Full turns through the real OpenAI-compatible provider against a real SSE server on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.api import Runtime
from runtime.engine.agent.context import DENIED
from runtime.events import EndReason
from runtime.parts import hearth_call_id
from tests.support.helpers import ECHO, collect, text_from, write_settings
from tests.support.openai_server import OpenAIServer, Reply


@pytest.fixture
async def server():
    async with OpenAIServer() as server:
        yield server


@pytest.fixture
async def rt(home, server):
    write_settings(home, server.base_url)
    rt = await Runtime.open(home, tools=[ECHO])
    yield rt
    await rt.aclose()


async def test_two_turn_task_carries_messages_and_tool_results(rt, server):
    server.script(
        Reply(chunks=["Let me ", "echo."], tool_calls=[("call_9", "echo", {"text": "pong"})], finish="tool_calls"),
        Reply(chunks=["It said ", "pong."]),
        Reply(chunks=["Still pong."]),
    )
    task = await rt.create_task()
    assert task.model == "local/test-model"
    await rt.send(task.id, "please echo pong")
    first = await collect(rt, task.id)
    assert first[-1].reason == EndReason.completed
    assert text_from(first) == "Let me echo.It said pong."
    await rt.wait_idle(task.id)
    await rt.send(task.id, "what did it say?")
    second = await collect(rt, task.id)
    assert text_from(second) == "Still pong."
    body = server.chat_requests[2]
    assert body["model"] == "test-model" and body["stream"] is True
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]
    msgs = body["messages"]
    assert msgs[1]["content"] == "please echo pong"
    # Rebuilt from what was saved, the call goes by Hearth's id for it (the server's own was call_9).
    assert msgs[2]["tool_calls"][0]["id"] == msgs[3]["tool_call_id"] != "call_9"
    assert json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"]) == {"text": "pong"}
    assert "echo: pong" in msgs[3]["content"]
    assert msgs[4]["content"] == "It said pong."
    assert msgs[5]["content"] == "what did it say?"
    assert any(t["function"]["name"] == "echo" for t in body["tools"])


async def test_malformed_stream_mid_answer_ends_error_with_partial_text(rt, server):
    server.script(Reply(chunks=["half ", "an ", "answer"], malformed_after=2))
    task = await rt.create_task()
    await rt.send(task.id, "go")
    events = await collect(rt, task.id)
    assert events[-1].reason == EndReason.error and "malformed" in events[-1].error.lower()
    await rt.wait_idle(task.id)
    assert (await rt.messages(task.id))[-1].text == "half an "


async def test_dead_server_gives_a_readable_error(home):
    write_settings(home, "http://127.0.0.1:9/v1")
    rt = await Runtime.open(home)
    try:
        task = await rt.create_task()
        await rt.send(task.id, "hello?")
        ended = (await collect(rt, task.id))[-1]
        assert ended.reason == EndReason.error
        assert "127.0.0.1:9" in ended.error and "running" in ended.error
        assert [m.text for m in await rt.messages(task.id)][0] == "hello?"
    finally:
        await rt.aclose()


async def test_stop_closes_the_http_stream(rt, server):
    server.script(Reply.counting(1000, delay=0.01))
    task = await rt.create_task()
    await rt.send(task.id, "go")
    async for ev in rt.subscribe(task.id):
        if ev.type == "text_delta":
            await rt.stop(task.id)
        if ev.type == "turn_ended":
            assert ev.reason == EndReason.aborted
    await server.wait_for_disconnect(1, timeout=2)


def _calls(msg) -> list[dict]:
    return [p for p in msg.parts if p["type"] == "tool_call"]


def _pairs_up(messages: list[dict]) -> list[str]:
    """The tool call ids of a model input, checking that each call is answered right after it, in order."""
    ids = []
    for i, m in enumerate(messages):
        calls = m.get("tool_calls") or []
        answers = messages[i + 1 : i + 1 + len(calls)]
        assert [a["role"] for a in answers] == ["tool"] * len(calls)
        assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
        ids += [c["id"] for c in calls]
    assert len(ids) == len(set(ids)), f"repeated call ids in one request: {ids}"
    return ids


async def test_a_server_that_repeats_call_ids_keeps_every_call_in_its_own_turn(rt, server):
    """Some servers give every call the same id. Each call is still its own: two of one step, and one per turn
    across approvals (approve lands on the call that asked, deny on the later one), in the stored parts, the
    events, the pending requests and the model input rebuilt from them."""
    same = "call_0"
    server.script(
        Reply(chunks=[], tool_calls=[(same, "echo", {"text": "one"}), (same, "echo", {"text": "two"})],
              finish="tool_calls"),
        Reply(chunks=["Echoed twice."]),
        Reply(chunks=[], tool_calls=[(same, "write_file", {"path": "a.txt", "content": "hi"})], finish="tool_calls"),
        Reply(chunks=["Written."]),
        Reply(chunks=[], tool_calls=[(same, "run_shell", {"command": "rm a.txt"})], finish="tool_calls"),
        Reply(chunks=["Left it."]),
    )
    task = await rt.create_task()  # asks before changes

    async def turn(send) -> list:
        await send
        events = await collect(rt, task.id)
        await rt.wait_idle(task.id)
        return events

    echoes = await turn(rt.send(task.id, "echo one and two"))
    assert echoes[-1].reason == EndReason.completed
    write = await turn(rt.send(task.id, "write a.txt"))
    assert write[-1].reason == EndReason.waiting
    asked_write = (await rt.get_task(task.id)).pending_request
    approved = await turn(rt.answer(task.id, asked_write["request_id"], "approve"))
    remove = await turn(rt.send(task.id, "now remove it"))
    asked_remove = (await rt.get_task(task.id)).pending_request
    denied = await turn(rt.answer(task.id, asked_remove["request_id"], "deny"))
    assert [e[-1].reason for e in (approved, remove, denied)] == ["completed", "waiting", "completed"]
    assert len(server.chat_requests) == 6  # every step asked once: no call was lost or asked for again
    assert Path((await rt.get_task(task.id)).workspace, "a.txt").read_text() == "hi"  # approved, then denied

    answers = [m for m in await rt.messages(task.id) if m.role == "assistant"]
    one, two = _calls(answers[0])
    assert (one["result"], two["result"]) == ("echo: one", "echo: two") and one["call_id"] != two["call_id"]
    (wrote,), (wrote_done,) = _calls(answers[1]), _calls(answers[2])
    (rm,), (rm_denied,) = _calls(answers[3]), _calls(answers[4])
    assert (wrote["name"], wrote["state"], wrote_done["state"]) == ("write_file", "pending", "done")
    assert (rm["name"], rm["state"], rm_denied["name"], rm_denied["state"]) == ("run_shell", "pending", "run_shell",
                                                                                "denied")
    assert rm_denied["result"] == DENIED and "a.txt" in wrote_done["result"]
    # An answer completes the call that asked, under that call's id; every other call has an id of its own turn.
    assert asked_write["call_id"] == wrote["call_id"] == wrote_done["call_id"]
    assert asked_remove["call_id"] == rm["call_id"] == rm_denied["call_id"]
    for msg, calls in ((answers[0], [one, two]), (answers[1], [wrote]), (answers[3], [rm])):
        assert all(c["call_id"] == hearth_call_id(msg.turn_id, c["part_id"]) for c in calls)
    assert len({one["call_id"], two["call_id"], wrote["call_id"], rm["call_id"]}) == 4
    # The events say the same.
    assert {e.call_id for e in echoes if e.type == "tool_call"} == {one["call_id"], two["call_id"]}
    assert {(e.call_id, e.name) for e in remove + denied if e.type == "tool_call"} == {(rm["call_id"], "run_shell")}

    # Live, a step's results go back under the server's id; the one it repeated gets Hearth's.
    assert _pairs_up(server.chat_requests[1]["messages"]) == [same, two["call_id"]]
    # Rebuilt, every call has Hearth's id and its own result.
    rebuilt = server.chat_requests[-1]["messages"]
    assert _pairs_up(rebuilt) == [one["call_id"], two["call_id"], wrote["call_id"], rm["call_id"]]
    results = {m["tool_call_id"]: m["content"] for m in rebuilt if m["role"] == "tool"}
    assert "echo: one" in results[one["call_id"]] and "echo: two" in results[two["call_id"]]
    assert "a.txt" in results[wrote["call_id"]] and results[rm["call_id"]] == DENIED
