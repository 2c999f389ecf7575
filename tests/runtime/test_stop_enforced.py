"""Stop is enforced between steps, and a Stop while `run_shell` starts its shell leaves nothing behind."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

import runtime.tools.shell.run_shell as shell_module
from runtime.api import Runtime
from runtime.errors import ToolError
from runtime.events import EndReason
from runtime.tools.base import Effect, FunctionTool
from tests.support.helpers import collect, write_settings
from tests.support.openai_server import OpenAIServer, Reply


def _swallower(after_cancel) -> FunctionTool:
    """A tool that swallows the cancellation: catches it, then does `after_cancel` (returns or raises)."""
    async def run(args, ctx):
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            return after_cancel()
        return "slept"

    return FunctionTool(name="swallow", description="Ignores cancellation.",
                        parameters={"type": "object", "properties": {}}, effect=Effect.read_only, fn=run)


def _returns() -> str:
    return "finished anyway"


def _raises_tool_error() -> str:
    raise ToolError("the tool broke while stopping")


@pytest.fixture
async def server():
    async with OpenAIServer() as server:
        yield server


@pytest.mark.parametrize("after_cancel", [_returns, _raises_tool_error], ids=["returns", "raises_tool_error"])
async def test_a_tool_that_swallows_stop_cannot_let_the_model_run_again(home, server, after_cancel):
    write_settings(home, server.base_url)
    server.script(
        Reply(chunks=["Working."], tool_calls=[("c1", "swallow", {})], finish="tool_calls"),
        Reply(chunks=["Done after stop."]),
    )
    rt = await Runtime.open(home, tools=[_swallower(after_cancel)])
    try:
        task = await rt.create_task(approval="full_auto")
        await rt.send(task.id, "go")
        requests_at_stop = None
        endings = []
        async for ev in rt.subscribe(task.id):
            if ev.type == "tool_call" and ev.state == "running":
                requests_at_stop = len(server.chat_requests)
                await rt.stop(task.id)
            if ev.type == "turn_ended":
                endings.append(ev.reason)
        await rt.wait_idle(task.id)
        assert endings == [EndReason.aborted]
        await asyncio.sleep(0.1)
        assert requests_at_stop == 1
        assert len(server.chat_requests) == requests_at_stop, "the model was called again after Stop"
        assert "Done after stop." not in (await rt.messages(task.id))[-1].text
    finally:
        await rt.aclose()


def _sleepers(token: str) -> list[int]:
    """Pids of live (non-zombie) processes whose command line contains `token`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if token in cmd and state != b"Z":
            found.append(int(entry))
    return found


@pytest.fixture
def slow_spawn(monkeypatch):
    """Makes the shell appear a little before `create_subprocess_exec` returns, widening the window in which a
    Stop lands while the process exists but the tool does not hold it yet (what a loaded machine does)."""
    real = asyncio.create_subprocess_exec
    delays = []

    async def spawn(*args, **kwargs):
        proc = await real(*args, **kwargs)
        await asyncio.sleep(delays.pop() if delays else 0)
        return proc

    monkeypatch.setattr(shell_module.asyncio, "create_subprocess_exec", spawn)
    return delays


async def test_stop_while_the_shell_starts_leaves_no_process_and_always_ends(home, slow_spawn):
    from runtime.providers.scripted import Call, ScriptedModel

    token = f"{1000 + os.getpid() % 1000}.{random.randint(100, 999)}"
    model = ScriptedModel()
    rt = await Runtime.open(home, providers={"scripted": model})
    rng = random.Random(8)
    hung = 0
    try:
        task = await rt.create_task(model="scripted/x", approval="full_auto")
        for i in range(200):
            model.add_steps([Call("run_shell", {"command": f"sleep {token} & sleep {token}"})])
            slow_spawn.append(rng.choice([0, 0.005, 0.02]))
            await rt.send(task.id, f"go {i}")
            async for ev in rt.subscribe(task.id):
                if ev.type == "tool_call" and ev.state == "running":
                    await asyncio.sleep(rng.uniform(0, 0.01))
                    await rt.stop(task.id)
            try:
                await asyncio.wait_for(rt.wait_idle(task.id), 15)
            except TimeoutError:
                hung += 1
                break
            events = await collect(rt, task.id)
            assert events[-1].type == "turn_ended" and events[-1].reason == EndReason.aborted
            assert _sleepers(f"sleep {token}") == [], f"orphans after try {i}"
            msgs = await rt.messages(task.id)
            assert msgs[-1].status == "complete"
            assert all(p["state"] == "interrupted" for p in msgs[-1].parts if p["type"] == "tool_call")
            assert len(model.requests) == i + 1, "the model was asked again after Stop"
        assert hung == 0
        assert (await rt.get_task(task.id)).state == "idle"
        # The task is not wedged: the next send runs.
        model.add_steps(["fine"])
        await rt.send(task.id, "still there?")
        await rt.wait_idle(task.id)
        assert (await rt.messages(task.id))[-1].text == "fine"
    finally:
        await rt.aclose()
        for pid in _sleepers(f"sleep {token}"):
            os.kill(pid, 9)
