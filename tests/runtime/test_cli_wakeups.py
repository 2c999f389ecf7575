"""Wake-ups and background commands in the terminal, on real child processes: `hearth tasks` says when a task
wakes, `hearth show` lists its background commands, `hearth stop` cancels a wait, and `hearth wake` runs wake-ups
without the app until it is told to stop."""

from __future__ import annotations

import asyncio
import re
import signal

from runtime.api import Runtime
from tests.runtime.test_background_wakeups import call, inputs, started_id
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def test_tasks_show_and_stop_tell_of_wake_ups_and_background_commands(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(
            call("c1", "wait", {"seconds": 600, "note": "look again later"}),
            call("c2", "run_shell", {"command": "echo compiling; sleep 60", "background": True}),
            call("c3", "wait", lambda body: {"command": started_id(body), "note": "the compiler"}),
        )
        rt = await Runtime.open(home)
        try:
            later = await rt.create_task(title="Later", approval="full_auto")
            await rt.send(later.id, "a")
            await rt.wait_idle(later.id)
            build = await rt.create_task(title="Build", approval="full_auto")
            await rt.send(build.id, "b")
            await rt.wait_idle(build.id)
        finally:
            await rt.aclose()  # the command ends `interrupted`; both wake-ups stay

    code, out, err = await _result(await _cli("tasks", home=home))
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert re.search(r"  wakes \d\d:\d\d  ", rows[later.id]) and " wakes after a command " in rows[build.id]

    code, out, err = await _result(await _cli("show", build.id[:10], home=home))
    assert code == 0, err
    assert "Waiting for a command to finish: the compiler" in out
    assert "Background commands:" in out and "interrupted by a quit of Hearth" in out and "echo compiling" in out

    code, out, err = await _result(await _cli("stop", later.id[:10], home=home))
    assert code == 0 and "no longer waits to wake up" in out, err
    code, out, _ = await _result(await _cli("tasks", home=home))
    row = next(line for line in out.splitlines() if line.startswith(later.id))
    assert "wakes" not in row and " idle " in row


async def test_hearth_run_says_what_outlives_it(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(call("c1", "run_shell", {"command": "sleep 60", "background": True}),
                      call("c2", "wait", {"seconds": 600, "note": "the sleeper"}))
        code, _, err = await _result(await _cli("run", "--approval", "full_auto", "sleep", home=home))
    assert code == 0, err
    lines = err.strip().splitlines()
    assert lines[-1].startswith("task ")
    assert "1 background command(s) of this task end now" in err and "Waiting until" in err and "the sleeper" in err


async def test_hearth_wake_runs_wake_ups_without_the_app_until_stopped(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(call("c1", "wait", {"seconds": 1, "note": "the kettle"}), Reply(chunks=["Tea is ready."]))
        rt = await Runtime.open(home)
        try:
            task = await rt.create_task()
            await rt.send(task.id, "make tea")
            await rt.wait_idle(task.id)
        finally:
            await rt.aclose()

        proc = await _cli("wake", home=home)
        try:
            assert proc.stdout is not None and proc.stderr is not None
            ready = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
            assert "running wake-ups (1 task(s) waiting" in ready
            seen = ""
            while "turn ended: completed" not in seen:
                seen += (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert f"task {task.id[:8]} woke: You waited until" in seen
        finally:
            proc.send_signal(signal.SIGTERM)
            code, _, err = await _result(proc)
        assert code == 0, err

    rt = await Runtime.open(home)
    try:
        said = await inputs(rt, task.id)
        assert len(said) == 2 and "the kettle" in said[1]
        assert (await rt.messages(task.id))[-1].text == "Tea is ready."
    finally:
        await rt.aclose()
    code, out, err = await _result(await _cli("show", task.id[:10], home=home))
    assert code == 0, err
    assert out.count("## user") == 2 and out.count("## user  (wake-up)") == 1
