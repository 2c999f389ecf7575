"""AgentKit: the desktop implementation of the turn's agent port (ports.AgentPort).

It builds what a turn's setup needs from the data folder's settings: the task's provider (built once and
kept), its tools, this turn's MCP sessions, the context budget, and the background jobs finalize enqueues.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .config import Settings
from .keys import SecretStore
from .models.library import ModelLibrary
from .providers import build_provider
from .providers.base import Provider
from .tools.base import Tool
from .tools.builtin import builtin_tools
from .tools.interactive import interactive_tools
from .tools.mcp_consent import MCPConsents

DEFAULT_CONTEXT_TOKENS = 16_000


class AgentKit:
    def __init__(self, settings: Callable[[], Settings], keys: SecretStore, providers: dict[str, Provider],
                 tools: list[Tool], consents: MCPConsents, library: ModelLibrary | None = None):
        self._settings = settings
        self._keys = keys
        self.providers = providers
        self._extra_tools = tools
        self._consents = consents
        self._library = library  # installed local models, served by a llama_cpp provider without model_path

    @property
    def max_steps(self) -> int:
        return self._settings().max_steps

    def provider(self, provider_id: str) -> Provider:
        provider = self.providers.get(provider_id)
        if provider is None:
            cfg = self._settings().provider(provider_id)
            provider = self.providers[provider_id] = build_provider(cfg, self._keys, self._library)
        return provider

    def tools_for(self, task: dict[str, Any]) -> dict[str, Tool]:
        hidden = self._settings().secret_env_names()  # read per turn: a settings change applies to the next
        tools = [*builtin_tools(hidden_env=hidden), *interactive_tools(), *self._extra_tools]
        return {t.name: t for t in tools}

    def mcp_sessions(self, cwd: Path):
        """This turn's MCP sessions, or None when no server is configured."""
        settings = self._settings()
        if not settings.mcp_servers:
            return None
        from .tools.mcp import MCPTurnSessions

        return MCPTurnSessions(
            settings.mcp_servers, approved=self._consents.is_approved,
            connect_timeout=settings.mcp_connect_timeout, cwd=cwd, hidden_env=settings.secret_env_names(),
        )

    def context_window(self, provider: Provider, model: str) -> int:
        """The model's context window in tokens: the provider's own figure (per model when it serves several),
        else a conservative default."""
        sized = getattr(provider, "context_tokens_for", None)
        if sized is not None:
            return int(sized(model))
        return int(getattr(provider, "context_tokens", DEFAULT_CONTEXT_TOKENS))

    def context_budget(self, provider: Provider) -> int:
        return int(getattr(provider, "context_tokens", DEFAULT_CONTEXT_TOKENS) * 0.75)

    def background_jobs(self, task: dict[str, Any], reason: str) -> list[tuple[str, Awaitable[Any]]]:
        return []
