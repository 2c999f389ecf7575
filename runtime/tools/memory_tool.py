"""The `memory` tool: the agent views, creates, updates and deletes the person's memory files.

The files and their rules (names confined to the memory folder by the workspace gate, no secrets, provenance)
are `runtime/memory/folder.py`'s; this is the model's handle on them. Viewing changes nothing; every other command
is a write and follows the task's approval mode like a workspace write (`effect_for`), and its approval says
truly what it touches: the person's memories, which every task and chat shares (`touches_for`). A write may not repeat
what Hearth hid as a secret anywhere in the turn's conversation (the person's words, tool results): the model
saw those words, so it could copy them into a memory (`Memory.write`'s `seen`, as the extraction job does); a
helper's call (`delegate`) counts the helper's own conversation too.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..errors import ToolError
from .base import Effect, ToolContext, ToolResult

COMMANDS = ("view", "create", "update", "delete")
WRITES = {"create": "saves a new memory", "update": "replaces your memory", "delete": "deletes your memory"}


class MemoryFiles(Protocol):
    """What the tool uses of runtime.memory.folder.Memory (the memory package sits above the tools)."""

    async def sync(self) -> list[dict[str, Any]]: ...

    async def read(self, name: str) -> str: ...

    async def write(self, name: str, text: str, *, origin: str, task_id: str | None = None,
                    turn_id: str | None = None, create: bool | None = None, seen: str = "") -> str: ...

    async def delete(self, name: str) -> None: ...


class MemoryTool:
    name = "memory"
    description = (
        "The person's memory: small Markdown files kept across tasks (the index is in your instructions). "
        "command 'view' without a path shows the index, with a path that file; 'create' a new file and 'update' "
        "(replace the whole file) take a path such as 'units.md' and the content, whose first line sums it up; "
        "'delete' removes one. Keep only lasting facts about the person, their preferences and projects, one "
        "topic per file; never secrets."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "enum": list(COMMANDS)},
            "path": {"type": "string", "description": "A memory file name, e.g. 'units.md'."},
            "content": {"type": "string", "description": "create/update: the whole file, first line a summary."},
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    effect = Effect.workspace_write  # what approvals assume before the arguments are known

    def __init__(self, memory: MemoryFiles):
        self._memory = memory

    def effect_for(self, args: dict[str, Any]) -> Effect:
        return Effect.read_only if args.get("command") == "view" else Effect.workspace_write

    def touches_for(self, args: dict[str, Any]) -> str:
        """Memory is the person's, shared by every task and chat: never this task's workspace."""
        command, path = args.get("command"), args.get("path")
        if command == "view":
            return "It only reads your saved memories."
        what = WRITES.get(str(command), "changes your memories")  # a model may send a list: no key then
        name = f" {path}" if isinstance(path, str) and path else ""
        return (f"It {what}{name} in Hearth's memory folder, which every task and chat reads (not this task's "
                "workspace folder).")

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        command, path = args.get("command"), args.get("path")
        if command not in COMMANDS:
            raise ToolError(f"command must be one of {', '.join(COMMANDS)}.")
        if path is not None and not isinstance(path, str):
            raise ToolError("path must be a string, such as 'units.md'.")
        if command == "view" and path is None:
            entries = await self._memory.sync()
            lines = "\n".join(f"- {e['name']}: {e['summary']}" for e in entries)
            return ToolResult(lines or "No memories yet.")
        if path is None:
            raise ToolError(f"'{command}' needs a path, such as 'units.md'.")
        if command == "view":
            return ToolResult(await self._memory.read(path))
        if command == "delete":
            await self._memory.delete(path)
            return ToolResult(f"Deleted the memory '{path}'.")
        content = args.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ToolError(f"'{command}' needs the content of the file.")
        name = await self._memory.write(path, content, origin="tool", task_id=ctx.task_id, turn_id=ctx.turn_id,
                                        create=command == "create", seen=_seen(ctx))
        return ToolResult(f"{'Saved' if command == 'create' else 'Updated'} the memory '{name}'.")


def _seen(ctx: ToolContext) -> str:
    """Everything the calling model has read: the turn's conversation, with the person's input and the tool
    results, and for a helper (engine/agent/subagents.py) its own conversation too."""
    chat = [*(getattr(ctx.extra.get("turn"), "chat", None) or ()), *(ctx.extra.get("helper_chat") or ())]
    return "\n\n".join(m["content"] for m in chat if isinstance(m.get("content"), str))
