"""Provider presets, model listing, local-server detection and saving settings through the facade."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from runtime.api import PRESETS, Preset, ProviderError, Runtime
from runtime.providers.presets import detect_local_servers
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


def test_presets_cover_the_common_servers():
    urls = {p.id: p.base_url for p in PRESETS}
    assert urls["ollama"] == "http://127.0.0.1:11434/v1"
    assert urls["lmstudio"].endswith(":1234/v1") and urls["llamacpp"].endswith(":8080/v1")
    assert urls["vllm"].endswith(":8000/v1")
    assert {"builtin", "openai", "openrouter", "custom"} <= set(urls)


async def test_detection_finds_running_servers_fast_and_ignores_silent_ones():
    async with OpenAIServer(models=["llama3.2:3b"]) as up, OpenAIServer() as hung:
        hung.script(Reply(hang=True))
        presets = [
            Preset("up", "Up", "openai", up.base_url),
            Preset("hung", "Hung", "openai", hung.base_url),
            Preset("down", "Down", "openai", "http://127.0.0.1:9/v1"),
        ]
        import httpx  # noqa: F401  (warm: the figure is the probes, not the first import)

        t0 = time.perf_counter()
        found = await detect_local_servers(0.25, presets)
        # A hung server is given up on after its timeout, not waited for (the figure itself is no unit test's
        # business; this only tells "bounded" from "hangs").
        assert time.perf_counter() - t0 < 5
    assert found == {"up": ["llama3.2:3b"]}


async def test_list_test_and_save_providers(home):
    async with OpenAIServer(models=["m1", "m2"]) as server:
        write_settings(home, server.base_url)
        rt = await Runtime.open(home)
        try:
            assert await rt.providers.list_models("local") == ["m1", "m2"]
            assert await rt.providers.all_models() == {"local": ["local/m1", "local/m2"]}
            assert await rt.providers.test({"id": "x", "kind": "openai", "base_url": server.base_url}) == ["m1", "m2"]
            with pytest.raises(ProviderError, match="Cannot reach"):
                await rt.providers.test({"id": "y", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"})
            new = rt.settings.model_copy(deep=True)
            new.providers.append(new.providers[0].model_copy(update={"id": "second"}))
            new.default_model = "second/m2"
            await rt.save_settings(new)
            saved = json.loads((home / "settings.json").read_text())
            assert saved["default_model"] == "second/m2"
            assert [p["id"] for p in saved["providers"]] == ["local", "second"]
            assert (await rt.create_task()).model == "second/m2"
        finally:
            await rt.aclose()


async def test_the_picker_offers_recent_models_and_reuses_a_fresh_list(home):
    async with OpenAIServer(models=["m1", "m2", "m3"]) as server:
        write_settings(home, server.base_url, default_model="local/m1")
        rt = await Runtime.open(home)
        try:
            await rt.create_task(model="local/m3")
            choices = await rt.providers.model_choices()
            assert [(c["ref"], c["group"]) for c in choices] == [
                ("local/m1", "default"), ("local/m3", "recent"), ("local/m2", "local")]
            listed = sum(r.path == "/v1/models" for r in server.log)
            await rt.providers.model_choices()  # a picker opened again within a minute: the list is reused
            assert sum(r.path == "/v1/models" for r in server.log) == listed
            await rt.providers.model_choices(max_age=0)  # an older list is asked again
            assert sum(r.path == "/v1/models" for r in server.log) == listed + 1
        finally:
            await rt.aclose()


async def test_cli_models_lists_configured_models(home):
    async with OpenAIServer(models=["tiny"]) as server:
        write_settings(home, server.base_url)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "runtime.cli", "--home", str(home), "models",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err
    assert "local/tiny" in out.decode()
