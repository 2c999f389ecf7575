"""The knowledge library's records: documents, their passages, and the passages' full-text index: on SQLite
`passages_fts` (FTS5 with BM25 ranking, kept in step with `passages` by triggers), on PostgreSQL the generated
tsvector `passages.search` (revision 0005) ranked by ts_rank with the same 2:1 weight of text over heading."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import bindparam, delete, insert, select, text, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from . import faults
from .fts import match_all, match_any, tsquery_all, tsquery_any
from .models import DocumentRow, PassageRow

COMMON = 0.05  # of the library's passages: a word in more of them is left out of a query with rarer words
COMMON_FLOOR = 2000  # passages: a smaller library matches every word of a query
RANK_BUDGET = 3000  # passages one FTS5 query ranks: BM25 costs ~3.5 µs for each match (its length is read)
_LAST_ROWID = 2**63 - 1
T = TypeVar("T")

_COLUMNS = "p.id, p.document_id, p.seq, p.text, p.heading, p.page, p.line_start, p.line_end"


def _row(r: Row) -> dict[str, Any]:
    return dict(r._mapping)


class KnowledgeRepo:
    def __init__(self, engine: AsyncEngine):
        self.engine = engine
        self._path = Path(engine.url.database or "")
        self._reader: sqlite3.Connection | None = None  # searches only (see bm25)
        self._reader_lock = threading.Lock()
        self._counts: dict = {}  # word -> passages holding it, for the library as it is (see _matches)
        self._generation = 0  # grows with every write of passages

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
        self._generation += 1
        async with self.engine.begin() as conn:
            await conn.execute(delete(PassageRow).where(PassageRow.document_id == doc_id))
            await conn.execute(delete(DocumentRow).where(DocumentRow.id == doc_id))

    # -- passages --

    async def clear_passages(self, doc_id: int) -> None:
        self._generation += 1
        async with self.engine.begin() as conn:
            await conn.execute(delete(PassageRow).where(PassageRow.document_id == doc_id))

    async def add_passages(self, doc_id: int, first_seq: int, passages: list[dict[str, Any]]) -> None:
        """One batch in one transaction (the triggers index each passage)."""
        rows = [dict(p, document_id=doc_id, seq=first_seq + i) for i, p in enumerate(passages)]
        async with self.engine.begin() as conn:
            await conn.execute(insert(PassageRow), rows)
        self._generation += 1  # after the commit: a search between the two still counts again

    async def bm25(self, words: list[str], doc_ids: list[int], limit: int) -> list[dict[str, Any]]:
        """The best passages of these documents for `words`, best first; `score` is BM25 (lower is better).

        In a large library (COMMON_FLOOR passages or more) the query is built from what each word is worth, since
        BM25's weight of a word falls with the share of passages holding it while its cost grows with it (a
        word in most of 100,000 passages: ~100 ms, a rare one: ~1 ms): words in more than half of the passages
        are left out (BM25 gives them no weight), the rarer words (in at most COMMON of them) are matched with
        OR; when only common words are left they must all occur (AND), and failing that the rarest one. Each
        query ranks at most RANK_BUDGET passages (~10 ms): rare words are ORed rarest first while their passages
        fit in it (a passage holding every one of them comes first), and a query matching more ranks the
        earliest-indexed RANK_BUDGET of its passages, or all of them when those hold too few of the task's.

        On SQLite its statements run on a connection of its own in one worker thread, one hop for the whole search
        (through the async engine each of them would be one: a search on a busy machine took twice as long); on
        PostgreSQL, `_ranked_postgres`."""
        if not doc_ids or not words:
            return []
        if self.engine.dialect.name == "postgresql":
            return await self._ranked_postgres(words, doc_ids, limit)
        generation = self._generation
        return await asyncio.to_thread(self._read,
                                       lambda db: _bm25(db, words, doc_ids, limit, self._counts, generation))

    async def _ranked_postgres(self, words: list[str], doc_ids: list[int], limit: int) -> list[dict[str, Any]]:
        """`bm25` on PostgreSQL: the same choice of words (`_plan`, on counts taken now: other processes write
        passages too), each query ranked by ts_rank, negated so that lower is better here as well. PostgreSQL
        ranks every match in the task's documents (FTS5's rowid walk within RANK_BUDGET has no counterpart)."""
        async with self.engine.connect() as conn:
            total = await conn.scalar(text("SELECT coalesce(sum(passages), 0) FROM documents"))
            queries = [(False, words)] if total < COMMON_FLOOR else _plan(words, await _pg_counts(conn, words), total)
            rows: dict[int, dict[str, Any]] = {}
            for every, group in queries:
                found = await conn.execute(_PG_RANKED, {"q": tsquery_all(group) if every else tsquery_any(group),
                                                        "ids": doc_ids, "n": limit})
                for row in found:
                    rows.setdefault(row.id, _row(row))
                if len(rows) >= limit:
                    break
        return list(rows.values())[:limit]

    def _read(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._reader_lock, faults.guard(self._path.parent):
            if self._reader is None:
                self._reader = sqlite3.connect(self._path, check_same_thread=False)
                self._reader.row_factory = sqlite3.Row
                self._reader.execute("PRAGMA busy_timeout=10000")
            return work(self._reader)

    def close(self) -> None:
        with self._reader_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None

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
            return [(passage_id, vector) for passage_id, vector in rows if vector is not None]


_BM25 = (f"SELECT {_COLUMNS}, passages_fts.rank AS score FROM passages_fts "
         "JOIN passages p ON p.id = passages_fts.rowid WHERE passages_fts MATCH ? AND passages_fts.rowid <= ? "
         "AND p.document_id IN ({ids}) ORDER BY passages_fts.rank LIMIT ?")
_EDGE = "SELECT rowid FROM passages_fts WHERE passages_fts MATCH ? LIMIT 1 OFFSET ?"  # walks rowids: no ranking


def _bm25(db: sqlite3.Connection, words: list[str], doc_ids: list[int], limit: int, counts: dict,
          generation: int) -> list[dict[str, Any]]:
    query = _BM25.format(ids=", ".join("?" * len(doc_ids)))
    rows: dict[int, dict[str, Any]] = {}
    for match in _matches(db, words, counts, generation):
        for row in _ranked(db, query, match, doc_ids, limit):
            rows.setdefault(row["id"], row)
        if len(rows) >= limit:
            break
    return list(rows.values())[:limit]


def _ranked(db: sqlite3.Connection, query: str, match: str, doc_ids: list[int], limit: int) -> list[dict[str, Any]]:
    """The best `limit` of the task's passages for one FTS5 query, ranking at most RANK_BUDGET passages when
    they hold enough of the task's (FTS5 walks a rowid range without ranking what lies outside it)."""
    edge = db.execute(_EDGE, (match, RANK_BUDGET - 1)).fetchone()
    if edge is not None:
        rows = [dict(r) for r in db.execute(query, (match, edge[0], *doc_ids, limit))]
        if len(rows) >= limit:
            return rows
    return [dict(r) for r in db.execute(query, (match, _LAST_ROWID, *doc_ids, limit))]


