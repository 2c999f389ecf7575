"""Built-in tools inside real turns: files and shell persisted and replayed, attachments, ask_user,
todo_write, and approvals (ask / auto_edit / full_auto, remembered rules, across a restart)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runtime.events import EndReason
from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import MODEL, collect, open_runtime, text_from


@pytest.fixture
async def model():
    return ScriptedModel()


@pytest.fixture
async def rt(home, model):
    rt = await open_runtime(home, model)
    yield rt
    await rt.aclose()


def _tool_parts(msg):
    return [p for p in msg.parts if p["type"] == "tool_call"]


async def test_scripted_turn_reads_edits_writes_and_runs_shell(rt, model):
    model.add_steps(
        [Call("write_file", {"path": "notes/todo.txt", "content": "buy milk\n"})],
        [Call("edit_file", {"path": "notes/todo.txt", "old_string": "milk", "new_string": "bread"})],
        [Call("read_file", {"path": "notes/todo.txt"})],
        [Call("run_shell", {"command": "wc -c notes/todo.txt && ls notes"})],
        ["All done."],
    )
    task = await rt.create_task(model=MODEL, approval="full_auto")
    await rt.send(task.id, "make a todo file")
    live = await collect(rt, task.id)
    assert live[-1].reason == EndReason.completed
    await rt.wait_idle(task.id)
    workspace = (await rt.get_task(task.id)).workspace
    assert Path(workspace, "notes/todo.txt").read_text() == "buy bread\n"
    msg = (await rt.messages(task.id))[-1]
    parts = _tool_parts(msg)
    assert [(p["name"], p["state"]) for p in parts] == [
        ("write_file", "done"), ("edit_file", "done"), ("read_file", "done"), ("run_shell", "done"),
    ]
    assert "buy bread" in parts[2]["result"] and "10 notes/todo.txt" in parts[3]["result"]
    assert msg.text == "All done."
    # The model saw the file contents framed as tool data.
    tool_msgs = [m for m in model.requests[3].messages if m["role"] == "tool"]
    assert "buy bread" in tool_msgs[-1]["content"] and "<tool_output" in tool_msgs[-1]["content"]
    # A replay after the end shows the same tool states and text.
    replay = await collect(rt, task.id)
    finals = [(e.name, e.state) for e in replay if e.type == "tool_call" and e.state == "done"]
    assert finals == [(p["name"], "done") for p in parts]
    assert text_from(replay) == msg.text


async def test_path_outside_the_workspace_is_an_error_part_not_a_crash(rt, model, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    model.add_steps([Call("read_file", {"path": str(outside)})], ["ok"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "read it")
    events = await collect(rt, task.id)
    err = next(e for e in events if e.type == "tool_call" and e.state == "error")
    assert "outside" in err.result and "secret" not in err.result.replace("secret.txt", "")
    assert events[-1].reason == EndReason.completed


async def test_attachments_are_copied_and_announced(rt, model, tmp_path):
    src = tmp_path / "report.csv"
    src.write_text("a,b\n1,2\n")
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "look at this", attachments=[src])
    await rt.wait_idle(task.id)
    workspace = (await rt.get_task(task.id)).workspace
    assert Path(workspace, "report.csv").read_text() == "a,b\n1,2\n"
    user = model.requests[0].messages[-1]
    assert "look at this" in user["content"] and "report.csv" in user["content"]


async def test_ask_user_waits_and_the_answer_starts_the_next_turn(rt, model):
    model.add_steps([Call("ask_user", {"question": "Which city?"})], ["Lisbon it is."])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "plan a trip")
    events = await collect(rt, task.id)
    req = next(e for e in events if e.type == "input_requested")
    assert req.kind == "question" and req.prompt == "Which city?"
    assert events[-1].reason == EndReason.waiting
    await rt.wait_idle(task.id)
    info = await rt.get_task(task.id)
    assert info.state == "waiting" and info.pending_request["request_id"] == req.request_id
    handle = await rt.answer(task.id, req.request_id, "Lisbon")
    again = await rt.answer(task.id, req.request_id, "Lisbon")  # a double click changes nothing
    assert again.turn_id == handle.turn_id
    events = await collect(rt, task.id)
    assert text_from(events) == "Lisbon it is." and events[-1].reason == EndReason.completed
    chat = model.requests[-1].messages
    call_idx = next(i for i, m in enumerate(chat) if m.get("tool_calls"))
    assert chat[call_idx + 1] == {
        "role": "tool", "tool_call_id": chat[call_idx]["tool_calls"][0]["id"],
        "content": chat[call_idx + 1]["content"],
    }
    assert "Lisbon" in chat[call_idx + 1]["content"]
    assert (await rt.get_task(task.id)).state == "idle"


async def test_todo_write_keeps_the_list_as_task_state(rt, model):
    items = [{"content": "book", "status": "done"}, {"content": "pack", "status": "pending"}]
    model.add_steps([Call("todo_write", {"items": items})], ["ok"])
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "plan")
    events = await collect(rt, task.id)
    done = next(e for e in events if e.type == "tool_call" and e.state == "done")
    assert done.result.splitlines()[1:] == ["[x] book", "[ ] pack"]
    assert next(e for e in events if e.type == "todos").todos == items
    assert (await rt.get_task(task.id)).todos == items
    model.add_steps([Call("todo_write", {"items": [{"text": "old shape"}]})], ["ok"])
    await rt.send(task.id, "again")
    events = await collect(rt, task.id)
    bad = next(e for e in events if e.type == "tool_call" and e.state == "error")
    assert "content" in bad.result  # a malformed list is refused with what is wrong


@pytest.mark.parametrize(
    ("mode", "tool", "args", "asks"),
    [
        ("ask", "write_file", {"path": "a.txt", "content": "x"}, True),
        ("ask", "read_file", {"path": "missing.txt"}, False),
        ("auto_edit", "write_file", {"path": "a.txt", "content": "x"}, False),
        ("auto_edit", "run_shell", {"command": "true"}, True),
        ("full_auto", "run_shell", {"command": "true"}, False),
    ],
)
async def test_approval_modes(rt, model, mode, tool, args, asks):
    model.add_steps([Call(tool, args)], ["ok"])
    task = await rt.create_task(model=MODEL, approval=mode)
    await rt.send(task.id, "go")
    events = await collect(rt, task.id)
    assert any(e.type == "input_requested" for e in events) == asks
    assert events[-1].reason == (EndReason.waiting if asks else EndReason.completed)


async def test_approval_round_trip_across_a_restart(home, tmp_path):
    model = ScriptedModel([[Call("write_file", {"path": "out.txt", "content": "hello"})], ["Wrote it."]])
    rt = await open_runtime(home, model)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "write hello")
    events = await collect(rt, task.id)
    req = next(e for e in events if e.type == "input_requested")
    assert req.kind == "approval" and req.tool_name == "write_file"
    assert req.tool_args == {"path": "out.txt", "content": "hello"}
    await rt.aclose()

    model2 = ScriptedModel([["Wrote it."]])
    rt = await open_runtime(home, model2)
    try:
        info = await rt.get_task(task.id)
        assert info.state == "waiting" and info.pending_request["request_id"] == req.request_id
        workspace = info.workspace
        await rt.answer(task.id, req.request_id, "approve")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed
        assert Path(workspace, "out.txt").read_text() == "hello"
        msgs = await rt.messages(task.id)
        assert [p["state"] for p in _tool_parts(msgs[-1])] == ["done"]
        chat = model2.requests[0].messages
        assert [m["role"] for m in chat] == ["system", "user", "assistant", "tool"]
    finally:
        await rt.aclose()


async def test_deny_and_remembered_rules(rt, model):
    model.add_steps(
        [Call("run_shell", {"command": "touch denied.txt"})], ["Okay, I won't."],
        [Call("run_shell", {"command": "touch again.txt"})], ["Denied by rule."],
    )
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "touch")
    req = next(e for e in await collect(rt, task.id) if e.type == "input_requested")
    await rt.answer(task.id, req.request_id, "deny", remember=True)
    events = await collect(rt, task.id)
    assert [e.state for e in events if e.type == "tool_call"] == ["pending", "denied"]
    await rt.wait_idle(task.id)
    assert (await rt.get_task(task.id)).pending_request is None
    await rt.send(task.id, "touch again")
    events = await collect(rt, task.id)
    assert not any(e.type == "input_requested" for e in events)
    assert next(e for e in events if e.type == "tool_call" and e.state == "denied")
    workspace = (await rt.get_task(task.id)).workspace
    assert not os.path.exists(f"{workspace}/denied.txt") and not os.path.exists(f"{workspace}/again.txt")
