"""Memory records: provenance of the memory files and their full-text index (`memory_fts`: FTS5 on SQLite, a
table with a generated tsvector on PostgreSQL, written by the same statements; revision 0005)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from .fts import match_any, query_words, tsquery_any
from .models import JobRow, MemoryRow, TaskRow, TurnRow

_SEARCH = {
    "sqlite": "SELECT name FROM memory_fts WHERE memory_fts MATCH :q ORDER BY bm25(memory_fts, 0, 2.0, 1.0) LIMIT :n",
    # Summary (A) ranked twice the body (B), as bm25's weights above; the name breaks ties.
    "postgresql": "SELECT name FROM memory_fts, to_tsquery('english', :q) AS q WHERE search @@ q "
                  "ORDER BY ts_rank('{0, 0, 0.5, 1}', search, q) DESC, name LIMIT :n",
}


class MemoryRepo:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    async def rows(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(MemoryRow.__table__).order_by(MemoryRow.name))
            return [dict(r._mapping) for r in rows]

    async def save(self, name: str, summary: str, body: str, content_hash: str, mtime: float, *,
                   origin: str, source: tuple[str | None, str | None] | None = None) -> None:
        """Insert or update a memory's record and its index entry. `source` (task id, turn id) says who wrote
        it now; without one (a file changed on disk) an update keeps the provenance it had."""
        now = time.time()
        async with self.engine.begin() as conn:
            old = (await conn.execute(select(MemoryRow.name).where(MemoryRow.name == name))).first()
            values = {"summary": summary, "content_hash": content_hash, "mtime": mtime, "updated_at": now}
            if source is not None:
                values.update(source_task_id=source[0], source_turn_id=source[1], origin=origin)
            if old is None:
                values.setdefault("origin", origin)
                await conn.execute(insert(MemoryRow).values(name=name, created_at=now, **values))
            else:
                await conn.execute(update(MemoryRow).where(MemoryRow.name == name).values(**values))
            await _index(conn, name, summary, body)

    async def restore(self, row: dict[str, Any], body: str) -> None:
        """Put a deleted memory's record back as it was (origin, source, times) with its index entry."""
        async with self.engine.begin() as conn:
            await conn.execute(delete(MemoryRow).where(MemoryRow.name == row["name"]))
            await conn.execute(insert(MemoryRow).values(**row))
            await _index(conn, row["name"], row["summary"], body)

    async def remove(self, names: list[str]) -> None:
        if not names:
            return
        async with self.engine.begin() as conn:
            await conn.execute(delete(MemoryRow).where(MemoryRow.name.in_(names)))
            await conn.execute(text("DELETE FROM memory_fts WHERE name IN :names").bindparams(
                bindparam("names", expanding=True)), {"names": names})

    async def search(self, words: str, limit: int) -> list[str]:
        """Names of the memories holding any of `words` (what a person or a model typed; never read as query
        syntax), best first: BM25 on SQLite, ts_rank on PostgreSQL."""
        dialect = self.engine.dialect.name
        found = query_words(words)
        query = tsquery_any(found) if dialect == "postgresql" else match_any(found)
        if not query:
            return []
        async with self.engine.connect() as conn:
            rows = await conn.execute(text(_SEARCH[dialect]), {"q": query, "n": limit})
            return [r[0] for r in rows]

    async def touch(self, names: list[str]) -> None:
        """They were given to a model just now."""
        if names:
            async with self.engine.begin() as conn:
                await conn.execute(update(MemoryRow).where(MemoryRow.name.in_(names)).values(last_used_at=time.time()))

    async def last_ended_turn(self, task_id: str) -> str | None:
        """The task's most recently ended turn: the one a background job after finalize belongs to (the next
        turn of the task is still running while the job starts)."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(
                select(TurnRow.id).where(TurnRow.task_id == task_id, TurnRow.status == "ended")
                .order_by(TurnRow.ended_at.desc()).limit(1))).first()
        return row[0] if row else None

    async def jobs(self, kind: str | None = None, limit: int = 50, *, failed: bool = False) -> list[dict[str, Any]]:
        """The newest background job records (kind, task and its title, status, error, when); `failed`: only
        the jobs that failed."""
        query = (select(JobRow.__table__, TaskRow.title.label("task_title"))
                 .outerjoin(TaskRow, TaskRow.id == JobRow.task_id).order_by(JobRow.id.desc()).limit(limit))
        if kind is not None:
            query = query.where(JobRow.kind == kind)
        if failed:
            query = query.where(JobRow.status == "failed")
        async with self.engine.connect() as conn:
            return [dict(r._mapping) for r in await conn.execute(query)]


async def _index(conn: AsyncConnection, name: str, summary: str, body: str) -> None:
    await conn.execute(text("DELETE FROM memory_fts WHERE name = :name"), {"name": name})
    await conn.execute(text("INSERT INTO memory_fts(name, summary, body) VALUES (:name, :summary, :body)"),
                       {"name": name, "summary": summary, "body": body})
