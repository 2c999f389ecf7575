"""Permission rules in SQLite (runtime/tools/approvals.py says what they mean). Part of `Store`."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import delete, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .models import PermissionRuleRow


class RulesRepo:
    engine: AsyncEngine

    async def permission_rules(self, task_id: str | None = None, *, every: bool = False) -> list[dict[str, Any]]:
        """The rules that apply to a task (its own and the global ones), only the global ones when `task_id` is
        None, or with `every=True` all of them; global first, then oldest first."""
        table = PermissionRuleRow.__table__
        query = select(table).order_by(PermissionRuleRow.task_id.is_not(None), PermissionRuleRow.id)
        if not every:
            query = query.where(or_(PermissionRuleRow.task_id.is_(None), PermissionRuleRow.task_id == task_id))
        async with self.engine.connect() as conn:
            return [dict(r._mapping) for r in await conn.execute(query)]

    async def add_permission_rule(self, task_id: str | None, tool: str, command: str | None,
                                  decision: str) -> dict[str, Any]:
        """Add a rule; the same rule twice is kept once (the existing one is returned)."""
        table = PermissionRuleRow.__table__
        same = select(table).where(
            PermissionRuleRow.task_id.is_(None) if task_id is None else PermissionRuleRow.task_id == task_id,
            PermissionRuleRow.tool == tool, PermissionRuleRow.decision == decision,
            PermissionRuleRow.command.is_(None) if command is None else PermissionRuleRow.command == command,
        )
        async with self.engine.begin() as conn:
            found = (await conn.execute(same)).first()
            if found is None:
                await conn.execute(insert(PermissionRuleRow).values(
                    task_id=task_id, tool=tool, command=command, decision=decision, created_at=time.time()))
                found = (await conn.execute(same)).one()
            return dict(found._mapping)

    async def remove_permission_rule(self, rule_id: int) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(delete(PermissionRuleRow).where(PermissionRuleRow.id == rule_id))
        return result.rowcount > 0
