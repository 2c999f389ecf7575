"""The raw-SSE stream path of OpenAICompatProvider against the SDK's typed iterator it replaced
(tests/support/sdk_typed_provider.py), on the real loopback server: same tuples, same error texts."""

from __future__ import annotations

import asyncio

import pytest
from openai.types.chat import ChatCompletionChunk

from runtime.providers.base import TEXT
from runtime.providers.openai_compat import OpenAICompatProvider
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.sdk_typed_provider import FAULTS, SdkTypedProvider, outcome

# Text that is hard on an SSE decoder: field-like text, escapes, line breaks inside JSON strings, multi-byte
# UTF-8 (sent raw, so 64 KiB HTTP chunks split characters), characters `str.splitlines` takes for line ends but
# JSON leaves raw (U+2028, U+2029, NEL) and an empty delta now and then.
AWKWARD = ["data: [DONE]", "\n\n", 'quote " and \\ back', "naïve ", "🙂", "日本語 ", "\r", "", "event: x\n", "ok ",
           "line\u2028separator ", "para\u2029graph ", "next\x85line "]


@pytest.fixture
async def server():
    async with OpenAIServer() as s:
        yield s


@pytest.mark.parametrize("case", FAULTS)
async def test_same_tuples_and_errors_as_the_sdk_iterator(server, case):
    raw = OpenAICompatProvider("local", server.base_url, read_timeout=0.5)
    typed = SdkTypedProvider("local", server.base_url, read_timeout=0.5)
    try:
        assert await outcome(raw, server, FAULTS[case]) == await outcome(typed, server, FAULTS[case])
    finally:
        await raw.aclose()
        await typed.aclose()


def sdk_loop_in_a_thread(server, reply: Reply):
    """The SDK's typed loop holds the event loop for most of a second per 20,000 chunks on a busy machine (the
    loop watchdog would fail the test), so the reference runs on its own loop in a worker thread."""

    async def run():
        typed = SdkTypedProvider("local", server.base_url)
        try:
            return await outcome(typed, server, reply)
        finally:
            await typed.aclose()

    return asyncio.run(run())


async def test_20000_chunks_same_text_as_the_sdk_loop_without_an_sdk_object_per_chunk(server, monkeypatch):
    built = 0

    def counting_new(cls, *args, **kwargs):
        nonlocal built
        built += 1
        return object.__new__(cls)

    monkeypatch.setattr(ChatCompletionChunk, "__new__", counting_new)
    chunks = ["" if i % 1000 == 0 else AWKWARD[i % len(AWKWARD)] + str(i) for i in range(20_000)]
    reply = Reply(chunks=chunks, ensure_ascii=False)
    sdk_events, _ = await asyncio.to_thread(sdk_loop_in_a_thread, server, reply)
    assert built == 20_003  # the probe sees the SDK's typed chunks: role, 20,000 texts, finish, usage
    built = 0
    raw = OpenAICompatProvider("local", server.base_url)
    try:
        raw_events, _ = await outcome(raw, server, reply)
    finally:
        await raw.aclose()
    assert built == 0
    sdk_text = "".join(ev[1] for ev in sdk_events if ev[0] == TEXT)
    assert "".join(ev[1] for ev in raw_events if ev[0] == TEXT) == sdk_text == "".join(chunks)
    assert raw_events == sdk_events
