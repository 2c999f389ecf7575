"""The only place that talks SQL. Hot writes use Core statements (one thread hop each)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Text, delete, func, insert, select, type_coerce, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from ..parts import FinalRecord, settle_parts
from .db import make_engine
from .db import migrate as migrate_db
from .models import CheckpointRow, JobRow, MessageRow, StepRow, SubagentRow, TaskRow, TurnRow, UsageAnchorRow

DB_NAME = "hearth.sqlite3"


@dataclass
class ContextInputs:
    messages: list[dict[str, Any]]
    anchor: dict[str, Any] | None
    checkpoint: dict[str, Any] | None  # {"id", "upto_message_id", "summary"}: the older history, summarized


class DuplicateMessage(Exception):
    """An input with this client message id exists already; `row` is it."""

    def __init__(self, row: dict[str, Any]):
        super().__init__(row["client_msg_id"])
        self.row = row


def _row(r) -> dict[str, Any]:
    return dict(r._mapping)


class Store:
    def __init__(self, engine: AsyncEngine, path: Path):
        self.engine = engine
        self.path = path

    @classmethod
    async def open(cls, home: Path, *, migrate: bool = True) -> Store:
        path = home / DB_NAME
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

    async def list_tasks(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(TaskRow.__table__).order_by(TaskRow.updated_at.desc()))
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
            for table in (TurnRow, MessageRow, UsageAnchorRow):
                await conn.execute(delete(table).where(table.task_id == task_id))
            await conn.execute(delete(TaskRow).where(TaskRow.id == task_id))

    # -- messages --

    async def messages(self, task_id: str, *, before: int | None = None, after: int | None = None,
                       limit: int | None = None) -> list[dict[str, Any]]:
        """A task's messages in order. With `limit`: the newest `limit` ones (before `before`), or the oldest
        ones after `after` — a page, read through the (task_id, id) index."""
        query = select(MessageRow.__table__).where(MessageRow.task_id == task_id, MessageRow.status != "discarded")
        if before is not None:
            query = query.where(MessageRow.id < before)
        if after is not None:
            query = query.where(MessageRow.id > after)
        newest_first = limit is not None and after is None
        query = query.order_by(MessageRow.id.desc() if newest_first else MessageRow.id)
        if limit is not None:
            query = query.limit(limit)
        async with self.engine.connect() as conn:
            rows = [_row(r) for r in await conn.execute(query)]
        return rows[::-1] if newest_first else rows

    async def find_client_message(self, task_id: str, client_msg_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    select(MessageRow.__table__).where(
                        MessageRow.task_id == task_id, MessageRow.client_msg_id == client_msg_id
                    )
                )
            ).first()
        return _row(r) if r else None

    async def add_input(
        self, task_id: str, parts: list[dict], *, client_msg_id: str | None, turn_id: str | None,
        title: str | None = None,
    ) -> tuple[int, tuple[int, list[dict], int] | None]:
        """Persist an input, durably, in one transaction. Without a turn id it is queued. With one, a turn
        starts for the oldest queued input of the task, which is this one unless older queued inputs wait (a
        new input never overtakes them). Returns (message id, (started input id, its parts, output message id)
        or None). Raises `DuplicateMessage` when `client_msg_id` was used before in this task."""
        now = time.time()
        try:
            async with self.engine.begin() as conn:
                msg_id = (
                    await conn.execute(
                        insert(MessageRow).values(
                            task_id=task_id, role="user", parts=parts, status="queued",
                            client_msg_id=client_msg_id, created_at=now,
                        )
                    )
                ).inserted_primary_key[0]
                started = await self._start_oldest_queued(conn, task_id, turn_id, now) if turn_id else None
                if title:
                    await conn.execute(
                        update(TaskRow).where(TaskRow.id == task_id, TaskRow.title.is_(None)).values(title=title)
                    )
        except IntegrityError:
            seen = await self.find_client_message(task_id, client_msg_id) if client_msg_id else None
            if seen is None:
                raise
            raise DuplicateMessage(seen) from None
        return msg_id, started

    async def start_queued_turn(self, task_id: str, turn_id: str) -> tuple[int, list[dict], int] | None:
        """Start a turn for the task's oldest queued input: (input id, parts, output message id), or None."""
        async with self.engine.begin() as conn:
            return await self._start_oldest_queued(conn, task_id, turn_id, time.time())

    async def _start_oldest_queued(self, conn, task_id: str, turn_id: str, now: float):
        first = (
            await conn.execute(
                select(MessageRow.id, MessageRow.parts)
                .where(MessageRow.task_id == task_id, MessageRow.status == "queued")
                .order_by(MessageRow.id)
                .limit(1)
            )
        ).first()
        if first is None:
            return None
        await conn.execute(update(MessageRow).where(MessageRow.id == first.id).values(status="complete"))
        return first.id, first.parts, await self._start_turn(conn, task_id, turn_id, first.id, now)

    async def copy_messages(self, source_id: str, target_id: str) -> int:
        """Copy a task's finished messages into another task (a fork), in order; returns how many."""
        async with self.engine.begin() as conn:
            rows = await conn.execute(
                select(MessageRow.role, MessageRow.parts, MessageRow.created_at)
                .where(MessageRow.task_id == source_id, MessageRow.status.in_(("complete", "streaming")))
                .order_by(MessageRow.id)
            )
            values = [{"task_id": target_id, "role": r.role, "parts": r.parts, "status": "complete",
                       "created_at": r.created_at} for r in rows]
            if values:
                await conn.execute(insert(MessageRow), values)
        return len(values)

    async def discard_queued(self, task_id: str, message_id: int) -> bool:
        """Discard a queued input that has not started (its text is dropped); False when there is none with that
        id. The row stays as an empty tombstone: message ids only ever grow, so a reader that asks for the
        messages after the newest id it knows never misses one (SQLite reuses a deleted highest rowid)."""
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(MessageRow)
                .where(MessageRow.id == message_id, MessageRow.task_id == task_id, MessageRow.status == "queued")
                .values(status="discarded", parts=[], client_msg_id=None)
            )
        return result.rowcount > 0

    async def _start_turn(self, conn, task_id: str, turn_id: str, input_id: int, now: float) -> int:
        out_id = (
            await conn.execute(
                insert(MessageRow).values(
                    task_id=task_id, turn_id=turn_id, role="assistant", parts=[], status="streaming",
                    created_at=now,
                )
            )
        ).inserted_primary_key[0]
        await conn.execute(
            insert(TurnRow).values(
                id=turn_id, task_id=task_id, input_message_id=input_id, output_message_id=out_id,
                status="running", started_at=now,
            )
        )
        await conn.execute(update(MessageRow).where(MessageRow.id == input_id).values(turn_id=turn_id))
        await conn.execute(
            update(TaskRow)
            .where(TaskRow.id == task_id)
            .values(state="running", pending_request=None, updated_at=now)
        )
        return out_id

    async def checkpoint(self, message_id: int, parts: list[dict]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(MessageRow).where(MessageRow.id == message_id).values(parts=parts))

    # -- turns --

    async def get_turn(self, turn_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(TurnRow.__table__).where(TurnRow.id == turn_id))).first()
        return _row(r) if r else None

    async def turns(self, task_id: str, turn_ids: list[str] | None = None) -> list[dict[str, Any]]:
        query = select(TurnRow.__table__).where(TurnRow.task_id == task_id)
        if turn_ids is not None:
            query = query.where(TurnRow.id.in_(turn_ids))
        async with self.engine.connect() as conn:
            rows = await conn.execute(query.order_by(TurnRow.started_at))
            return [_row(r) for r in rows]

    async def steps(self, turn_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(StepRow.__table__).where(StepRow.turn_id == turn_id).order_by(StepRow.step_index)
            )
            return [_row(r) for r in rows]

    async def context_inputs(self, task_id: str) -> ContextInputs:
        """What a turn's model input is rebuilt from, read on one connection (this is on the turn's critical
        path): the latest context checkpoint, the messages after it, the usage anchor. Parts come as JSON text:
        the turn decodes them in a worker thread, off the event loop."""
        m = MessageRow.__table__.c
        c = CheckpointRow.__table__.c
        async with self.engine.connect() as conn:
            cp = (
                await conn.execute(
                    select(c.id, c.upto_message_id, c.summary).where(c.task_id == task_id)
                    .order_by(c.upto_message_id.desc(), c.id.desc()).limit(1)
                )
            ).first()
            query = select(m.id, m.role, m.status, type_coerce(m.parts, Text).label("parts")).where(
                m.task_id == task_id, m.status != "discarded")
            if cp is not None:
                query = query.where(m.id > cp.upto_message_id)
            messages = [_row(r) for r in await conn.execute(query.order_by(m.id))]
            r = (
                await conn.execute(select(UsageAnchorRow.__table__).where(UsageAnchorRow.task_id == task_id))
            ).first()
        return ContextInputs(messages, _row(r) if r else None, _row(cp) if cp else None)

    async def add_checkpoint(self, task_id: str, turn_id: str | None, upto_message_id: int, summary: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(insert(CheckpointRow).values(
                task_id=task_id, turn_id=turn_id, upto_message_id=upto_message_id, summary=summary,
                created_at=time.time()))

    async def checkpoints(self, task_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(CheckpointRow.__table__).where(CheckpointRow.task_id == task_id)
                                      .order_by(CheckpointRow.id))
            return [_row(r) for r in rows]

    async def finalize_turn(self, rec: FinalRecord) -> None:
        """Finalize's commit: the message and its parts, the turn row and the task, in one transaction."""
        now = time.time()
        task_id, turn_id = rec["task_id"], rec["turn_id"]
        usage = rec["usage"]
        async with self.engine.begin() as conn:
            await conn.execute(
                update(MessageRow)
                .where(MessageRow.id == rec["output_message_id"])
                .values(parts=rec["parts"], status="complete")
            )
            await conn.execute(
                update(TurnRow)
                .where(TurnRow.id == turn_id)
                .values(
                    status="ended", reason=rec["reason"], ended_at=now, error=rec["error"],
                    input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                )
            )
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.id == task_id)
                .values(
                    state=rec["state"], last_reason=rec["reason"], last_error=rec["error"],
                    pending_request=rec["pending_request"], updated_at=now,
                    input_tokens=TaskRow.input_tokens + usage.input_tokens,
                    output_tokens=TaskRow.output_tokens + usage.output_tokens,
                    **rec["task_values"],
                )
            )

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

    async def fail_turn(self, rec: FinalRecord) -> None:
        """Fallback when `finalize_turn` failed: the settled parts, the turn `error`, the task idle."""
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(
                update(MessageRow)
                .where(MessageRow.id == rec["output_message_id"])
                .values(parts=rec["parts"], status="complete")
            )
            await conn.execute(
                update(TurnRow)
                .where(TurnRow.id == rec["turn_id"])
                .values(status="ended", reason="error", ended_at=now, error=rec["error"])
            )
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.id == rec["task_id"])
                .values(state="idle", last_reason="error", last_error=rec["error"], pending_request=None,
                        updated_at=now)
            )

    # -- recovery --

    async def recover(self) -> list[str]:
        """Startup recovery: running turns become `interrupted`, their unfinished tool parts settled,
        checkpointed text kept. Waiting tasks stay waiting. Returns the recovered turn ids."""
        now = time.time()
        async with self.engine.begin() as conn:
            running = (
                await conn.execute(select(TurnRow.id, TurnRow.task_id, TurnRow.output_message_id).where(
                    TurnRow.status == "running"
                ))
            ).all()
            for turn_id, task_id, out_id in running:
                if out_id is not None:
                    parts = (
                        await conn.execute(select(MessageRow.parts).where(MessageRow.id == out_id))
                    ).scalar_one_or_none() or []
                    settle_parts(parts)
                    await conn.execute(
                        update(MessageRow).where(MessageRow.id == out_id).values(parts=parts, status="complete")
                    )
                await conn.execute(
                    update(TurnRow)
                    .where(TurnRow.id == turn_id)
                    .values(status="ended", reason="interrupted", ended_at=now)
                )
                await conn.execute(
                    update(TaskRow)
                    .where(TaskRow.id == task_id, TaskRow.state != "waiting")
                    .values(state="idle", last_reason="interrupted", updated_at=now)
                )
            # A task marked running without a running turn (crash between commits) is idle again.
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.state == "running")
                .values(state="idle", last_reason=func.coalesce(TaskRow.last_reason, "interrupted"))
            )
        return [r[0] for r in running]

    async def record_job(self, kind: str, task_id: str | None, status: str, error: str | None) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(JobRow).values(
                    kind=kind, task_id=task_id, status=status, error=error, created_at=time.time()
                )
            )