def _matches(db: sqlite3.Connection, words: list[str], counts: dict, generation: int) -> list[str]:
    """The FTS5 queries to try, in order (`_plan`). `counts` keeps each word's passage count while no passage was
    written (`generation`): counting a common word walks its whole list, and common words come back in query
    after query."""
    total = db.execute("SELECT coalesce(sum(passages), 0) FROM documents").fetchone()[0]
    if counts.get(None) != generation:
        counts.clear()
        counts[None] = generation
    missing = [w for w in words if w not in counts]
    if missing:
        each = ", ".join("(SELECT count(*) FROM passages_fts WHERE passages_fts MATCH ?)" for _ in missing)
        counts.update(zip(missing, db.execute(f"SELECT {each}", [f'"{w}"' for w in missing]).fetchone(),
                          strict=True))
    queries = (match_all(group) if every else match_any(group) for every, group in _plan(words, counts, total))
    return [query for query in queries if query]  # none is empty: `_plan` makes no empty group


def _plan(words: list[str], counts: dict, total: int) -> list[tuple[bool, list[str]]]:
    """The queries to try, in order (see `KnowledgeRepo.bm25`): each (every word must occur, the words), from
    each word's passage count and the library's passages."""
    found = {w: counts[w] for w in words if counts[w]}
    if total < COMMON_FLOOR:
        return [(False, list(found))] if found else []
    found = {w: n for w, n in found.items() if n <= total / 2}
    rare = sorted((w for w, n in found.items() if n <= COMMON * total), key=found.__getitem__)
    if rare:
        kept = _within_budget(rare, found)
        return [(True, rare), (False, kept)] if len(kept) < len(rare) else [(False, kept)]
    if not found:
        return []
    rarest = [min(found, key=found.__getitem__)]
    return [(True, list(found)), (False, rarest)] if len(found) > 1 else [(False, rarest)]


# Text (A) ranked twice the heading (B), as bm25(1.0, 0.5) on SQLite; negated: lower is better, as BM25's score.
_PG_RANKED = text(f"SELECT {_COLUMNS}, -ts_rank('{{0, 0, 0.5, 1}}', p.search, q) AS score "
                  "FROM passages p, to_tsquery('english', :q) AS q WHERE p.search @@ q AND p.document_id IN :ids "
                  "ORDER BY score, p.id LIMIT :n").bindparams(bindparam("ids", expanding=True))


async def _pg_counts(conn: AsyncConnection, words: list[str]) -> dict[str, int]:
    """How many passages hold each word, in one pass over the passages holding any of them (the GIN index)."""
    each = ", ".join(f"count(*) FILTER (WHERE search @@ to_tsquery('english', :w{i}))" for i in range(len(words)))
    found = (await conn.execute(text(f"SELECT {each} FROM passages WHERE search @@ to_tsquery('english', :any)"),
                                {"any": tsquery_any(words), **{f"w{i}": w for i, w in enumerate(words)}})).one()
    return dict(zip(words, found, strict=True))


def _within_budget(rare: list[str], counts: dict[str, int]) -> list[str]:
    """The rarest words (at least one) whose passages together fit in RANK_BUDGET."""
    kept, passages = rare[:1], counts[rare[0]]
    for word in rare[1:]:
        passages += counts[word]
        if passages > RANK_BUDGET:
            break
        kept.append(word)
    return kept
