"""The model's title replaces the provisional one after the first completed turn, never a person's name."""

from __future__ import annotations

import asyncio

import pytest

from runtime.engine.titles import PROMPT, clean_title
from runtime.providers.scripted import Delay, Fail, ScriptedModel
from tests.support.helpers import MODEL, open_runtime, write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def _title_event(rt, task_id: str, timeout: float = 10.0):
    async def first():
        async for ev in rt.events():
            if ev.type == "title" and ev.task_id == task_id:
                return ev

    return await asyncio.wait_for(first(), timeout)


async def _jobs_done(rt) -> None:
    while rt.jobs.pending:
        await asyncio.sleep(0.02)


@pytest.fixture
async def model():
    return ScriptedModel(title='"Trip to Lisbon."')


@pytest.fixture
async def rt(home, model):
    rt = await open_runtime(home, model)
    yield rt
    await rt.aclose()


async def test_the_models_title_replaces_the_provisional_one_and_is_announced(rt, model):
    model.add_steps(["Sure."])
    task = await rt.create_task(model=MODEL)
    titled = asyncio.ensure_future(_title_event(rt, task.id))
    await asyncio.sleep(0)
    await rt.send(task.id, "Plan my week in Lisbon, with a day trip to Sintra")
    assert (await rt.get_task(task.id)).title == "Plan my week in Lisbon, with a day trip to Sintra"
    event = await titled
    assert event.title == "Trip to Lisbon" and event.seq == 0
    assert (await rt.get_task(task.id)).title == "Trip to Lisbon"
    # The model read the first input under the title prompt; the conversation's script was not used for it.
    [asked] = model.title_requests
    assert asked.messages[0]["content"] == PROMPT
    assert asked.messages[1]["content"] == "Plan my week in Lisbon, with a day trip to Sintra"
    assert len(model.requests) == 1
    # Final: later turns ask for no title.
    await rt.send(task.id, "and Porto")
    await rt.wait_idle(task.id)
    await _jobs_done(rt)
    assert len(model.title_requests) == 1


async def test_a_name_the_person_gave_is_never_replaced(rt, model):
    model.add_steps(["slow", Delay(0.3), " answer"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "what about taxes")
    await rt.tasks.rename(task.id, "My taxes")  # while the first turn runs
    await rt.wait_idle(task.id)
    await _jobs_done(rt)
    assert (await rt.get_task(task.id)).title == "My taxes"

    asked = len(model.title_requests)
    named = await rt.create_task(title="Given", model=MODEL)
    await rt.send(named.id, "hello")
    await rt.wait_idle(named.id)
    await _jobs_done(rt)
    assert len(model.title_requests) == asked
    assert (await rt.get_task(named.id)).title == "Given"


async def test_a_rename_while_the_model_writes_the_title_wins(rt, model):
    model.add_steps(["ok"])
    task = await rt.create_task(model=MODEL)
    renamed = asyncio.Event()
    real_stream = model.stream

    async def slow_title(request, **kw):
        if request.purpose == "title":
            await rt.tasks.rename(task.id, "Mine")
            renamed.set()
        async for item in real_stream(request, **kw):
            yield item

    model.stream = slow_title
    await rt.send(task.id, "first words")
    await rt.wait_idle(task.id)
    await asyncio.wait_for(renamed.wait(), 10)
    await _jobs_done(rt)
    assert (await rt.get_task(task.id)).title == "Mine"


async def test_a_failed_title_request_is_tried_again_after_the_next_completed_turn(home):
    model = ScriptedModel(title="Garden plan")
    rt = await open_runtime(home, model)
    try:
        real_stream = model.stream
        failures = [True]

        async def flaky(request, **kw):
            if request.purpose == "title" and failures:
                failures.pop()
                raise ConnectionError("server went away")
            async for item in real_stream(request, **kw):
                yield item

        model.stream = flaky
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "plan my garden")
        await rt.wait_idle(task.id)
        await _jobs_done(rt)
        assert (await rt.get_task(task.id)).title == "plan my garden"
        failed = await rt.jobs.log(failed=True)
        assert [(j["kind"], j["task_id"]) for j in failed] == [("title", task.id)]

        await rt.send(task.id, "tomatoes first")
        await rt.wait_idle(task.id)
        await _jobs_done(rt)
        assert (await rt.get_task(task.id)).title == "Garden plan"
    finally:
        await rt.aclose()


