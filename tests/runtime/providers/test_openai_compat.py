"""OpenAICompatProvider against a real OpenAI-compatible HTTP server on loopback (tests/support/openai_server)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runtime.errors import ProviderError
from runtime.events import Usage
from runtime.providers.base import (
    FINISH,
    REASONING,
    STATUS,
    TEXT,
    TOOL_CALLS,
    TOOL_START,
    USAGE,
    ModelRequest,
    ToolCallRequest,
)
from runtime.providers.openai_compat import WAITING_FOR_SERVER, OpenAICompatProvider
from tests.support.openai_server import OpenAIServer, Reply, run_in_thread

ROOT = Path(__file__).resolve().parents[3]
MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def server():
    async with OpenAIServer() as s:
        yield s


@pytest.fixture
async def provider(server):
    p = OpenAICompatProvider("local", server.base_url, read_timeout=5.0)
    yield p
    await p.aclose()


async def collect(provider, model="test-model", **kw):
    """The step's items after the one every step starts with: what the person sees until the first token."""
    items = [ev async for ev in provider.stream(ModelRequest(model=model, messages=MSGS, **kw))]
    assert items[0] == (STATUS, WAITING_FOR_SERVER)
    return items[1:]


async def fails(provider, model="test-model", **kw) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await collect(provider, model, **kw)
    return info.value


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- streaming ------------------------------------------------------------------------------------------------


async def test_text_stream_usage_and_finish(server, provider):
    server.script(Reply(chunks=["Hel", "lo", "", " world"], usage=(12, 3)))
    events = await collect(provider)
    assert events == [
        (TEXT, "Hel"),
        (TEXT, "lo"),
        (TEXT, " world"),
        (USAGE, Usage(input_tokens=12, output_tokens=3)),
        (FINISH, "stop"),
    ]
    body = server.requests[-1]
    assert body["model"] == "test-model" and body["messages"] == MSGS
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    for key in ("tools", "max_tokens", "temperature", "seed"):
        assert key not in body
    headers = server.log[-1].headers
    assert headers["authorization"].startswith("Bearer ")  # a dummy key: local servers need none


async def test_optional_parameters_are_sent_when_set(server, provider):
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
    await collect(provider, tools=tools, max_tokens=50, temperature=0.2, seed=7)
    body = server.requests[-1]
    assert body["tools"] == tools
    assert (body["max_tokens"], body["temperature"], body["seed"]) == (50, 0.2, 7)


async def test_provider_sampling_defaults_apply_when_the_request_sets_none(server):
    p = OpenAICompatProvider("local", server.base_url, temperature=0.0, max_tokens=64, seed=3)
    try:
        await collect(p)
        body = server.requests[-1]
        assert (body["max_tokens"], body["temperature"], body["seed"]) == (64, 0.0, 3)
        await collect(p, max_tokens=5, temperature=0.7, seed=9)  # the request's own values win
        body = server.requests[-1]
        assert (body["max_tokens"], body["temperature"], body["seed"]) == (5, 0.7, 9)
    finally:
        await p.aclose()
    await collect(OpenAICompatProvider("plain", server.base_url))
    assert not {"max_tokens", "temperature", "seed"} & server.requests[-1].keys()


async def test_length_finish_and_no_usage(server, provider):
    server.script(Reply(chunks=["a"], finish="length", usage=None))
    assert await collect(provider) == [(TEXT, "a"), (FINISH, "length")]


async def test_client_is_reused_over_keep_alive(server, provider):
    clients = set()
    for _ in range(3):
        await collect(provider)
        clients.add(id(provider._http))
    assert len(server.requests) == 3
    assert len(clients) == 1 and server.connections == 1


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning(server, provider, field):
    server.script(Reply(reasoning=["think", "ing"], chunks=["answer"], reasoning_field=field))
    events = await collect(provider)
    assert events[:3] == [(REASONING, "think"), (REASONING, "ing"), (TEXT, "answer")]
    assert events[-1] == (FINISH, "stop")


async def test_tool_calls_with_fragmented_arguments(server, provider):
    server.script(
        Reply(
            chunks=["Let me look."],
            tool_calls=[
                ("call_1", "read_file", {"path": "notes/todo.txt", "limit": 100}),
                ("call_2", "shell", {"command": "ls -la", "env": {"A": "ü"}}),
                ("call_3", "now", ""),
                ("call_4", "broken", '{"path": "unterminated'),
            ],
            finish="tool_calls",
            fragment=3,
        )
    )
    events = await collect(provider)
    kinds = [e[0] for e in events]
    assert kinds == [TEXT, TOOL_START, TOOL_START, TOOL_START, TOOL_START, TOOL_CALLS, USAGE, FINISH]
    assert events[1:5] == [
        (TOOL_START, 0, "call_1", "read_file"),
        (TOOL_START, 1, "call_2", "shell"),
        (TOOL_START, 2, "call_3", "now"),
        (TOOL_START, 3, "call_4", "broken"),
    ]
    calls = events[5][1]
    assert calls[0] == ToolCallRequest(
        "call_1", "read_file", '{"path": "notes/todo.txt", "limit": 100}', {"path": "notes/todo.txt", "limit": 100}
    )
    assert calls[1].args == {"command": "ls -la", "env": {"A": "ü"}}
    assert calls[2].arguments == "" and calls[2].args == {}
    assert calls[3].arguments == '{"path": "unterminated' and calls[3].args is None
    assert events[-1] == (FINISH, "tool_calls")


