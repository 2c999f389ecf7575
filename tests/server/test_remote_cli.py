"""`hearth --server URL …` and `hearth login URL` as a person runs them: the real command in a child process against
a real `hearth serve` (the single box on a SQLite data folder), a loopback model server as the model. The output and
exit codes are the local command's (tests/runtime/test_cli.py)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http.server
import os
import pty
import signal
import sys
import threading
from pathlib import Path

import pytest

from tests.support import keyring_file
from tests.support.cluster import ROOT, Cluster
from tests.support.openai_server import Reply
from tests.support.services import free_port


@pytest.fixture(autouse=True)
def fresh_script(model) -> None:
    model.forget_script()


@pytest.fixture
def person(tmp_path) -> dict[str, str]:
    """The environment of a person's shell: their own (empty) data folder and keyring file, no server set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(PYTHONPATH=str(ROOT), HEARTH_HOME=str(tmp_path / "home"), HOME=str(tmp_path),
               PYTHON_KEYRING_BACKEND=keyring_file.BACKEND, **{keyring_file.ENV: str(tmp_path / "keyring.json")})
    return env


async def _start(*args: str, env: dict[str, str], stdin: bytes | None = None,
                 python: bool = False) -> asyncio.subprocess.Process:
    """`hearth ARGS` (with `python`: `python ARGS`)."""
    return await asyncio.create_subprocess_exec(
        sys.executable, *([] if python else ["-m", "runtime.cli"]), *args, cwd=ROOT, env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _hearth(*args: str, env: dict[str, str], stdin: bytes | None = None,
                 python: bool = False) -> tuple[int | None, str, str]:
    proc = await _start(*args, env=env, stdin=stdin, python=python)
    out, err = await asyncio.wait_for(proc.communicate(stdin), 60)
    assert "Traceback" not in err.decode(), err.decode()
    return proc.returncode, out.decode(), err.decode()


def _task_of(err: str) -> str:
    last = err.strip().splitlines()[-1]
    assert last.startswith("task "), err
    return last.split()[-1]


async def test_run_streams_like_the_local_command_and_tasks_and_show_read_the_server(box, model, person):
    cluster, api = box
    server = ["--server", api.base_url, "--token", await cluster.user("ada")]
    model.script(Reply(chunks=["Hello ", "from ", "the server."]))
    code, out, err = await _hearth(*server, "run", "hi there", env=person)
    assert code == 0, err
    assert out.strip() == "Hello from the server."
    task_id = _task_of(err)
    assert not Path(person["HEARTH_HOME"]).exists()  # nothing of it on this computer

    code, out, err = await _hearth(*server, "tasks", env=person)
    assert code == 0, err
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATE", "LAST", "ACTIVITY", "MODEL", "TITLE"]
    assert row.startswith(task_id) and " idle " in row and "t/test-model" in row and row.endswith("hi there")

    model.script(Reply(chunks=["Again."]))
    code, out, err = await _hearth(*server, "run", "--task", task_id[:10], "more", env=person)
    assert code == 0 and out.strip() == "Again.", err
    assert _task_of(err) == task_id

    code, out, err = await _hearth(*server, "show", task_id[:10], "--steps", env=person)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "# hi there  [idle]"
    assert [line for line in lines if line.startswith("## ")] == ["## user", "## assistant"] * 2
    assert "Hello from the server." in lines and "Again." in lines and "more" in lines
    assert sum(line.startswith("  step 1: ") and "10 in / 5 out tokens, ended stop" in line for line in lines) == 2


async def test_tokens_quotas_and_an_absent_server_are_one_sentence_and_the_local_exit_codes(box, model, person):
    cluster, api = box
    code, out, err = await _hearth("--server", api.base_url, "--token", "not-a-token", "run", "hi", env=person)
    assert code == 2 and out == ""
    assert err == (f"hearth: The server refused this token (revoked, or never issued by {api.base_url}). Log in "
                   f"again with: hearth login {api.base_url}\n")
    code, _, err = await _hearth("--server", api.base_url, "tasks", env=person)
    assert code == 2 and err.startswith(f"hearth: No token for {api.base_url}. Log in with: hearth login")

    spent = await cluster.user("spent", quota_tokens=0)
    code, out, err = await _hearth("--server", api.base_url, "--token", spent, "run", "hi", env=person)
    assert (code, out) == (3, "")
    assert err == "hearth: Your token quota on this server is used up. Ask the server's administrator for more.\n"

    nowhere = f"http://127.0.0.1:{free_port()}"
    code, out, err = await _hearth("--server", nowhere, "--token", spent, "tasks", env=person)
    assert (code, out) == (8, "")
    assert err == (f"hearth: Cannot reach the Hearth server at {nowhere}. Check that it runs and that the address "
                   "is right.\n")

    token = await cluster.user("bob")
    for args, says in [(("run", "--doc", "notes.md", "read it"), "--doc (the server cannot read this computer's"),
                       (("run", "--task", "0" * 32, "hi"), "No task with id '00000000"),
                       (("show", "nope"), "No task with id 'nope'."),
                       (("show", "--deliveries", "x"), "--deliveries works on this computer's tasks only"),
                       (("run", " \n"), 'Give the text to send, e.g. hearth run "hello".'),
                       (("models",), "hearth models works on this computer only: leave out --server.")]:
        code, out, err = await _hearth("--server", api.base_url, "--token", token, *args, env=person)
        assert (code, out) == (2, ""), (args, err)
        assert err.startswith("hearth: ") and says in err and len(err.splitlines()) == 1, (args, err)
    code, _, err = await _hearth("--server", "ftp://x", "--token", token, "tasks", env=person)
    assert code == 2 and "is not a server address" in err


async def test_login_checks_the_token_and_keeps_it_in_the_keyring_only(box, person, tmp_path):
    cluster, api = box
    token = await cluster.user("cy")
    keyring = Path(person[keyring_file.ENV])
    code, out, err = await _hearth("login", api.base_url, "--token", "wrong", env=person)
    assert code == 2 and "refused this token" in err and not keyring.exists()

    code, out, err = await _hearth("login", api.base_url + "/", env=person, stdin=f"{token}\n".encode())
    assert code == 0, err
    assert out == (f"Logged in to {api.base_url}; the token is kept in the system keyring. Use it with: hearth "
                   f"--server {api.base_url} …\n")
    assert keyring_file.read(keyring) == {f"hearth/server:{api.base_url}": token}
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p != keyring and token in p.read_text(errors="ignore")]
    assert written == []

    code, out, err = await _hearth("tasks", env={**person, "HEARTH_SERVER": api.base_url})
    assert code == 0 and out.startswith("No tasks yet."), err
    code, _, err = await _hearth("tasks", env={**person, "HEARTH_SERVER": api.base_url, "HEARTH_TOKEN": "revoked"})
    assert code == 2 and "The server refused this token" in err  # $HEARTH_TOKEN before the keyring's
    code, out, err = await _hearth("models", "list", env={**person, "HEARTH_SERVER": api.base_url})
    assert code == 0 and out.startswith("Installed (use with --model):"), err  # the others stay on this computer

    no_keyring = {**person, "PYTHON_KEYRING_BACKEND": "keyring.backends.fail.Keyring"}
    code, out, err = await _hearth("login", api.base_url, "--token", token, env=no_keyring)
    assert (code, out) == (2, "") and "no system keyring" in err and "--token or $HEARTH_TOKEN" in err