async def test_a_turn_that_did_not_complete_asks_for_no_title(home):
    model = ScriptedModel([[Fail("boom")]], title="Never")
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "hello there")
        await rt.wait_idle(task.id)
        await _jobs_done(rt)
        assert model.title_requests == []
        assert (await rt.get_task(task.id)).title == "hello there"
    finally:
        await rt.aclose()


async def test_no_usable_title_keeps_the_provisional_one_for_good(home):
    model = ScriptedModel(title="  \n ")
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        for text in ("first", "second"):
            await rt.send(task.id, text)
            await rt.wait_idle(task.id)
            await _jobs_done(rt)
        assert len(model.title_requests) == 1
        assert (await rt.get_task(task.id)).title == "first"
    finally:
        await rt.aclose()


async def test_a_first_input_of_attachments_only_is_titled_with_their_names_for_good(rt, model, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("Buy milk.\n")
    task = await rt.create_task(model=MODEL)
    for _ in range(3):
        model.add_steps(["Read it."])
        await rt.send(task.id, "", attachments=[notes])
        await rt.wait_idle(task.id)
        await _jobs_done(rt)
    assert (await rt.get_task(task.id)).title == "notes.txt"
    assert model.title_requests == []
    # One title job settled it; the later turns ran none.
    assert len(await rt.jobs.log("title")) == 1


async def test_closing_the_runtime_does_not_wait_for_a_title(home):
    model = ScriptedModel(title="Late")
    rt = await open_runtime(home, model)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "quick one")
    await rt.wait_idle(task.id)
    assert rt.jobs.pending == 1
    loop = asyncio.get_running_loop()
    began = loop.time()
    await rt.aclose()
    assert loop.time() - began < 0.4  # the title job waits WAIT_SECONDS first: cancelled, not awaited


async def test_a_chat_is_titled_too(home):
    model = ScriptedModel(title="Weekend ideas")
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model=MODEL)
        titled = asyncio.ensure_future(_title_event(rt, chat.id))
        await asyncio.sleep(0)
        await rt.chats.send(chat.id, "what should I do this weekend")
        assert (await titled).title == "Weekend ideas"
        assert (await rt.chats.get(chat.id)).title == "Weekend ideas"
    finally:
        await rt.aclose()


async def test_an_openai_compatible_server_is_asked_with_the_title_prompt(home):
    async with OpenAIServer() as server:
        server.title = "Budget review"
        server.script(Reply(chunks=["Let us ", "look."]))
        write_settings(home, server.base_url)
        from runtime.api import Runtime

        rt = await Runtime.open(home)
        try:
            task = await rt.create_task()
            titled = asyncio.ensure_future(_title_event(rt, task.id))
            await asyncio.sleep(0)
            await rt.send(task.id, "review my budget for march")
            assert (await titled).title == "Budget review"
            [asked] = server.title_requests
            assert asked["model"] == "test-model" and asked["stream"] is True
            assert asked["messages"][1]["content"] == "review my budget for march"
            assert len(server.chat_requests) == 1  # the conversation's own request only
        finally:
            await rt.aclose()


@pytest.mark.parametrize(("answer", "title"), [
    ("Trip to Lisbon", "Trip to Lisbon"),
    ('"Trip to Lisbon."', "Trip to Lisbon"),
    ("Title: **Trip to Lisbon**\nBecause you asked.", "Trip to Lisbon"),
    ("\n\n  # Budget\x07 review  ", "Budget review"),
    ("", None),
    ("“”", None),
    ("x" * 80, None),
    ("Planning a day trip to Sintra with a focus on Lisbon", None),
    ("Kitchen sink leak", "Kitchen sink leak"),
])
def test_clean_title(answer, title):
    assert clean_title(answer) == title
