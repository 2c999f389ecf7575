"""A model that cannot call tools reliably (the catalog marks the bundled SmolLM2-135M) is offered none: its
requests carry no tools and a system prompt without them, no MCP server starts for it, no memory extraction is
tried with it, and a request that needs files or commands gets a notice, once per task, naming the catalog
model that fits this computer."""

from __future__ import annotations

import json

from runtime.engine.agent.prompt import TALK_ONLY
from runtime.engine.agent.talk_only import needs_files_or_commands
from runtime.local_models.catalog import best_fit
from runtime.local_models.library import ModelLibrary, ModelRecord
from runtime.providers.llama.provider import LlamaCppProvider
from runtime.providers.scripted import Call, ScriptedModel
from tests.runtime.test_memory import settle
from tests.support.helpers import ECHO, collect, open_runtime, text_from

NEEDS_FILES = "Tidy my notes folder, please."


async def test_a_model_that_can_only_talk_is_offered_no_tools_and_answers_plainly(home):
    model = ScriptedModel([["1. Red\n2. Blue\n3. Green"]], talk_only=True)
    rt = await open_runtime(home, model, tools=[ECHO])
    try:
        task = await rt.create_task(model="scripted/test")
        await rt.send(task.id, "Name three colours.")
        events = await collect(rt, task.id)
        assert events[-1].reason == "completed" and text_from(events) == "1. Red\n2. Blue\n3. Green"
        assert not [e for e in events if e.type in ("tool_call", "warning")]
        [request] = model.requests
        assert request.tools == []
        assert request.messages[0] == {"role": "system", "content": TALK_ONLY}  # nothing about tools to echo
    finally:
        await rt.aclose()


async def test_a_model_that_calls_tools_still_gets_them(home):
    model = ScriptedModel([["Red, blue, green."]])
    rt = await open_runtime(home, model, tools=[ECHO])
    try:
        task = await rt.create_task(model="scripted/test")
        await rt.send(task.id, NEEDS_FILES)
        events = await collect(rt, task.id)
        assert not [e for e in events if e.type == "warning"]
        assert "echo" in {t["function"]["name"] for t in model.requests[0].tools}
    finally:
        await rt.aclose()


async def test_no_memory_extraction_is_tried_with_a_model_that_can_only_talk(home):
    model = ScriptedModel([["A lentil curry, Sam."]], talk_only=True)
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model="scripted/test")
        await rt.send(task.id, "I'm vegetarian and my name is Sam. Suggest a dinner.")  # about themselves
        await collect(rt, task.id)
        await rt.wait_idle(task.id)
        await settle(rt)
        assert await rt.jobs.log("memory.extraction") == []  # it would fail after every turn
        assert [r.purpose for r in model.requests] == ["turn"]
    finally:
        await rt.aclose()


async def test_a_request_for_files_or_commands_gets_a_notice_once_per_task(home):
    model = ScriptedModel([["I tidied it."], ["Done."], ["Sure."]], talk_only=True)
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model="scripted/test")
        await rt.send(task.id, NEEDS_FILES)
        events = await collect(rt, task.id)
        [warning] = [e for e in events if e.type == "warning"]
        assert warning.code == "talk_only"
        assert "can only talk" in warning.message and "files" in warning.message and "commands" in warning.message
        assert f"{best_fit().label} can, and fits this computer" in warning.message
        assert "Settings ▸ Models" in warning.message and "“Another model…”" in warning.message
        await rt.wait_idle(task.id)
        saved = (await rt.messages(task.id))[-1].parts
        assert {"type": "marker", "marker": "warning", "message": warning.message, "code": "talk_only",
                "step": 0} in saved

        await rt.send(task.id, "Now list the files in it.")  # said once in this task
        assert not [e for e in await collect(rt, task.id) if e.type == "warning"]
        await rt.wait_idle(task.id)

        other = await rt.create_task(model="scripted/test")
        await rt.send(other.id, "Run the tests in my project.")
        assert [e.code for e in await collect(rt, other.id) if e.type == "warning"] == ["talk_only"]
    finally:
        await rt.aclose()


