"""Background commands and wake-ups on real processes: a command started in a turn outlives it and wakes the task
when it ends, also after the process running Hearth was killed; no process outlives Stop or a quit; a timed
wake-up fires once, across a restart too, says it is late when it came due while Hearth was down, and a person's
input cancels it. The model is the scripted loopback server (tests/support/openai_server.py)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sqlite3
import sys
import textwrap
import time
from datetime import datetime

import pytest

from runtime.api import Runtime
from runtime.errors import ToolError
from runtime.store.repo import DB_NAME, Store
from runtime.tools.shell.background import BackgroundCommands, CappedLog, process_start, read_log
from runtime.tools.shell.process import group_alive
from runtime.tools.waiting import due_time
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply

NO_SANDBOX = {"sandbox_bwrap": "hearth-no-such-bwrap"}  # commands run as the person: the harder case to clean up


def call(call_id: str, name: str, args) -> Reply:
    return Reply(chunks=[], tool_calls=[(call_id, name, args)], finish="tool_calls")


def started_id(body: dict) -> str:
    """The id of the background command the conversation so far started (the model reads it from run_shell)."""
    for message in reversed(body["messages"]):
        if message["role"] == "tool" and (found := re.search(r"background with id (\w+)", message["content"])):
            return found.group(1)
    raise AssertionError("no background command was started")


async def _dead(pgid: int) -> bool:
    return not group_alive(pgid)


async def inputs(rt: Runtime, task_id: str) -> list[str]:
    return [m.text for m in await rt.messages(task_id) if m.role == "user"]


async def until(check, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


async def woken_inputs(rt: Runtime, task_id: str, count: int, timeout: float = 15.0) -> list[str]:
    """The task's inputs once it has `count` of them and is idle again."""
    async def enough() -> bool:
        return len(await inputs(rt, task_id)) >= count and not rt.tasks.is_running(task_id)

    await until(enough, timeout)
    await rt.wait_idle(task_id)
    return await inputs(rt, task_id)


@pytest.fixture
async def server():
    async with OpenAIServer() as server:
        yield server


async def _open(home, server, **settings) -> Runtime:
    write_settings(home, server.base_url, **settings)
    rt = await Runtime.open(home)
    rt.wakeups.start()
    return rt


async def test_a_background_command_outlives_its_turn_and_wakes_the_task_with_its_exit_code(home, server):
    server.script(
        call("c1", "run_shell", {"command": "sleep 1.5; echo built it; exit 3", "background": True}),
        call("c2", "wait", lambda body: {"command": started_id(body), "note": "the build"}),
        Reply(chunks=["The build failed with code 3."]),
    )
    rt = await _open(home, server)
    try:
        task = await rt.create_task(approval="full_auto")
        await rt.send(task.id, "build it")
        await rt.wait_idle(task.id)
        (command,) = await rt.tasks.background(task.id)
        assert command["status"] == "running" and group_alive(command["pgid"])  # the turn is over, it is not
        info = await rt.get_task(task.id)
        assert info.state == "idle" and info.wake is not None and info.wake["command_id"] == command["id"]

        said = await woken_inputs(rt, task.id, 2)
        assert len(said) == 2
        assert "exited with code 3" in said[1] and "built it" in said[1] and "the build" in said[1]
        assert "exited with code 3" in str(server.requests[-1]["messages"][-1]["content"])  # what the model read
        assert (await rt.messages(task.id))[-1].text == "The build failed with code 3."
        assert (await rt.get_task(task.id)).wake is None
        (command,) = await rt.tasks.background(task.id)
        assert (command["status"], command["exit_code"]) == ("exited", 3)
        await asyncio.sleep(0.5)
        assert len(await inputs(rt, task.id)) == 2  # once
    finally:
        await rt.aclose()


CHILD = textwrap.dedent("""
    import asyncio, sys
    from runtime.api import Runtime

    async def main():
        rt = await Runtime.open(sys.argv[1])
        rt.wakeups.start()
        task = await rt.create_task(approval="full_auto")
        await rt.permissions.set_task_sandbox(task.id, unsandboxed_ok=True)
        await rt.send(task.id, "download it")
        await rt.wait_idle(task.id)
        (command,) = await rt.tasks.background(task.id)
        print("STARTED", task.id, command["pgid"], flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
""")


