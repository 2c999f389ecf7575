"""A task's deliveries: what its turns handed to the person (tools/deliver.py), one row per version. Part of `Store`.

A version is the next number for the task's path, taken in the transaction that writes the row; the unique
constraint on (task, path, version) makes a second writer that took the same number fail, and it takes the next
one. Rows are only ever added (and removed with their task).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from .models import DeliveryRow

_TRIES = 10  # each round of writers racing for one path's next version has a winner: 10 racers all get one


class DeliveriesRepo:
    engine: AsyncEngine

    async def add_delivery(self, values: dict[str, Any]) -> dict[str, Any]:
        """Record a delivery (task_id, turn_id, path, kind, size, sha256, note, stored) as the path's next
        version; the row as written."""
        for _ in range(_TRIES - 1):
            try:
                return await self._add_next(values)
            except IntegrityError:
                pass  # another writer took this number: the next try sees its row
        return await self._add_next(values)

    async def _add_next(self, values: dict[str, Any]) -> dict[str, Any]:
        async with self.engine.begin() as conn:
            latest = await conn.scalar(select(func.max(DeliveryRow.version)).where(
                DeliveryRow.task_id == values["task_id"], DeliveryRow.path == values["path"]))
            row = dict(values, version=(latest or 0) + 1, created_at=time.time())
            new_id = (await conn.execute(insert(DeliveryRow).values(**row).returning(DeliveryRow.id))).scalar_one()
        return dict(row, id=new_id)

    async def deliveries(self, task_id: str) -> list[dict[str, Any]]:
        """The task's deliveries, newest first."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(DeliveryRow.__table__).where(DeliveryRow.task_id == task_id)
                                      .order_by(DeliveryRow.created_at.desc(), DeliveryRow.id.desc()))
            return [dict(r._mapping) for r in rows]

    async def delivery_count(self, task_id: str) -> int:
        async with self.engine.connect() as conn:
            found = await conn.scalar(select(func.count()).select_from(DeliveryRow)
                                      .where(DeliveryRow.task_id == task_id))
        return int(found or 0)
