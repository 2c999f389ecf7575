"""The headless CLI as a person runs it: a real child process, a real server, real exit codes."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import signal
import sys

from runtime.cli.status import StatusLine
from runtime.events import Phase, Status, TextDelta, ToolCall, ToolState
from tests.support.disks import fill, immutable, tmpfs
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def _cli(*args: str, home=None, stdin=None, **kw):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    env.pop("HEARTH_HOME", None)
    argv = [sys.executable, "-m", "runtime.cli", *(["--home", str(home)] if home else []), *args]
    kw.setdefault("stderr", asyncio.subprocess.PIPE)
    return await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=env, stdin=stdin, **kw)


async def _result(proc):
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_run_streams_the_answer_and_exits_0(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["Hello ", "from ", "the server."]))
        code, out, err = await _result(await _cli("run", "hi there", home=home))
        assert code == 0, err
        assert out.strip() == "Hello from the server."
        task_id = err.strip().splitlines()[-1].split()[-1]
        code, out, _ = await _result(await _cli("tasks", home=home))
        assert code == 0 and task_id in out and " idle " in out
        code, out, _ = await _result(await _cli("show", task_id, home=home))
        assert code == 0 and "hi there" in out and "Hello from the server." in out
        server.script(Reply(chunks=["Again."]))
        code, out, _ = await _result(await _cli("run", "--task", task_id, "more", home=home))
        assert code == 0 and out.strip() == "Again."


async def test_run_on_a_server_model_never_imports_openai(home):
    """The SDK's import is most of a `hearth run`'s start (bench_first_token.py (b)): the turn and the context
    window's questions go out on httpx2 alone (nor is the legacy httpx, with its command line, imported)."""
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["Hello."]))
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        env.pop("HEARTH_HOME", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-m", "runtime.cli", "--home", str(home), "run", "hi",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        code, out, err = await _result(proc)
        assert code == 0 and out.strip() == "Hello.", err
        imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if line.startswith("import time:")}
        assert "httpx2" in imported and not {"openai", "httpx"} & imported


