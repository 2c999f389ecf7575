"""Each model's context window: from settings.json, from what each server kind says, else an assumed default
with a one-time note — through real loopback servers that answer like Ollama, llama.cpp's server, vLLM, LM Studio."""

from __future__ import annotations

import json

import pytest

from runtime.api import Runtime
from tests.support.openai_server import OpenAIServer, Reply

SERVERS = {
    "llama.cpp": dict(routes={("GET", "/props"): {"default_generation_settings": {"n_ctx": 12288}}}),
    "vllm": dict(model_fields={"m": {"max_model_len": 32768}}),
    "lmstudio": dict(routes={("GET", "/api/v0/models"): {"data": [
        {"id": "m", "max_context_length": 131072, "loaded_context_length": 8000}]}}),
    "ollama": dict(routes={("POST", "/api/show"): {
        "parameters": "temperature 0.7\nnum_ctx 6144", "model_info": {"llama.context_length": 131072}}}),
    "ollama-default": dict(routes={("POST", "/api/show"): {"model_info": {"qwen2.context_length": 32768}}}),
}
EXPECTED = {"llama.cpp": 12288, "vllm": 32768, "lmstudio": 8000, "ollama": 6144, "ollama-default": 4096}


@pytest.mark.parametrize("kind", sorted(SERVERS))
async def test_the_window_is_read_from_what_the_server_says(home, kind):
    async with OpenAIServer(models=["m"], **SERVERS[kind]) as server:
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "p", "kind": "openai", "base_url": server.base_url}], "default_model": "p/m"}))
        rt = await Runtime.open(home)
        try:
            provider = rt.provider("p")
            assert await rt.kit.context_window(provider, "m") == (EXPECTED[kind], None)
        finally:
            await rt.aclose()


async def test_settings_win_and_an_unknown_window_is_assumed_with_one_note(home):
    async with OpenAIServer(models=["m", "n"]) as server:
        server.script(Reply(chunks=["one"]), Reply(chunks=["two"]))
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "p", "kind": "openai", "base_url": server.base_url},
                          {"id": "q", "kind": "openai", "base_url": server.base_url, "context_window": {"n": 65536}}],
            "default_model": "p/m"}))
        rt = await Runtime.open(home)
        try:
            assert (await rt.kit.context_window(rt.provider("q"), "n"))[0] == 65536
            task = await rt.create_task()
            notes = []
            for text in ("first", "second"):
                await rt.send(task.id, text)
                notes += [e.message for e in [ev async for ev in rt.subscribe(task.id)] if e.type == "warning"]
                await rt.wait_idle(task.id)
            assert len(notes) == 1 and "assumes 8,192 tokens" in notes[0] and "context_window" in notes[0]
        finally:
            await rt.aclose()
