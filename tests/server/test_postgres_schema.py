"""The same models and alembic migrations on PostgreSQL: an empty database migrated to head has SQLite's tables and
columns, the full-text indexes have their PostgreSQL counterparts (revision 0005), and the migrations run down and
up again there with data, also when several processes start at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from runtime.errors import StorageUnavailable
from runtime.store.db import _upgrade, alembic_config, migrate_url
from runtime.store.knowledge_repo import KnowledgeRepo
from runtime.store.memory_repo import MemoryRepo
from tests.support.schema import schema_diff
from tests.support.services import free_port

ROOT = Path(__file__).resolve().parents[2]
HEAD = ScriptDirectory.from_config(alembic_config()).get_current_head()
# FTS5 virtual tables and the shadow tables SQLite keeps for them: PostgreSQL's full-text search lives in tsvector
# columns instead (memory_fts is an ordinary table there, with FTS5's columns).
SQLITE_ONLY_TABLES = {"passages_fts"} | {f"{t}_{s}" for t in ("memory_fts", "passages_fts")
                                         for s in ("config", "data", "docsize", "idx")} | {"memory_fts_content"}
POSTGRES_ONLY_COLUMNS = {("passages", "search"), ("memory_fts", "search")}  # the tsvectors, with GIN indexes
# Ranks the A weight (memory summary, passage text) twice B (memory body, passage heading), as bm25 does on SQLite.
WEIGHTS = "'{0, 0, 0.5, 1}'"


def _columns(sync_conn) -> dict[str, list[tuple[str, bool, str]]]:
    """Each table's columns in order: name, nullable, and the type's family (VARCHAR and TEXT are both String)."""
    found = inspect(sync_conn)
    return {table: [(c["name"], c["nullable"], getattr(c["type"]._type_affinity, "__name__", "untyped"))
                    for c in found.get_columns(table)] for table in found.get_table_names()}


async def _read(url: str, fn):
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(fn)
    finally:
        await engine.dispose()


def _downgrade(sync_conn, revision: str) -> None:
    from alembic import command

    cfg = alembic_config()
    cfg.attributes["connection"] = sync_conn
    command.downgrade(cfg, revision)


async def _migrated(url: str) -> AsyncEngine:
    await migrate_url(url)
    return create_async_engine(url)


async def test_an_empty_postgres_database_migrates_to_sqlites_tables_and_columns(postgres_url, tmp_path):
    sqlite_url = f"sqlite+aiosqlite:///{tmp_path / 'hearth.sqlite3'}"
    await migrate_url(postgres_url)
    await migrate_url(sqlite_url)
    postgres, sqlite = await _read(postgres_url, _columns), await _read(sqlite_url, _columns)

    assert set(postgres) == set(sqlite) - SQLITE_ONLY_TABLES
    for table, columns in sqlite.items():
        if table in SQLITE_ONLY_TABLES:
            continue
        shared = [c for c in postgres[table] if (table, c[0]) not in POSTGRES_ONLY_COLUMNS]
        if table == "memory_fts":  # an FTS5 table's columns have no type or constraint on SQLite
            assert [c[0] for c in shared] == [c[0] for c in columns]
        else:
            assert shared == columns, table
    assert {(t, c[0]) for t, cs in postgres.items() for c in cs} >= POSTGRES_ONLY_COLUMNS

    # Against the models (types, keys, indexes, as the SQLite schema test checks): only the passages' tsvector,
    # which the models do not describe, differs.
    diff = await _read(postgres_url, schema_diff)
    assert sorted((d[0], d[1].name) if d[0] == "remove_index" else (d[0], d[2], d[3].name) for d in diff) == [
        ("remove_column", "passages", "search"), ("remove_index", "ix_passages_search")]
    assert await _read(postgres_url, lambda c: c.exec_driver_sql("select version_num from alembic_version")
                       .scalar()) == HEAD


async def test_memory_search_counterpart_on_postgres(postgres_url):
    """The memory repository writes memory_fts with its own statements; PostgreSQL stems as FTS5's porter
    tokenizer does and ranks a summary's match above a body's."""
    engine = await _migrated(postgres_url)
    try:
        memory = MemoryRepo(engine)
        await memory.save("travel.md", "Trips", "The person drives long distances in kilometres", "h1", 0.0,
                          origin="person")
        await memory.save("units.md", "Kilometres, not miles", "Measures", "h2", 0.0, origin="person")
        await memory.save("units.md", "Kilometres, not miles", "Metric measures", "h3", 0.0, origin="person")
        search = text(f"SELECT name FROM memory_fts WHERE search @@ to_tsquery('english', :q) "
                      f"ORDER BY ts_rank({WEIGHTS}, search, to_tsquery('english', :q)) DESC")
        async with engine.connect() as conn:
            assert (await conn.execute(search, {"q": "kilometre"})).scalars().all() == ["units.md", "travel.md"]
            assert (await conn.execute(search, {"q": "metric"})).scalars().all() == ["units.md"]  # one row each
        await memory.remove(["units.md"])
        async with engine.connect() as conn:
            assert (await conn.execute(search, {"q": "kilometre"})).scalars().all() == ["travel.md"]
    finally:
        await engine.dispose()


async def test_passage_search_counterpart_on_postgres(postgres_url):
    """Passages written by the knowledge repository are searchable at once (a generated tsvector), text ranked
    above heading, and a removed document takes its passages out of the search."""
    engine = await _migrated(postgres_url)
    try:
        knowledge = KnowledgeRepo(engine)
        [doc] = await knowledge.add_documents([{"path": "/docs/coast.md", "kind": "markdown", "size": 1, "mtime": 0}])
        await knowledge.add_passages(doc["id"], 0, [{"text": "Storms close the harbour", "heading": "Lighthouses"},
                                                    {"text": "The lighthouse keepers' logbooks", "heading": None}])
        search = text(f"SELECT seq FROM passages WHERE search @@ to_tsquery('english', :q) "
                      f"ORDER BY ts_rank({WEIGHTS}, search, to_tsquery('english', :q)) DESC")
        async with engine.connect() as conn:
            assert (await conn.execute(search, {"q": "lighthouse"})).scalars().all() == [1, 0]
            assert (await conn.execute(search, {"q": "storm & harbour"})).scalars().all() == [0]
        await knowledge.remove_document(doc["id"])
        async with engine.connect() as conn:
            assert (await conn.execute(search, {"q": "lighthouse"})).scalars().all() == []
    finally:
        await engine.dispose()


async def test_postgres_migrations_go_down_and_up_with_data(postgres_url):
    """Revision 0003 moves a task's tool rules into permission_rules with PostgreSQL's JSON functions, and back."""
    engine = create_async_engine(postgres_url)
    try:
        async with engine.connect() as conn:
            await conn.run_sync(_upgrade, "0002_tasks_by_update")
        async with engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO tasks (id, model, knowledge, workspace, tool_rules, created_at, updated_at) VALUES "
                "('t1', 'a/b', '[]', '/w', '{\"read_file\": \"always\", \"run_shell\": \"never\", \"x\": \"ask\"}', "
                "0, 5), ('t2', 'a/b', '[]', '/w', '[]', 0, 5)"))
        await migrate_url(postgres_url)
        async with engine.connect() as conn:
            rules = await conn.execute(text("SELECT task_id, tool, decision, created_at FROM permission_rules "
                                            "ORDER BY tool"))
            assert rules.all() == [("t1", "read_file", "allow", 5.0), ("t1", "run_shell", "deny", 5.0)]
            assert (await conn.execute(text("SELECT network, memory FROM tasks"))).all() == [(False, True)] * 2

        async with engine.connect() as conn:
            await conn.run_sync(_downgrade, "0002_tasks_by_update")
            rows = (await conn.execute(text("SELECT id, tool_rules::text FROM tasks ORDER BY id"))).all()
            assert [(r[0], r[1].replace(" ", "")) for r in rows] == [  # t2 had no rule: the column's default
                ("t1", '{"read_file":"always","run_shell":"never"}'), ("t2", "{}")]
        async with engine.connect() as conn:
            await conn.run_sync(_downgrade, "base")
            assert await conn.run_sync(lambda c: inspect(c).get_table_names()) == ["alembic_version"]
        await migrate_url(postgres_url)
        async with engine.connect() as conn:
            assert await conn.scalar(text("select version_num from alembic_version")) == HEAD
    finally:
        await engine.dispose()


def test_processes_starting_at_once_migrate_one_after_another(postgres_server, postgres_url):
    """API instances and workers that start together on a new database: one migrates, the others find the head
    (without the lock they race to create the same tables and fail)."""
    migrate = "import asyncio, sys\nfrom runtime.store.db import migrate_url\nasyncio.run(migrate_url(sys.argv[1]))"
    starts = [subprocess.Popen([sys.executable, "-c", migrate, postgres_url], cwd=ROOT, stderr=subprocess.PIPE,
                               text=True) for _ in range(4)]
    for process in starts:
        _, errors = process.communicate(timeout=120)
        assert process.returncode == 0, errors
    database = postgres_url.rsplit("/", 1)[1]
    assert postgres_server.sql("select version_num from alembic_version", database) == HEAD
    assert postgres_server.sql("select count(*) from information_schema.tables where table_name = 'tasks'",
                               database) == "1"


async def test_a_database_that_cannot_be_used_gets_a_sentence(postgres_url):
    host_port = postgres_url.rsplit("@", 1)[1].rsplit("/", 1)[0]
    with pytest.raises(StorageUnavailable, match=r"database \"nosuch\" does not exist\.$"):
        await migrate_url(f"postgresql+asyncpg://postgres@{host_port}/nosuch")
    with pytest.raises(StorageUnavailable, match="nothing answers there"):
        await migrate_url(f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/hearth")
    engine = create_async_engine(postgres_url)
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)"))
        await conn.execute(text("INSERT INTO alembic_version VALUES ('9999_from_the_future')"))
    await engine.dispose()
    with pytest.raises(StorageUnavailable, match="written by a newer version of Hearth"):
        await migrate_url(postgres_url)


def test_revision_ids_fit_alembic_version_on_postgres():
    """alembic_version.version_num is VARCHAR(32): SQLite stores a longer id, PostgreSQL refuses it."""
    script = ScriptDirectory.from_config(alembic_config())
    assert [r.revision for r in script.walk_revisions() if len(r.revision) > 32] == []
