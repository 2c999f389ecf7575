"""Known model servers, and finding the local ones that are running.

Detection probes each local preset's default port with a short timeout, all at once, so it costs at most
about `timeout` seconds; callers run it in the background (the app at first start, `hearth models`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class Preset:
    id: str
    label: str
    kind: str  # "openai" | "llama_cpp"
    base_url: str | None = None
    needs_key: bool = False
    local: bool = True
    empty_tool_call_content: bool = False  # ProviderConfig's quirk flag for servers that need it


PRESETS: tuple[Preset, ...] = (
    Preset("builtin", "Bundled model (SmolLM2-135M, offline)", "llama_cpp"),
    Preset("ollama", "Ollama", "openai", "http://127.0.0.1:11434/v1"),
    Preset("lmstudio", "LM Studio", "openai", "http://127.0.0.1:1234/v1"),
    Preset("llamacpp", "llama.cpp server", "openai", "http://127.0.0.1:8080/v1", empty_tool_call_content=True),
    Preset("vllm", "vLLM", "openai", "http://127.0.0.1:8000/v1"),
    Preset("openai", "OpenAI", "openai", "https://api.openai.com/v1", needs_key=True, local=False),
    Preset("openrouter", "OpenRouter", "openai", "https://openrouter.ai/api/v1", needs_key=True, local=False),
    Preset("custom", "Custom OpenAI-compatible URL", "openai", "http://127.0.0.1:8000/v1"),
)


async def probe_models(client: httpx.AsyncClient, base_url: str) -> list[str] | None:
    """Model ids a server offers at GET {base_url}/models, or None when it does not answer like one."""
    import httpx

    try:
        resp = await client.get(base_url.rstrip("/") + "/models")
        data = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        return None
    return [m["id"] for m in data["data"] if isinstance(m, dict) and "id" in m]


async def detect_local_servers(timeout: float = 0.25, presets: Iterable[Preset] = PRESETS) -> dict[str, list[str]]:
    """Preset id -> model ids, for every local OpenAI-compatible preset that answers on its default port."""
    import httpx  # imported on use: the window paints before network libraries load

    candidates = [(p.id, p.base_url) for p in presets
                  if p.local and p.kind == "openai" and p.id != "custom" and p.base_url is not None]
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout), trust_env=False) as client:
        found = await asyncio.gather(*(probe_models(client, url) for _, url in candidates))
    return {pid: models for (pid, _), models in zip(candidates, found, strict=True) if models is not None}
