"""Permissions (`rt.permissions`): whether commands run sandboxed, permission rules (per task and global) and a
task's sandbox settings. MCP servers paused because their tools changed are `rt.mcp`'s.

Decisions: rules live in SQLite (`permission_rules`), global ones with no task, so a task's rules go when the task
goes and Settings lists them all in one query.
"""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel

from ..errors import ConfigError, TaskNotFound
from ..kits.task import AgentKit
from ..tools.approvals import COMMAND_TOOLS, command_words
from ..tools.mcp.util import of_server, server_prefix
from .core import Core


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


def _text(tool: str, decision: str, command: str | None) -> str:
    verb = "Always allow" if decision == "allow" else "Never allow"
    if command is None:
        return f"{verb} {tool}"
    how = "starting with" if decision == "allow" else "like"
    return f"{verb} {tool} commands {how} `{command}`"


class Permissions:
    def __init__(self, core: Core, kit: AgentKit):
        self._core = core
        self._kit = kit  # the sandbox, and the names of the tools a turn can have

    async def sandbox_status(self) -> SandboxInfo:
        """Whether shell commands run in a sandbox on this computer, in plain words (starts one to find out, once)."""
        status, _ = await self._kit.sandbox()
        return SandboxInfo(available=status.available, mechanism=status.mechanism, message=status.message,
                           process_limit=status.process_limit, detail=status.detail)

    async def rules(self, task_id: str | None = None) -> list[PermissionRule]:
        """Every rule (global first), or with `task_id` the rules that apply to that task (its own and global)."""
        store = self._core.store
        if task_id is not None and await store.get_task(task_id) is None:
            raise TaskNotFound(task_id)
        rows = await store.permission_rules(task_id, every=task_id is None)
        titles = {t["id"]: t["title"] for t in await store.list_tasks()} if rows else {}
        return [_rule(r, titles) for r in rows]

    async def add_rule(self, tool: str, decision: str, *, command: str | None = None,
                       task_id: str | None = None) -> PermissionRule:
        """Always allow (`decision="allow"`) or never allow (`"deny"`) a tool, for one task or (no `task_id`) for
        every task. `command` narrows a run_shell rule to commands starting with those words ("git status");
        see tools/approvals.py for how a command line is matched."""
        self._core.writable()
        tool = (tool or "").strip()
        if not tool:
            raise ConfigError("A rule needs the name of a tool.")
        self.check_tool_name(tool)
        return await self.approval_rule(tool, decision, command, task_id)

    async def approval_rule(self, tool: str, decision: str, command: str | None,
                            task_id: str | None) -> PermissionRule:
        """A rule for `tool`, whose name is known to be a tool's: the tool of an approval the person answered
        with "remember" (`rt.tasks.answer`), or one `add_rule` checked."""
        self._core.writable()
        if decision not in ("allow", "deny"):
            raise ConfigError(f"A rule either allows or denies ('allow' or 'deny'), not {decision!r}.")
        if command is not None:
            if tool not in COMMAND_TOOLS:
                raise ConfigError(f"Only {', '.join(sorted(COMMAND_TOOLS))} rules can name a command; {tool} rules "
                                  f"apply to the whole tool.")
            command = shlex.join(command_words(command))
        title = None
        if task_id is not None:
            task = await self._core.store.get_task(task_id)
            if task is None:
                raise TaskNotFound(task_id)
            title = task["title"]
        row = await self._core.store.add_permission_rule(task_id, tool, command, decision)
        return _rule(row, {task_id: title} if task_id else {})

    def check_tool_name(self, tool: str) -> None:
        """A rule (or a team member's tool list) must name a tool a turn can have (a typo would be a rule that
        never applies): one of Hearth's, or `server__tool` of a configured MCP server, whose tools may not be
        known until it runs."""
        own = self._kit.tool_names()
        servers = sorted(self._core.settings.mcp_servers)
        if tool in own or any(of_server(tool, server) for server in servers):
            return
        mcp = (f"or an MCP server's tool ({', '.join(f'{server_prefix(s)}…' for s in servers)})" if servers
               else "(an MCP server's tools are named server__tool once a server is added)")
        raise ConfigError(f"Hearth has no tool called {tool!r}. Name one of {', '.join(own)} {mcp}.")

    async def remove_rule(self, rule_id: int) -> bool:
        """Remove a rule; False when there is no such rule (any more). Applies from the next tool call's turn."""
        self._core.writable()
        return await self._core.store.remove_permission_rule(rule_id)

    async def set_task_sandbox(self, task_id: str, *, network: bool | None = None,
                               unsandboxed_ok: bool | None = None) -> None:
        """A task's sandbox settings: `network` lets its commands use the network; `unsandboxed_ok` accepts the
        risk of running its commands without a sandbox in full_auto when none can start (otherwise each asks).
        Apply from the task's next turn."""
        self._core.writable()
        if await self._core.store.get_task(task_id) is None:
            raise TaskNotFound(task_id)
        values = {k: bool(v) for k, v in (("network", network), ("unsandboxed_ok", unsandboxed_ok)) if v is not None}
        if values:
            await self._core.store.update_task(task_id, **values)


def _rule(row: dict[str, Any], titles: dict[str | None, str | None]) -> PermissionRule:
    task_id = row["task_id"]
    return PermissionRule(
        id=row["id"], scope="global" if task_id is None else "task", task_id=task_id,
        task_title=titles.get(task_id) if task_id else None, tool=row["tool"], command=row["command"],
        decision=row["decision"], text=_text(row["tool"], row["decision"], row["command"]),
        created_at=row["created_at"],
    )