async def test_ctrl_c_and_stop_end_the_servers_turn_and_the_command_exits_130(box, model, person):
    cluster, api = box
    server = ["--server", api.base_url, "--token", await cluster.user("dee")]
    model.script(Reply.counting(5000, delay=0.01))
    proc = await _start(*server, "run", "long", env=person)
    assert await asyncio.wait_for(proc.stdout.read(1), 30) == b"0"
    code, out, err = await _hearth(*server, "tasks", env=person)
    assert code == 0 and " running " in out.splitlines()[1], err
    running = out.splitlines()[1].split()[0]
    code, out, err = await _hearth(*server, "run", "--task", running, "more", env=person)
    assert (code, out) == (3, "") and err == (f"hearth: Task {running!r} is already working on a turn. Wait for it, "
                                              "stop it, or queue the input.\n")
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130, err.decode()
    task_id = _task_of(err.decode())
    code, out, _ = await _hearth(*server, "show", task_id, env=person)
    assert code == 0 and "[stopped]" in out and out.startswith("# long  [idle]")

    # On a server, `hearth stop` also stops a running turn (the server runs it, not the command that sent it).
    model.script(Reply.counting(5000, delay=0.01))
    proc = await _start(*server, "run", "--task", task_id, "again", env=person)
    assert await asyncio.wait_for(proc.stdout.read(1), 30) == b"0"
    code, out, err = await _hearth(*server, "stop", task_id, env=person)
    assert code == 0 and out == f"Stopped: task {task_id}'s turn ends stopped; the next message starts afresh.\n"
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 130, err.decode()


