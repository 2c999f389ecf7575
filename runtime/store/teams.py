"""Teams in SQLite: teams, their members, the plan's assignments, and (through `Conversations`) each
assignment's messages, turns, model steps (an answer's Details) and checkpoints.

An assignment is the owner of its conversation, as a chat is (its `state`, `last_reason`… are its turn's), so its
turns run on the shared engine and answer the same storage port; its place in the plan is `status`. Permission
rules: the global ones (an assignment has none of its own).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..parts import FinalRecord, text_of
from .conversations import Conversations, Tables, row_dict
from .plan_status import finished, refresh
from .rules import RulesRepo
from .team_models import (
    AssignmentCheckpointRow,
    AssignmentMessageRow,
    AssignmentRow,
    AssignmentStepRow,
    AssignmentTurnRow,
    TeamMemberRow,
    TeamRow,
)

ASSIGNMENT_TABLES = Tables(AssignmentRow.__table__, AssignmentMessageRow.__table__, AssignmentTurnRow.__table__,
                           AssignmentCheckpointRow.__table__, "assignment_id")
A = AssignmentRow.__table__


def outcome(row: dict[str, Any]) -> str | None:
    """The plan status an assignment's last turn leaves it in, or None while a turn is (still) running."""
    if row["state"] == "running":
        return None
    return {"completed": "done", "error": "failed", "aborted": "aborted", "interrupted": "interrupted",
            "waiting": "waiting", None: "ready"}.get(row["last_reason"], "failed")


