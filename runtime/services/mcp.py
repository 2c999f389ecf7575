"""MCP servers (`rt.mcp`): the configured servers and the person's consent to each, adding, removing and importing
them, and the servers paused because their tools changed since they were approved.

A server is launched only after the person saw its exact command line and agreed (tools/mcp/consent.py). Pinned
tool lists live with the consents in the data folder's `mcp_consents.json`: they belong to a server, not to a task,
and the file already holds that server's approval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ..config import MCPServerConfig
from ..errors import ConfigError
from ..tools.mcp.consent import MCPConsents
from .core import Core


class MCPToolChange(BaseModel):
    """An MCP server paused because its tools differ from the ones approved."""

    server: str
    command_line: str
    seen_at: float | None
    changes: list[dict[str, Any]]  # {"tool", "change": added|removed|changed, "fields", "text": a line diff}


class MCPServers:
    def __init__(self, core: Core):
        self._core = core

    def servers(self) -> list[tuple[str, str, bool]]:
        """(name, the exact command line shown to the person, approved) for each configured server."""
        consents = self._core.consents
        return [
            (name, MCPConsents.command_line(cfg), consents.is_approved(name, cfg))
            for name, cfg in self._core.settings.mcp_servers.items()
        ]

    async def add(self, name: str, cfg: MCPServerConfig | dict, *, approve: bool = False) -> str:
        """Add or replace a server; `approve=True` records consent to exactly this configuration."""
        cfg = cfg if isinstance(cfg, MCPServerConfig) else MCPServerConfig.model_validate(cfg)
        if not name or not (cfg.command or cfg.url):
            raise ConfigError("An MCP server needs a name and either a command or a url.")
        new = self._core.settings.model_copy(deep=True)
        new.mcp_servers[name] = cfg
        await self._core.save_settings(new)
        if approve:
            self._core.consents.approve(name, cfg)
        return MCPConsents.command_line(cfg)

    async def remove(self, name: str) -> None:
        if name not in self._core.settings.mcp_servers:
            raise ConfigError(f"No MCP server named {name!r}.")
        new = self._core.settings.model_copy(deep=True)
        del new.mcp_servers[name]
        await self._core.save_settings(new)
        self._core.consents.revoke(name)

    def approve(self, name: str) -> str:
        """Consent to the server's configuration as it is now; returns its command line."""
        cfg = self._core.settings.mcp_servers.get(name)
        if cfg is None:
            raise ConfigError(f"No MCP server named {name!r}.")
        self._core.consents.approve(name, cfg)
        return MCPConsents.command_line(cfg)

    async def import_config(self, path: str | Path) -> dict[str, str]:
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
        new = self._core.settings.model_copy(deep=True)
        new.mcp_servers.update(servers)
        await self._core.save_settings(new)
        return {name: MCPConsents.command_line(cfg) for name, cfg in servers.items()}

    def tool_changes(self) -> list[MCPToolChange]:
        """MCP servers paused because their tools changed since they were approved, with the difference."""
        servers = self._core.settings.mcp_servers
        return [
            MCPToolChange(server=name, seen_at=change["seen_at"], changes=change["changes"],
                          command_line=MCPConsents.command_line(servers[name]) if name in servers else "")
            for name, change in sorted(self._core.consents.tool_changes().items())
        ]

    def approve_tools(self, name: str) -> None:
        """Accept a paused server's changed tools: they become the approved ones and the server runs again."""
        self._core.writable()
        if not self._core.consents.approve_tools(name):
            raise ConfigError(f"MCP server {name!r} has no changed tools waiting for approval.")
