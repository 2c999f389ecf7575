"""The migrated schema is exactly the models' schema; pragmas and hot-read indexes are in place."""

from __future__ import annotations

import sqlite3

from alembic.script import ScriptDirectory

from runtime.store.db import alembic_config, make_engine, migrate
from runtime.store.models import FTS_TABLES
from runtime.store.repo import DB_NAME, Store
from tests.support.schema import schema_diff


async def test_migrated_schema_equals_models(tmp_path):
    engine = make_engine(tmp_path / "x.sqlite3")
    await migrate(engine)

    async with engine.connect() as conn:
        assert await conn.run_sync(schema_diff) == []
    await engine.dispose()


async def test_migrations_are_ordered_and_reach_head(tmp_path):
    script = ScriptDirectory.from_config(alembic_config())
    revisions = list(script.walk_revisions())
    assert len(script.get_heads()) == 1
    assert revisions[-1].down_revision is None
    store = await Store.open(tmp_path)
    await store.aclose()
    db = sqlite3.connect(tmp_path / DB_NAME)
    assert db.execute("select version_num from alembic_version").fetchone()[0] == script.get_current_head()


async def test_pragmas_and_indexes(tmp_path):
    store = await Store.open(tmp_path)
    async with store.engine.connect() as conn:
        raw = await conn.exec_driver_sql("PRAGMA journal_mode")
        assert raw.scalar() == "wal"
        assert (await conn.exec_driver_sql("PRAGMA foreign_keys")).scalar() == 1
        assert (await conn.exec_driver_sql("PRAGMA synchronous")).scalar() == 2  # FULL
        plan = await conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT id FROM turns WHERE status = 'running'"
        )
        assert "ix_turns_running" in " ".join(str(r) for r in plan)
        plan = await conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT * FROM messages WHERE task_id = 'x' ORDER BY id"
        )
        assert "ix_messages_task_order" in " ".join(str(r) for r in plan)
        plan = await conn.exec_driver_sql("EXPLAIN QUERY PLAN SELECT * FROM tasks ORDER BY updated_at DESC")
        assert "ix_tasks_updated" in " ".join(str(r) for r in plan)
        # The server host's list of one user's tasks, and the desktop's (no owner), newest first, by one index.
        for owner in ("= 'u1'", "IS NULL"):
            steps = " ".join(str(r) for r in await conn.exec_driver_sql(
                f"EXPLAIN QUERY PLAN SELECT * FROM tasks WHERE owner_id {owner} ORDER BY updated_at DESC"))
            assert "ix_tasks_owner" in steps and "TEMP B-TREE" not in steps, steps  # no sort: read in order
        # An assignment's conversation is read and recovered through its own indexes, as a chat's.
        plan = await conn.exec_driver_sql(
            "EXPLAIN QUERY PLAN SELECT * FROM assignment_messages WHERE assignment_id = 'x' ORDER BY id")
        assert "ix_assignment_messages_order" in " ".join(str(r) for r in plan)
        plan = await conn.exec_driver_sql("EXPLAIN QUERY PLAN SELECT id FROM assignment_turns WHERE status = 'running'")
        assert "ix_assignment_turns_running" in " ".join(str(r) for r in plan)
    await store.aclose()


async def test_reopening_an_existing_database_keeps_data(tmp_path):
    store = await Store.open(tmp_path)
    await store.create_task(id="t1", model="a/b", workspace="/w", knowledge=[])
    await store.aclose()
    store = await Store.open(tmp_path)
    assert (await store.get_task("t1"))["model"] == "a/b"
    await store.aclose()


async def test_fts_tables_index_what_is_written(tmp_path):
    """The full-text tables the migration makes by hand: the memory index, and the passages index that the
    triggers keep in step with `passages` (insert and delete, also through a document's cascade)."""
    store = await Store.open(tmp_path)
    async with store.engine.begin() as conn:
        names = {r[0] for r in await conn.exec_driver_sql("select name from sqlite_master where type = 'table'")}
        assert set(FTS_TABLES) <= names
        await conn.exec_driver_sql("insert into memory_fts(name, summary, body) values ('units.md', 'Units', "
                                   "'The person prefers kilometres')")
        hits = await conn.exec_driver_sql("select name from memory_fts where memory_fts match 'kilometre'")
        assert [r[0] for r in hits] == ["units.md"]  # porter stemming
        await conn.exec_driver_sql("insert into documents (id, path, kind, status, added_at) "
                                   "values (1, '/a.txt', 'text', 'ready', 0)")
        await conn.exec_driver_sql("insert into passages (document_id, seq, text) values (1, 0, 'lighthouse keeper')")
        hits = await conn.exec_driver_sql("select rowid from passages_fts where passages_fts match 'lighthouse'")
        assert len(hits.all()) == 1
        await conn.exec_driver_sql("delete from documents where id = 1")
        hits = await conn.exec_driver_sql("select rowid from passages_fts where passages_fts match 'lighthouse'")
        assert hits.all() == []
        # Raises when the index and the content table disagree.
        await conn.exec_driver_sql("insert into passages_fts(passages_fts) values ('integrity-check')")
    await store.aclose()