async def test_a_chat_on_a_model_that_can_only_talk_has_no_tools_and_no_notice(home):
    model = ScriptedModel([["Here you go."]], talk_only=True)
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model="scripted/test")
        await rt.chats.send(chat.id, NEEDS_FILES)
        events = [ev async for ev in rt.chats.subscribe(chat.id)]
        assert events[-1].reason == "completed" and not [e for e in events if e.type == "warning"]
        assert model.requests[0].tools == []
    finally:
        await rt.aclose()


async def test_no_mcp_server_starts_for_a_model_that_can_only_talk(home):
    (home / "settings.json").write_text(json.dumps({"mcpServers": {"time": {"command": "true"}}}))
    for talk_only, starts in ((True, False), (False, True)):
        rt = await open_runtime(home, ScriptedModel(talk_only=talk_only))
        try:
            task = await rt.create_task(model="scripted/test")
            row = {"id": task.id, "model": task.model, "planning": False}
            assert (rt.kit.mcp_sessions(row, home) is not None) is starts
        finally:
            await rt.aclose()


def test_which_requests_need_files_or_commands():
    needs = ["Tidy my notes folder", "What's in notes.txt?", "Run the tests", "list the files here",
             "Please read ~/todo", "delete the old logs in my Downloads folder", "ls -la", "Install numpy for me",
             "create a file called hello with hi in it", "Rename the photos in this folder by date", "git status"]
    talk = ["Name three colours.", "I'm vegetarian and my name is Sam. Suggest a dinner.", "hello",
            "What is the capital of France?", "Write a short poem about tea.", "I run every morning, any tips?",
            "Make me a shopping list", "Cat names?", "Python or Java for a beginner?", "How do I make sourdough?"]
    assert [t for t in needs if not needs_files_or_commands(t)] == []
    assert [t for t in talk if needs_files_or_commands(t)] == []


def test_the_catalog_marks_the_bundled_model_as_one_that_can_only_talk(home):
    assert LlamaCppProvider("builtin", library=ModelLibrary(home)).calls_tools("smollm2-135m") is False
    library = ModelLibrary(home)
    library.add(ModelRecord(name="qwen2.5-3b-instruct", source="hub", path="models/q.gguf", size=1,
                            catalog_id="qwen2.5-3b-instruct"))
    assert LlamaCppProvider("builtin", library=library).calls_tools("qwen2.5-3b-instruct") is True
    assert LlamaCppProvider("mine", "/models/any.gguf").calls_tools("any") is True  # a file the catalog does not know


def test_the_model_suggested_is_the_biggest_that_leaves_this_computer_room(monkeypatch):
    from runtime.local_models import catalog

    for ram_gb, suggested in ((24, "llama-3.1-8b-instruct"), (8, "llama-3.2-3b-instruct"),
                              (3, "qwen2.5-1.5b-instruct"), (1, None), (None, "qwen2.5-1.5b-instruct")):
        monkeypatch.setattr(catalog, "total_ram_bytes", lambda gb=ram_gb: gb and gb * catalog.GB)
        entry = best_fit()
        assert (entry.id if entry else None) == suggested, ram_gb


async def test_plan_first_on_a_model_that_can_only_talk_asks_for_the_plan_at_once(home):
    plan = Call("submit_plan", {"summary": "Shop, then cook.", "steps": ["Buy lentils", "Cook the curry"]})
    model = ScriptedModel([[plan]], talk_only=True)
    rt = await open_runtime(home, model, tools=[ECHO])
    try:
        task = await rt.create_task(model="scripted/test", planning=True)
        await rt.send(task.id, "Plan a dinner for Sam.")
        await rt.wait_idle(task.id)
        [request] = model.requests
        assert [t["function"]["name"] for t in request.tools] == ["submit_plan"]  # nothing else to reach for
        assert request.tool_choice == {"type": "function", "function": {"name": "submit_plan"}}
        info = await rt.get_task(task.id)
        assert info.state == "waiting" and info.pending_request["kind"] == "plan"
        assert info.pending_request["plan"] == ["Buy lentils", "Cook the curry"]
    finally:
        await rt.aclose()
