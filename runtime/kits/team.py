"""An assignment's agent port and input (services/teams.py): the member's tools and role, its dependencies' results."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..tools.base import Effect, Tool
from ..tools.deliver import Deliver
from ..tools.team_lead import PlanAssignments, Propose
from .task import Prepared

if TYPE_CHECKING:
    from ..providers.base import Provider
    from .task import AgentKit


class TeamKit:
    """An assignment's agent port: the task kit, with the member's tools (MCP servers' included) and its role
    as a note. A lead's planning assignment gets the member's read-only tools and `plan_assignments`
    (tools/team_lead.py)."""

    def __init__(self, kit: AgentKit, propose: Propose):
        self._kit = kit
        self._plan_tool = PlanAssignments(propose)

    @property
    def max_steps(self) -> int:
        return self._kit.max_steps

    def provider(self, provider_id: str) -> Provider:
        return self._kit.provider(provider_id)

    async def prepare(self, owner: dict[str, Any], input_parts: list[dict]) -> Prepared:
        prepared = await self._kit.prepare(owner, input_parts, background=False)
        allowed = owner["member_row"]["tools"]
        # An assignment's result is its output, which the plan passes on; deliverables are a task's.
        tools = {n: t for n, t in prepared.tools.items() if n != Deliver.name and (allowed == "all" or n in allowed)}
        if owner["kind"] == "plan":
            tools = {n: t for n, t in tools.items() if t.effect == Effect.read_only}
            tools[self._plan_tool.name] = self._plan_tool
        return Prepared(tools, [role_note(owner), *prepared.notes], prepared.system)

    def mcp_sessions(self, owner: dict[str, Any], cwd: Path) -> MemberMCP | None:
        """The MCP servers' tools for a member given "all" tools, or the ones its list names (`server__tool`:
        only those servers start). A planning assignment gets none: it only reads, and an outside program's
        tools may change things."""
        if owner["kind"] == "plan":
            return None
        allowed = owner["member_row"]["tools"]
        sessions = self._kit.mcp_sessions(owner, cwd, for_tools=None if allowed == "all" else allowed)
        return None if sessions is None else MemberMCP(sessions, allowed)

    async def context_window(self, provider: Provider, model: str) -> tuple[int, str | None]:
        return await self._kit.context_window(provider, model)

    def background_jobs(self, owner: dict[str, Any], reason: str) -> list[tuple[str, dict[str, Any]]]:
        return []

    async def run_job(self, kind: str, payload: dict[str, Any]) -> Any:
        return await self._kit.run_job(kind, payload)


class MemberMCP:
    """A turn's MCP sessions as a member sees them: only the tools its list allows."""

    def __init__(self, sessions: Any, allowed: str | list[str]):
        self._sessions = sessions
        self._allowed = allowed

    @property
    def paused(self) -> set[str]:
        return self._sessions.paused

    def start(self) -> None:
        self._sessions.start()

    async def ready(self) -> tuple[list[Tool], list[str]]:
        tools, warnings = await self._sessions.ready()
        return [t for t in tools if self._allowed == "all" or t.name in self._allowed], warnings

    async def aclose(self) -> None:
        await self._sessions.aclose()


def role_note(owner: dict[str, Any]) -> str:
    member = owner["member_row"]
    lines = [f"You are {member['name']}, a member of a team working toward this goal: {owner['goal']}",
             "The person's message is your assignment. Your final answer is handed to the team members whose "
             "assignments build on yours, so end with the result itself, complete."]
    if member["role"]:
        lines.append(f"Your role: {member['role']}")
    return "\n".join(lines)


def assignment_input(row: dict[str, Any], by_key: dict[str, dict]) -> str:
    """The instructions, then each dependency's result, labelled (a skipped one has none)."""
    sections = [row["instructions"]]
    if row["depends_on"]:
        sections.append("Results of the assignments this one builds on:")
    for key in row["depends_on"]:
        dep = by_key[key]
        body = dep["output"] if dep["status"] == "done" else "(skipped by the person: there is no result)"
        sections.append(f'<result of="{dep["key"]}" title="{dep["title"] or dep["key"]}" by="{dep["member"]}">\n'
                        f"{body}\n</result>")
    return "\n\n".join(sections)
