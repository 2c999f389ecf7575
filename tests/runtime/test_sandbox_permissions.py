"""The sandbox and permission rules in real turns: Settings' plain words, the unsandboxed fallback (bwrap made
unavailable by configuration, by PATH, or failing like a system without user namespaces; Windows), the network per
task and per command, and rules per task and global through the facade."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from runtime.api import ConfigError, TaskNotFound
from runtime.events import EndReason
from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import MODEL, collect, connect_command, open_runtime

NO_BWRAP = "/nonexistent/bwrap"


@pytest.fixture
async def model():
    return ScriptedModel()


def _settings(home: Path, **values) -> None:
    (home / "settings.json").write_text(json.dumps(values))


async def _turn(rt, task_id: str, text: str) -> list:
    await rt.send(task_id, text)
    return await collect(rt, task_id)


def _tool_results(events) -> list[tuple[str, str]]:
    return [(e.state, e.result) for e in events if e.type == "tool_call" and e.state in ("done", "error", "denied")]


async def test_settings_say_in_plain_words_whether_commands_run_sandboxed(home, tmp_path, monkeypatch, model):
    rt = await open_runtime(home, model)
    try:
        status = await rt.permissions.sandbox_status()
        assert status.available and status.mechanism == "bubblewrap" and status.process_limit == 256
        assert "workspace" in status.message and "no network" in status.message

        await rt.save_settings({**rt.settings.dump(), "sandbox_bwrap": NO_BWRAP})
        status = await rt.permissions.sandbox_status()
        assert not status.available and status.mechanism is None
        assert "not installed" in status.message and "ask before each command" in status.message

        fake = tmp_path / "bwrap"  # what bwrap says where user namespaces are disabled
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace, likely because the "
                        "kernel does not allow non-privileged user namespaces.' >&2\nexit 1\n")
        fake.chmod(0o755)
        await rt.save_settings({**rt.settings.dump(), "sandbox_bwrap": str(fake)})
        status = await rt.permissions.sandbox_status()
        assert not status.available and "does not let bubblewrap create the namespaces" in status.message
        assert "No permissions to creating new namespace" in status.detail

        empty = tmp_path / "bin"
        empty.mkdir()
        monkeypatch.setenv("PATH", str(empty))
        await rt.save_settings({**rt.settings.dump(), "sandbox_bwrap": "bwrap"})
        status = await rt.permissions.sandbox_status()
        assert not status.available and "'bwrap' program) is not installed" in status.message
    finally:
        await rt.aclose()


async def test_full_auto_asks_before_each_unsandboxed_command_unless_the_risk_is_accepted(home, tmp_path, model):
    _settings(home, sandbox_bwrap=NO_BWRAP)
    outside = tmp_path / "outside.txt"
    model.add_steps([Call("run_shell", {"command": f"echo one > {outside}"})], ["ran"],
                    [Call("run_shell", {"command": f"echo two >> {outside}"})], ["ran again"])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, approval="full_auto")
        events = await _turn(rt, task.id, "go")
        assert events[-1].reason == EndReason.waiting and not outside.exists()
        request = (await rt.get_task(task.id)).pending_request
        assert request["sandboxed"] is False and request["network"] is True and request["network_offer"] is False
        assert "WITHOUT a sandbox (bubblewrap" in request["touches"] and "WITHOUT a sandbox" in request["prompt"]
        with pytest.raises(ConfigError, match="'approve' or 'deny'"):
            await rt.answer(task.id, request["request_id"], "approve_network")
        await rt.answer(task.id, request["request_id"], "approve")  # the person's explicit yes: it runs as them
        assert (await collect(rt, task.id))[-1].reason == EndReason.completed
        assert outside.read_text() == "one\n"

        await rt.permissions.set_task_sandbox(task.id, unsandboxed_ok=True)
        assert (await rt.get_task(task.id)).unsandboxed_ok is True
        events = await _turn(rt, task.id, "again")
        assert not any(e.type == "input_requested" for e in events) and events[-1].reason == EndReason.completed
        assert outside.read_text() == "one\ntwo\n"
    finally:
        await rt.aclose()


async def test_on_windows_settings_say_there_is_no_sandbox_and_full_auto_asks_before_each_command(
        home, tmp_path, monkeypatch, model):
    monkeypatch.setattr(sys, "platform", "win32")  # bwrap is installed here: only the platform says "none"
    outside = tmp_path / "outside.txt"

    def written() -> str:
        return outside.read_text() if outside.exists() else ""

    model.add_steps([Call("run_shell", {"command": f"echo one > {outside}"})], ["ran"],
                    [Call("run_shell", {"command": f"echo two >> {outside}"})], ["ran again"],
                    [Call("run_shell", {"command": f"echo three >> {outside}"})], ["ran once more"])
    rt = await open_runtime(home, model)
    try:
        status = await rt.permissions.sandbox_status()
        assert not status.available and status.mechanism is None
        assert status.message == (
            "Commands are not sandboxed: Windows has no sandbox Hearth can use yet, so a command could do anything "
            "your account can. Tasks in full auto therefore ask before each command, unless you accept the risk "
            "for a task; every approval says whether the command runs in a sandbox.")

        task = await rt.create_task(model=MODEL, approval="full_auto")
        for text, before, after in (("go", "", "one\n"), ("again", "one\n", "one\ntwo\n")):  # each time
            events = await _turn(rt, task.id, text)
            assert events[-1].reason == EndReason.waiting and written() == before  # asked first, nothing ran
            request = (await rt.get_task(task.id)).pending_request
            assert request["sandboxed"] is False
            assert "WITHOUT a sandbox (Windows has no sandbox Hearth can use yet)" in request["touches"]
            await rt.answer(task.id, request["request_id"], "approve")
            assert (await collect(rt, task.id))[-1].reason == EndReason.completed
            assert written() == after

        await rt.permissions.set_task_sandbox(task.id, unsandboxed_ok=True)  # the person accepts the risk for this task
        events = await _turn(rt, task.id, "once more")
        assert not any(e.type == "input_requested" for e in events) and events[-1].reason == EndReason.completed
        assert written() == "one\ntwo\nthree\n"
    finally:
        await rt.aclose()


async def test_the_network_is_asked_per_command_and_allowed_per_task(home, model, listener):
    port, accepted = listener
    connect = connect_command(port)
    model.add_steps([Call("run_shell", {"command": connect})], ["no network"],
                    [Call("run_shell", {"command": connect})], ["with network"],
                    [Call("run_shell", {"command": connect})], ["task network"])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await _turn(rt, task.id, "one")
        request = (await rt.get_task(task.id)).pending_request
        assert request["sandboxed"] is True and request["network"] is False and request["network_offer"] is True
        assert "in the sandbox" in request["prompt"] and "no network" in request["touches"]
        await rt.answer(task.id, request["request_id"], "approve")
        (state, result), = _tool_results(await collect(rt, task.id))
        assert state == "done" and "Connection refused" in result and accepted == []

        await _turn(rt, task.id, "two")
        request = (await rt.get_task(task.id)).pending_request
        await rt.answer(task.id, request["request_id"], "approve_network")
        (state, result), = _tool_results(await collect(rt, task.id))
        assert state == "done" and "hello from the host" in result and accepted == [1]

        await rt.permissions.set_task_sandbox(task.id, network=True)
        await rt.permissions.add_rule("run_shell", "allow", task_id=task.id)
        events = await _turn(rt, task.id, "three")
        assert not any(e.type == "input_requested" for e in events)
        assert "hello from the host" in _tool_results(events)[0][1] and accepted == [1, 1]
        assert (await rt.create_task(model=MODEL, network=True)).network is True
    finally:
        await rt.aclose()


async def test_a_command_approved_as_sandboxed_is_not_run_without_the_sandbox(home, model):
    model.add_steps([Call("run_shell", {"command": "echo x > made.txt"})], ["ok"])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await _turn(rt, task.id, "go")
        request = (await rt.get_task(task.id)).pending_request
        assert request["sandboxed"] is True
        await rt.save_settings({**rt.settings.dump(), "sandbox_bwrap": NO_BWRAP})  # bwrap gone meanwhile
        await rt.answer(task.id, request["request_id"], "approve")
        (state, result), = _tool_results(await collect(rt, task.id))
        assert state == "error" and "approved to run in the sandbox" in result
        assert not (Path(task.workspace) / "made.txt").exists()
    finally:
        await rt.aclose()


async def test_command_rules_per_task_and_global_through_the_facade(home, model):
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(title="Rules", model=MODEL)
        other = await rt.create_task(title="Other", model=MODEL, approval="full_auto")
        echo = await rt.permissions.add_rule("run_shell", "allow", command=" echo ", task_id=task.id)
        deny = await rt.permissions.add_rule("run_shell", "deny", command="rm -rf")
        assert (echo.scope, echo.command, echo.text) == ("task", "echo", "Always allow run_shell commands starting "
                                                                         "with `echo`")
        assert echo.task_title == "Rules" and deny.scope == "global" and deny.text.startswith("Never allow")
        assert [r.id for r in await rt.permissions.rules()] == [deny.id, echo.id]
        assert [r.id for r in await rt.permissions.rules(other.id)] == [deny.id]

        model.add_steps([Call("run_shell", {"command": "echo hi && echo there 2>/dev/null"})], ["ok"],
                        [Call("run_shell", {"command": "echo hi; touch x"})], ["asked"])
        events = await _turn(rt, task.id, "allowed")
        assert not any(e.type == "input_requested" for e in events) and "hi\nthere" in _tool_results(events)[0][1]
        events = await _turn(rt, task.id, "not covered")
        assert events[-1].reason == EndReason.waiting
        await rt.answer(task.id, (await rt.get_task(task.id)).pending_request["request_id"], "deny")
        await rt.wait_idle(task.id)

        ws = Path(other.workspace)
        (ws / "keep").mkdir(parents=True)
        model.add_steps([Call("run_shell", {"command": "cd . && rm -fr keep"})], ["denied"])
        events = await _turn(rt, other.id, "delete")  # full_auto, but the global rule says never
        assert _tool_results(events)[0][0] == "denied" and (ws / "keep").is_dir()

        assert await rt.permissions.remove_rule(echo.id) is True
        assert await rt.permissions.remove_rule(echo.id) is False
        model.add_steps([Call("run_shell", {"command": "echo hi"})], ["asked again"])
        assert (await _turn(rt, task.id, "no rule now"))[-1].reason == EndReason.waiting

        # "Always allow commands like this" from the approval card: the suggested rule, stored for the task.
        request = (await rt.get_task(task.id)).pending_request
        assert request["suggested_rule"] == "echo"
        await rt.answer(task.id, request["request_id"], "approve", remember=True, rule_command="echo")
        await rt.wait_idle(task.id)
        assert [(r.command, r.decision) for r in await rt.permissions.rules(task.id)] == [("rm -rf", "deny"),
                                                                                          ("echo", "allow")]
        await rt.tasks.delete(task.id)
        assert [r.id for r in await rt.permissions.rules()] == [deny.id]
    finally:
        await rt.aclose()


async def test_bad_rules_get_one_plain_sentence(home, model):
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        for kwargs, words in [
            ({"tool": "run_shell", "decision": "maybe"}, "allows or denies"),
            ({"tool": " ", "decision": "allow"}, "name of a tool"),
            ({"tool": "rn_shell", "decision": "allow"}, "no tool called 'rn_shell'. Name one of .*run_shell"),
            ({"tool": "calc__add", "decision": "allow"}, "no tool called 'calc__add'.*once a server is added"),
            ({"tool": "write_file", "decision": "allow", "command": "ls"}, "apply to the whole tool"),
            ({"tool": "run_shell", "decision": "allow", "command": "git status; rm x"}, "one plain command"),
            ({"tool": "run_shell", "decision": "allow", "command": "ls $(whoami)"}, "one plain command"),
        ]:
            with pytest.raises(ConfigError, match=words) as err:
                await rt.permissions.add_rule(**kwargs, task_id=task.id)
            assert "\n" not in str(err.value)
        with pytest.raises(TaskNotFound):
            await rt.permissions.add_rule("run_shell", "allow", task_id="nope")
        with pytest.raises(TaskNotFound):
            await rt.permissions.set_task_sandbox("nope", network=True)
        assert await rt.permissions.rules() == []
    finally:
        await rt.aclose()


async def test_a_rule_may_name_any_tool_a_turn_can_have_and_a_configured_mcp_servers_tools(home, model):
    """Tools only some tasks have (documents, skills, planning, memory even when it is off) can have rules; an MCP
    tool is named by its server's sanitized prefix, which the refusal shows."""
    _settings(home, memory=False, mcpServers={"my.srv": {"command": sys.executable, "args": ["-c", "pass"]}})
    rt = await open_runtime(home, model)
    try:
        for tool in ("search_knowledge", "skill", "memory", "submit_plan", "delegate", "my_srv__add"):
            assert (await rt.permissions.add_rule(tool, "deny")).text == f"Never allow {tool}"
        with pytest.raises(ConfigError, match=r"no tool called 'my.srv__add'.*MCP server's tool \(my_srv__…\)"):
            await rt.permissions.add_rule("my.srv__add", "deny")
        assert len(await rt.permissions.rules()) == 6
    finally:
        await rt.aclose()