class TeamStore(Conversations, RulesRepo):
    def __init__(self, engine: AsyncEngine):
        super().__init__(engine, ASSIGNMENT_TABLES)

    # -- teams and members --

    async def create_team(self, team_id: str, title: str, max_parallel: int, members: list[dict],
                          assignments: list[dict]) -> None:
        """The team, its members and its first assignments, in one transaction."""
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(insert(TeamRow).values(id=team_id, title=title, max_parallel=max_parallel,
                                                      state="idle", created_at=now, updated_at=now))
            for m in members:
                await conn.execute(insert(TeamMemberRow).values(team_id=team_id, created_at=now, **m))
            for position, a in enumerate(assignments):
                await conn.execute(insert(AssignmentRow).values(
                    team_id=team_id, position=position, status="blocked", created_at=now, updated_at=now, **a))

    async def get_team(self, team_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(TeamRow.__table__).where(TeamRow.id == team_id))).first()
        return row_dict(r) if r else None

    async def list_teams(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            return [row_dict(r) for r in await conn.execute(
                select(TeamRow.__table__).order_by(TeamRow.updated_at.desc()))]

    async def update_team(self, team_id: str, **values: Any) -> None:
        values["updated_at"] = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(update(TeamRow).where(TeamRow.id == team_id).values(**values))

    async def delete_team(self, team_id: str) -> None:
        """The team and all it holds, in one transaction."""
        owned = select(A.c.id).where(A.c.team_id == team_id)
        async with self.engine.begin() as conn:
            turn_ids = select(AssignmentTurnRow.id).where(AssignmentTurnRow.assignment_id.in_(owned))
            await conn.execute(delete(AssignmentStepRow).where(AssignmentStepRow.turn_id.in_(turn_ids)))
            for table in (AssignmentCheckpointRow, AssignmentTurnRow, AssignmentMessageRow):
                await conn.execute(delete(table).where(table.assignment_id.in_(owned)))
            await conn.execute(delete(A).where(A.c.team_id == team_id))
            await conn.execute(delete(TeamMemberRow).where(TeamMemberRow.team_id == team_id))
            await conn.execute(delete(TeamRow).where(TeamRow.id == team_id))

    async def members(self, team_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            return [row_dict(r) for r in await conn.execute(select(TeamMemberRow.__table__).where(
                TeamMemberRow.team_id == team_id).order_by(TeamMemberRow.created_at, TeamMemberRow.name))]

    async def add_member(self, team_id: str, member: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(TeamMemberRow).values(team_id=team_id, created_at=time.time(), **member))

    # -- assignments --

    async def assignments(self, team_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            return [row_dict(r) for r in await conn.execute(
                select(A).where(A.c.team_id == team_id).order_by(A.c.position))]

    async def get_assignment(self, assignment_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(A).where(A.c.id == assignment_id))).first()
        return row_dict(r) if r else None

    async def add_assignment(self, team_id: str, assignment: dict[str, Any]) -> None:
        now = time.time()
        async with self.engine.begin() as conn:
            last = (await conn.execute(select(func.max(A.c.position)).where(A.c.team_id == team_id))).scalar_one()
            position = -1 if last is None else last
            await conn.execute(insert(AssignmentRow).values(team_id=team_id, position=position + 1, status="blocked",
                                                            created_at=now, updated_at=now, **assignment))

    async def replace_assignments(self, team_id: str, remove: list[str], entries: list[dict[str, Any]]) -> None:
        """A lead's new proposal: the earlier one (which never ran) out, the new one in, in one transaction."""
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(delete(A).where(A.c.id.in_(remove)))
            last = (await conn.execute(select(func.max(A.c.position)).where(A.c.team_id == team_id))).scalar_one()
            for offset, entry in enumerate(entries, 1):
                await conn.execute(insert(AssignmentRow).values(
                    team_id=team_id, position=(-1 if last is None else last) + offset, status="blocked", created_at=now,
                    updated_at=now, **entry))

    async def update_assignment(self, assignment_id: str, **values: Any) -> None:
        values["updated_at"] = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(update(AssignmentRow).where(AssignmentRow.id == assignment_id).values(**values))

    async def last_answer(self, assignment_id: str) -> str:
        """The text of the assignment's answer: what its dependents are given."""
        async with self.engine.connect() as conn:
            return await _last_answer(conn, assignment_id)

    # -- recovery --

    async def recover(self) -> list[str]:
        """Startup recovery: running turns end `interrupted` (Conversations.recover); an assignment marked running
        takes its last turn's outcome (interrupted, or done when the crash came after the turn's commit), and a
        running team is done if every assignment is, else idle until the person runs it again."""
        recovered = await super().recover()
        async with self.engine.begin() as conn:
            rows = [row_dict(r) for r in await conn.execute(select(A).where(A.c.status == "running"))]
            for row in rows:
                status = outcome(row) or "interrupted"
                output = await _last_answer(conn, row["id"]) if status == "done" else None
                await conn.execute(update(A).where(A.c.id == row["id"]).values(status=status, output=output))
            for team_id in {row["team_id"] for row in rows}:  # dependents say what they wait for now
                plan = [row_dict(r) for r in await conn.execute(select(A).where(A.c.team_id == team_id))]
                for row, status, reason in refresh(plan):
                    await conn.execute(update(A).where(A.c.id == row["id"]).values(status=status, reason=reason))
            # A crash after the last assignment's commit but before the team's own write leaves it "running".
            for team_id in (await conn.execute(select(TeamRow.id).where(TeamRow.state == "running"))).scalars():
                plan = [row_dict(r) for r in await conn.execute(select(A).where(A.c.team_id == team_id))]
                await conn.execute(update(TeamRow).where(TeamRow.id == team_id).values(
                    state="done" if finished(plan) else "idle"))
        return recovered

    async def write_turn_records(self, rec: FinalRecord) -> None:
        """An assignment turn's model steps (its helpers' records and usage anchor are not kept)."""
        if rec["steps"]:
            async with self.engine.begin() as conn:
                await conn.execute(insert(AssignmentStepRow),
                                   [dict(s, turn_id=rec["turn_id"]) for s in rec["steps"]])

    async def steps(self, assignment_id: str, turn_id: str) -> list[dict[str, Any]]:
        """The model steps of one of this assignment's turns, in order (none for another's turn)."""
        own = select(AssignmentTurnRow.id).where(AssignmentTurnRow.id == turn_id,
                                                 AssignmentTurnRow.assignment_id == assignment_id)
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(AssignmentStepRow.__table__).where(AssignmentStepRow.turn_id.in_(own))
                                      .order_by(AssignmentStepRow.step_index))
            return [row_dict(r) for r in rows]

    # -- the rest of the turn's storage port: an assignment keeps none of these --

    async def set_todos(self, assignment_id: str, todos: list[dict]) -> None:
        return None


async def _last_answer(conn: AsyncConnection, assignment_id: str) -> str:
    """The answers since the person's last real input, joined: a Continue or an approval's answer goes on with
    the same answer, so its dependents get all of it."""
    m = AssignmentMessageRow.__table__
    rows = await conn.execute(select(m.c.role, m.c.parts).where(
        m.c.assignment_id == assignment_id, m.c.status == "complete").order_by(m.c.id.desc()))
    texts = []
    for role, parts in rows:
        if role == "assistant":
            texts.append(text_of(parts))
        elif role == "user" and not any(p.get("type") in ("continue", "answer") for p in parts):
            break
    return "".join(reversed(texts))
