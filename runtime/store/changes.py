"""A turn's changes to its task's workspace (tools/changes.py finds them): one row per file created, modified or
deleted, with the hashes of its content before and after (the blobs in `<data folder>/changes/`)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, String, Text, func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base


class TurnChangeRow(Base):
    __tablename__ = "turn_changes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), index=True)
    path: Mapped[str] = mapped_column(Text)  # relative to the workspace, '/'-separated
    kind: Mapped[str] = mapped_column(String(16))  # created | modified | deleted
    before_sha: Mapped[str | None] = mapped_column(String(64))  # the kept earlier content; None: none, or lost
    before_size: Mapped[int | None] = mapped_column(BigInteger)  # a file may pass PostgreSQL's 4-byte integer
    after_sha: Mapped[str | None] = mapped_column(String(64))  # None: deleted
    after_size: Mapped[int | None] = mapped_column(BigInteger)
    after_kept: Mapped[bool] = mapped_column(Boolean, server_default="0")  # the new content is a blob (the diff)
    lost: Mapped[str | None] = mapped_column(Text)  # why the earlier content could not be kept
    dropped: Mapped[bool] = mapped_column(Boolean, server_default="0")  # its blobs went to the size cap
    created_at: Mapped[float] = mapped_column(Float)
    undone_at: Mapped[float | None] = mapped_column(Float)


_T = TurnChangeRow


class ChangesRepo:
    engine: AsyncEngine

    async def add_changes(self, task_id: str, turn_id: str, changes: list[dict[str, Any]]) -> None:
        if not changes:
            return
        now = time.time()
        async with self.engine.begin() as conn:
            await conn.execute(_T.__table__.insert(), [
                {"task_id": task_id, "turn_id": turn_id, "created_at": now, **change} for change in changes])

    async def changes(self, task_id: str) -> list[dict[str, Any]]:
        """Every change of the task's turns, in the order they were recorded."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(_T.__table__).where(_T.task_id == task_id).order_by(_T.id))
            return [dict(r._mapping) for r in rows]

    async def change_counts(self, turn_ids: Iterable[str]) -> dict[str, int]:
        """How many files each of these turns changed, folders aside (turns that changed none are left out)."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(_T.turn_id, func.count()).where(
                _T.turn_id.in_(list(turn_ids)), ~_T.path.endswith("/")).group_by(_T.turn_id))
            return {turn_id: n for turn_id, n in rows}

    async def mark_undone(self, turn_id: str) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(_T).where(_T.turn_id == turn_id).values(undone_at=time.time()))

    async def kept_blobs(self) -> list[tuple[str, str, int]]:
        """(turn id, sha256, size) of every blob a change still keeps, oldest change first."""
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(_T.turn_id, _T.before_sha, _T.before_size, _T.after_sha, _T.after_size,
                                              _T.after_kept).where(_T.dropped.is_(False)).order_by(_T.id))).all()
        kept = []
        for turn_id, before_sha, before_size, after_sha, after_size, after_kept in rows:
            if before_sha:
                kept.append((turn_id, before_sha, before_size or 0))
            if after_kept and after_sha:
                kept.append((turn_id, after_sha, after_size or 0))
        return kept

    async def drop_restore_data(self, turn_ids: list[str]) -> None:
        """These turns' kept contents go (the size cap): they can no longer be undone or diffed."""
        async with self.engine.begin() as conn:
            await conn.execute(update(_T).where(_T.turn_id.in_(turn_ids)).values(dropped=True))
