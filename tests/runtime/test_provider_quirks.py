"""Per-provider quirks as options: llama.cpp's server rejects `"content": null` on an assistant message that
only calls tools, so a provider with `empty_tool_call_content` sends "" there; others keep the OpenAI API's null.
Checked on the wire, against the loopback OpenAI-compatible server, in a full turn with a tool call."""

from __future__ import annotations

import json

import pytest

from runtime.api import PRESETS, Runtime
from runtime.events import EndReason
from tests.support.helpers import ECHO, collect, write_settings
from tests.support.openai_server import OpenAIServer, Reply


@pytest.mark.parametrize("quirk", [True, False])
async def test_tool_call_only_messages_carry_empty_content_for_servers_that_need_it(home, quirk):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        settings = json.loads((home / "settings.json").read_text())
        settings["providers"][0]["empty_tool_call_content"] = quirk
        (home / "settings.json").write_text(json.dumps(settings))
        server.script(Reply(chunks=[], tool_calls=[("call_1", "echo", {"text": "hi"})], finish="tool_calls"),
                      Reply(chunks=["Done."]))
        rt = await Runtime.open(home, tools=[ECHO])
        try:
            task = await rt.create_task()
            await rt.send(task.id, "echo hi")
            events = await collect(rt, task.id)
            assert events[-1].reason == EndReason.completed
            assistant = server.chat_requests[1]["messages"][-2]
            assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["id"] == "call_1"
            assert assistant["content"] == ("" if quirk else None)
            # The runtime's own chat keeps null: the quirk is only how this server is spoken to.
            messages = await rt.messages(task.id)
            assert messages[-1].text == "Done."
        finally:
            await rt.aclose()


def test_the_llama_cpp_server_preset_carries_the_quirk():
    flags = {p.id: p.empty_tool_call_content for p in PRESETS}
    assert flags["llamacpp"] is True and not flags["ollama"] and not flags["openai"]