async def test_an_approval_waits_exit_4_then_answer_and_stop_go_to_the_server(box, model, person):
    cluster, api = box
    server = ["--server", api.base_url, "--token", await cluster.user("eve")]
    model.script(Reply(chunks=["Let me look. "], tool_calls=[("c1", "run_shell", {"command": "echo hi"})],
                       finish="tool_calls"), Reply(["It said hi."]))
    code, out, err = await _hearth(*server, "run", "say hi", env=person)
    assert code == 4, err
    *_, said, waiting = err.strip().splitlines()
    task_id = _task_of(said)
    assert out.strip() == "Let me look."
    assert waiting.startswith("waiting: Allow run_shell?")
    assert f"Answer with: hearth answer {task_id} --approve or --deny" in waiting
    code, out, err = await _hearth(*server, "answer", task_id, "--approve", "--always", env=person)
    assert code == 0, err
    assert out.strip() == "It said hi." and "[run_shell done]" in err

    # --always kept "commands starting echo" as a rule of the task, on the server: the next echo asks nothing.
    model.script(Reply(chunks=[], tool_calls=[("c2", "run_shell", {"command": "echo again"})], finish="tool_calls"),
                 Reply(["Said again."]))
    code, out, err = await _hearth(*server, "run", "--task", task_id, "again", env=person)
    assert code == 0 and out.strip() == "Said again.", err
    model.script(Reply(chunks=[], tool_calls=[("c3", "run_shell", {"command": "ls"})], finish="tool_calls"))
    code, _, err = await _hearth(*server, "run", "--task", task_id, "look", env=person)
    assert code == 4, err
    code, out, err = await _hearth(*server, "stop", task_id, env=person)
    assert code == 0 and out == (f"Stopped: task {task_id} no longer waits for an answer; the next message starts "
                                 "afresh.\n"), err
    code, out, err = await _hearth(*server, "stop", task_id, env=person)
    assert code == 0 and out == f"Task {task_id} is not waiting for an answer: nothing to stop.\n"


async def test_a_remote_run_imports_neither_the_engine_nor_the_store_nor_the_providers(box, model, person):
    """The remote client stands on httpx alone: a `hearth --server … run` imports none of what runs turns."""
    cluster, api = box
    model.script(Reply(chunks=["Light."]))
    code, out, err = await _hearth("-X", "importtime", "-m", "runtime.cli", "--server", api.base_url, "--token",
                                   await cluster.user("fay"), "run", "hi", env=person, python=True)
    assert code == 0 and out.strip() == "Light.", err
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
    assert {"httpx", "httpx_sse", "runtime.remote.client"} <= imported
    heavy = {"openai", "httpx2", "sqlalchemy", "runtime.api", "runtime.services", "runtime.engine",
             "runtime.store.repo", "runtime.providers"}
    assert heavy & imported == set()


async def test_a_dropped_server_is_reconnected_and_the_turn_read_to_its_stored_end(tmp_path, model, person,
                                                                                   postgres_server, redis_server):
    """Two processes of a server host (an API instance, a worker): the instance is killed mid-turn and started
    again on its port; the command says it reconnects, goes on from the last event it printed, and what it printed
    is the stored answer, nothing missed, nothing twice."""
    database = postgres_server.create_database()
    cluster = Cluster(tmp_path / "host", model.base_url, database=postgres_server.url(database),
                      redis=redis_server.url.rsplit("/", 1)[0] + "/4")
    try:
        port = free_port()
        api, _ = cluster.launch_api(port), await cluster.worker()
        await api.started()
        reply = Reply.counting(800, delay=0.005)
        model.script(reply)
        proc = await _start("--server", api.base_url, "--token", await cluster.user("gus"), "run", "count",
                            env=person)
        first = await asyncio.wait_for(proc.stdout.read(20), 30)
        api.kill()
        await api.stopped()
        await asyncio.sleep(0.5)
        await cluster.launch_api(port).started()
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        store = await cluster.store()
        try:
            [stored] = [m for m in await store.messages(_task_of(err.decode())) if m["role"] == "assistant"]
        finally:
            await store.aclose()
        assert (first + out).decode() == "".join(reply.chunks) + "\n"
        assert stored["parts"][0]["text"] == "".join(reply.chunks)
        assert "[reconnecting: the server does not answer]" in err.decode() and "[reconnected]" in err.decode()
    finally:
        cluster.stop()
        postgres_server.drop_database(database)


