"""Planning: a planning turn offers no write tools and ends with a plan the person approves, edits or rejects;
approved, its steps are the task's todo list, kept in SQLite and recalled at every step."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from runtime.api import Runtime
from runtime.events import EndReason
from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import MODEL, open_runtime, write_settings
from tests.support.openai_server import OpenAIServer, Reply

PLAN = ["List the photos", "Rename them by date", "Write notes.md"]


def _tool_names(request) -> set[str]:
    return {t["function"]["name"] for t in request.tools}


async def test_a_planning_turn_reads_only_then_an_approved_plan_runs_with_its_todos(home):
    model = ScriptedModel([
        ["Let me look first.", Call("list_files", {"path": "."})],
        [Call("submit_plan", {"summary": "Rename by date, then note it.", "steps": PLAN})],
        [Call("todo_write", {"items": [{"content": s, "status": "done" if i == 0 else "pending"}
                                       for i, s in enumerate(PLAN)]})],
        ["Renamed them."],
    ])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, planning=True, approval="full_auto")
        await rt.send(task.id, "Sort out my photos.")
        await rt.wait_idle(task.id)
        names = _tool_names(model.requests[0])
        assert {"write_file", "edit_file", "run_shell"}.isdisjoint(names)
        assert {"read_file", "list_files", "submit_plan", "ask_user"} <= names
        assert "You are planning this task" in model.requests[0].messages[0]["content"]
        info = await rt.get_task(task.id)
        assert info.state == "waiting" and info.pending_request["kind"] == "plan"
        assert info.pending_request["plan"] == PLAN

        await rt.answer(task.id, info.pending_request["request_id"], "approve")
        await rt.wait_idle(task.id)
        info = await rt.get_task(task.id)
        assert info.plan_status == "approved" and info.last_reason == "completed"
        execute = model.requests[2]
        assert {"write_file", "run_shell"} <= _tool_names(execute) and "submit_plan" not in _tool_names(execute)
        assert "You are planning" not in execute.messages[0]["content"]
        assert "[ ] Rename them by date" in execute.messages[0]["content"]  # the step is reminded of open items
        assert "[ ] List the photos" not in model.requests[3].messages[0]["content"]  # done, no longer reminded
        assert [t["status"] for t in info.todos] == ["done", "pending", "pending"]
    finally:
        await rt.aclose()
    rt = await open_runtime(home, ScriptedModel())
    try:
        assert [t["content"] for t in (await rt.get_task(task.id)).todos] == PLAN  # todos survive a restart
    finally:
        await rt.aclose()


async def test_an_edited_plan_is_the_one_kept_and_a_rejected_one_is_planned_again(home):
    model = ScriptedModel([
        [Call("submit_plan", {"steps": ["Delete everything"]})],
        [Call("submit_plan", {"steps": ["Back up", "Then tidy"]})],
        ["Backing up."],
    ])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, planning=True)
        await rt.send(task.id, "Tidy my disk.")
        await rt.wait_idle(task.id)
        req = (await rt.get_task(task.id)).pending_request
        await rt.answer(task.id, req["request_id"], "No, never delete anything.")
        await rt.wait_idle(task.id)
        assert "did not approve the plan: No, never delete anything." in model.requests[1].messages[-1]["content"]
        assert "write_file" not in _tool_names(model.requests[1])  # still planning
        req = (await rt.get_task(task.id)).pending_request
        await rt.answer(task.id, req["request_id"], "approve", plan=["Back up first", "Then tidy", "Report"])
        await rt.wait_idle(task.id)
        info = await rt.get_task(task.id)
        assert [t["content"] for t in info.todos] == ["Back up first", "Then tidy", "Report"]
        events = [e async for e in rt.subscribe(task.id)]
        assert events[-1].reason == EndReason.completed
    finally:
        await rt.aclose()


async def test_a_planning_turn_starts_no_mcp_server_and_an_approved_plan_gets_its_tools(home, tmp_path):
    pid_file = tmp_path / "pids"  # the test server writes its pid here when it starts
    server = {"command": sys.executable, "args": ["-m", "tests.support.mcp_server"], "cwd": str(Path.cwd()),
              "env": {"MCP_TEST_PID_FILE": str(pid_file)}}
    (home / "settings.json").write_text(json.dumps({"mcpServers": {"calc": server}, "mcp_connect_timeout": 20}))
    model = ScriptedModel([
        [Call("calc__add", {"a": 2, "b": 3})],  # a tool it was not offered: refused, nothing runs
        [Call("submit_plan", {"steps": ["Add them"]})],
        [Call("calc__add", {"a": 2, "b": 3})],
        ["5."],
    ])
    rt = await open_runtime(home, model)
    try:
        rt.mcp.approve("calc")
        task = await rt.create_task(model=MODEL, planning=True, approval="full_auto")
        await rt.send(task.id, "Add 2 and 3.")
        await rt.wait_idle(task.id)
        assert not any(name.startswith("calc__") for name in _tool_names(model.requests[0]))
        assert not pid_file.exists()
        refused = next(p for m in await rt.messages(task.id) for p in m.parts if p.get("name") == "calc__add")
        assert refused["state"] == "error"
        info = await rt.get_task(task.id)
        await rt.answer(task.id, info.pending_request["request_id"], "approve")
        await rt.wait_idle(task.id)
        assert "calc__add" in _tool_names(model.requests[2]) and pid_file.exists()
        done = [p for m in await rt.messages(task.id) for p in m.parts if p.get("name") == "calc__add"]
        assert done[-1]["state"] == "done" and "5" in done[-1]["result"]
    finally:
        await rt.aclose()


PLAN_CHOICE = {"type": "function", "function": {"name": "submit_plan"}}
IN_WORDS = "Here is my plan: first back up, then tidy."


async def test_a_plan_in_plain_words_is_asked_for_again_by_name_and_comes_back_to_approve(home):
    model = ScriptedModel([
        [Call("list_files", {"path": "."})],  # looking around first is free
        [IN_WORDS],  # no submit_plan: the next request names it
        [Call("submit_plan", {"summary": "Back up, then tidy.", "steps": ["Back up", "Tidy"]})],
        ["Backing up."],
    ])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, planning=True)
        await rt.send(task.id, "Tidy my disk.")
        await rt.wait_idle(task.id)
        assert [r.tool_choice for r in model.requests] == [None, None, PLAN_CHOICE]
        assert _tool_names(model.requests[2]) == {"submit_plan"}
        assert model.requests[2].messages == model.requests[1].messages  # the same question, the plan required
        info = await rt.get_task(task.id)
        assert info.state == "waiting" and info.pending_request["kind"] == "plan"
        assert info.pending_request["plan"] == ["Back up", "Tidy"]
        [answer] = [m for m in await rt.messages(task.id) if m.role == "assistant"]
        said = [(p["type"], p["step"]) for p in answer.parts if p["type"] in ("text", "tool_call")]
        assert said == [("tool_call", 0), ("text", 1), ("tool_call", 1)]  # the words and their plan: one step
        await rt.answer(task.id, info.pending_request["request_id"], "approve")
        await rt.wait_idle(task.id)
        planned = [m for m in model.requests[3].messages if m["role"] == "assistant"][-1]
        assert planned["content"] == IN_WORDS and planned["tool_calls"][0]["function"]["name"] == "submit_plan"
        assert (await rt.get_task(task.id)).plan_status == "approved"
    finally:
        await rt.aclose()


async def test_a_model_that_never_plans_is_asked_once_and_its_last_step_must_plan(home):
    (home / "settings.json").write_text(json.dumps({"max_steps": 3}))
    model = ScriptedModel([[IN_WORDS], ["Still just words."]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, planning=True)
        await rt.send(task.id, "Tidy my disk.")
        await rt.wait_idle(task.id)
        assert [r.tool_choice for r in model.requests] == [None, PLAN_CHOICE]  # asked once, never again
        assert (await rt.get_task(task.id)).last_reason == "completed"
        looking = [[Call("list_files", {"path": "."})]] * 3
        model.add_steps(*looking)
        await rt.send(task.id, "Look around as long as you like.")
        await rt.wait_idle(task.id)
        assert [r.tool_choice for r in model.requests[2:]] == [None, None, PLAN_CHOICE]  # the last step plans
        model.add_steps(*looking)
        task = await rt.create_task(model=MODEL)  # no planning: nothing is forced
        await rt.send(task.id, "Look around.")
        await rt.wait_idle(task.id)
        assert all(r.tool_choice is None for r in model.requests[5:])
    finally:
        await rt.aclose()


async def test_a_server_model_that_answers_in_words_is_asked_for_the_plan_with_tool_choice(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=[IN_WORDS]),
                      Reply(chunks=[], tool_calls=[("c1", "submit_plan", {"steps": ["Back up", "Tidy"]})],
                            finish="tool_calls"))
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task(planning=True)
            await rt.send(task.id, "Tidy my disk.")
            await rt.wait_idle(task.id)
            first, second = server.chat_requests
            assert "tool_choice" not in first and len(first["tools"]) > 1
            assert second["tool_choice"] == PLAN_CHOICE
            assert [t["function"]["name"] for t in second["tools"]] == ["submit_plan"]
            request = (await rt.get_task(task.id)).pending_request
            assert request["kind"] == "plan" and request["plan"] == ["Back up", "Tidy"]
        finally:
            await rt.aclose()
