"""Teams: members and a plan of assignments with dependencies, on the same turn engine (`rt.teams`).

A team has members (name, role instructions, model, tools, approval mode) and a plan: assignments, each given to
a member, that depend on others (a DAG, checked by team_plan.check_plan). Every assignment owns a conversation
(store/teams.py) whose turns run through a `host.TurnHost`, so each has a task turn's guarantees: one lock, replay
and live events (`subscribe`), Stop ends it `aborted`, a crash leaves it `interrupted`.

The scheduler is event-driven: when an assignment's turn ends (the host's `turn_over`), its outcome becomes its
status (done with its answer as output, failed with the error, aborted, interrupted, waiting for the person) and
the plan moves on — blocked assignments whose dependencies are all done or skipped become ready, and ready ones
start, at most the team's `max_parallel` at once. An assignment's input is its instructions followed by the
results of its dependencies, each labelled with its id, title and member. A failed dependency keeps its
dependents blocked, with the reason, until `retry` or `skip`; `stop` ends the running ones `aborted` and starts
nothing more; after a crash done assignments stay done and `run` continues the interrupted ones (a Continue, as
for a task turn). A team is `running` while its scheduler may start assignments, `idle` when the person must act
(or stopped it), `done` when every assignment is done or skipped. A team created with a `lead` starts with that
member's planning assignment, whose `plan_assignments` tool writes the rest of the plan (tools/team_lead.py).

Decisions: members get the task kit's tools filtered to their list ("all": every one, the approved MCP servers'
included; a list names them `server__tool`) and no memory (kits/team.py); they work in one folder per team
(`workspaces/<team id>`). Permission rules: the global ones.
"""

from __future__ import annotations

import asyncio
import builtins  # `Teams.list` hides the builtin in the annotations below it
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from typing import Any

from ..errors import ConfigError, HearthError, TaskBusy, TeamNotFound
from ..events import Event
from ..infos import AssignmentInfo, MemberInfo, MessageInfo, TeamInfo, TurnHandle
from ..kits.task import AgentKit
from ..kits.team import TeamKit, assignment_input
from ..store.teams import TeamStore, outcome
from ..teams import plan as team_plan
from ..teams import specs as team_specs
from ..tools import team_lead
from ..workspace import workspace_for
from .core import Core
from .permissions import Permissions

RETRYABLE = ("failed", "aborted", "interrupted")


