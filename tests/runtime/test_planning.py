"""Planning: a planning turn offers no write tools and ends with a plan the person approves, edits or rejects;
approved, its steps are the task's todo list, kept in SQLite and recalled at every step."""

from __future__ import annotations

from runtime.events import EndReason
from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import MODEL, open_runtime

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
