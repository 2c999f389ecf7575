"""The permissions part of the Runtime facade: whether commands run sandboxed, permission rules (per task and
global), a task's sandbox settings, and MCP servers paused because their tools changed. `Runtime` inherits it, so
callers (the app's Settings, the CLI, tests) still use only `runtime.api`.

Decisions: rules live in SQLite (`permission_rules`), global ones with no task, so a task's rules go when the task
goes and Settings lists them all in one query. Pinned MCP tool lists live with the MCP consents in the data folder's
`mcp_consents.json` (tools/mcp/consent.py): they belong to a server, not to a task, and the file already holds that
server's approval.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..config import Settings
from ..errors import ConfigError, TaskNotFound
from ..kits.task import AgentKit
from ..store.repo import Store
from ..tools.approvals import COMMAND_TOOLS, command_words
from ..tools.mcp.consent import MCPConsents
from ..tools.mcp.util import of_server, server_prefix


class SandboxInfo(BaseModel):
    """What Settings shows about the sandbox of shell commands."""

    available: bool
    mechanism: str | None  # "bubblewrap" | "sandbox-exec" | None
    message: str  # plain words: what a command can and cannot do here, or why there is no sandbox
    process_limit: int | None
    detail: str | None  # what the sandbox program said when it could not start


class PermissionRule(BaseModel):
    id: int
    scope: str  # "global" | "task"
    task_id: str | None
    task_title: str | None
    tool: str
    command: str | None  # run_shell rules: the words a command starts with; None: every call of the tool
    decision: str  # "allow" | "deny"
    text: str  # the rule in plain words
    created_at: float


class MCPToolChange(BaseModel):
    """An MCP server paused because its tools differ from the ones approved."""

    server: str
    command_line: str
    seen_at: float | None
    changes: list[dict[str, Any]]  # {"tool", "change": added|removed|changed, "fields", "text": a line diff}


def _text(tool: str, decision: str, command: str | None) -> str:
    verb = "Always allow" if decision == "allow" else "Never allow"
    if command is None:
        return f"{verb} {tool}"
    how = "starting with" if decision == "allow" else "like"
    return f"{verb} {tool} commands {how} `{command}`"


class PermissionsMixin:
    home: Path
    settings: Settings
    store: Store
    kit: AgentKit
    mcp_consents: MCPConsents
    _writable: Callable[[], None]

    async def sandbox_status(self) -> SandboxInfo:
        """Whether shell commands run in a sandbox on this computer, in plain words (starts one to find out, once)."""
        status, _ = await self.kit.sandbox()
        return SandboxInfo(available=status.available, mechanism=status.mechanism, message=status.message,
                           process_limit=status.process_limit, detail=status.detail)

    async def permission_rules(self, task_id: str | None = None) -> list[PermissionRule]:
        """Every rule (global first), or with `task_id` the rules that apply to that task (its own and global)."""
        if task_id is not None and await self.store.get_task(task_id) is None:
            raise TaskNotFound(task_id)
        rows = await self.store.permission_rules(task_id, every=task_id is None)
        titles = {t["id"]: t["title"] for t in await self.store.list_tasks()} if rows else {}
        return [self._rule(r, titles) for r in rows]

    async def add_permission_rule(self, tool: str, decision: str, *, command: str | None = None,
                                  task_id: str | None = None) -> PermissionRule:
        """Always allow (`decision="allow"`) or never allow (`"deny"`) a tool, for one task or (no `task_id`) for
        every task. `command` narrows a run_shell rule to commands starting with those words ("git status");
        see tools/approvals.py for how a command line is matched."""
        self._writable()
        tool = (tool or "").strip()
        if not tool:
            raise ConfigError("A rule needs the name of a tool.")
        self._check_tool_name(tool)
        return await self._add_rule(tool, decision, command, task_id)

    async def _add_rule(self, tool: str, decision: str, command: str | None, task_id: str | None) -> PermissionRule:
        """A rule for `tool`, whose name is known to be a tool's (checked, or the tool of an approval)."""
        self._writable()
        if decision not in ("allow", "deny"):
            raise ConfigError(f"A rule either allows or denies ('allow' or 'deny'), not {decision!r}.")
        if command is not None:
            if tool not in COMMAND_TOOLS:
                raise ConfigError(f"Only {', '.join(sorted(COMMAND_TOOLS))} rules can name a command; {tool} rules "
                                  f"apply to the whole tool.")
            command = shlex.join(command_words(command))
        title = None
        if task_id is not None:
            task = await self.store.get_task(task_id)
            if task is None:
                raise TaskNotFound(task_id)
            title = task["title"]
        row = await self.store.add_permission_rule(task_id, tool, command, decision)
        return self._rule(row, {task_id: title} if task_id else {})

    def _check_tool_name(self, tool: str) -> None:
        """A rule must name a tool a turn can have (a typo would be a rule that never applies): one of Hearth's,
        or `server__tool` of a configured MCP server, whose tools may not be known until it runs."""
        own = self.kit.tool_names()
        servers = sorted(self.settings.mcp_servers)
        if tool in own or any(of_server(tool, server) for server in servers):
            return
        mcp = (f"or an MCP server's tool ({', '.join(f'{server_prefix(s)}…' for s in servers)})" if servers
               else "(an MCP server's tools are named server__tool once a server is added)")
        raise ConfigError(f"Hearth has no tool called {tool!r}. Name one of {', '.join(own)} {mcp}.")

    async def remove_permission_rule(self, rule_id: int) -> bool:
        """Remove a rule; False when there is no such rule (any more). Applies from the next tool call's turn."""
        self._writable()
        return await self.store.remove_permission_rule(rule_id)

    async def set_task_sandbox(self, task_id: str, *, network: bool | None = None,
                               unsandboxed_ok: bool | None = None) -> None:
        """A task's sandbox settings: `network` lets its commands use the network; `unsandboxed_ok` accepts the
        risk of running its commands without a sandbox in full_auto when none can start (otherwise each asks).
        Apply from the task's next turn."""
        self._writable()
        if await self.store.get_task(task_id) is None:
            raise TaskNotFound(task_id)
        values = {k: bool(v) for k, v in (("network", network), ("unsandboxed_ok", unsandboxed_ok)) if v is not None}
        if values:
            await self.store.update_task(task_id, **values)

    def mcp_tool_changes(self) -> list[MCPToolChange]:
        """MCP servers paused because their tools changed since they were approved, with the difference."""
        servers = self.settings.mcp_servers
        return [
            MCPToolChange(server=name, seen_at=change["seen_at"], changes=change["changes"],
                          command_line=MCPConsents.command_line(servers[name]) if name in servers else "")
            for name, change in sorted(self.mcp_consents.tool_changes().items())
        ]

    def approve_mcp_tools(self, name: str) -> None:
        """Accept a paused server's changed tools: they become the approved ones and the server runs again."""
        self._writable()
        if not self.mcp_consents.approve_tools(name):
            raise ConfigError(f"MCP server {name!r} has no changed tools waiting for approval.")

    @staticmethod
    def _rule(row: dict[str, Any], titles: dict[str | None, str | None]) -> PermissionRule:
        task_id = row["task_id"]
        return PermissionRule(
            id=row["id"], scope="global" if task_id is None else "task", task_id=task_id,
            task_title=titles.get(task_id) if task_id else None, tool=row["tool"], command=row["command"],
            decision=row["decision"], text=_text(row["tool"], row["decision"], row["command"]),
            created_at=row["created_at"],
        )
