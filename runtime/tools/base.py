"""The tool protocol.

A tool has a name, a JSON schema for its arguments, an effect class and an async `run` that honours
cancellation: when the turn is stopped, the task running the tool is cancelled, and the tool must release
what it holds (kill its processes, close its sessions) before re-raising `CancelledError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol


class Effect(StrEnum):
    read_only = "read_only"
    workspace_write = "workspace_write"
    external = "external"


@dataclass(slots=True)
class ToolContext:
    task_id: str
    turn_id: str
    workspace: Path
    call_id: str
    extra: dict[str, Any] = field(default_factory=dict)
    # Records what a write is about to do (workspace.write_intent), committed before it does it; None outside a
    # turn's own calls (a helper's), where nothing is recovered.
    intend: Callable[[dict[str, str]], Awaitable[None]] | None = None


@dataclass(slots=True)
class ToolResult:
    output: str
    is_error: bool = False
    state: dict[str, Any] | None = None  # task state the call changes (e.g. {"todos": [...]}); the loop saves it


class Tool(Protocol):
    """Every tool also says in one sentence what a call touches, for its approval: `touches`, or
    `touches_for(args)` when that depends on the call (see `touches` below)."""

    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    effect: Effect

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult: ...


# What an approval says of a tool that does not say it itself (a test's FunctionTool), by its effect class.
EFFECT_TOUCHES = {
    Effect.read_only: "It only reads.",
    Effect.workspace_write: "It changes files in this task's workspace folder.",
    Effect.external: "It may change things outside this task's workspace folder.",
}


def touches(tool: Any, args: dict[str, Any]) -> str:
    """The sentence an approval of this call shows the person: what it reads or changes, in the tool's words."""
    said = tool.touches_for(args) if hasattr(tool, "touches_for") else getattr(tool, "touches", None)
    if said:
        return said
    effect = tool.effect_for(args) if hasattr(tool, "effect_for") else tool.effect
    return EFFECT_TOUCHES[Effect(effect)]


def tool_spec(tool: Tool) -> dict[str, Any]:
    """The chat-completions `tools` entry for a tool."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


@dataclass(slots=True)
class FunctionTool:
    """A tool built from an async function; tests and small built-ins use it."""

    name: str
    description: str
    parameters: dict[str, Any]
    effect: Effect
    fn: Callable[[dict[str, Any], ToolContext], Awaitable[object]]  # a ToolResult, or what becomes its output

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        out = await self.fn(args, ctx)
        return out if isinstance(out, ToolResult) else ToolResult(str(out))
