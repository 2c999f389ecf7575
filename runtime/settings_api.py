"""The settings part of the Runtime facade: providers, keys, model lists, local server detection.

Kept apart from api.py so the turn facade stays small; `Runtime` inherits it, so callers still use only
`runtime.api`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from .config import ProviderConfig, Settings, save_settings
from .errors import ConfigError, ProviderError
from .keys import SecretStore
from .providers import build_provider
from .providers.base import Provider
from .providers.presets import PRESETS, Preset, detect_local_servers


class SettingsMixin:
    home: Path
    settings: Settings
    keys: SecretStore
    _providers: dict[str, Provider]

    def presets(self) -> tuple[Preset, ...]:
        return PRESETS

    async def detect_local_servers(self, timeout: float = 0.25) -> dict[str, list[str]]:
        """Preset id -> models of local servers answering on their default ports (runs all probes at once)."""
        return await detect_local_servers(timeout)

    async def list_models(self, provider_id: str) -> list[str]:
        """Models a configured provider offers; `ProviderError` with a readable message when unreachable."""
        return await self.provider(provider_id).list_models()

    async def all_models(self) -> dict[str, list[str] | str]:
        """Provider id -> `provider_id/model` refs, or the error text when a provider is unreachable."""

        async def one(cfg: ProviderConfig) -> list[str] | str:
            try:
                return [f"{cfg.id}/{m}" for m in await self.list_models(cfg.id)]
            except (ProviderError, ConfigError) as exc:
                return str(exc)

        results = await asyncio.gather(*(one(p) for p in self.settings.providers))
        return {p.id: r for p, r in zip(self.settings.providers, results, strict=True)}

    async def test_provider(self, cfg: ProviderConfig | dict) -> list[str]:
        """Try a provider configuration before saving it: the models it offers, or `ProviderError`."""
        cfg = cfg if isinstance(cfg, ProviderConfig) else ProviderConfig.model_validate(cfg)
        provider = build_provider(cfg, self.keys)
        try:
            return await provider.list_models()
        finally:
            await provider.aclose()

    def set_api_key(self, name: str, value: str) -> str:
        """Store a key in the OS keyring (or the private fallback file); returns the `api_key_ref` to use."""
        self.keys.set(name, value)
        return f"keyring:{name}"

    async def save_settings(self, settings: Settings | dict) -> None:
        """Validate and write settings.json; providers whose configuration changed are rebuilt on next use."""
        new = settings if isinstance(settings, Settings) else Settings.model_validate(settings)
        old = {p.id: p for p in self.settings.providers}
        for cfg in new.providers:
            if old.get(cfg.id) != cfg and cfg.id in self._providers:
                await self._providers.pop(cfg.id).aclose()
        save_settings(self.home, new)
        self.settings = new
