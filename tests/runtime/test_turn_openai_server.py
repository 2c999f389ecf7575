"""Full turns through the real OpenAI-compatible provider against a real SSE server on 127.0.0.1."""

from __future__ import annotations

import json

import pytest

from runtime.api import Runtime
from runtime.events import EndReason
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
    assert msgs[2]["tool_calls"][0]["id"] == "call_9"
    assert json.loads(msgs[2]["tool_calls"][0]["function"]["arguments"]) == {"text": "pong"}
    assert msgs[3]["tool_call_id"] == "call_9" and "echo: pong" in msgs[3]["content"]
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
    server.script(Reply.many(1000, "x", delay=0.01))
    task = await rt.create_task()
    await rt.send(task.id, "go")
    async for ev in rt.subscribe(task.id):
        if ev.type == "text_delta":
            await rt.stop(task.id)
        if ev.type == "turn_ended":
            assert ev.reason == EndReason.aborted
    await server.wait_for_disconnect(1, timeout=2)
