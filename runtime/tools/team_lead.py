"""A lead member turns the team's goal into assignments (services/teams.py).

A team created with a lead starts with one planning assignment (kind "plan", key `plan`) given to that member:
its input is the goal and the roster, its tools are the member's read-only ones plus `plan_assignments`. That
tool puts the proposed assignments in the plan at once, each depending on the planning assignment, so none
starts before the lead's turn is done and every one is given the lead's closing brief as a dependency result.
Calling it again (the lead changing its mind, or a Continue after a crash) replaces the earlier proposal, which
cannot have started. A planning turn that ends without a proposal fails with that reason, so the person sees it
and can retry or write assignments themselves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConfigError, ToolError
from .base import Effect, ToolContext, ToolResult

PLAN_KEY = "plan"
MAX_PROPOSED = 30  # a runaway plan is refused, not scheduled
NO_PROPOSAL = "the lead ended without planning any assignment (retry it, or add assignments yourself)"


def planning_instructions(goal: str, members: list[dict[str, Any]], lead: str) -> str:
    """The planning assignment's input: the goal and who can do what."""
    roster = []
    for m in members:
        tools = "every tool" if m["tools"] == "all" else (", ".join(m["tools"]) or "no tools")
        role = f" — {m['role']}" if m["role"] else ""
        roster.append(f"- {m['name']}{role} (tools: {tools})")
    return "\n".join([
        f"You lead this team. Turn its goal into assignments for the members: {goal}",
        "", "Members:", *roster, "",
        "Give each assignment a short id, a title, the member who does it, complete instructions (the member sees "
        "only those and the results it builds on) and the ids of the assignments whose results it needs. Call "
        "plan_assignments once with all of them; assignments that do not depend on each other run at the same "
        f"time. You may give assignments to yourself ({lead}). Then end with a short brief for the members: it "
        "reaches every one of them.",
    ])


Propose = Callable[[str, list[dict[str, Any]]], Awaitable[str]]


class PlanAssignments:
    name = "plan_assignments"
    description = ("Put your assignments in the team's plan (replacing any you proposed before). Each has an id, a "
                   "title, the member who does it, instructions, and depends_on: ids whose results it needs.")
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "assignments": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"}, "title": {"type": "string"}, "member": {"type": "string"},
                        "instructions": {"type": "string"},
                        "depends_on": {"type": "array", "items": {"type": "string"}},
                    },
                    "required": ["id", "member", "instructions"],
                },
            }
        },
        "required": ["assignments"],
    }
    effect = Effect.read_only  # it changes the team's plan, which the person sees on the board, not the world
    touches = "It sets the team's plan, shown on the team's board; it changes no files."

    def __init__(self, propose: Propose):
        self._propose = propose

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        specs = args.get("assignments")
        if not isinstance(specs, list) or not specs or not all(isinstance(s, dict) for s in specs):
            raise ToolError("'assignments' must be a non-empty list of {id, title, member, instructions, "
                            "depends_on}.")
        if len(specs) > MAX_PROPOSED:
            raise ToolError(f"A plan has at most {MAX_PROPOSED} assignments; merge some.")
        try:
            return ToolResult(await self._propose(ctx.task_id, specs))
        except ConfigError as exc:  # the plan's checks speak in sentences the model can act on
            raise ToolError(f"The plan was not taken: {exc}") from None


def proposal(plan_key: str, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries as the lead's: each waits for the planning assignment (and gets its brief)."""
    for entry in entries:
        entry["depends_on"] = [plan_key, *(d for d in entry["depends_on"] if d != plan_key)]
    return entries


def is_proposed(row: dict[str, Any], plan_key: str) -> bool:
    return row["kind"] == "work" and plan_key in row["depends_on"]


def summary(entries: list[dict[str, Any]]) -> str:
    lines = [f"- {e['key']} ({e['member']}): {e['title'] or e['instructions'][:80]}"
             + (f" — after {', '.join(e['depends_on'][1:])}" if len(e["depends_on"]) > 1 else "")
             for e in entries]
    return "The plan now has these assignments; they start when you end your turn:\n" + "\n".join(lines)
