"""Model providers (`rt.providers`): the presets, local servers answering on their default ports, the models each
provider offers (and what a model picker shows), trying a configuration before it is saved, API keys, and the
provider behind a model reference. Settings themselves are the core's (`rt.settings`, `rt.save_settings`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable

from ..config import ProviderConfig
from ..errors import ConfigError, ProviderError
from ..kits.task import AgentKit
from ..providers import build_provider
from ..providers.base import Provider
from ..providers.presets import PRESETS, Preset, detect_local_servers
from ..redact import redact
from .core import Core


class Providers:
    def __init__(self, core: Core, kit: AgentKit):
        self._core = core
        self._kit = kit  # builds a configured provider on first use
        self._model_lists: dict[str, tuple[float, ProviderConfig, list[str]]] = {}  # id -> (when, config, models)

    def get(self, provider_id: str) -> Provider:
        """The configured provider `provider_id` (`ConfigError` naming the configured ones when there is none)."""
        return self._kit.provider(provider_id)

    def presets(self) -> tuple[Preset, ...]:
        return PRESETS

    async def detect_local_servers(self, timeout: float = 0.25) -> dict[str, list[str]]:
        """Preset id -> models of local servers answering on their default ports (runs all probes at once)."""
        return await detect_local_servers(timeout)

    async def list_models(self, provider_id: str) -> list[str]:
        """Models a configured provider offers; `ProviderError` with a readable message when unreachable."""
        return await _redacted(self.get(provider_id).list_models())

    async def all_models(self, timeout: float | None = None, max_age: float = 0.0) -> dict[str, list[str] | str]:
        """Provider id -> `provider_id/model` refs, or the error text when a provider is unreachable. All
        providers are asked at once, each for at most `timeout` seconds; answers younger than `max_age` seconds
        are reused (a model picker opens often, servers change rarely)."""
        now = time.monotonic()
        cache = self._model_lists
        settings = self._core.settings

        async def one(cfg: ProviderConfig) -> list[str] | str:
            seen = cache.get(cfg.id)
            if seen is not None and now - seen[0] < max_age and seen[1] == cfg:
                return seen[2]
            try:
                result = [f"{cfg.id}/{m}" for m in await asyncio.wait_for(self.list_models(cfg.id), timeout)]
            except TimeoutError:
                return f"{cfg.id} did not answer within {timeout:g} s."
            except (ProviderError, ConfigError) as exc:
                return str(exc)  # not kept: the next picker asks again
            cache[cfg.id] = (time.monotonic(), cfg, result)
            return result

        results = await asyncio.gather(*(one(p) for p in settings.providers))
        return {p.id: r for p, r in zip(settings.providers, results, strict=True)}

    async def model_choices(self, timeout: float = 3.0, max_age: float = 60.0) -> list[dict]:
        """What a model picker offers, in order: the default, models of recent tasks, then each provider's live
        models; an unreachable provider is one entry with `available: False` and the reason. Entries:
        {"ref", "provider", "group" ("default" | "recent" | provider id), "available", "reason"}."""
        lists = await self.all_models(timeout, max_age)
        tasks = await self._core.store.list_tasks()
        out: list[dict] = []
        seen: set[str] = set()

        def add(ref: str, group: str, available: bool = True, reason: str | None = None) -> None:
            if ref not in seen:
                seen.add(ref)
                out.append({"ref": ref, "provider": ref.partition("/")[0], "group": group,
                            "available": available, "reason": reason})

        add(self._core.settings.default_model, "default")
        for task in tasks[:50]:
            add(task["model"], "recent")
        for provider_id, models in lists.items():
            if isinstance(models, str):
                out.append({"ref": None, "provider": provider_id, "group": provider_id, "available": False,
                            "reason": models})
            else:
                for ref in models:
                    add(ref, provider_id)
        return out

    async def test(self, cfg: ProviderConfig | dict) -> list[str]:
        """Try a provider configuration before saving it: the models it offers, or `ProviderError`."""
        cfg = cfg if isinstance(cfg, ProviderConfig) else ProviderConfig.model_validate(cfg)
        provider = build_provider(cfg, self._core.keys, self._core.library)
        try:
            return await _redacted(provider.list_models())
        finally:
            await provider.aclose()

    def set_api_key(self, name: str, value: str) -> str:
        """Store a key in the OS keyring (or the private fallback file); returns the `api_key_ref` to use."""
        self._core.keys.set(name, value)
        return f"keyring:{name}"

    async def window_told(self, provider_id: str) -> None:
        """The person was told that `provider_id`'s context window is assumed: not again (the kit's `told`)."""
        new = self._core.settings.model_copy(deep=True)
        new.context_window_told = [*new.context_window_told, provider_id]
        await self._core.save_settings(new)


async def _redacted(listing: Awaitable[list[str]]) -> list[str]:
    """A server's error text may echo the key it was sent (some proxies do): never show that."""
    try:
        return await listing
    except ProviderError as exc:
        raise ProviderError(redact(exc.message), status_code=exc.status_code, retryable=exc.retryable) from None
