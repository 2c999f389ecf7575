"""What each tool's approval says it touches: every tool a turn can be offered has its own true sentence (memory is
the person's, shared by every task and chat; an MCP tool is an outside program's), and a turn that asks for an
approval shows exactly that sentence."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runtime.api import Runtime
from runtime.providers.scripted import Call, ScriptedModel
from runtime.tools.base import EFFECT_TOUCHES, touches
from runtime.tools.discovery import FindTools
from runtime.tools.team_lead import PlanAssignments
from tests.support.helpers import MODEL, collect, open_runtime

SANDBOXED = ("It runs in the sandbox: it can change only this task's workspace, cannot see Hearth's data or your keys, "
             "and has no network.")
MEMORY_PLACE = "in Hearth's memory folder, which every task and chat reads (not this task's workspace folder)."
# (tool, its arguments) -> the sentence its approval shows.
SAID = {
    ("read_file", "{}"): "It only reads a file in this task's workspace folder.",
    ("list_files", "{}"): "It only lists files in this task's workspace folder.",
    ("search_files", "{}"): "It only reads files in this task's workspace folder.",
    ("write_file", "{}"): "It writes a file in this task's workspace folder (new, or replacing it), and nothing else.",
    ("edit_file", "{}"): "It changes a file in this task's workspace folder, and nothing else.",
    ("ask_user", "{}"): "It asks you a question; it changes nothing.",
    ("todo_write", "{}"): "It rewrites the todo list shown beside this conversation; it changes no files.",
    ("submit_plan", "{}"): "It shows you a plan to approve; it changes nothing.",
    ("skill", "{}"): "It only reads a skill's instructions or files, from the skills folder in Hearth's data folder.",
    ("search_knowledge", "{}"): "It only searches the knowledge documents it was given; it changes nothing.",
    ("delegate", "{}"): ("It hands a job to a helper model. The helper's own tool calls follow this task's approval "
                         "mode, and any that would ask you are refused."),
    ("find_tools", "{}"): "It only looks up other tools by what they do.",
    ("deliver", "{}"): ("It reads a file or folder in this task's workspace folder and keeps a copy among the task's "
                        "deliverables; it changes nothing in the workspace."),
    ("background_command", '{"action": "list"}'): "It reads or stops commands this task started in the background.",
    ("wait", "{}"): "It ends this turn; the task wakes up by itself later. It changes nothing.",
    ("plan_assignments", "{}"): "It sets the team's plan, shown on the team's board; it changes no files.",
    ("memory", '{"command": "view"}'): "It only reads your saved memories.",
    ("memory", '{"command": "create", "path": "tea.md"}'): f"It saves a new memory tea.md {MEMORY_PLACE}",
    ("memory", '{"command": "update", "path": "tea.md"}'): f"It replaces your memory tea.md {MEMORY_PLACE}",
    ("memory", '{"command": "delete", "path": "tea.md"}'): f"It deletes your memory tea.md {MEMORY_PLACE}",
}


async def every_tool(rt: Runtime, home: Path) -> dict[str, object]:
    """Every tool a task's turn, a planning turn, a team lead and tool discovery offer, by name."""
    skill = home / "skills" / "haiku"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: haiku\ndescription: Write haiku.\n---\nFive, seven, five.\n")
    doc = home / "notes.md"
    doc.write_text("# Notes\nTea at four.\n")
    task = await rt.create_task(model=MODEL, knowledge=[str(doc)])
    planning = await rt.create_task(model=MODEL, planning=True)
    tools = dict((await rt.kit.prepare(await rt.core.store.get_task(task.id), [])).tools)
    tools.update((await rt.kit.prepare(await rt.core.store.get_task(planning.id), [])).tools)
    for tool in (FindTools({}), PlanAssignments(lambda *_: None)):
        tools[tool.name] = tool
    return tools


async def test_every_tool_says_truly_what_its_call_touches(home):
    rt = await open_runtime(home)
    try:
        tools = await every_tool(rt, home)
        assert set(rt.kit.tool_names()) | {"find_tools"} == set(tools) == {name for name, _ in SAID} | {"run_shell"}
        for (name, args), sentence in SAID.items():
            said = touches(tools[name], json.loads(args))
            assert said == sentence, name
            assert said not in EFFECT_TOUCHES.values(), f"{name} has no sentence of its own"
        # A command's sentence is its sandbox's (each kind is checked in real turns in test_sandbox_permissions).
        shell = tools["run_shell"]
        said = touches(shell, {"command": "ls"})
        assert said == SANDBOXED if shell.sandboxed else said.startswith("It runs WITHOUT a sandbox (")
    finally:
        await rt.aclose()


@pytest.mark.parametrize(("call", "place"), [
    (Call("memory", {"command": "create", "path": "tea.md", "content": "# Likes green tea\nNo sugar."}),
     f"It saves a new memory tea.md {MEMORY_PLACE}"),
    # A command that is no string (the schema says one, a model may not): the turn still asks (it failed with
    # "unhashable type: 'list'"), and running it would refuse the command.
    (Call("memory", {"command": ["create"], "path": "tea.md", "content": "# Likes green tea"}),
     f"It changes your memories tea.md {MEMORY_PLACE}"),
    (Call("write_file", {"path": "a.txt", "content": "hi"}), SAID[("write_file", "{}")]),
    (Call("edit_file", {"path": "a.txt", "old_string": "hi", "new_string": "ho"}), SAID[("edit_file", "{}")]),
])
async def test_a_waiting_approval_says_what_the_call_touches(home, call, place):
    model = ScriptedModel([[call]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, approval="ask")
        await rt.send(task.id, "Remember that I like green tea.")
        events = await collect(rt, task.id)
        await rt.wait_idle(task.id)
        request = (await rt.get_task(task.id)).pending_request
        assert request["kind"] == "approval" and request["touches"] == place
        asked = next(e for e in events if e.type == "input_requested")
        assert asked.prompt == f"Allow {call.name}? {place}"
    finally:
        await rt.aclose()


async def test_an_mcp_tools_approval_names_its_server(home):
    server = [sys.executable, "-m", "tests.support.mcp_server"]
    (home / "settings.json").write_text(json.dumps({"mcpServers": {"calc": {
        "command": server[0], "args": server[1:], "cwd": str(Path.cwd())}}}))
    rt = await open_runtime(home, ScriptedModel([[Call("calc__add", {"a": 2, "b": 3})]]))
    try:
        rt.mcp.approve("calc")
        task = await rt.create_task(model=MODEL, approval="ask")
        await rt.send(task.id, "Add 2 and 3.")
        await collect(rt, task.id)
        await rt.wait_idle(task.id)
        request = (await rt.get_task(task.id)).pending_request
        assert request["touches"] == ("It runs “add” of the MCP server “calc”, a program outside Hearth: what it "
                                      "reads or changes is up to that server.")
    finally:
        await rt.aclose()
