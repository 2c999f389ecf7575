"""Continue carries on the same answer; retry, edit and a fork to another model, through a real server."""

from __future__ import annotations

import json

import pytest

from runtime.api import Runtime
from runtime.engine.agent.context import CONTINUE
from runtime.errors import ConfigError
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


@pytest.fixture
async def server():
    async with OpenAIServer() as server:
        yield server


@pytest.fixture
async def rt(home, server):
    write_settings(home, server.base_url)
    rt = await Runtime.open(home)
    yield rt
    await rt.aclose()


def _tail(body: dict, n: int) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content")) for m in body["messages"][-n:]]


async def test_continue_after_a_length_stop_sends_the_partial_answer_and_goes_on(rt, server):
    server.script(Reply(chunks=["The three colours are red, ", "green"], finish="length"),
                  Reply(chunks=[" and blue."]))
    task = await rt.create_task()
    await rt.send(task.id, "Name three colours.")
    await rt.wait_idle(task.id)
    assert (await rt.messages(task.id))[-1].truncated
    handle = await rt.tasks.continue_task(task.id)
    await rt.wait_idle(task.id)
    assert _tail(server.requests[-1], 3) == [
        ("user", "Name three colours."), ("assistant", "The three colours are red, green"), ("user", CONTINUE)]
    messages = await rt.messages(task.id)
    assert [m.role for m in messages] == ["user", "assistant", "user", "assistant"]
    assert messages[2].parts == [{"type": "continue"}] and messages[2].text == ""  # nothing typed, nothing shown
    assert messages[1].text + messages[3].text == "The three colours are red, green and blue."
    assert messages[3].turn_id == handle.turn_id


async def test_continue_after_a_stop_and_after_an_interruption(home, server):
    write_settings(home, server.base_url)
    server.script(Reply(chunks=["Once upon ", "a time ", *Reply.counting(200).chunks], delay=0.02),
                  Reply(chunks=["happily."]))
    rt = await Runtime.open(home)
    task = await rt.create_task()
    await rt.send(task.id, "A story, please.")
    async for ev in rt.subscribe(task.id):
        if ev.type == "text_delta":
            await rt.aclose()  # a quit while it writes: the turn ends interrupted
            break
    rt = await Runtime.open(home)
    try:
        partial = (await rt.messages(task.id))[-1].text
        assert partial.startswith("Once upon")
        await rt.tasks.continue_task(task.id)
        await rt.wait_idle(task.id)
        assert _tail(server.requests[-1], 2) == [("assistant", partial), ("user", CONTINUE)]
    finally:
        await rt.aclose()


async def test_retry_answers_the_last_input_afresh(rt, server):
    server.script(Reply(chunks=["A poor answer."]), Reply(chunks=["A better answer."]))
    task = await rt.create_task()
    await rt.send(task.id, "Explain tides.")
    await rt.wait_idle(task.id)
    await rt.tasks.retry(task.id)
    await rt.wait_idle(task.id)
    body = server.requests[-1]
    assert _tail(body, 1) == [("user", "Explain tides.")]
    assert "A poor answer." not in json.dumps(body)
    assert (await rt.messages(task.id))[-1].text == "A better answer."


async def test_edit_replaces_the_last_input(rt, server):
    server.script(Reply(chunks=["About cats."]), Reply(chunks=["About dogs."]))
    task = await rt.create_task()
    await rt.send(task.id, "Tell me about cats.")
    await rt.wait_idle(task.id)
    await rt.tasks.edit_last(task.id, "Tell me about dogs.")
    await rt.wait_idle(task.id)
    body = json.dumps(server.requests[-1])
    assert "Tell me about dogs." in body and "cats" not in body
    with pytest.raises(ConfigError):
        await rt.tasks.edit_last(task.id, "   ")


async def test_retry_with_nothing_to_retry_says_so(rt):
    task = await rt.create_task()
    with pytest.raises(ConfigError, match="no message of yours"):
        await rt.tasks.retry(task.id)


async def test_a_fork_to_another_model_carries_the_conversation(home, server):
    write_settings(home, server.base_url)
    settings = json.loads((home / "settings.json").read_text())
    settings["providers"].append({"id": "other", "kind": "openai", "base_url": server.base_url})
    (home / "settings.json").write_text(json.dumps(settings))
    server.script(Reply(chunks=["First answer."]), Reply(chunks=["Second model here."]))
    rt = await Runtime.open(home)
    try:
        task = await rt.create_task(title="Original")
        await rt.send(task.id, "Hello there.")
        await rt.wait_idle(task.id)
        fork = await rt.tasks.fork(task.id, "other/bigger-model")
        assert fork.model == "other/bigger-model" and fork.title == "Original" and fork.id != task.id
        await rt.send(fork.id, "Go on.")
        await rt.wait_idle(fork.id)
        body = server.requests[-1]
        assert body["model"] == "bigger-model"
        assert _tail(body, 3) == [("user", "Hello there."), ("assistant", "First answer."), ("user", "Go on.")]
        assert len(await rt.messages(task.id)) == 2  # the original is untouched
    finally:
        await rt.aclose()
