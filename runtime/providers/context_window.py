"""How long a model's context is, asked from an OpenAI-compatible server where it says so.

Each server kind tells it its own way; all are asked at once, each bounded by a short timeout, and the first
figure in this order wins:
- llama.cpp server: `GET /props` → `default_generation_settings.n_ctx` (the context it actually runs with);
- vLLM (and servers like it): `GET /v1/models` → the model's `max_model_len` (or `context_length`);
- LM Studio: `GET /api/v0/models` → the model's `loaded_context_length`, else `max_context_length`;
- Ollama: `POST /api/show` → `num_ctx` in its parameters when set; otherwise the model's trained
  `*.context_length`, but at most 4,096 — what Ollama runs a model with unless told otherwise.
None when no server says: the caller then assumes a conservative default and says so once.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

OLLAMA_DEFAULT_CTX = 4096
_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)", re.MULTILINE)


async def discover(client: Any, base_url: str, model: str, timeout: float = 2.0) -> tuple[int, str] | None:
    """(tokens, which server said it) for `model`, or None; asked on `client`, the provider's httpx2 client (its
    key, and connections the chat request can reuse)."""
    import httpx2  # already imported: `client` is one of its

    root = base_url.rstrip("/").removesuffix("/v1")

    async def ask(method: str, url: str, body: dict | None = None) -> Any:
        try:
            r = await client.request(method, url, json=body, timeout=timeout)
            return r.json() if r.status_code == 200 else None
        except (httpx2.HTTPError, ValueError):
            return None

    props, models, lmstudio, ollama = await asyncio.gather(
        ask("GET", f"{root}/props"), ask("GET", f"{base_url.rstrip('/')}/models"),
        ask("GET", f"{root}/api/v0/models"), ask("POST", f"{root}/api/show", {"model": model}))
    for source, found in (("llama.cpp server", _llama_cpp(props)), ("server's model list", _listed(models, model)),
                          ("LM Studio", _lm_studio(lmstudio, model)), ("Ollama", _ollama(ollama))):
        if found:
            return found, source
    return None


def _positive(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _llama_cpp(props: Any) -> int | None:
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    return _positive(settings.get("n_ctx")) if isinstance(settings, dict) else _positive(props.get("n_ctx"))


def _entries(listing: Any) -> list[dict]:
    data = listing.get("data") if isinstance(listing, dict) else None
    return [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []


def _listed(listing: Any, model: str) -> int | None:
    for entry in _entries(listing):
        if entry.get("id") == model:
            return _positive(entry.get("max_model_len")) or _positive(entry.get("context_length"))
    return None


def _lm_studio(listing: Any, model: str) -> int | None:
    for entry in _entries(listing):
        if entry.get("id") == model:
            return _positive(entry.get("loaded_context_length")) or _positive(entry.get("max_context_length"))
    return None


def _ollama(show: Any) -> int | None:
    if not isinstance(show, dict):
        return None
    m = _NUM_CTX.search(show.get("parameters") or "") if isinstance(show.get("parameters"), str) else None
    if m:
        return int(m.group(1))
    info = show.get("model_info")
    trained = next((_positive(v) for k, v in info.items() if k.endswith(".context_length")), None) \
        if isinstance(info, dict) else None
    return min(trained, OLLAMA_DEFAULT_CTX) if trained else None
