"""Tools that talk to the person: `ask_user` ends the turn `waiting` with a question (the loop handles it;
`Runtime.answer()` starts the next turn with the answer), `todo_write` keeps the task's todo list, shown to
the person as the call's result."""

from __future__ import annotations

from typing import Any

from ..errors import ToolError
from .base import Effect, FunctionTool, ToolContext, ToolResult


class AskUser:
    name = "ask_user"
    description = "Ask the person a question and wait for their answer. Use when only they can decide."
    parameters = {
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question, complete and clear."}},
        "required": ["question"],
    }
    effect = Effect.read_only
    asks_user = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ToolError("ask_user is answered by the person, not run.")


async def _todo_write(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    items = args.get("items")
    if not isinstance(items, list) or not all(isinstance(i, dict) and "text" in i for i in items):
        raise ToolError("todo_write needs 'items': a list of {text, done}.")
    lines = [f"[{'x' if i.get('done') else ' '}] {i['text']}" for i in items]
    return ToolResult("Todo list updated:\n" + "\n".join(lines))


TODO_WRITE = FunctionTool(
    name="todo_write",
    description="Replace the task's todo list (shown to the person). Mark items done as you finish them.",
    parameters={
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "done": {"type": "boolean"}},
                    "required": ["text"],
                },
            }
        },
        "required": ["items"],
    },
    effect=Effect.read_only,
    fn=_todo_write,
)


def interactive_tools() -> list:
    return [AskUser(), TODO_WRITE]
