"""Tools that talk to the person: `ask_user` ends the turn `waiting` with a question (the loop handles it;
`Runtime.answer()` starts the next turn with the answer), `todo_write` keeps the task's todo list
(tools/planning.py)."""

from __future__ import annotations

from typing import Any

from ..errors import ToolError
from .base import Effect, ToolContext, ToolResult
from .planning import TodoWrite


class AskUser:
    name = "ask_user"
    description = "Ask the person a question and wait for their answer. Use when only they can decide."
    parameters = {
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question, complete and clear."}},
        "required": ["question"],
    }
    effect = Effect.read_only
    touches = "It asks you a question; it changes nothing."
    asks_user = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ToolError("ask_user is answered by the person, not run.")


def interactive_tools() -> list:
    return [AskUser(), TodoWrite()]
