"""Planning and the task's todo list (runtime/ARCHITECTURE.md, "Planning").

- `submit_plan` ends a planning turn `waiting` with the plan as a request of kind "plan"; the person approves it
  (as is or edited) or rejects it with a reason, through `Runtime.answer()`. Approved, its steps become the
  task's todo list and the following turns carry it out.
- `todo_write` replaces the todo list (items with a status: pending, in_progress, done). The list is task state,
  persisted at once and shown beside the conversation; every model step is reminded of the open items.
"""

from __future__ import annotations

from typing import Any

from ..errors import ToolError
from .base import Effect, ToolContext, ToolResult

STATUSES = ("pending", "in_progress", "done")


def check_todos(items: Any) -> list[dict]:
    """The items as stored ({"content", "status"}), or ToolError with what is wrong."""
    if not isinstance(items, list) or not items:
        raise ToolError("'items' must be a non-empty list of {content, status}.")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("content"), str) or not item["content"].strip():
            raise ToolError("Each item needs 'content': the step, in words.")
        status = item.get("status", "pending")
        if status not in STATUSES:
            raise ToolError(f"An item's status is one of {', '.join(STATUSES)}, not {status!r}.")
        out.append({"content": item["content"].strip(), "status": status})
    return out


def todo_lines(todos: list[dict]) -> str:
    marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
    return "\n".join(f"{marks.get(t['status'], '[ ]')} {t['content']}" for t in todos)


def reminder(todos: list[dict] | None) -> str | None:
    """The short note each step gets about the open todo items, or None when nothing is open."""
    open_items = [t for t in todos or () if t.get("status") != "done"]
    if not open_items:
        return None
    return "Open items on this task's todo list (update it with todo_write as you go):\n" + todo_lines(open_items)


class TodoWrite:
    name = "todo_write"
    description = ("Replace this task's todo list (the person sees it beside the conversation). Give every item, "
                   "with status pending, in_progress or done; mark items done as you finish them.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"content": {"type": "string"}, "status": {"type": "string", "enum": list(STATUSES)}},
                    "required": ["content", "status"],
                },
            }
        },
        "required": ["items"],
    }
    effect = Effect.read_only  # it changes the task's list, not files or the world
    touches = "It rewrites the todo list shown beside this conversation; it changes no files."

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        todos = check_todos(args.get("items"))
        return ToolResult("Todo list updated:\n" + todo_lines(todos), state={"todos": todos})


class SubmitPlan:
    name = "submit_plan"
    description = ("Propose your plan for this task to the person and wait for their approval. Call it once you "
                   "have looked around enough (read-only tools only while planning). Steps are short and concrete.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "summary": {"type": "string", "description": "One or two sentences: the approach."},
            # At least one: a local model writes its call under a grammar made from this schema.
            "steps": {"type": "array", "items": {"type": "string"}, "minItems": 1,
                      "description": "The steps, in order."},
        },
        "required": ["steps"],
    }
    effect = Effect.read_only
    touches = "It shows you a plan to approve; it changes nothing."
    asks_user = "plan"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        raise ToolError("submit_plan is answered by the person, not run.")


def plan_steps(args: dict[str, Any]) -> list[str]:
    steps = args.get("steps")
    if not isinstance(steps, list) or not steps or not all(isinstance(s, str) and s.strip() for s in steps):
        raise ToolError("submit_plan needs 'steps': a non-empty list of short sentences.")
    return [s.strip() for s in steps]