@pytest.mark.parametrize("sandboxed", [False, True], ids=["unsandboxed", "sandboxed"])
async def test_a_command_killed_with_hearth_wakes_the_task_after_the_restart_and_is_dead(home, server, sandboxed):
    """Unsandboxed, the command outlives the killed process until the next start ends its group; in the sandbox
    the kernel ends it with Hearth (bwrap's --die-with-parent)."""
    server.script(
        call("c1", "run_shell", {"command": "echo fetching; sleep 60; echo never", "background": True}),
        call("c2", "wait", lambda body: {"command": started_id(body), "note": "the download"}),
    )
    settings = {} if sandboxed else NO_SANDBOX
    write_settings(home, server.base_url, **settings)
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(home), stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert child.stdout is not None
        line = (await asyncio.wait_for(child.stdout.readline(), 30)).decode().split()
        assert line[0] == "STARTED", line
        task_id, pgid = line[1], int(line[2])
        assert group_alive(pgid)
    finally:
        child.send_signal(signal.SIGKILL)
        await child.wait()
    if sandboxed:
        await until(lambda: _dead(pgid), timeout=5)
    else:
        assert group_alive(pgid)  # not tied to the process that died: the next start must end it

    server.script(Reply(chunks=["It was cut off; I will start it again."]))
    rt = await _open(home, server, **settings)
    try:
        assert not group_alive(pgid)  # ended at the start, before anything else
        (command,) = await rt.tasks.background(task_id)
        assert command["status"] == "interrupted" and bool(command["sandboxed"]) is sandboxed
        said = await woken_inputs(rt, task_id, 2)
        assert "interrupted by the quit" in said[1] and "fetching" in said[1] and "the download" in said[1]
    finally:
        await rt.aclose()


async def test_no_background_process_outlives_stop_or_quit_and_a_quit_wakes_the_task_that_waited(home, server):
    server.script(
        call("c1", "run_shell", {"command": "sleep 60 & sleep 60", "background": True}), Reply(chunks=["started"]),
        call("c2", "run_shell", {"command": "sleep 60", "background": True}),
        call("c3", "wait", lambda body: {"command": started_id(body), "note": "the sleeper"}),
    )
    rt = await _open(home, server)
    try:
        stopped = await rt.create_task(approval="full_auto")
        await rt.send(stopped.id, "one")
        await rt.wait_idle(stopped.id)
        quit_ = await rt.create_task(approval="full_auto")
        await rt.send(quit_.id, "two")
        await rt.wait_idle(quit_.id)
        (first,) = await rt.tasks.background(stopped.id)
        (second,) = await rt.tasks.background(quit_.id)
        assert group_alive(first["pgid"]) and group_alive(second["pgid"])
        await rt.stop(stopped.id)
        assert not group_alive(first["pgid"]) and group_alive(second["pgid"])
        assert (await rt.tasks.background(stopped.id))[0]["status"] == "stopped"
    finally:
        await rt.aclose()
    assert not group_alive(second["pgid"])
    db = sqlite3.connect(home / DB_NAME)
    try:
        assert db.execute("select status from background_commands where id = ?", (second["id"],)).fetchone() == (
            "interrupted",)
    finally:
        db.close()
    server.script(Reply(chunks=["It was cut off."]))
    rt = await _open(home, server)  # the task that waited for it wakes with that fact
    try:
        said = await woken_inputs(rt, quit_.id, 2)
        assert "interrupted by the quit" in said[1] and "the sleeper" in said[1]
    finally:
        await rt.aclose()


async def test_deleting_a_task_ends_its_commands_and_removes_their_logs(home, server):
    server.script(call("c1", "run_shell", {"command": "echo working; sleep 60", "background": True}),
                  Reply(chunks=["started"]))
    rt = await _open(home, server)
    try:
        task = await rt.create_task(approval="full_auto")
        await rt.send(task.id, "go")
        await rt.wait_idle(task.id)
        (command,) = await rt.tasks.background(task.id)
        assert group_alive(command["pgid"]) and os.path.exists(command["log_path"])
        await rt.tasks.delete(task.id)
        assert not group_alive(command["pgid"]) and not os.path.exists(command["log_path"])
    finally:
        await rt.aclose()


async def test_a_timed_wake_up_fires_once(home, server):
    server.script(call("c1", "wait", {"seconds": 2, "note": "check the oven"}), Reply(chunks=["Done."]))
    rt = await _open(home, server)
    try:
        task = await rt.create_task()
        await rt.send(task.id, "bake")
        await rt.wait_idle(task.id)
        wake = (await rt.get_task(task.id)).wake
        assert wake is not None and wake["note"] == "check the oven"
        set_at = time.time()
        said = await woken_inputs(rt, task.id, 2)
        assert time.time() - set_at >= 1.5
        assert "check the oven" in said[1] and "on time" in said[1]
        await asyncio.sleep(2)
        assert len(await inputs(rt, task.id)) == 2
    finally:
        await rt.aclose()


