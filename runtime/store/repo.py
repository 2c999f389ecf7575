"""The only place that talks SQL. Hot writes use Core statements (one thread hop each)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from ..parts import settle_parts
from .db import make_engine, migrate
from .models import JobRow, MessageRow, StepRow, SubagentRow, TaskRow, TurnRow, UsageAnchorRow

DB_NAME = "hearth.sqlite3"


def _row(r) -> dict[str, Any]:
    return dict(r._mapping)


class Store:
    def __init__(self, engine: AsyncEngine, path: Path):
        self.engine = engine
        self.path = path

    @classmethod
    async def open(cls, home: Path) -> Store:
        path = home / DB_NAME
        engine = make_engine(path)
        await migrate(engine)
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

    async def messages(self, task_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(MessageRow.__table__).where(MessageRow.task_id == task_id).order_by(MessageRow.id)
            )
            return [_row(r) for r in rows]

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

    async def add_user_message(
        self, task_id: str, parts: list[dict], *, client_msg_id: str | None, turn_id: str | None
    ) -> tuple[int, int | None]:
        """Persist an input: with a turn id it starts that turn (turn row, assistant draft, task running);
        without one it is queued."""
        now = time.time()
        async with self.engine.begin() as conn:
            msg_id = (
                await conn.execute(
                    insert(MessageRow).values(
                        task_id=task_id,
                        role="user",
                        parts=parts,
                        status="complete" if turn_id else "queued",
                        client_msg_id=client_msg_id,
                        created_at=now,
                    )
                )
            ).inserted_primary_key[0]
            out_id = await self._start_turn(conn, task_id, turn_id, msg_id, now) if turn_id else None
        return msg_id, out_id

    async def start_queued_turn(self, task_id: str, message_id: int, turn_id: str) -> int:
        async with self.engine.begin() as conn:
            await conn.execute(update(MessageRow).where(MessageRow.id == message_id).values(status="complete"))
            return await self._start_turn(conn, task_id, turn_id, message_id, time.time())

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

    async def next_queued(self, task_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (
                await conn.execute(
                    select(MessageRow.__table__)
                    .where(MessageRow.task_id == task_id, MessageRow.status == "queued")
                    .order_by(MessageRow.id)
                    .limit(1)
                )
            ).first()
        return _row(r) if r else None

    async def checkpoint(self, message_id: int, parts: list[dict]) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(MessageRow).where(MessageRow.id == message_id).values(parts=parts))

    # -- turns --

    async def get_turn(self, turn_id: str) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(TurnRow.__table__).where(TurnRow.id == turn_id))).first()
        return _row(r) if r else None

    async def turns(self, task_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(TurnRow.__table__).where(TurnRow.task_id == task_id).order_by(TurnRow.started_at)
            )
            return [_row(r) for r in rows]

    async def steps(self, turn_id: str) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(StepRow.__table__).where(StepRow.turn_id == turn_id).order_by(StepRow.step_index)
            )
            return [_row(r) for r in rows]

    async def context_inputs(self, task_id: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """A task's messages and usage anchor, read on one connection (this is on the turn's critical path)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(
                select(MessageRow.__table__).where(MessageRow.task_id == task_id).order_by(MessageRow.id)
            )
            messages = [_row(r) for r in rows]
            r = (
                await conn.execute(select(UsageAnchorRow.__table__).where(UsageAnchorRow.task_id == task_id))
            ).first()
        return messages, (_row(r) if r else None)

    async def finalize_turn(self, rec: dict[str, Any]) -> None:
        """Finalize step 3: everything a turn produced, in one transaction."""
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
                    status="ended", reason=rec["reason"], ended_at=now, error=rec.get("error"),
                    input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                )
            )
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.id == task_id)
                .values(
                    state=rec["state"], last_reason=rec["reason"], last_error=rec.get("error"),
                    pending_request=rec.get("pending_request"), updated_at=now,
                    input_tokens=TaskRow.input_tokens + usage.input_tokens,
                    output_tokens=TaskRow.output_tokens + usage.output_tokens,
                    **rec.get("task_values", {}),
                )
            )
            if rec.get("anchor_tokens"):
                await conn.execute(delete(UsageAnchorRow).where(UsageAnchorRow.task_id == task_id))
                await conn.execute(
                    insert(UsageAnchorRow).values(
                        task_id=task_id, turn_id=turn_id, message_id=rec["output_message_id"],
                        input_tokens=rec["anchor_tokens"], input_chars=rec["anchor_chars"],
                        created_at=now,
                    )
                )
            if rec.get("steps"):
                await conn.execute(insert(StepRow), [dict(s, turn_id=turn_id) for s in rec["steps"]])
            if rec.get("subagents"):
                await conn.execute(insert(SubagentRow), [dict(s, turn_id=turn_id) for s in rec["subagents"]])

    async def fail_turn(self, rec: dict[str, Any]) -> None:
        """Fallback when `finalize_turn` failed: end the turn `error`, keep what can be kept."""
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(
                update(TurnRow)
                .where(TurnRow.id == rec["turn_id"])
                .values(status="ended", reason="error", ended_at=now, error=rec["error"])
            )
            await conn.execute(
                update(TaskRow)
                .where(TaskRow.id == rec["task_id"])
                .values(state="idle", last_reason="error", last_error=rec["error"], updated_at=now)
            )
            await conn.execute(
                update(MessageRow).where(MessageRow.id == rec["output_message_id"]).values(status="complete")
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