async def test_tool_calls_without_index_like_old_ollama(server, provider):
    server.script(
        Reply(
            chunks=[],
            tool_calls=[("call_a", "read_file", {"path": "a.txt"}), ("call_b", "read_file", {"path": "b.txt"})],
            finish="tool_calls",
            omit_index=True,
            fragment=4,
        )
    )
    events = await collect(provider)
    assert [e for e in events if e[0] == TOOL_START] == [
        (TOOL_START, 0, "call_a", "read_file"),
        (TOOL_START, 1, "call_b", "read_file"),
    ]
    calls = next(e[1] for e in events if e[0] == TOOL_CALLS)
    assert [(c.call_id, c.args) for c in calls] == [("call_a", {"path": "a.txt"}), ("call_b", {"path": "b.txt"})]


# -- failures -------------------------------------------------------------------------------------------------


async def test_connection_refused():
    url = f"http://127.0.0.1:{free_port()}/v1"
    p = OpenAICompatProvider("local", url, connect_timeout=2.0)
    try:
        err = await fails(p)
        assert str(err) == f"Cannot reach the model server at {url}. Is it running?"
        assert err.status_code is None
        with pytest.raises(ProviderError, match="Cannot reach the model server"):
            await p.list_models()
    finally:
        await p.aclose()


@pytest.mark.parametrize("status", [401, 403])
async def test_key_rejected(server, provider, status):
    server.script(Reply(status=status))
    err = await fails(provider)
    assert err.status_code == status and not err.retryable
    assert "rejected the API key" in str(err) and server.base_url in str(err)


async def test_server_checks_the_key_we_pass():
    async with OpenAIServer(api_key="sk-right") as server:
        wrong = OpenAICompatProvider("remote", server.base_url, "sk-wrong")
        right = OpenAICompatProvider("remote", server.base_url, "sk-right")
        try:
            assert (await fails(wrong)).status_code == 401
            assert (await collect(right))[-1] == (FINISH, "stop")
            assert "sk-right" not in repr(right)
        finally:
            await wrong.aclose()
            await right.aclose()


async def test_model_not_found(server, provider):
    server.script(Reply(status=404, error_body='model "llama9" not found, try pulling it first'))
    err = await fails(provider, model="llama9")
    assert err.status_code == 404
    assert 'Model "llama9" was not found' in str(err) and server.base_url in str(err)
    assert "try pulling it first" in str(err)


async def test_wrong_base_url_path_is_a_404(server):
    p = OpenAICompatProvider("local", server.base_url.removesuffix("/v1"))
    try:
        err = await fails(p)
        assert err.status_code == 404 and "base URL" in str(err)
    finally:
        await p.aclose()


async def test_rate_limited_is_retryable(server, provider):
    server.script(Reply(status=429))
    err = await fails(provider)
    assert err.status_code == 429 and err.retryable and "rate limit" in str(err)


async def test_server_error_is_not_retried_by_the_sdk(server, provider):
    server.script(Reply(status=500, error_body="CUDA out of memory"))
    err = await fails(provider)
    assert err.status_code == 500 and "server error (HTTP 500)" in str(err) and "CUDA out of memory" in str(err)
    assert len(server.requests) == 1  # max_retries=0: the SDK's default would send it three times


async def test_malformed_data_line(server, provider):
    server.script(Reply(chunks=["a", "b", "c"], malformed_after=2))
    events = []
    with pytest.raises(ProviderError, match="malformed stream") as info:
        async for ev in provider.stream(ModelRequest(model="test-model", messages=MSGS)):
            events.append(ev)
    assert events[1:] == [(TEXT, "a"), (TEXT, "b")]  # two chunks, then a line that is not JSON
    assert server.base_url in str(info.value)


async def test_error_event_in_stream(server, provider):
    server.script(Reply(chunks=["partial"], error_event="the model crashed"))
    err = await fails(provider)
    assert "sent an error in the stream" in str(err) and "the model crashed" in str(err)


async def test_html_page_is_not_the_protocol(server, provider):
    server.script(Reply(html=True))
    err = await fails(provider)
    assert "did not answer in the streaming chat-completions protocol" in str(err)
    assert "/v1" in str(err)


