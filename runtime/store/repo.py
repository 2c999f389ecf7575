"""The only place that talks SQL. Hot writes use Core statements (one thread hop each).

A `Store` opens the desktop's SQLite file in a data folder (`open`), or any database by URL (`open_url`: the
server host's PostgreSQL, or a SQLite file); the chats, teams, memory and knowledge repositories take its engine.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, delete, insert, select, update
from sqlalchemy.engine import URL
from sqlalchemy.ext.asyncio import AsyncEngine

from ..parts import FinalRecord
from .background import BackgroundRepo
from .changes import ChangesRepo
from .conversations import ContextInputs, Conversations, DuplicateMessage, Tables, row_dict
from .db import database_url, make_engine, migrate_url, server_engine
from .db import migrate as migrate_db
from .deliveries import DeliveriesRepo
from .lengths import refuse_too_long
from .models import (
    BackgroundCommandRow,
    CheckpointRow,
    DeliveryRow,
    JobRow,
    MessageRow,
    PermissionRuleRow,
    StepRow,
    SubagentRow,
    TaskRow,
    TurnRow,
    UsageAnchorRow,
    WakeupRow,
)
from .rules import RulesRepo
from .users import UsersRepo

DB_NAME = "hearth.sqlite3"
__all__ = ["DB_NAME", "ContextInputs", "Conversations", "DuplicateMessage", "Store"]


TASK_TABLES = Tables(TaskRow.__table__, MessageRow.__table__, TurnRow.__table__, CheckpointRow.__table__, "task_id",
                     UsageAnchorRow.__table__)
_row = row_dict


class Store(Conversations, RulesRepo, UsersRepo, DeliveriesRepo, ChangesRepo, BackgroundRepo):
    """Tasks: their rows, and (through `Conversations`) their messages, turns and checkpoints; what their turns
    delivered (`DeliveriesRepo`); their turns' workspace changes (`ChangesRepo`); their background commands and
    wake-ups (`BackgroundRepo`); the server host's users (`UsersRepo`)."""

    def __init__(self, engine: AsyncEngine, path: Path | None):
        super().__init__(engine, TASK_TABLES)
        self.path = path  # the SQLite file; None on PostgreSQL

    @classmethod
    async def open(cls, home: Path, *, migrate: bool = True) -> Store:
        """The data folder's SQLite database (`DB_NAME`), migrated unless `migrate` is False."""
        return await cls._open_file(home / DB_NAME, migrate=migrate)

    @classmethod
    async def open_url(cls, url: str | URL) -> Store:
        """The database at `url`, migrated to the head: PostgreSQL (`postgresql+asyncpg://…`; a plain
        `postgresql://` is normalised) or a SQLite file (`sqlite:///PATH`). ConfigError for another URL,
        StorageUnavailable for a database that cannot be reached or was written by a newer Hearth."""
        url = database_url(url)
        if url.get_backend_name() == "sqlite":
            return await cls._open_file(Path(url.database or ""))
        await migrate_url(url)
        return cls(server_engine(url), None)

    @classmethod
    async def _open_file(cls, path: Path, *, migrate: bool = True) -> Store:
        engine = make_engine(path)
        if migrate:
            try:
                await migrate_db(engine)
            except BaseException:
                await engine.dispose()
                raise
        return cls(engine, path)

    async def aclose(self) -> None:
        await self.engine.dispose()

    # -- tasks --

    async def create_task(self, **values: Any) -> dict[str, Any]:
        """A task row from its columns (`owner_id`: the server host's user it belongs to; none: the local
        person's). ConfigError for a model name longer than its column."""
        refuse_too_long(TaskRow.__table__, values)
        now = time.time()
        values.setdefault("state", "idle")
        values.update(created_at=now, updated_at=now)
        async with self.engine.begin() as conn:
            await conn.execute(insert(TaskRow).values(**values))
            return _row((await conn.execute(select(TaskRow.__table__).where(TaskRow.id == values["id"]))).one())

    async def get_task(self, task_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(TaskRow.__table__).where(TaskRow.id == task_id))).first()
        return _row(r) if r else None

    async def get_owned_task(self, task_id: str, owner_id: str | None) -> dict[str, Any] | None:
        """The task, only when it belongs to `owner_id` (None: the local person); else None, as for a task that
        does not exist, so a caller cannot tell the two apart."""
        async with self.engine.connect() as conn:
            r = (await conn.execute(
                select(TaskRow.__table__).where(TaskRow.id == task_id, _owned_by(owner_id)))).first()
        return _row(r) if r else None

    async def list_tasks(self, owner_id: str | None = None) -> list[dict[str, Any]]:
        """The tasks of `owner_id` (a server user), or without one the local person's (every task on a desktop),
        newest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(TaskRow.__table__).where(_owned_by(owner_id))
                                      .order_by(TaskRow.updated_at.desc()))
            return [_row(r) for r in rows]

    async def update_task(self, task_id: str, **values: Any) -> None:
        values["updated_at"] = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(update(TaskRow).where(TaskRow.id == task_id).values(**values))

    async def delete_task(self, task_id: str) -> None:
        async with self.engine.begin() as conn:
            turn_ids = select(TurnRow.id).where(TurnRow.task_id == task_id)
            await conn.execute(delete(StepRow).where(StepRow.turn_id.in_(turn_ids)))
            await conn.execute(delete(SubagentRow).where(SubagentRow.turn_id.in_(turn_ids)))
            for table in (TurnRow, MessageRow, UsageAnchorRow, CheckpointRow, PermissionRuleRow, DeliveryRow,
                          BackgroundCommandRow, WakeupRow):
                await conn.execute(delete(table).where(table.task_id == task_id))
            await conn.execute(delete(TaskRow).where(TaskRow.id == task_id))

    async def copy_messages(self, source_id: str, target_id: str, source: Conversations | None = None) -> int:
        """Copy the finished messages of a task (or of another owner, e.g. a chat) into a task, in order."""
        rows = await (source or self).finished_messages(source_id)
        values = [dict(r, task_id=target_id, status="complete") for r in rows]
        if values:
            async with self.engine.begin() as conn:
                await conn.execute(insert(MessageRow), values)
        return len(values)

    # -- turns --

    async def steps(self, turn_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(StepRow.__table__).where(StepRow.turn_id == turn_id).order_by(StepRow.step_index)
            )
            return [_row(r) for r in rows]

    async def subagents(self, turn_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(SubagentRow.__table__).where(SubagentRow.turn_id == turn_id).order_by(SubagentRow.created_at)
            )
            return [_row(r) for r in rows]

    async def set_todos(self, task_id: str, todos: list[dict]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(TaskRow).where(TaskRow.id == task_id).values(todos=todos))

    async def write_turn_records(self, rec: FinalRecord) -> None:
        """Auxiliary records of a finalized turn: usage anchor, steps, subagents."""
        now = time.time()
        task_id, turn_id = rec["task_id"], rec["turn_id"]
        async with self.engine.begin() as conn:
            if rec["anchor_tokens"]:
                await conn.execute(delete(UsageAnchorRow).where(UsageAnchorRow.task_id == task_id))
                await conn.execute(
                    insert(UsageAnchorRow).values(
                        task_id=task_id, turn_id=turn_id, message_id=rec["output_message_id"],
                        input_tokens=rec["anchor_tokens"], input_chars=rec["anchor_chars"],
                        created_at=now,
                    )
                )
            if rec["steps"]:
                await conn.execute(insert(StepRow), [dict(s, turn_id=turn_id) for s in rec["steps"]])
            if rec["subagents"]:
                await conn.execute(insert(SubagentRow), [dict(s, turn_id=turn_id) for s in rec["subagents"]])

    async def record_job(self, kind: str, task_id: str | None, status: str, error: str | None) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(JobRow).values(
                    kind=kind, task_id=task_id, status=status, error=error, created_at=time.time()
                )
            )


def _owned_by(owner_id: str | None) -> ColumnElement[bool]:
    return TaskRow.owner_id.is_(None) if owner_id is None else TaskRow.owner_id == owner_id
