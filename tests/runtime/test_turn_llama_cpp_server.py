"""Full turns against an OpenAI-compatible server nobody here wrote: llama-cpp-python's own
`python -m llama_cpp.server` (the `server` extra), serving the bundled SmolLM2 GGUF on 127.0.0.1 as a child process.

The runtime reads a settings.json whose provider `llamacpp` (kind `openai`) points at the server, with
deterministic sampling (temperature 0, a seed, a short max_tokens: the fields Hearth sends when the agent loop
sets none). The plain turn uses exactly the provider settings.json builds.

The tool turn needs two adjustments for this server (llama-cpp-python 0.3.36, `--chat_format
chatml-function-calling`), made on the outgoing request by a test-side subclass of Hearth's
`OpenAICompatProvider` (`ServerQuirks` below) whose streaming, tool-call assembly and error handling are the
real provider's, unchanged:

1. `tool_choice`. The handler ignores `tools` unless the request names a `tool_choice`, and raises
   "Automatic streaming tool choice is not supported" for a streamed `tool_choice: "auto"`. So a step whose
   conversation ends with the person's message names the test tool (`{"type": "function", "function":
   {"name": "get_weather"}}`): the model must call it, with arguments the server samples under the tool's JSON
   schema. Later steps send no `tool_choice`, and the server answers in plain text.
2. `content: null`. Hearth sends an assistant message that only calls tools with `"content": null`, as the
   OpenAI spec allows. The server's request model rejects null (HTTP 500, "Input should be a valid string"),
   and its chat template fails when the key is missing, so such messages carry `"content": ""` here. Hearth
   keeps null, which other servers need (some reject "" with tool calls); see the closing note.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from runtime.api import Runtime
from runtime.events import EndReason
from runtime.parts import hearth_call_id
from runtime.providers.llama.provider import bundled_model_path
from runtime.providers.openai_compat import OpenAICompatProvider
from runtime.tools.base import Effect, FunctionTool
from tests.support.helpers import collect, text_from

pytestmark = pytest.mark.slow_model

SEED = 1234
MAX_TOKENS = 48
FORCED_TOOL = "get_weather"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    """`python -m llama_cpp.server` on a free loopback port; yields its base URL; killed at the end."""
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-server") / "server.log"
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(bundled_model_path()),
        "--host", "127.0.0.1", "--port", str(port), "--chat_format", "chatml-function-calling",
        "--n_ctx", "4096", "--seed", str(SEED), "--verbose", "False",
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 90
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=1) as resp:
                    if resp.status == 200 and json.load(resp)["data"]:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer /v1/models:\n{log_path.read_text()[-3000:]}")
            time.sleep(0.1)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


class ServerQuirks(OpenAICompatProvider):
    """Hearth's OpenAI-compatible provider, with the two request adjustments of the module docstring."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sent: list[dict] = []  # the adjusted request bodies, in order

    def _request_kwargs(self, request):
        kwargs = super()._request_kwargs(request)
        messages = kwargs["messages"]
        kwargs["messages"] = [
            dict(m, content="") if m.get("role") == "assistant" and m.get("content") is None else m for m in messages
        ]
        if kwargs.get("tools") and messages[-1]["role"] == "user":
            kwargs["tool_choice"] = {"type": "function", "function": {"name": FORCED_TOOL}}
        self.sent.append(kwargs)
        return kwargs


def write_settings(home: Path, base_url: str) -> None:
    provider = {"id": "llamacpp", "kind": "openai", "base_url": base_url,
                "temperature": 0, "seed": SEED, "max_tokens": MAX_TOKENS}  # fmt: skip
    settings = {"providers": [provider], "default_model": "llamacpp/smollm2-135m"}
    (home / "settings.json").write_text(json.dumps(settings))


async def test_plain_streamed_turn_through_the_settings_built_provider(home, llama_server):
    write_settings(home, llama_server)
    rt = await Runtime.open(home)
    try:
        assert type(rt.providers.get("llamacpp")) is OpenAICompatProvider
        assert await rt.providers.get("llamacpp").list_models()  # the server's /v1/models
        task = await rt.create_task()
        await rt.send(task.id, "What is the capital of France?")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed, events[-1]
        deltas = [e for e in events if e.type == "text_delta"]
        assert len(deltas) > 3, "the answer should arrive in many streamed chunks"
        await rt.wait_idle(task.id)
        reply = (await rt.messages(task.id))[-1]
        assert reply.text.strip() and reply.text == text_from(events)
    finally:
        await rt.aclose()


async def test_streamed_tool_calling_turn(home, llama_server):
    calls: list[dict] = []

    async def get_weather(args, ctx):
        calls.append(args)
        return f"Sunny, 21 degrees Celsius in {args.get('city')}."

    weather = FunctionTool(
        name=FORCED_TOOL,
        description="Get the current weather in a city.",
        parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        effect=Effect.read_only,
        fn=get_weather,
    )
    write_settings(home, llama_server)
    provider = ServerQuirks("llamacpp", llama_server, temperature=0, seed=SEED, max_tokens=MAX_TOKENS)
    rt = await Runtime.open(home, providers={"llamacpp": provider}, tools=[weather])
    try:
        task = await rt.create_task()
        assert task.model == "llamacpp/smollm2-135m"
        handle = await rt.send(task.id, "What's the weather in Paris?")
        events = await collect(rt, task.id)
        ended = events[-1]
        assert ended.reason == EndReason.completed, ended

        states = [(e.name, e.state) for e in events if e.type == "tool_call"]
        assert states == [(FORCED_TOOL, "pending"), (FORCED_TOOL, "running"), (FORCED_TOOL, "done")]
        assert len(calls) == 1 and isinstance(calls[0].get("city"), str) and calls[0]["city"]
        assert len([e for e in events if e.type == "text_delta"]) > 3  # the answer after the result streamed
        await rt.wait_idle(task.id)

        reply = (await rt.messages(task.id))[-1]
        (part,) = [p for p in reply.parts if p["type"] == "tool_call"]
        assert part["state"] == "done" and part["args"] == calls[0] and "Sunny" in part["result"]
        assert reply.text.strip() and reply.text == text_from(events)
        steps = await rt.core.store.steps(handle.turn_id)
        assert [s["finish_reason"] for s in steps][0] == "tool_calls" and len(steps) == 2

        # What went over the wire: streamed requests, the call's id carried into the tool result.
        first, second = provider.sent
        assert first["stream"] is True and first["tool_choice"]["function"]["name"] == FORCED_TOOL
        assert "tool_choice" not in second
        assistant, tool = second["messages"][-2:]
        assert assistant["tool_calls"][0]["id"] == tool["tool_call_id"]  # the server's own id, answered in the step
        assert part["call_id"] == hearth_call_id(handle.turn_id, part["part_id"])  # saved under Hearth's
        assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == calls[0]
    finally:
        await rt.aclose()
