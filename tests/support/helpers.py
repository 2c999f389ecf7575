"""Shared helpers for runtime tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from runtime.api import Runtime
from runtime.providers.scripted import ScriptedModel
from runtime.tools.base import Effect, FunctionTool

MODEL = "scripted/test"

# A Python that a sandboxed command can run: the interpreter the venv was made from. The venv's own `python`
# lives in the checkout, which the sandbox's private /tmp hides when the checkout is under /tmp. Sandboxed probes
# use only the standard library.
SANDBOX_PY = os.path.realpath(sys._base_executable)


def connect_command(port: int) -> str:
    """A shell command that connects to 127.0.0.1:`port` and prints what the server says first."""
    return (f"{SANDBOX_PY} -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}), timeout=3); "
            f"print(s.recv(100).decode())\"")


async def open_runtime(home: Path, model: ScriptedModel | None = None, tools=()) -> Runtime:
    return await Runtime.open(home, providers={"scripted": model or ScriptedModel()}, tools=tools)


def write_settings(home: Path, base_url: str, **extra) -> None:
    settings = {
        "providers": [{"id": "local", "kind": "openai", "base_url": base_url}],
        "default_model": "local/test-model",
        **extra,
    }
    (home / "settings.json").write_text(json.dumps(settings))


async def collect(rt: Runtime, task_id: str, after_seq: int = 0, turn_id: str | None = None) -> list:
    return [ev async for ev in rt.subscribe(task_id, after_seq, turn_id=turn_id)]


def text_from(events) -> str:
    return "".join(ev.text for ev in events if ev.type == "text_delta")


async def _echo(args, ctx):
    return f"echo: {args.get('text', '')}"


ECHO = FunctionTool(
    name="echo",
    description="Echo the text back.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    effect=Effect.read_only,
    fn=_echo,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.asynccontextmanager
async def mcp_http_server(tmp_path: Path):
    """tests/support/mcp_server.py serving streamable HTTP in its own process; yields its url."""
    port = free_port()
    env = {**os.environ, "MCP_TEST_CANCEL_FILE": str(tmp_path / "http.cancel")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).with_name("mcp_server.py")), "--http", str(port), env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.returncode is not None:
                    raise AssertionError("the HTTP MCP server did not start") from None
                await asyncio.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        await proc.wait()
