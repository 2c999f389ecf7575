"""`hearth tasks`, `hearth show` and `hearth skills` as a person reads them: real child processes on a data folder
filled through a real server (the endings come from real turns), plain words, ids by a unique prefix."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import pytest

from runtime.api import ConfigError, Runtime, TaskNotFound
from runtime.cli.exits import EXIT_WAITING
from runtime.cli.tasks import resolve_task
from runtime.providers.scripted import Delay, ScriptedModel
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import ECHO, MODEL, collect, write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def _fill(home) -> dict[str, str]:
    """Three tasks: one that called a tool and completed, one whose answer hit the length limit, one failed."""
    ids = {}
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        rt = await Runtime.open(home, tools=[ECHO])
        try:
            for name, replies in (
                ("tool", [Reply(chunks=[], tool_calls=[("c1", "echo", {"text": "hi"})], finish="tool_calls"),
                          Reply(chunks=["Echoed."])]),
                ("cut", [Reply(chunks=["A very long answer that"], finish="length")]),
                ("failed", [Reply(status=400, error_body={"error": {"message": "model 'x' not found"}})]),
            ):
                server.script(*replies)
                task = await rt.create_task(title=f"The {name} task", approval="full_auto")
                await rt.send(task.id, f"please do the {name} thing")
                await collect(rt, task.id)
                await rt.wait_idle(task.id)
                ids[name] = task.id
        finally:
            await rt.aclose()
    return ids


async def test_tasks_and_show_speak_plainly_and_take_an_id_prefix(home):
    ids = await _fill(home)
    code, out, err = await _result(await _cli("tasks", home=home))
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split()[:3] == ["ID", "STATE", "LAST"] and len(rows) == 3
    failed_row = next(r for r in rows if r.startswith(ids["failed"]))
    assert " error " in failed_row and "The failed task" in failed_row
    assert all(re.search(r"  \d{4}-\d\d-\d\d \d\d:\d\d  ", r) for r in rows)  # a date, not a float

    code, out, err = await _result(await _cli("show", ids["failed"][:10], home=home))
    assert code == 0, err
    assert out.startswith("# The failed task  [error]") and "[failed:" in out and "not found" in out
    code, out, _ = await _result(await _cli("show", ids["cut"][:10], home=home))
    assert "[cut off at the model's length limit]" in out
    code, out, _ = await _result(await _cli("show", ids["tool"][:10], "--steps", home=home))
    assert "[echo done]" in out and "step 1:" in out and "called echo" in out and "step 2:" in out
    assert out.count("idle") == 1  # the state once, not "idle, completed"

    code, _, err = await _result(await _cli("show", "zzzz", home=home))
    assert code == 2 and "Traceback" not in err and "zzzz" in err


async def test_show_marks_an_answer_hearth_closed_while_it_ran(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel([["Once upon a time ", Delay(30), "the end."]])})
    task = await rt.create_task(title="A story", model=MODEL)
    await rt.send(task.id, "A story, please.")
    async for ev in rt.subscribe(task.id):
        if ev.type == "text_delta":
            await rt.aclose()  # a quit while it writes: the turn ends interrupted
            break
    code, out, err = await _result(await _cli("show", task.id[:10], home=home))
    assert code == 0, err
    assert "Once upon a time" in out and "[interrupted: Hearth closed while it ran]" in out


async def test_show_steps_lists_the_helpers_a_delegate_turn_ran(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(
            Reply(chunks=[], tool_calls=[("d1", "delegate", {"agent": "researcher", "task": "find the invoice"})],
                  finish="tool_calls"),
            Reply(chunks=["The invoice is in inbox/."], usage=(40, 7)),  # the helper's own request
            Reply(chunks=["It is in inbox/."]),
        )
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task(title="Invoice", approval="full_auto")
            await rt.send(task.id, "Where is the invoice?")
            assert (await collect(rt, task.id))[-1].reason == "completed"
            await rt.wait_idle(task.id)
        finally:
            await rt.aclose()
    code, out, err = await _result(await _cli("show", task.id[:10], "--steps", home=home))
    assert code == 0, err
    [helper] = [line for line in out.splitlines() if line.startswith("  helper ")]
    assert helper.startswith("  helper researcher (local/test-model): completed, ")
    assert helper.endswith(" s, 40 in / 7 out tokens, 0 tool calls — find the invoice")
    assert "[delegate done] " in out and "The invoice is in inbox/." in out
    code, out, _ = await _result(await _cli("show", task.id[:10], home=home))
    assert "helper" not in out  # the records only with --steps


async def test_show_into_a_closed_pipe_ends_quietly(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["a line of a long answer\n" * 20_000]))  # far more than a pipe holds
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task(title="Long")
            await rt.send(task.id, "write a lot")
            await rt.wait_idle(task.id)
        finally:
            await rt.aclose()
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    # `hearth show ID | head -1`: head leaves after one line, the rest of the output meets a closed pipe.
    script = f"{sys.executable} -m runtime.cli --home {home} show {task.id[:8]} | head -1"
    proc = await asyncio.to_thread(subprocess.run, ["bash", "-o", "pipefail", "-c", script], env=env,
                                   capture_output=True, text=True, timeout=120)
    assert proc.stdout == "# Long  [idle]\n"
    assert proc.returncode == 0 and proc.stderr == ""


async def test_skills_list_and_add(home, tmp_path):
    write_settings(home, "http://127.0.0.1:9/v1")
    code, out, _ = await _result(await _cli("skills", home=home))
    assert code == 0 and "No skills yet" in out
    folder = tmp_path / "release-notes"
    folder.mkdir()
    (folder / "SKILL.md").write_text("---\nname: release-notes\ndescription: Write release notes from a git log\n"
                                     "---\nGroup the changes by kind.\n")
    code, out, err = await _result(await _cli("skills", "add", str(folder), home=home))
    assert code == 0 and "release-notes" in out, err
    code, out, _ = await _result(await _cli("skills", "list", home=home))
    assert "release-notes" in out and "Write release notes from a git log" in out
    code, _, err = await _result(await _cli("skills", "add", str(tmp_path / "missing"), home=home))
    assert code == 2 and "Traceback" not in err


async def test_models_marks_the_default(home):
    code, out, err = await _result(await _cli("models", home=home))
    assert code == 0, err
    marked = [line for line in out.splitlines() if line.endswith("(default)")]
    assert marked and all("builtin/" in line for line in marked)  # the bundled model, where it is listed
    write_settings(home, "http://127.0.0.1:9/v1")  # the default on a server that is down
    code, out, err = await _result(await _cli("models", home=home))
    assert code == 0, err
    lines = out.splitlines()
    down = next(i for i, line in enumerate(lines) if line.startswith("  local: unavailable: "))
    assert lines[down + 1] == "  local/test-model  (default)"


async def test_an_ambiguous_prefix_asks_for_more_of_the_id(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    try:
        ids = [(await rt.create_task(model=MODEL)).id for _ in range(17)]  # 17 ids: two share a first digit
        first = next(c for c in "0123456789abcdef" if sum(i.startswith(c) for i in ids) > 1)
        with pytest.raises(ConfigError, match="give more of it"):
            await resolve_task(rt.tasks, first)
        assert await resolve_task(rt.tasks, ids[0]) == ids[0]
        with pytest.raises(TaskNotFound):
            await resolve_task(rt.tasks, "")
    finally:
        await rt.aclose()


async def test_run_binds_a_new_tasks_planning_documents_memory_and_network(home, tmp_path):
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nWater the plants on Monday.\n")
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=[], tool_calls=[("p1", "submit_plan", {"steps": ["Read the notes", "Sum up"]})],
                            finish="tool_calls"))
        code, _, err = await _result(await _cli("run", "--plan", "--doc", str(notes), "--no-memory", "--network",
                                                "Sum up my notes.", home=home, stdin=subprocess.DEVNULL))
        assert code == EXIT_WAITING, err
        assert f'hearth answer {err.split("task ")[1].split()[0]} --approve, or --text "what to change"' in err
        offered = {t["function"]["name"] for t in server.requests[-1]["tools"]}
        assert "submit_plan" in offered and "write_file" not in offered  # it plans first
        rt = await Runtime.open(home)
        try:
            task = (await rt.list_tasks())[0]
            assert task.planning and task.knowledge == [str(notes.resolve())]
            assert task.memory is False and task.network is True
            assert task.pending_request["plan"] == ["Read the notes", "Sum up"]
        finally:
            await rt.aclose()
        server.script(Reply(chunks=["Water the plants on Monday."]))
        code, out, err = await _result(await _cli("answer", task.id, "--approve", home=home,
                                                  stdin=subprocess.DEVNULL))
        assert code == 0 and out.strip() == "Water the plants on Monday.", err
        code, _, err = await _result(await _cli("run", "--doc", str(tmp_path / "missing.md"), "x", home=home))
        assert code != 0 and "missing.md" in err and "Traceback" not in err


async def test_answer_grants_network_to_one_command_and_always_remembers_commands_like_it(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(
            Reply(chunks=[], tool_calls=[("c1", "run_shell", {"command": "git status -s"})], finish="tool_calls"),
            Reply(chunks=["Clean."]),
        )
        code, _, err = await _result(await _cli("run", "Is my repo clean?", home=home, stdin=subprocess.DEVNULL))
        assert code == EXIT_WAITING, err
        line = next(ln for ln in err.splitlines() if ln.startswith("waiting:"))
        assert line.endswith("--approve or --deny (--approve --network: this one command may use the network)")
        task_id = line.split("hearth answer ")[1].split()[0]
        code, _, err = await _result(await _cli("answer", task_id, "--deny", "--network", home=home))
        assert code == 2 and "--network goes with --approve" in err
        code, out, err = await _result(await _cli("answer", task_id, "--approve", "--network", "--always",
                                                  home=home, stdin=subprocess.DEVNULL))
        assert code == 0 and out.strip() == "Clean.", err
        rt = await Runtime.open(home)
        try:
            (rule,) = await rt.permissions.rules(task_id)
            assert (rule.tool, rule.command, rule.decision) == ("run_shell", "git status", "allow")  # not every command
            messages = await rt.messages(task_id)
            answer = next(p for m in messages for p in m.parts if p.get("type") == "answer")
            assert answer["answer"] == "approve_network"
        finally:
            await rt.aclose()
