"""AgentKit: the desktop implementation of the turn's agent port (ports.AgentPort).

It builds what a turn's setup needs from the data folder's settings: the task's provider (built once and
kept), its tools, this turn's MCP sessions, the context budget, and the background jobs finalize enqueues.
A task's `run_shell` runs in the sandbox (tools/sandbox.py) when one can start: its workspace writable, the data
folder and the home's secret folders hidden, the network as the task allows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from .config import Settings
from .keys import SecretStore
from .providers import build_provider
from .providers.base import Provider
from .tools.base import Tool
from .tools.builtin import builtin_tools
from .tools.interactive import interactive_tools
from .tools.mcp_consent import MCPConsents
from .tools.sandbox import Sandbox, SandboxStatus, detect, hidden_paths

DEFAULT_CONTEXT_TOKENS = 16_000


class AgentKit:
    def __init__(self, home: Path, settings: Callable[[], Settings], keys: SecretStore,
                 providers: dict[str, Provider], tools: list[Tool], consents: MCPConsents):
        self.home = home
        self._settings = settings
        self._keys = keys
        self.providers = providers
        self._extra_tools = tools
        self._consents = consents

    @property
    def max_steps(self) -> int:
        return self._settings().max_steps

    def provider(self, provider_id: str) -> Provider:
        provider = self.providers.get(provider_id)
        if provider is None:
            cfg = self._settings().provider(provider_id)
            provider = self.providers[provider_id] = build_provider(cfg, self._keys)
        return provider

    async def sandbox(self) -> tuple[SandboxStatus, Sandbox | None]:
        """Whether commands can run sandboxed (detected once per sandbox program; see tools/sandbox.py)."""
        settings = self._settings()
        return await detect(settings.sandbox_bwrap, settings.sandbox_max_processes)

    async def tools_for(self, task: dict[str, Any]) -> dict[str, Tool]:
        hidden = self._settings().secret_env_names()  # read per turn: a settings change applies to the next
        status, sandbox = await self.sandbox()
        shell = {"sandbox": sandbox, "hidden": hidden_paths(self.home), "network": bool(task.get("network")),
                 "unsandboxed_reason": status.reason or ""}
        tools = [*builtin_tools(hidden_env=hidden, **shell), *interactive_tools(), *self._extra_tools]
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
            check_tools=self._consents.check_tools,
        )

    def context_budget(self, provider: Provider) -> int:
        return int(getattr(provider, "context_tokens", DEFAULT_CONTEXT_TOKENS) * 0.75)

    def background_jobs(self, task: dict[str, Any], reason: str) -> list[tuple[str, Awaitable[Any]]]:
        return []
