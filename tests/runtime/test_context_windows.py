"""Each model's context window: from settings.json, from what each server kind says, else an assumed default
with a one-time note — through real loopback servers that answer like Ollama, llama.cpp's server, vLLM, LM Studio."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os

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
            provider = rt.providers.get("p")
            assert await rt.kit.context_window(provider, "m") == (EXPECTED[kind], None)
        finally:
            await rt.aclose()


async def test_settings_win_and_an_unknown_window_is_assumed_with_one_note_per_provider_ever(home):
    async with OpenAIServer(models=["m", "n"]) as server:
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "p", "kind": "openai", "base_url": server.base_url},
                          {"id": "q", "kind": "openai", "base_url": server.base_url, "context_window": {"n": 65536}},
                          {"id": "r", "kind": "openai", "base_url": server.base_url}],
            "default_model": "p/m"}))

        async def notes(rt: Runtime, model: str, *texts: str) -> list[str]:
            task = await rt.create_task(model=model)
            said = []
            for text in texts:
                server.script(Reply(chunks=["ok"]))
                await rt.send(task.id, text)
                said += [e.message for e in [ev async for ev in rt.subscribe(task.id)] if e.type == "warning"]
                await rt.wait_idle(task.id)
            return said

        rt = await Runtime.open(home)
        try:
            assert (await rt.kit.context_window(rt.providers.get("q"), "n"))[0] == 65536
            [note] = await notes(rt, "p/m", "first", "second")
            assert note == ("The server of p does not say how long a context m takes, so Hearth assumes 8,192 tokens "
                            "for its models. If they can take more, set the context window in Settings ▸ Models ▸ p.")
            assert await notes(rt, "p/n", "another model of p") == []  # once per provider, not per model
            [other] = await notes(rt, "r/m", "another provider")
            assert other.startswith("The server of r does not say")
        finally:
            await rt.aclose()
        assert json.loads((home / "settings.json").read_text())["context_window_told"] == ["p", "r"]
        rt = await Runtime.open(home)  # a restart does not say it again
        try:
            assert await notes(rt, "p/m", "after a restart") == []
            assert await rt.kit.context_window(rt.providers.get("p"), "m") == (8192, None)
        finally:
            await rt.aclose()


async def test_the_window_is_asked_beside_the_rest_of_the_setup(home):
    """A turn's setup reads side by side: the server is asked for the context window while the skills are still
    being read (here a SKILL.md that is a named pipe, so reading it waits until the test writes it, which it
    does only once the server has been asked). One after the other, the turn would wait forever. The request is
    the same: the skill is in its notes, the window the server gave sizes it."""
    async with OpenAIServer(models=["m"], **SERVERS["llama.cpp"]) as server:
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "p", "kind": "openai", "base_url": server.base_url}], "default_model": "p/m"}))
        rt = await Runtime.open(home)
        skill = home / "skills" / "release-notes"
        skill.mkdir(parents=True)
        os.mkfifo(skill / "SKILL.md")
        try:
            task = await rt.create_task()
            await rt.send(task.id, "Write the release notes.")
            await asyncio.wait_for(_asked(server, "/props"), 10)
            await asyncio.to_thread((skill / "SKILL.md").write_text,
                                    "---\nname: release-notes\ndescription: Writes release notes.\n---\nBe brief.\n")
            await asyncio.wait_for(rt.wait_idle(task.id), 10)
            assert (await rt.get_task(task.id)).last_reason == "completed"
            system = server.requests[-1]["messages"][0]["content"]
            assert "release-notes" in system and "Writes release notes." in system
        finally:
            _unblock(skill / "SKILL.md")
            await rt.aclose()


async def _asked(server: OpenAIServer, path: str) -> None:
    while not any(r.path == path for r in server.log):
        await asyncio.sleep(0.01)


def _unblock(fifo) -> None:
    """A reader still waiting on the pipe (the test failed) gets an end of file, so the runtime can close."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
