"""One process per data folder runs turns: real processes contend for one folder."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap

import pytest

from runtime.api import Runtime
from runtime.errors import DataFolderBusy, ReadOnlyRuntime
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply

OWNER = textwrap.dedent(
    """
    import asyncio, sys
    from runtime.api import Runtime

    async def main():
        rt = await Runtime.open(sys.argv[1])
        task = await rt.create_task(title="owned")
        print(task.id, flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


@pytest.fixture
async def owner(home):
    write_settings(home, "http://127.0.0.1:9/v1")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", OWNER, str(home), stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    task_id = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
    yield proc, task_id
    if proc.returncode is None:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()


async def test_a_second_process_cannot_open_the_folder_for_turns(home, owner):
    proc, task_id = owner
    with pytest.raises(DataFolderBusy) as busy:
        await Runtime.open(home)
    assert busy.value.pid == proc.pid and str(home) in str(busy.value)
    # Reading beside the owner works; changing does not.
    rt = await Runtime.open(home, read_only=True)
    try:
        assert [t.id for t in await rt.list_tasks()] == [task_id]
        with pytest.raises(ReadOnlyRuntime):
            await rt.send(task_id, "hi")
        with pytest.raises(ReadOnlyRuntime):
            await rt.create_task()
    finally:
        await rt.aclose()


async def test_the_cli_refuses_to_run_turns_but_reads_beside_the_owner(home, owner):
    _, task_id = owner
    code, out, err = await _result(await _cli("run", "--task", task_id, "hello", home=home))
    assert code == 5 and "already running" in err and "Traceback" not in err
    code, out, err = await _result(await _cli("tasks", home=home))
    assert code == 0 and task_id in out, err
    code, out, err = await _result(await _cli("show", task_id, home=home))
    assert code == 0 and "owned" in out, err


async def test_the_folder_is_free_again_when_the_owner_dies(home, owner):
    proc, task_id = owner
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    rt = await Runtime.open(home)
    try:
        assert (await rt.get_task(task_id)).title == "owned"
    finally:
        await rt.aclose()
    rt = await Runtime.open(home)  # and a clean close frees it too
    await rt.aclose()


async def test_waiting_task_exits_4_and_hearth_answer_finishes_it(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(
            Reply(chunks=["Writing."], tool_calls=[("c1", "write_file", {"path": "a.txt", "content": "hi"})],
                  finish="tool_calls"),
            Reply(chunks=["Written."]),
        )
        code, out, err = await _result(await _cli("run", "write a.txt", home=home))
        assert code == 4, err
        task_id = err.strip().splitlines()[-1].split()[-1] if "task " in err else None
        line = next(ln for ln in err.splitlines() if ln.startswith("waiting:"))
        assert "hearth answer" in line and "--approve" in line
        task_id = line.split("hearth answer ")[1].split()[0]
        code, out, err = await _result(await _cli("answer", task_id, "--approve", home=home))
        assert code == 0, err
        assert out.strip() == "Written."
        workspaces = list((home / "workspaces").iterdir())
        assert (workspaces[0] / "a.txt").read_text() == "hi"
        code, _, err = await _result(await _cli("answer", task_id, "--approve", home=home))
        assert code == 2 and "not waiting" in err


async def test_run_in_a_terminal_asks_the_approval_itself(home):
    import pty

    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(
            Reply(chunks=["Writing."], tool_calls=[("c1", "write_file", {"path": "b.txt", "content": "yo"})],
                  finish="tool_calls"),
            Reply(chunks=["Done writing."]),
        )
        leader, follower = pty.openpty()
        proc = await _cli("run", "write b.txt", home=home, stdin=follower)
        os.close(follower)
        os.write(leader, b"y\n")
        code, out, err = await _result(proc)
        os.close(leader)
        assert code == 0, err
        assert "Done writing." in out
        workspaces = list((home / "workspaces").iterdir())
        assert (workspaces[0] / "b.txt").read_text() == "yo"


async def test_hearth_answer_denies_remembers_and_answers_questions(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        write = [("c1", "write_file", {"path": "a.txt", "content": "hi"})]
        server.script(Reply(chunks=["Writing."], tool_calls=write, finish="tool_calls"),
                      Reply(chunks=["I did not write it."]))
        code, _, err = await _result(await _cli("run", "write a.txt", home=home))
        assert code == 4, err
        task_id = next(ln for ln in err.splitlines() if ln.startswith("waiting:")).split("hearth answer ")[1].split()[0]
        code, _, err = await _result(await _cli("answer", task_id, "--text", "sure", home=home))
        assert code == 2 and "--approve or --deny" in err
        code, out, err = await _result(await _cli("answer", task_id, "--deny", "--always", home=home))
        assert code == 0 and out.strip() == "I did not write it.", err
        assert not list((home / "workspaces").glob("*/a.txt"))
        # The denial is remembered for this task: the next write_file is refused without asking.
        server.script(Reply(chunks=["Again."], tool_calls=[("c2", "write_file", {"path": "b.txt", "content": "x"})],
                            finish="tool_calls"), Reply(chunks=["Refused, as you said."]))
        code, out, err = await _result(await _cli("run", "--task", task_id, "write b.txt", home=home))
        assert code == 0 and "Refused, as you said." in out, err
        assert "Denied by a rule" in json.dumps(server.chat_requests[-1]["messages"])
        # A question is answered with --text.
        server.script(Reply(chunks=[], tool_calls=[("q1", "ask_user", {"question": "Which colour?"})],
                            finish="tool_calls"), Reply(chunks=["Blue it is."]))
        code, _, err = await _result(await _cli("run", "--task", task_id, "paint it", home=home))
        assert code == 4 and "Which colour?" in err
        code, _, err = await _result(await _cli("answer", task_id, "--approve", home=home))
        assert code == 2 and 'Answer with --text "..."' in err
        code, out, err = await _result(await _cli("answer", task_id, "--text", "blue", home=home))
        assert code == 0 and out.strip() == "Blue it is.", err
        assert "The person answered: blue" in json.dumps(server.chat_requests[-1]["messages"])


async def test_hearth_run_queued_runs_what_a_crash_left_queued(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(hang=True))
        rt = await Runtime.open(home)
        try:  # a quit while a turn runs leaves what was queued behind it
            task = await rt.create_task(model="local/test-model")
            await rt.send(task.id, "zeroth")
            await rt.send(task.id, "first", queue=True)
            await rt.send(task.id, "second", queue=True)
        finally:
            await rt.aclose()
        code, _, err = await _result(await _cli("run", "--task", task.id, "--queued", "extra", home=home))
        assert code == 2 and "--queued runs a task's queued inputs" in err
        server.script(Reply(chunks=["One."]), Reply(chunks=["Two."]))
        code, out, err = await _result(await _cli("run", "--task", task.id, "--queued", home=home))
        assert code == 0 and "One." in out and "Two." in out, err
        assert [m["messages"][-1]["content"] for m in server.chat_requests][-2:] == ["first", "second"]
        code, _, err = await _result(await _cli("run", "--task", task.id, "--queued", home=home))
        assert code == 0 and "Nothing is queued for this task." in err