async def _waiting_task(home, server, seconds: float, note: str) -> tuple[str, float]:
    """A task that ended its turn waiting `seconds`, in a runtime closed right after: its id and when it is due."""
    server.script(call("c1", "wait", {"seconds": seconds, "note": note}))
    rt = await _open(home, server)
    try:
        task = await rt.create_task()
        await rt.send(task.id, "a")
        await rt.wait_idle(task.id)
        wake = await rt.wakeups.get(task.id)
        assert wake is not None
        return task.id, wake["due_at"]
    finally:
        await rt.aclose()


async def test_a_wake_up_set_for_seconds_fires_once_across_a_restart(home, server):
    task_id, due = await _waiting_task(home, server, 3, "soon")  # 3 s: room for the restart
    server.script(Reply(chunks=["on time"]))
    rt = await _open(home, server)
    try:
        assert time.time() < due  # reopened before it came due
        said = await woken_inputs(rt, task_id, 2)
        assert time.time() >= due and "soon" in said[1] and "on time" in said[1]
        await asyncio.sleep(1.5)
        assert len(await inputs(rt, task_id)) == 2 and (await rt.get_task(task_id)).wake is None
    finally:
        await rt.aclose()


async def test_a_wake_up_due_while_hearth_was_down_fires_at_the_start_marked_late(home, server):
    task_id, due = await _waiting_task(home, server, 1, "while away")
    await asyncio.sleep(max(0.0, due - time.time()) + 0.5)  # it comes due while nothing runs
    server.script(Reply(chunks=["late one"]))
    rt = await _open(home, server)
    try:
        said = await woken_inputs(rt, task_id, 2)
        assert "while away" in said[1] and "late, as Hearth was not running when it came due" in said[1]
        await asyncio.sleep(1)
        assert len(await inputs(rt, task_id)) == 2 and [t.wake for t in await rt.list_tasks()] == [None]
    finally:
        await rt.aclose()


async def test_the_persons_input_cancels_a_wake_up(home, server):
    server.script(call("c1", "wait", {"seconds": 3, "note": "later"}), Reply(chunks=["Sure."]))
    rt = await _open(home, server)
    try:
        task = await rt.create_task()
        await rt.send(task.id, "a")
        await rt.wait_idle(task.id)
        wake = (await rt.get_task(task.id)).wake
        assert wake is not None
        await rt.send(task.id, "never mind")
        assert time.time() < wake["due_at"]  # (the person spoke before it came due)
        await rt.wait_idle(task.id)
        assert (await rt.get_task(task.id)).wake is None
        await asyncio.sleep(max(0.0, wake["due_at"] - time.time()) + 1)
        assert await inputs(rt, task.id) == ["a", "never mind"]
    finally:
        await rt.aclose()


async def test_a_background_command_is_approved_as_a_foreground_one_and_read_in_pieces(home, server):
    """In `ask` mode the call waits for the person's approval, with the sandbox's sentence; approved, it starts in
    the background, and background_command reads its output by offset and from the end."""
    server.script(
        call("c1", "run_shell", {"command": "seq 1 3000", "background": True}),
        call("c2", "background_command", lambda body: {"action": "read", "id": started_id(body), "offset": -20}),
        Reply(chunks=["Read it."]),
    )
    rt = await _open(home, server)
    try:
        task = await rt.create_task(approval="ask")
        await rt.send(task.id, "count")
        await rt.wait_idle(task.id)
        request = (await rt.get_task(task.id)).pending_request
        assert request is not None and request["tool_name"] == "run_shell" and "sandbox" in request["touches"]
        assert await rt.tasks.background(task.id) == []  # nothing runs before the approval

        async def ended() -> bool:
            rows = await rt.tasks.background(task.id)
            return bool(rows) and rows[0]["status"] == "exited"

        await rt.answer(task.id, request["request_id"], "approve")
        await until(ended)  # (the read may come first: it says what there is so far)
        await rt.wait_idle(task.id)
        (command,) = await rt.tasks.background(task.id)
        whole = "\n".join(str(i) for i in range(1, 3001)) + "\n"
        assert command["output_bytes"] == len(whole)
        assert await rt.tasks.background_output(task.id, command["id"], 0, 10) == whole[:10]
        assert await rt.tasks.background_output(task.id, command["id"], -15) == whole[-15:]
    finally:
        await rt.aclose()


