"""The knowledge library's records: documents, their passages, and the passages' full-text index (`passages_fts`,
FTS5 with BM25 ranking, kept in step with `passages` by triggers)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from .models import DocumentRow, PassageRow

_COLUMNS = "p.id, p.document_id, p.seq, p.text, p.heading, p.page, p.line_start, p.line_end"


def _row(r) -> dict[str, Any]:
    return dict(r._mapping)


class KnowledgeRepo:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine

    # -- documents --

    async def documents(self) -> list[dict[str, Any]]:
        async with self.engine.connect() as conn:
            return [_row(r) for r in await conn.execute(select(DocumentRow.__table__).order_by(DocumentRow.path))]

    async def document(self, doc_id: int) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(DocumentRow.__table__).where(DocumentRow.id == doc_id))).first()
        return _row(r) if r else None

    async def add_documents(self, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Insert the files (path, kind, size, mtime) not in the library yet, queued; returns every row."""
        now = time.time()
        async with self.engine.begin() as conn:
            known = {r.path for r in await conn.execute(
                select(DocumentRow.path).where(DocumentRow.path.in_([f["path"] for f in files])))}
            new = [dict(f, status="queued", added_at=now) for f in files if f["path"] not in known]
            if new:
                await conn.execute(insert(DocumentRow), new)
            rows = await conn.execute(select(DocumentRow.__table__).where(
                DocumentRow.path.in_([f["path"] for f in files])))
            return [_row(r) for r in rows]

    async def update_document(self, doc_id: int, **values: Any) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(update(DocumentRow).where(DocumentRow.id == doc_id).values(**values))

    async def next_queued(self) -> dict[str, Any] | None:
        async with self.engine.connect() as conn:
            r = (await conn.execute(select(DocumentRow.__table__).where(DocumentRow.status == "queued")
                                    .order_by(DocumentRow.id).limit(1))).first()
        return _row(r) if r else None

    async def requeue_unfinished(self) -> int:
        """Documents whose indexing a quit or a crash cut off go back in the queue; returns how many wait."""
        async with self.engine.begin() as conn:
            await conn.execute(update(DocumentRow).where(DocumentRow.status == "indexing")
                               .values(status="queued", progress=0))
            rows = await conn.execute(select(DocumentRow.id).where(DocumentRow.status == "queued"))
            return len(rows.all())

    async def remove_document(self, doc_id: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(PassageRow).where(PassageRow.document_id == doc_id))
            await conn.execute(delete(DocumentRow).where(DocumentRow.id == doc_id))

    # -- passages --

    async def clear_passages(self, doc_id: int) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(delete(PassageRow).where(PassageRow.document_id == doc_id))

    async def add_passages(self, doc_id: int, first_seq: int, passages: list[dict[str, Any]]) -> None:
        """One batch in one transaction (the triggers index each passage)."""
        rows = [dict(p, document_id=doc_id, seq=first_seq + i) for i, p in enumerate(passages)]
        async with self.engine.begin() as conn:
            await conn.execute(insert(PassageRow), rows)

    async def bm25(self, match: str, doc_ids: list[int], limit: int) -> list[dict[str, Any]]:
        """The best passages of these documents for an FTS5 query, best first; `score` is BM25 (lower is better)."""
        if not doc_ids:
            return []
        query = text(f"SELECT {_COLUMNS}, bm25(passages_fts, 1.0, 0.5) AS score FROM passages_fts "
                     "JOIN passages p ON p.id = passages_fts.rowid "
                     "WHERE passages_fts MATCH :q AND p.document_id IN :ids ORDER BY score LIMIT :n"
                     ).bindparams(bindparam("ids", expanding=True))
        async with self.engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query, {"q": match, "ids": doc_ids, "n": limit})]

    async def passages(self, ids: list[int]) -> list[dict[str, Any]]:
        if not ids:
            return []
        query = text(f"SELECT {_COLUMNS} FROM passages p WHERE p.id IN :ids").bindparams(
            bindparam("ids", expanding=True))
        async with self.engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query, {"ids": ids})]

    async def vectors(self, doc_id: int) -> list[tuple[int, bytes]]:
        """(passage id, float32 vector) of a document's passages that have one."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(PassageRow.id, PassageRow.vector).where(
                PassageRow.document_id == doc_id, PassageRow.vector.is_not(None)).order_by(PassageRow.seq))
            return [(r[0], r[1]) for r in rows]