async def test_console_script_uses_hearth_home(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        env = {**os.environ, "HEARTH_HOME": str(home)}
        proc = await asyncio.create_subprocess_exec(
            os.path.join(os.path.dirname(sys.executable), "hearth"), "run", "hi",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env,
        )
        code, out, err = await _result(proc)
        assert code == 0 and out.strip() == "ok", err


async def test_exit_codes_for_config_and_provider_errors(home):
    (home / "settings.json").write_text("{oops")
    code, _, err = await _result(await _cli("tasks", home=home))
    assert code == 2 and "not valid JSON" in err
    write_settings(home, "http://127.0.0.1:9/v1")
    code, _, err = await _result(await _cli("run", "hi", home=home))
    assert code == 3 and "Cannot reach the model server" in err
    code, _, err = await _result(await _cli("show", "nope", home=home))
    assert code == 2 and "No task" in err
    code, _, _ = await _result(await _cli("bogus", home=home))
    assert code == 2
    _, before, _ = await _result(await _cli("tasks", home=home))
    code, _, err = await _result(await _cli("run", " \n\t", home=home))
    assert code == 2 and err.strip() == 'hearth: Give the text to send, e.g. hearth run "hello".'
    _, after, _ = await _result(await _cli("tasks", home=home))
    assert after == before  # no task was made for the empty message


async def test_ctrl_c_stops_the_turn_and_exits_130(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply.counting(5000, delay=0.01))
        proc = await _cli("run", "long", home=home)
        assert await asyncio.wait_for(proc.stdout.read(1), 30) == b"0"
        proc.send_signal(signal.SIGINT)
        code, _, err = await _result(proc)
        assert code == 130, err
        code, out, _ = await _result(await _cli("tasks", home=home))
        task_id = out.splitlines()[1].split()[0]
        code, out, _ = await _result(await _cli("show", task_id, home=home))
        assert "[stopped]" in out


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hearth: ") and "Traceback" not in err, err
    return lines[0]


async def test_storage_faults_exit_with_their_codes_in_one_plain_line(home, tmp_path):
    code, _, err = await _result(await _cli("tasks", home=home))
    assert code == 0, err
    (home / "hearth.sqlite3").write_bytes(os.urandom(8192))
    code, _, err = await _result(await _cli("tasks", home=home))
    assert code == 7 and "damaged" in _one_line(err)

    with tmpfs(tmp_path / "disk", "1m") as disk:
        filler = await asyncio.to_thread(fill, disk)
        code, _, err = await _result(await _cli("run", "hi", home=disk))
        assert code == 6 and "full" in _one_line(err)
        filler.unlink()

    ro = tmp_path / "ro"
    ro.mkdir()
    with immutable(ro):
        code, _, err = await _result(await _cli("tasks", home=ro))
    assert code == 8 and "cannot write" in _one_line(err)


async def test_run_on_a_terminal_shows_what_the_step_waits_for_then_erases_it(home):
    """stderr a terminal: "Waiting for the server…" while the server is silent, erased before the answer; the
    same run with stderr piped prints no status line."""
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        server.script(Reply(chunks=["Hello."], wait=0.5), Reply(chunks=["Again."], wait=0.5))
        leader, follower = pty.openpty()
        proc = await _cli("run", "hi", home=home, stderr=follower)
        os.close(follower)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        terminal = _read_all(leader)
        assert proc.returncode == 0 and out.decode().strip() == "Hello."
        waiting = terminal.index("Waiting for the server…")
        assert "\r\x1b[K" in terminal[waiting:]  # erased once the answer began
        code, out, err = await _result(await _cli("run", "again", home=home))
        assert code == 0 and out.strip() == "Again." and "Waiting" not in err


def _read_all(fd: int) -> str:
    chunks = []
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the other end is closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(fd)
    return b"".join(chunks).decode()


def test_the_status_line_goes_below_an_unfinished_line_of_the_answer():
    """`hearth chat` prints no line for a tool call: a step that follows text without a newline must not erase it."""

    class Terminal(io.StringIO):  # stdout and stderr on one terminal
        def isatty(self) -> bool:
            return True

    term, ids = Terminal(), {"task_id": "t", "turn_id": "u"}
    status = StatusLine(term)
    for ev in [TextDelta(**ids, part_id=0, text="Let me search your notes."),
               ToolCall(**ids, part_id=1, call_id="c", name="search_knowledge", state=ToolState.done),
               Status(**ids, phase=Phase.agent_running, detail="Waiting for the server…"),
               TextDelta(**ids, part_id=2, text="Found it.\n"),
               Status(**ids, phase=Phase.agent_running, detail="Waiting for the server…")]:
        status.event(ev)
        if ev.type == "text_delta":
            term.write(ev.text)
            status.printed(ev.text)
    assert term.getvalue() == ("Let me search your notes.\n\r\x1b[KWaiting for the server…\r\x1b[KFound it.\n"
                               "\r\x1b[KWaiting for the server…")


CHILD_STATUS = """
import os, sys
from runtime.cli.status import StatusLine
from runtime.events import Phase, Status
# What llama-cpp-python does to stderr while `hearth run` preloads a model: descriptor and object to /dev/null.
saved, real = os.dup(2), sys.stderr
os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
sys.stderr = open(os.devnull, "w")
line = StatusLine()  # the turn's first statuses come while the model loads
os.dup2(saved, 2)
sys.stderr = real
line.event(Status(task_id="t", turn_id="u", phase=Phase.agent_running, detail="Reading your message… 40%"))
"""


async def test_the_status_line_shows_even_when_the_model_load_had_hidden_stderr():
    leader, follower = pty.openpty()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD_STATUS, stderr=follower,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    os.close(follower)
    await asyncio.wait_for(proc.wait(), 60)
    assert proc.returncode == 0 and "Reading your message… 40%" in _read_all(leader)


CHILD_LOG = """
import logging, os, sys
import runtime.cli.main as cli
real = sys.stderr
sys.stderr = open(os.devnull, "w")  # as while llama-cpp-python loads the preloaded model
cli._plain_logging()
sys.stderr = real
logging.getLogger("runtime.engine.turn").warning("the model server at 127.0.0.1 did not answer")
"""


async def test_warnings_reach_stderr_even_when_logging_started_while_the_model_loaded():
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD_LOG, stderr=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0 and err.decode() == "hearth: the model server at 127.0.0.1 did not answer\n"


async def test_importing_the_cli_leaves_the_heavy_modules_for_after_the_model_preload_starts():
    # `hearth run` starts loading the model once its arguments are read: whatever the CLI module imports before
    # that delays the load, and the first answer with it.
    heavy = "('runtime.api', 'runtime.kits.task', 'sqlalchemy', 'llama_cpp')"
    code = f"import sys, runtime.cli.main; print(sorted(m for m in {heavy} if m in sys.modules))"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0 and out.decode() == "[]\n"
