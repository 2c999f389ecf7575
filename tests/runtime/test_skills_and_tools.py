"""Skills (listed, loaded by the model, activated with /name for one turn) and many tools (a 200-tool MCP server
costs the prompt no more than 40 tools; find_tools makes the rest callable)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from runtime.providers.scripted import Call, ScriptedModel
from runtime.tools.skills import add_skill, load_skills
from tests.support.helpers import MODEL, collect, open_runtime

HAIKU = """---
name: haiku
description: Write a haiku about something the person names.
---
Write exactly three lines of 5, 7 and 5 syllables. No title."""


def _skill(root: Path, name: str, text: str) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(text)
    return folder


def _system(request) -> str:
    return request.messages[0]["content"]


async def test_skills_are_listed_loaded_by_the_model_and_activated_for_one_turn(home, tmp_path):
    add_skill(home, _skill(tmp_path, "haiku", HAIKU))
    _skill(home / "skills", "broken", "no front matter at all")
    assert [s.name for s in load_skills(home)] == ["haiku"]
    model = ScriptedModel([["A poem."], ["Plain."], [Call("skill", {"name": "haiku"})], ["Three lines."]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "/haiku about rain")
        await rt.wait_idle(task.id)
        assert "- haiku: Write a haiku" in _system(model.requests[0])
        assert "Write exactly three lines" in _system(model.requests[0])  # activated for this turn
        await rt.send(task.id, "and now a normal answer")
        await rt.wait_idle(task.id)
        assert "Write exactly three lines" not in _system(model.requests[1])  # only that turn
        await rt.send(task.id, "a poem about snow, please")
        events = await collect(rt, task.id)
        result = next(e for e in events if e.type == "tool_call" and e.state == "done").result
        assert "Write exactly three lines" in result  # the model loaded it itself
    finally:
        await rt.aclose()


async def test_a_skill_reads_its_own_files_and_nothing_outside_its_folder(home, tmp_path):
    folder = _skill(tmp_path, "forms", "---\nname: forms\ndescription: Fill in forms.\n---\n"
                                        "Read reference.md and fields/tax.md first.")
    (folder / "reference.md").write_text("Use black ink.")
    (folder / "fields").mkdir()
    (folder / "fields" / "tax.md").write_text("Box 7 is the total.")
    add_skill(home, folder)
    (home / "secret.txt").write_text("not for skills")
    model = ScriptedModel([[Call("skill", {"name": "forms"}), Call("skill", {"name": "forms", "file": "fields/tax.md"}),
                            Call("skill", {"name": "forms", "file": "../../secret.txt"}),
                            Call("read_file", {"path": "reference.md"})], ["Done."]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "fill in my tax form")
        events = await collect(rt, task.id)
        results = [(e.state, e.result) for e in events if e.type == "tool_call" and e.state in ("done", "error")]
        loaded, read, outside, workspace = results
        assert loaded[0] == "done" and "`file` argument: fields/tax.md, reference.md." in loaded[1]
        assert read == ("done", "Box 7 is the total.")
        assert outside[0] == "error" and "outside the folder of the skill forms" in outside[1]
        assert "not for skills" not in outside[1]
        assert workspace[0] == "error"  # read_file stays in the task's workspace
    finally:
        await rt.aclose()


async def test_two_hundred_mcp_tools_are_found_not_sent(home):
    server = {"command": sys.executable, "args": ["-m", "tests.support.mcp_server", "--many", "200"],
              "cwd": str(Path.cwd())}
    (home / "settings.json").write_text(json.dumps({"mcpServers": {"big": server}, "mcp_connect_timeout": 30}))
    model = ScriptedModel([
        [Call("find_tools", {"query": "convert celsius to fahrenheit"})],
        [Call("big__t173", {"celsius": 21})],
        ["It is 69.8 F."],
    ])
    rt = await open_runtime(home, model)
    try:
        rt.mcp.approve("big")
        task = await rt.create_task(model=MODEL, approval="full_auto")
        await rt.jobs.drain(timeout=30)
        await rt.send(task.id, "What is 21 C in F?")
        events = await collect(rt, task.id)
        first = model.requests[0]
        assert len(first.tools) <= 45
        names = {t["function"]["name"] for t in first.tools}
        assert "find_tools" in names and "big__t173" not in names
        assert "big__t173" in {t["function"]["name"] for t in model.requests[1].tools}
        done = [e for e in events if e.type == "tool_call" and e.state == "done"]
        assert done[-1].name == "big__t173" and "69.8 F" in done[-1].result
        sizes = [len(json.dumps(r.tools)) for r in model.requests]
        assert sizes[0] < 20_000  # 200 schemas would be far more
    finally:
        await rt.aclose()
