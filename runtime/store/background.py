"""A task's background commands and its wake-up in SQL (tools/shell/background.py and services/wakeups.py say
what they mean). Part of `Store`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from .conversations import row_dicts
from .models import BackgroundCommandRow, WakeupRow


class BackgroundRepo:
    engine: AsyncEngine

    # -- background commands --

    async def add_background(self, values: dict[str, Any]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(BackgroundCommandRow).values(**values))

    async def end_background(self, command_id: str, status: str, exit_code: int | None, ended_at: float) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(BackgroundCommandRow).where(BackgroundCommandRow.id == command_id)
                               .values(status=status, exit_code=exit_code, ended_at=ended_at))

    async def background_command(self, command_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            rows = row_dicts(await conn.execute(
                select(BackgroundCommandRow.__table__).where(BackgroundCommandRow.id == command_id)))
        return rows[0] if rows else None

    async def background_commands(self, task_id: str) -> list[dict[str, Any]]:
        """The task's background commands, newest first."""
        async with self.engine.connect() as conn:
            return row_dicts(await conn.execute(
                select(BackgroundCommandRow.__table__).where(BackgroundCommandRow.task_id == task_id)
                .order_by(BackgroundCommandRow.started_at.desc())))

    async def running_background(self) -> list[dict[str, Any]]:
        """Every command recorded as running (at start: the ones the last process left behind)."""
        async with self.engine.connect() as conn:
            return row_dicts(await conn.execute(
                select(BackgroundCommandRow.__table__).where(BackgroundCommandRow.status == "running")))

    # -- wake-ups --

    async def set_wakeup(self, values: dict[str, Any]) -> None:
        """The task's wake-up, replacing the one it had."""
        async with self.engine.begin() as conn:
            await conn.execute(delete(WakeupRow).where(WakeupRow.task_id == values["task_id"]))
            await conn.execute(insert(WakeupRow).values(**values))

    async def wakeups(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """Every task's wake-up, or one task's."""
        query = select(WakeupRow.__table__)
        if task_id is not None:
            query = query.where(WakeupRow.task_id == task_id)
        async with self.engine.connect() as conn:
            return row_dicts(await conn.execute(query))

    async def delete_wakeup(self, task_id: str, wakeup_id: str | None = None) -> bool:
        """Drop the task's wake-up (only if it is still `wakeup_id`, when given); False when there was none."""
        query = delete(WakeupRow).where(WakeupRow.task_id == task_id)
        if wakeup_id is not None:
            query = query.where(WakeupRow.id == wakeup_id)
        async with self.engine.begin() as conn:
            return bool((await conn.execute(query)).rowcount)