@pytest.mark.parametrize("connection_close", [False, True], ids=["chunked", "connection-close"])
async def test_closed_early(server, provider, connection_close):
    server.script(Reply(chunks=["half an"], close_early=True, connection_close=connection_close))
    err = await fails(provider)
    assert "closed the stream before the answer was complete" in str(err)


async def test_done_without_finish_reason_is_truncated(server, provider):
    server.script(Reply(chunks=["a"], finish=None))
    assert "closed the stream before the answer was complete" in str(await fails(provider))


async def test_timeout_before_headers(server):
    server.script(Reply(hang=True))
    p = OpenAICompatProvider("local", server.base_url, read_timeout=0.3)
    try:
        t0 = time.monotonic()
        err = await fails(p)
        assert time.monotonic() - t0 < 3
        assert "timed out" in str(err) and err.retryable
        await server.wait_for_disconnect()
    finally:
        await p.aclose()


async def test_timeout_mid_stream(server):
    server.script(Reply(chunks=["a", "b", "c"], stall_after=2))
    p = OpenAICompatProvider("local", server.base_url, read_timeout=0.3)
    events = []
    try:
        with pytest.raises(ProviderError, match="timed out"):
            async for ev in p.stream(ModelRequest(model="test-model", messages=MSGS)):
                events.append(ev)
        assert events == [(STATUS, WAITING_FOR_SERVER), (TEXT, "a"), (TEXT, "b")]
        await server.wait_for_disconnect()
    finally:
        await p.aclose()


# -- cancellation ---------------------------------------------------------------------------------------------


async def test_cancel_closes_the_connection(server, provider):
    server.script(Reply.many(1000, delay=0.01))
    first = asyncio.Event()

    async def consume():
        async for ev in provider.stream(ModelRequest(model="test-model", messages=MSGS)):
            if ev[0] == TEXT:
                first.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    await server.wait_for_disconnect(timeout=2)
    assert server.disconnects == [0]
    # the provider still works afterwards
    assert (await collect(provider))[-1] == (FINISH, "stop")


async def test_consumer_stopping_early_closes_the_connection(server, provider):
    server.script(Reply.many(1000, delay=0.01))
    gen = provider.stream(ModelRequest(model="test-model", messages=MSGS))
    assert await anext(gen) == (STATUS, WAITING_FOR_SERVER)
    assert await anext(gen) == (TEXT, "tok ")
    await gen.aclose()
    await server.wait_for_disconnect(timeout=2)


# -- models, lifecycle ----------------------------------------------------------------------------------------


async def test_list_models(server, provider):
    server.models = ["llama3.2:1b", "qwen2.5:0.5b"]
    assert await provider.list_models() == ["llama3.2:1b", "qwen2.5:0.5b"]
    assert server.log[-1].method == "GET" and server.log[-1].path == "/v1/models"
    server.script(Reply(status=401))
    with pytest.raises(ProviderError, match="rejected the API key"):
        await provider.list_models()


async def test_aclose_is_idempotent_and_reopens(server, provider):
    await collect(provider)
    await provider.aclose()
    await provider.aclose()
    assert (await collect(provider))[-1] == (FINISH, "stop")


def test_importing_the_module_does_not_import_openai():
    code = "import sys, runtime.providers.openai_compat; assert 'openai' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env, timeout=60)


# -- the test server itself -----------------------------------------------------------------------------------


async def test_server_sends_20000_chunks_fast(server):
    server.script(Reply.many(20_000))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = b'{"model":"m","stream":true,"messages":[]}'
    t0 = time.perf_counter()
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    await reader.readuntil(b"\r\n\r\n")
    data = bytearray()
    while True:  # de-chunk the body
        size = int(await reader.readline(), 16)
        data += await reader.readexactly(size + 2)
        del data[-2:]
        if not size:
            break
    elapsed = time.perf_counter() - t0
    writer.close()
    assert data.count(b'"content":"tok "') == 20_000
    assert b"data: [DONE]" in data
    assert elapsed < 1.0, elapsed


def test_server_in_a_thread():
    with run_in_thread() as server:
        server.script(Reply(chunks=["from", " a thread"]))

        async def main():
            p = OpenAICompatProvider("local", server.base_url)
            try:
                return await collect(p)
            finally:
                await p.aclose()

        events = asyncio.run(main())
        assert [e[1] for e in events if e[0] == TEXT] == ["from", " a thread"]
        assert len(server.first_byte_times) == 1


def test_server_as_a_process():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.openai_server", "--chunks", "3", "--text", "x"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("READY http://127.0.0.1:")
        url = line.split()[1]

        async def main():
            p = OpenAICompatProvider("local", url)
            try:
                return await collect(p)
            finally:
                await p.aclose()

        events = asyncio.run(main())
        assert [e for e in events if e[0] == TEXT] == [(TEXT, "x")] * 3
    finally:
        proc.terminate()
        proc.wait(10)