class Teams:
    def __init__(self, core: Core, store: TeamStore, kit: AgentKit, permissions: Permissions):
        self._core = core
        self._store = store
        self._permissions = permissions  # a member's tools are checked as a rule's tool is
        self._turns = core.host(store, TeamKit(kit, self._propose), self._row, noun="Assignment",
                                turn_over=self._turn_over)
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)  # one plan change at a time
        self._settling: set[asyncio.Task] = set()

    async def _row(self, assignment_id: str) -> dict:
        """The assignment as the turn engine reads an owner: the member's model and approval mode, the team's
        folder, no planning, memory or documents."""
        row = await self._store.get_assignment(assignment_id)
        if row is None:
            raise TeamNotFound(None, assignment_id)
        team = await self._team(row["team_id"])
        member = next(m for m in await self._store.members(team["id"]) if m["name"] == row["member"])
        return dict(row, workspace=str(workspace_for(self._core.home, team["id"])), model=member["model"],
                    approval=member["approval"], planning=False, memory=False, knowledge=[], network=False,
                    member_row=member, goal=team["title"])

    async def _team(self, team_id: str) -> dict:
        team = await self._store.get_team(team_id)
        if team is None:
            raise TeamNotFound(team_id)
        return team

    async def _assignment(self, team_id: str, key: str) -> dict:
        await self._team(team_id)
        for row in await self._store.assignments(team_id):
            if row["key"] == key:
                return row
        raise TeamNotFound(team_id, key)

    # -- checking what the person gives --

    def _member(self, spec: dict) -> dict:
        """A member as given, checked: its model, and its tools named as a rule's are."""
        return team_specs.member_entry(spec, self._core.check_model, self._permissions.check_tool_name)

    @staticmethod
    def _planning_entry(goal: str, members: list[dict], lead: str) -> dict[str, Any]:
        if not any(m["name"] == lead for m in members):
            raise ConfigError(f"The lead must be a member of the team, and {lead!r} is not.")
        return {"id": uuid.uuid4().hex, "key": team_lead.PLAN_KEY, "kind": "plan", "title": "Plan the work",
                "instructions": team_lead.planning_instructions(goal, members, lead), "member": lead,
                "depends_on": []}

    # -- teams --

    async def create(self, goal: str, members: Iterable[dict] = (), assignments: Iterable[dict] = (),
                     max_parallel: int | None = None, lead: str | None = None) -> TeamInfo:
        """A new team working toward `goal`. `members`: {name, model (default: the default model), role, tools
        (names, or one of team_specs.TOOL_SETS: "all", "files", "read_only", "none"), approval}; `assignments`:
        {key, instructions, member, depends_on (keys), title}; `lead`: a member who first turns the goal into
        assignments (its planning assignment, key `plan`).
        Checked whole first (ConfigError naming the problem: an unknown member or dependency, a cycle …)."""
        self._core.writable()
        if not goal.strip():
            raise ConfigError("A team needs a goal.")
        max_parallel = self._core.settings.team_max_parallel if max_parallel is None else max_parallel
        if max_parallel < 1:
            raise ConfigError("A team runs at least one assignment at a time (max_parallel ≥ 1).")
        members = [self._member(m) for m in members]
        if len({m["name"] for m in members}) != len(members):
            raise ConfigError("Two members of the team have the same name.")
        plan = [team_specs.plan_entry(a) for a in assignments]
        if lead is not None:
            plan.insert(0, self._planning_entry(goal.strip(), members, lead))
        team_plan.check_plan((m["name"] for m in members), plan)
        team_id = uuid.uuid4().hex
        await self._store.create_team(team_id, goal.strip(), max_parallel, members, plan)
        async with self._locks[team_id]:
            await self._advance(team_id)  # blocked or ready, with the reasons
        return await self.get(team_id)

    async def add_member(self, team_id: str, name: str, model: str | None = None, role: str = "",
                         tools: list[str] | str = "all", approval: str = "ask") -> TeamInfo:
        self._core.writable()
        await self._team(team_id)
        member = self._member({"name": name, "model": model, "role": role, "tools": tools, "approval": approval})
        if any(m["name"] == member["name"] for m in await self._store.members(team_id)):
            raise ConfigError(f"The team has a member called {member['name']!r} already.")
        await self._store.add_member(team_id, member)
        return await self.get(team_id)

    async def add_assignment(self, team_id: str, key: str, instructions: str, member: str,
                             depends_on: Iterable[str] = (), title: str | None = None) -> TeamInfo:
        """Add an assignment to the plan; when the team is running it starts as soon as it can."""
        self._core.writable()
        entry = team_specs.plan_entry({"key": key, "instructions": instructions, "member": member,
                                  "depends_on": list(depends_on), "title": title})
        async with self._locks[team_id]:
            await self._team(team_id)
            members = [m["name"] for m in await self._store.members(team_id)]
            team_plan.check_plan(members, [*await self._store.assignments(team_id), entry])
            await self._store.add_assignment(team_id, entry)
            await self._advance(team_id)
        return await self.get(team_id)

    async def delete(self, team_id: str) -> None:
        """Delete the team, its plan and its conversations; running assignments are stopped first. The team's
        folder stays on disk, as a deleted task's does."""
        self._core.writable()
        await self.stop(team_id)
        await self.wait_idle(team_id)
        async with self._locks[team_id]:
            await self._store.delete_team(team_id)
        self._locks.pop(team_id, None)

    async def get(self, team_id: str) -> TeamInfo:
        """The team, its members and its assignments with their statuses, in plan order."""
        team = await self._team(team_id)
        return TeamInfo(**team, members=[MemberInfo.model_validate(m) for m in await self._store.members(team_id)],
                        assignments=[AssignmentInfo.model_validate(a) for a in await self._store.assignments(team_id)])

    async def list(self) -> list[TeamInfo]:
        """Every team, the most recently changed first."""
        return [await self.get(t["id"]) for t in await self._store.list_teams()]

    # -- running the plan --

    async def run(self, team_id: str) -> TeamInfo:
        """Start the plan, or go on with it: what is ready starts, and stopped or interrupted assignments
        continue where they ended (failed ones wait for `retry` or `skip`)."""
        self._core.writable()
        async with self._locks[team_id]:
            rows = await self._store.assignments(team_id)
            await self._team(team_id)
            if not rows:
                raise ConfigError("The team has no assignments yet: add one first.")
            for row in rows:
                if row["status"] in ("aborted", "interrupted"):
                    await self._store.update_assignment(row["id"], status="ready", reason=None)
            await self._store.update_team(team_id, state="running")
            await self._advance(team_id)
        return await self.get(team_id)

    async def stop(self, team_id: str) -> None:
        """Stop the team: its running assignments, and those waiting for an answer, end `aborted`, and nothing more
        starts until `run`."""
        self._core.writable()
        async with self._locks[team_id]:
            await self._team(team_id)
            await self._store.update_team(team_id, state="idle")
            for row in await self._store.assignments(team_id):
                await self._turns.stop(row["id"])

    async def stop_assignment(self, team_id: str, key: str) -> None:
        """Stop one assignment (it ends `aborted`; what depends on it stays blocked); the rest go on."""
        await self._turns.stop((await self._assignment(team_id, key))["id"])

    async def retry(self, team_id: str, key: str) -> TurnHandle | None:
        """A new answer for a failed, stopped or interrupted assignment; the plan goes on after it."""
        self._core.writable()
        async with self._locks[team_id]:
            row = await self._assignment(team_id, key)
            if row["status"] not in RETRYABLE:
                raise ConfigError(f"Assignment {key!r} is {row['status']}: only a failed, stopped or interrupted "
                                  "one can be retried.")
            if row["last_reason"] is None:
                parts = await self._first_input(row)
            else:
                parts = [{"type": "retry", "message_id": await self._turns.last_input(row["id"])}]
            await self._store.update_team(team_id, state="running")
            return await self._start(row, parts)

    async def skip(self, team_id: str, key: str) -> TeamInfo:
        """Go on without this assignment: its dependents start without its result."""
        self._core.writable()
        async with self._locks[team_id]:
            row = await self._assignment(team_id, key)
            if row["status"] in ("running", "done"):
                raise ConfigError(f"Assignment {key!r} is {row['status']}: it cannot be skipped.")
            await self._store.update_assignment(row["id"], status="skipped", reason="skipped by you")
            await self._store.update_team(team_id, state="running")
            await self._advance(team_id)
        return await self.get(team_id)

    async def answer(self, team_id: str, key: str, request_id: str, answer: str) -> TurnHandle | None:
        """Reply to the approval ("approve" / "deny") or question an assignment waits for; it goes on."""
        self._core.writable()
        async with self._locks[team_id]:
            row = await self._assignment(team_id, key)
            req = row["pending_request"]
            if not req or req["request_id"] != request_id:
                if seen := await self._store.find_client_message(row["id"], f"answer:{request_id}"):
                    return self._turns.duplicate(seen)  # answered already (a double click)
                raise ConfigError(f"Assignment {key!r} is not waiting for an answer to request {request_id!r}.")
            if req["kind"] == "approval" and answer not in ("approve", "deny"):
                raise ConfigError(f"An approval is answered with 'approve' or 'deny', not {answer!r}.")
            await self._store.update_team(team_id, state="running")
            return await self._start(row, [{"type": "answer", "request": req, "answer": answer}],
                                     f"answer:{request_id}")

    async def wait_idle(self, team_id: str) -> None:
        """Wait until no assignment of the team runs and the plan has taken in every ended turn."""
        while True:
            running = [r["id"] for r in await self._store.assignments(team_id) if not self._core.aborts.idle(r["id"])]
            if not running and not self._settling:
                return
            for assignment_id in running:
                await self._turns.wait_idle(assignment_id)
            await self.wait_settled()

    # -- an assignment's conversation --

    async def messages(self, team_id: str, key: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> builtins.list[MessageInfo]:
        """As `rt.tasks.messages`, for one assignment (paged the same way)."""
        row = await self._assignment(team_id, key)
        rows = await self._store.messages(row["id"], before=before, after=after, limit=limit)
        return [MessageInfo.model_validate(m) for m in rows]

    async def turn_rows(self, team_id: str, key: str, turn_ids: Iterable[str] | None = None) -> builtins.list[dict]:
        """As `rt.tasks.turns`, for one assignment: its turn rows (reason, error, usage, times)."""
        row = await self._assignment(team_id, key)
        return await self._store.turns(row["id"], None if turn_ids is None else list(turn_ids))

    async def turn_details(self, team_id: str, key: str, turn_id: str) -> dict:
        """As `rt.tasks.turn_details`, for one assignment's turn: its model steps (helpers are not kept)."""
        row = await self._assignment(team_id, key)
        return {"steps": await self._store.steps(row["id"], turn_id), "subagents": []}

    async def wait_assignment(self, team_id: str, key: str) -> None:
        """Until the assignment's running turn (if any) is over and the plan has taken it in."""
        row = await self._assignment(team_id, key)
        await self._turns.wait_idle(row["id"])
        await self.wait_settled()

    async def wait_settled(self) -> None:
        """Until every ended turn has moved its plan on: what a board reads after a turn ends."""
        await asyncio.gather(*list(self._settling), return_exceptions=True)

    async def subscribe(self, team_id: str, key: str, after_seq: int = 0, turn_id: str | None = None,
                        follow: bool = False, deltas: bool = True) -> AsyncIterator[Event]:
        """As `rt.tasks.subscribe`, for one assignment; its events' `task_id` is the assignment's `id`."""
        row = await self._assignment(team_id, key)
        async for event in self._turns.subscribe(row["id"], after_seq, turn_id, follow, deltas):
            yield event

    # -- the scheduler --

    def _turn_over(self, assignment_id: str) -> None:
        settle = asyncio.ensure_future(self._settle(assignment_id))
        for pending in (self._settling, self._core.runs):  # the runtime waits for them at shutdown
            pending.add(settle)
            settle.add_done_callback(pending.discard)

    async def _settle(self, assignment_id: str) -> None:
        """An assignment's turn ended: its outcome becomes its status, and the plan moves on."""
        row = await self._store.get_assignment(assignment_id)
        if row is None:
            return
        async with self._locks[row["team_id"]]:
            row = await self._store.get_assignment(assignment_id)
            if row is None:  # deleted (with its team) while this waited for the lock: nothing to settle
                return
            status = outcome(row)
            if status is None or assignment_id in self._core.aborts:  # another turn of it has started since
                return
            values: dict[str, Any] = {"status": status, "reason": None, "output": None}
            if status == "done":
                values["output"] = await self._store.last_answer(assignment_id)
            elif status == "failed":
                values["reason"] = row["last_error"] or "the turn failed"
            if status == "done" and row["kind"] == "plan" and not any(
                    team_lead.is_proposed(r, row["key"]) for r in await self._store.assignments(row["team_id"])):
                values.update(status="failed", reason=team_lead.NO_PROPOSAL, output=None)
            elif status == "waiting":
                values["reason"] = "waiting for your answer"
            await self._store.update_assignment(assignment_id, **values)
            await self._advance(row["team_id"])

    async def _propose(self, plan_id: str, specs: builtins.list[dict]) -> str:
        """The lead's `plan_assignments`: its assignments replace any it proposed before, checked whole."""
        plan = await self._store.get_assignment(plan_id)
        if plan is None or plan["kind"] != "plan":
            raise ConfigError("Only a team's planning assignment can plan assignments.")
        entries = team_lead.proposal(plan["key"], [team_specs.plan_entry(s) for s in specs])
        async with self._locks[plan["team_id"]]:
            rows = await self._store.assignments(plan["team_id"])
            kept = [r for r in rows if not team_lead.is_proposed(r, plan["key"])]
            members = [m["name"] for m in await self._store.members(plan["team_id"])]
            team_plan.check_plan(members, [*kept, *entries])
            await self._store.replace_assignments(plan["team_id"], [r["id"] for r in rows if r not in kept], entries)
            await self._advance(plan["team_id"])
        return team_lead.summary(entries)

    async def _advance(self, team_id: str) -> None:
        """With the team's lock held: refresh blocked and ready assignments, start what may start."""
        rows = await self._store.assignments(team_id)
        for row, status, reason in team_plan.refresh(rows):
            await self._store.update_assignment(row["id"], status=status, reason=reason)
            row.update(status=status, reason=reason)
        team = await self._team(team_id)
        if team["state"] != "running" or self._core.closed:
            return
        for row in team_plan.to_start(rows, team["max_parallel"]):
            parts = await self._first_input(row, rows) if row["last_reason"] is None else [{"type": "continue"}]
            await self._start(row, parts)
        if not any(r["status"] == "running" for r in rows):
            await self._store.update_team(team_id, state="done" if team_plan.finished(rows) else "idle")

    async def _first_input(self, row: dict, rows: builtins.list[dict] | None = None) -> builtins.list[dict]:
        rows = rows if rows is not None else await self._store.assignments(row["team_id"])
        return [{"type": "text", "text": assignment_input(row, {r["key"]: r for r in rows})}]

    async def _start(self, row: dict, parts: builtins.list[dict],
                     client_msg_id: str | None = None) -> TurnHandle | None:
        """Mark the assignment running and start its turn; a turn that cannot start fails it, with the reason."""
        await self._store.update_assignment(row["id"], status="running", reason=None)
        row.update(status="running", reason=None)
        try:
            return await self._turns.send(row["id"], parts, client_msg_id, False)
        except TaskBusy:  # a turn of it runs already: its end moves the plan on
            return None
        except HearthError as exc:
            await self._store.update_assignment(row["id"], status="failed", reason=str(exc))
            row.update(status="failed", reason=str(exc))
            return None
