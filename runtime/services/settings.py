"""The settings part of the Runtime facade: providers, keys, model lists, local server detection.

Kept apart from api.py so the turn facade stays small; `Runtime` inherits it, so callers still use only
`runtime.api`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from pathlib import Path

from pydantic import ValidationError

from ..config import MCPServerConfig, ProviderConfig, Settings, save_settings
from ..errors import ConfigError, ProviderError
from ..keys import SecretStore
from ..local_models.library import ModelLibrary
from ..providers import build_provider
from ..providers.base import Provider
from ..providers.presets import PRESETS, Preset, detect_local_servers
from ..redact import redact, remember
from ..store.faults import guard as storage_faults
from ..store.repo import Store
from ..tools.mcp.consent import MCPConsents


class SettingsMixin:
    home: Path
    settings: Settings
    keys: SecretStore
    models: ModelLibrary
    _providers: dict[str, Provider]
    _model_lists: dict  # provider id -> (when, its config, its models or the error text)
    mcp_consents: MCPConsents
    store: Store

    def presets(self) -> tuple[Preset, ...]:
        return PRESETS

    async def detect_local_servers(self, timeout: float = 0.25) -> dict[str, list[str]]:
        """Preset id -> models of local servers answering on their default ports (runs all probes at once)."""
        return await detect_local_servers(timeout)

    async def list_models(self, provider_id: str) -> list[str]:
        """Models a configured provider offers; `ProviderError` with a readable message when unreachable."""
        return await _redacted(self.provider(provider_id).list_models())

    async def all_models(self, timeout: float | None = None, max_age: float = 0.0) -> dict[str, list[str] | str]:
        """Provider id -> `provider_id/model` refs, or the error text when a provider is unreachable. All
        providers are asked at once, each for at most `timeout` seconds; answers younger than `max_age` seconds
        are reused (a model picker opens often, servers change rarely)."""
        now = time.monotonic()
        cache = self._model_lists

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

        results = await asyncio.gather(*(one(p) for p in self.settings.providers))
        return {p.id: r for p, r in zip(self.settings.providers, results, strict=True)}

    async def model_choices(self, timeout: float = 3.0, max_age: float = 60.0) -> list[dict]:
        """What a model picker offers, in order: the default, models of recent tasks, then each provider's live
        models; an unreachable provider is one entry with `available: False` and the reason. Entries:
        {"ref", "provider", "group" ("default" | "recent" | provider id), "available", "reason"}."""
        lists = await self.all_models(timeout, max_age)
        tasks = await self.store.list_tasks()
        out: list[dict] = []
        seen: set[str] = set()

        def add(ref: str, group: str, available: bool = True, reason: str | None = None) -> None:
            if ref not in seen:
                seen.add(ref)
                out.append({"ref": ref, "provider": ref.partition("/")[0], "group": group,
                            "available": available, "reason": reason})

        add(self.settings.default_model, "default")
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

    async def test_provider(self, cfg: ProviderConfig | dict) -> list[str]:
        """Try a provider configuration before saving it: the models it offers, or `ProviderError`."""
        cfg = cfg if isinstance(cfg, ProviderConfig) else ProviderConfig.model_validate(cfg)
        provider = build_provider(cfg, self.keys, self.models)
        try:
            return await _redacted(provider.list_models())
        finally:
            await provider.aclose()

    def set_api_key(self, name: str, value: str) -> str:
        """Store a key in the OS keyring (or the private fallback file); returns the `api_key_ref` to use."""
        self.keys.set(name, value)
        return f"keyring:{name}"

    async def save_settings(self, settings: Settings | dict) -> None:
        """Validate and write settings.json; providers whose configuration changed are rebuilt on next use."""
        new = settings if isinstance(settings, Settings) else Settings.model_validate(settings)
        with storage_faults(self.home):  # a full disk or a read-only folder: StorageFull / StorageReadOnly
            save_settings(self.home, new)
        remember(new.secret_values())
        old, kept = {p.id: p for p in self.settings.providers}, {p.id: p for p in new.providers}
        self.settings = new
        # Dropped with no await in between: a provider asked for meanwhile is built from the new settings, never
        # rebuilt from the old ones while an old one closes.
        stale = [self._providers.pop(pid) for pid in list(self._providers) if kept.get(pid) != old.get(pid)]
        for provider in stale:
            await provider.aclose()

    async def _context_window_told(self, provider_id: str) -> None:
        """The person was told that `provider_id`'s context window is assumed: not again (kits/task.py)."""
        new = self.settings.model_copy(deep=True)
        new.context_window_told = [*new.context_window_told, provider_id]
        await self.save_settings(new)

    # -- MCP servers: a server is launched only after the person saw its command line and agreed --

    def mcp_servers(self) -> list[tuple[str, str, bool]]:
        """(name, the exact command line shown to the person, approved) for each configured server."""
        return [
            (name, MCPConsents.command_line(cfg), self.mcp_consents.is_approved(name, cfg))
            for name, cfg in self.settings.mcp_servers.items()
        ]

    async def add_mcp_server(self, name: str, cfg: MCPServerConfig | dict, *, approve: bool = False) -> str:
        """Add or replace a server; `approve=True` records consent to exactly this configuration."""
        cfg = cfg if isinstance(cfg, MCPServerConfig) else MCPServerConfig.model_validate(cfg)
        if not name or not (cfg.command or cfg.url):
            raise ConfigError("An MCP server needs a name and either a command or a url.")
        new = self.settings.model_copy(deep=True)
        new.mcp_servers[name] = cfg
        await self.save_settings(new)
        if approve:
            self.mcp_consents.approve(name, cfg)
        return MCPConsents.command_line(cfg)

    async def remove_mcp_server(self, name: str) -> None:
        if name not in self.settings.mcp_servers:
            raise ConfigError(f"No MCP server named {name!r}.")
        new = self.settings.model_copy(deep=True)
        del new.mcp_servers[name]
        await self.save_settings(new)
        self.mcp_consents.revoke(name)

    def approve_mcp_server(self, name: str) -> str:
        cfg = self.settings.mcp_servers.get(name)
        if cfg is None:
            raise ConfigError(f"No MCP server named {name!r}.")
        self.mcp_consents.approve(name, cfg)
        return MCPConsents.command_line(cfg)

    async def import_mcp_config(self, path: str | Path) -> dict[str, str]:
        """Merge the servers of a Claude Desktop / Cursor (`mcpServers`) or VS Code (`servers`) config file.
        Nothing is approved: returns name -> command line for the person to review."""
        path = Path(path).expanduser()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            raw = data.get("mcpServers", data.get("servers")) if isinstance(data, dict) else None
            if not isinstance(raw, dict):
                raise ConfigError(f"{path} has no 'mcpServers' section.")
            servers = {name: MCPServerConfig.model_validate(cfg) for name, cfg in raw.items()}
        except OSError as exc:
            raise ConfigError(f"Cannot read {path}: {exc.strerror}.") from None
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}.") from None
        except ValidationError as exc:
            raise ConfigError(f"{path} has an invalid MCP server entry: {exc.errors()[0]['msg']}.") from None
        new = self.settings.model_copy(deep=True)
        new.mcp_servers.update(servers)
        await self.save_settings(new)
        return {name: MCPConsents.command_line(cfg) for name, cfg in servers.items()}


async def _redacted(listing: Awaitable[list[str]]) -> list[str]:
    """A server's error text may echo the key it was sent (some proxies do): never show that."""
    try:
        return await listing
    except ProviderError as exc:
        raise ProviderError(redact(exc.message), status_code=exc.status_code, retryable=exc.retryable) from None