async def test_a_single_box_killed_mid_turn_ends_the_command_interrupted_once_it_is_back(tmp_path, model, person):
    """The single box runs its turns itself: killed, its turn is gone, and started again it has nothing buffered
    (204). The command reconnects, reads how the server stored the turn's end, and exits as a local turn
    interrupted by a closing Hearth does."""
    cluster = Cluster(tmp_path / "box", model.base_url)
    try:
        port = free_port()
        api = cluster.launch_api(port)
        await api.started()
        server = ["--server", api.base_url, "--token", await cluster.user("hal")]
        model.script(Reply.counting(3000, delay=0.01))
        proc = await _start(*server, "run", "count", env=person)
        assert await asyncio.wait_for(proc.stdout.read(20), 30)
        api.kill()
        await api.stopped()
        await cluster.launch_api(port).started()
        _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 130, err.decode()
        assert "[reconnecting: the server does not answer]" in err.decode() and "[reconnected]" in err.decode()
        code, out, _ = await _hearth(*server, "show", _task_of(err.decode()), env=person)
        assert code == 0 and out.startswith("# count  [interrupted]")
        assert "[interrupted: Hearth closed while it ran]" in out
    finally:
        cluster.stop()


async def test_login_in_a_terminal_asks_for_the_token_without_showing_it(box, person):
    cluster, api = box
    token = await cluster.user("ivy")
    leader, follower = pty.openpty()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "runtime.cli", "login", api.base_url, cwd=ROOT, env=person, stdin=follower,
        stdout=asyncio.subprocess.PIPE, stderr=follower, start_new_session=True)  # no other terminal to ask on
    os.close(follower)
    seen = b""
    while b"API token for" not in seen:
        seen += await asyncio.wait_for(asyncio.to_thread(os.read, leader, 1024), 30)
    os.write(leader, f"{token}\n".encode())
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    with contextlib.suppress(OSError):  # EIO once the child closed its end
        seen += os.read(leader, 4096)
    os.close(leader)
    assert proc.returncode == 0 and out.decode().startswith(f"Logged in to {api.base_url};")
    assert f"API token for {api.base_url}: ".encode() in seen and token.encode() not in seen
    assert keyring_file.read(Path(person[keyring_file.ENV])) == {f"hearth/server:{api.base_url}": token}


async def test_ctrl_c_while_the_server_is_unreachable_exits_130_at_once_and_says_so(tmp_path, model, person):
    """Stop cannot reach a server that is gone: the command says so and stops waiting for it, instead of going on
    reconnecting for a minute."""
    cluster = Cluster(tmp_path / "box", model.base_url)
    try:
        api = await cluster.api()
        model.script(Reply.counting(3000, delay=0.01))
        proc = await _start("--server", api.base_url, "--token", await cluster.user("jo"), "run", "count",
                            env=person)
        assert await asyncio.wait_for(proc.stdout.read(20), 30)
        api.kill()
        await api.stopped()
        await asyncio.sleep(0.5)  # reconnecting by now
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 130, err.decode()
        lines = err.decode().strip().splitlines()
        assert "[reconnecting: the server does not answer]" in lines and "Traceback" not in err.decode()
        assert f"hearth: Cannot reach the Hearth server at {api.base_url}. Check that it runs and that the address " \
               "is right." in lines
        assert lines[-1].startswith("task ")
    finally:
        cluster.stop()


async def test_an_address_that_is_not_a_hearth_server_is_one_sentence(tmp_path, person):
    """A web server that answers something else at the same paths (a page, a wrong JSON) is a wrong address."""
    (tmp_path / "site" / "api" / "tasks").mkdir(parents=True)
    (tmp_path / "site" / "api" / "tasks" / "index.html").write_text("<html>my router</html>")
    (tmp_path / "site" / "api" / "events").write_text('[{"id": 1}]')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{site.server_address[1]}"
    try:
        for args in (("tasks",), ("show", "x"), ("run", "hi")):
            code, out, err = await _hearth("--server", url, "--token", "t", *args, env=person)
            assert (code, out) == (2, ""), (args, err)
            assert err == f"hearth: {url} does not answer as a Hearth server does: check the address.\n", args
    finally:
        site.shutdown()
