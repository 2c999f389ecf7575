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
from .parts import text_of
from .providers import build_provider
from .providers.base import Provider
from .store.repo import Store
from .tools.base import Tool
from .tools.builtin import builtin_tools
from .tools.interactive import interactive_tools
from .tools.mcp_consent import MCPConsents

DEFAULT_CONTEXT_TOKENS = 16_000
TITLE_CHARS = 60


class AgentKit:
    def __init__(self, settings: Callable[[], Settings], keys: SecretStore, providers: dict[str, Provider],
                 tools: list[Tool], consents: MCPConsents, store: Store, library: ModelLibrary | None = None):
        self._settings = settings
        self._keys = keys
        self.providers = providers
        self._extra_tools = tools
        self._consents = consents
        self._store = store
        self._library = library

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
        tools = [*builtin_tools(), *interactive_tools(), *self._extra_tools]
        return {t.name: t for t in tools}

    def mcp_sessions(self, cwd: Path):
        """This turn's MCP sessions, or None when no server is configured."""
        settings = self._settings()
        if not settings.mcp_servers:
            return None
        from .tools.mcp import MCPTurnSessions

        return MCPTurnSessions(
            settings.mcp_servers, approved=self._consents.is_approved,
            connect_timeout=settings.mcp_connect_timeout, cwd=cwd,
        )

    def context_budget(self, provider: Provider, model: str) -> int:
        sized = getattr(provider, "context_tokens_for", None)
        tokens = sized(model) if sized is not None else getattr(provider, "context_tokens", DEFAULT_CONTEXT_TOKENS)
        return int(tokens * 0.75)

    def background_jobs(self, task: dict[str, Any], reason: str) -> list[tuple[str, Awaitable[Any]]]:
        if reason == "completed" and not task.get("title"):
            return [("title", self.make_title(task["id"]))]
        return []

    async def make_title(self, task_id: str) -> None:
        """A title from the first input when the person gave none."""
        messages = await self._store.messages(task_id)
        first = next((text_of(m["parts"]) for m in messages if m["role"] == "user" and text_of(m["parts"])), "")
        line = " ".join(first.split())
        task = await self._store.get_task(task_id)
        if line and task is not None and not task["title"]:
            title = line[:TITLE_CHARS] + ("…" if len(line) > TITLE_CHARS else "")
            await self._store.update_task(task_id, title=title)