def test_a_log_past_its_cap_keeps_its_newest_half_and_says_what_it_dropped(tmp_path):
    log = CappedLog(tmp_path / "c.log", cap=1000)
    for i in range(300):
        log.write(f"line {i:04}\n".encode())
    log.close()
    text, _, _, size = read_log(tmp_path / "c.log", 0, 5000)
    assert size <= 1100 and text.startswith("[... ") and "earlier bytes of output dropped" in text
    assert text.endswith("line 0299\n") and "line 0000" not in text


async def test_a_wake_up_sent_just_before_a_crash_does_not_run_twice(home, server):
    """Its input was stored but its row not yet dropped (the process died in between): the next start sends it
    again under the same client id, which the host answers as a duplicate, and drops the row."""
    server.script(call("c1", "wait", {"seconds": 1, "note": "once"}), Reply(chunks=["Woke."]))
    write_settings(home, server.base_url)
    rt = await Runtime.open(home)  # runs no wake-ups: the send below plays the one that was cut off
    try:
        task = await rt.create_task()
        await rt.send(task.id, "a")
        await rt.wait_idle(task.id)
        wake = await rt.wakeups.get(task.id)
        assert wake is not None
        await rt.tasks.wake(task.id, "[Wake-up] as sent before the crash", f"wake:{wake['id']}")
        await rt.wait_idle(task.id)
    finally:
        await rt.aclose()
    rt = await _open(home, server)
    try:
        await until(lambda: _no_wake(rt, task.id))
        await asyncio.sleep(0.5)
        assert await inputs(rt, task.id) == ["a", "[Wake-up] as sent before the crash"]
    finally:
        await rt.aclose()


async def _no_wake(rt: Runtime, task_id: str) -> bool:
    return await rt.wakeups.get(task_id) is None


async def test_the_start_after_a_crash_ends_what_a_command_left_in_its_group_after_its_shell_exited(tmp_path):
    """The shell that led the group is gone (it exited after the crash), a process it started lives on in the
    group: recovery ends it too, and leaves alone a group whose leader is another process now."""
    store = await Store.open(tmp_path)
    try:
        await store.create_task(id="t1", model="a/b", workspace=str(tmp_path), knowledge=[])
        leaderless = await asyncio.create_subprocess_exec("/bin/sh", "-c", "sleep 60 & sleep 0.5",
                                                          start_new_session=True)
        started = process_start(leaderless.pid)
        await leaderless.wait()  # the shell has exited; its `sleep 60` is still in the group
        assert started is not None and group_alive(leaderless.pid)
        stranger = await asyncio.create_subprocess_exec("sleep", "60", start_new_session=True)
        for command_id, pgid, start in (("c1", leaderless.pid, started), ("c2", stranger.pid, started)):
            await store.add_background({"id": command_id, "task_id": "t1", "command": "x", "status": "running",
                                        "started_at": 1.0, "pgid": pgid, "proc_start": start,
                                        "log_path": str(tmp_path / f"{command_id}.log")})
        recovered = await BackgroundCommands(tmp_path, store).recover()
        assert {r["id"] for r in recovered} == {"c1", "c2"}
        assert not group_alive(leaderless.pid)
        assert group_alive(stranger.pid)  # its leader started at another time: not the command's
        assert {r["status"] for r in await store.background_commands("t1")} == {"interrupted"}
        stranger.kill()
        await stranger.wait()
    finally:
        await store.aclose()


def test_wait_takes_seconds_an_iso_time_or_a_time_of_day_and_refuses_the_rest_in_words():
    now = datetime(2026, 12, 6, 10, 30).timestamp()
    assert due_time({"seconds": 90}, now) == now + 90
    assert due_time({"until": "2026-12-07T09:00"}, now) == datetime(2026, 12, 7, 9, 0).timestamp()
    assert due_time({"until": "11:00"}, now) == datetime(2026, 12, 6, 11, 0).timestamp()  # later today
    assert due_time({"until": "09:00"}, now) == datetime(2026, 12, 7, 9, 0).timestamp()  # passed: tomorrow
    for args, said in (({"until": "2026-12-06T08:00"}, "has already passed; it is now 2026-12-06T10:30:00"),
                       ({"until": "soon"}, "until must be an ISO 8601 time"),
                       ({"seconds": -1}, "seconds must be a number above 0"),
                       ({"seconds": 90 * 86400}, "A wait may last at most 30 days")):
        with pytest.raises(ToolError, match=re.escape(said)):
            due_time(args, now)
