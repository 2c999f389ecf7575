"""Migrations are atomic per revision and resumable; an older database upgrades with its data."""

from __future__ import annotations

import itertools
import json
import operator
import sqlite3

import pytest
from alembic.command import downgrade, upgrade
from alembic.script import ScriptDirectory
from sqlalchemy import event
from sqlalchemy.engine import Engine

from runtime.store.db import alembic_config
from runtime.store.repo import DB_NAME, Store
from tests.reliability.migration_kill_harness import _counts, _sync_engine, make_old_folder


class Crash(Exception):
    pass


SCRIPT = ScriptDirectory.from_config(alembic_config())
HEAD = SCRIPT.get_current_head()
REVISIONS = [[r.revision] for r in SCRIPT.walk_revisions()]
# Revision 0005's tables, with the shadow tables SQLite makes for each FTS5 table.
FIFTH = {"memories", "documents", "passages"} | {
    f"{t}{s}" for t in ("memory_fts", "passages_fts") for s in ("", "_data", "_idx", "_docsize", "_config")
} | {"memory_fts_content"}
SIXTH = {"chats", "chat_messages", "chat_turns", "chat_checkpoints"}
SEVENTH = {"teams", "team_members", "team_assignments", "assignment_messages", "assignment_turns",
           "assignment_checkpoints"}


def _tables(path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[0] for r in db.execute("select name from sqlite_master where type = 'table'")}
    finally:
        db.close()


def _version(path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [r[0] for r in db.execute("select version_num from alembic_version")]
    finally:
        db.close()


async def _open_failing_at(home, k: int) -> bool:
    """Open the store with a failure before its k-th statement or commit; True when the failure happened."""
    seen = 0

    def point(*_args, **_kw):
        nonlocal seen
        seen += 1
        if seen == k:
            raise Crash

    event.listen(Engine, "before_cursor_execute", point)
    event.listen(Engine, "commit", point)
    try:
        store = await Store.open(home)
        await store.aclose()
        return False
    except Crash:
        return True
    finally:
        event.remove(Engine, "before_cursor_execute", point)
        event.remove(Engine, "commit", point)


async def test_a_failure_at_any_point_of_the_first_open_leaves_a_folder_that_opens(tmp_path):
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    k = 0
    while True:
        k += 1
        home = tmp_path / f"k{k}"
        home.mkdir()
        if not await _open_failing_at(home, k):
            break
        # Nothing half-made: either no table of ours yet, or whole revisions with their stamp.
        tables = _tables(home / DB_NAME) - {"alembic_version"}
        first = {"jobs", "tasks", "messages", "usage_anchors", "turns", "steps", "subagents"}
        # Each revision's tables, in order: a folder holds those of the first n revisions, for some n.
        revisions = [set(), first, {"permission_rules"}, {"context_checkpoints"}, FIFTH, SIXTH, SEVENTH,
                     {"chat_steps"}, {"assignment_steps"}, {"users"}, {"deliveries"}, {"turn_changes"},
                     {"background_commands", "wakeups"}]
        assert tables in list(itertools.accumulate(revisions, operator.or_)), (k, tables)
        store = await Store.open(home)
        await store.aclose()
        assert _version(home / DB_NAME) == [head]
    assert k > 20  # every statement of the first open was a failure point


async def test_upgrade_from_0001_keeps_the_data_and_resumes_after_a_failure(tmp_path):
    home = tmp_path / "old"
    home.mkdir()
    counts = make_old_folder(home, 50)
    assert _version(home / DB_NAME) == ["0001_initial"]
    k = 1
    while await _open_failing_at(home, k):
        assert _version(home / DB_NAME) in REVISIONS
        k += 1
    assert k > 3
    assert _version(home / DB_NAME) == [HEAD]
    store = await Store.open(home)
    try:
        tasks = await store.list_tasks()
        assert len(tasks) == counts["tasks"] == 50
        assert tasks[0]["updated_at"] > tasks[-1]["updated_at"]
        assert len(await store.messages(tasks[0]["id"])) == 2
    finally:
        await store.aclose()


async def test_a_revision_and_its_stamp_commit_together(tmp_path):
    """A failure at a revision's version stamp leaves none of its DDL behind, and the next open runs it again."""
    home = tmp_path / "h"
    home.mkdir()
    make_old_folder(home, 5)

    def fail_on_stamp(conn, cursor, statement, *_args):
        if statement.startswith("UPDATE alembic_version"):
            raise Crash

    event.listen(Engine, "before_cursor_execute", fail_on_stamp)
    try:
        with pytest.raises(Crash):
            await Store.open(home)
    finally:
        event.remove(Engine, "before_cursor_execute", fail_on_stamp)
    assert _version(home / DB_NAME) == ["0001_initial"]
    db = sqlite3.connect(home / DB_NAME)
    indexes = {r[0] for r in db.execute("select name from sqlite_master where type = 'index'")}
    db.close()
    assert "ix_tasks_updated" not in indexes
    store = await Store.open(home)
    await store.aclose()
    assert _version(home / DB_NAME) == [HEAD]


def _columns(path, table: str) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {r[1] for r in db.execute(f"pragma table_info({table})")}
    finally:
        db.close()


async def test_0003_moves_tool_rules_into_permission_rules_and_keeps_every_message(tmp_path):
    home = tmp_path / "old"
    home.mkdir()
    before = make_old_folder(home, 3)
    db = sqlite3.connect(home / DB_NAME)
    ids = [r[0] for r in db.execute("select id from tasks order by updated_at")]
    db.execute("update tasks set tool_rules = ? where id = ?", ('{"run_shell": "never", "write_file": "always"}',
                                                               ids[0]))
    db.execute("update tasks set tool_rules = 'not json' where id = ?", (ids[1],))
    db.commit()
    db.close()
    store = await Store.open(home)
    try:
        rules = await store.permission_rules(every=True)
        assert sorted((r["task_id"], r["tool"], r["command"], r["decision"]) for r in rules) == [
            (ids[0], "run_shell", None, "deny"), (ids[0], "write_file", None, "allow")]
        task = await store.get_task(ids[0])
        assert task["network"] is False and task["unsandboxed_ok"] is False
    finally:
        await store.aclose()
    # Dropping the column must not copy and drop `tasks`: that would cascade into messages and turns.
    db = sqlite3.connect(home / DB_NAME)
    after = _counts(db)
    db.close()
    assert after == before
    assert "tool_rules" not in _columns(home / DB_NAME, "tasks")

    # And back: the whole-tool rules return to tool_rules, the new columns and table go.
    with _sync_engine(home / DB_NAME).begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        downgrade(cfg, "0002_tasks_by_update")
    db = sqlite3.connect(home / DB_NAME)
    try:
        assert json.loads(db.execute("select tool_rules from tasks where id = ?", (ids[0],)).fetchone()[0]) == {
            "run_shell": "never", "write_file": "always"}
        assert db.execute("select tool_rules from tasks where id = ?", (ids[2],)).fetchone()[0] == "{}"
        assert _counts(db) == before
    finally:
        db.close()
    assert {"network", "unsandboxed_ok"}.isdisjoint(_columns(home / DB_NAME, "tasks"))
    assert "permission_rules" not in _tables(home / DB_NAME)


async def test_upgrades_from_0007_keep_every_conversation_and_mark_no_title_provisional(tmp_path):
    """Later revisions add columns to the owner tables conversations cascade from (alembic's batch mode would
    copy and drop them): every message stays, and titles written before 0009 stay as the person knows them."""
    home = tmp_path / "h"
    home.mkdir()
    with _sync_engine(home / DB_NAME).begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        upgrade(cfg, "0007_teams")
    db = sqlite3.connect(home / DB_NAME)
    db.execute("pragma foreign_keys = on")
    db.execute("insert into tasks (id, title, model, knowledge, workspace, created_at, updated_at) "
               "values ('t1', 'Taxes', 'p/m', '[]', '/w', 1, 1)")
    db.execute("insert into messages (task_id, role, parts, created_at) values ('t1', 'user', '[]', 1)")
    db.execute("insert into chats (id, title, model, created_at, updated_at) values ('c1', 'Hi', 'p/m', 1, 1)")
    db.execute("insert into chat_messages (chat_id, role, parts, created_at) values ('c1', 'user', '[]', 1)")
    db.execute("insert into teams (id, title, max_parallel, created_at, updated_at) values ('g', 'Goal', 1, 1, 1)")
    db.execute("insert into team_assignments (id, team_id, key, instructions, member, depends_on, position, "
               "status, created_at, updated_at) values ('a1', 'g', 'A', 'do', 'm', '[]', 0, 'done', 1, 1)")
    db.execute("insert into assignment_messages (assignment_id, role, parts, created_at) "
               "values ('a1', 'user', '[]', 1)")
    db.commit()
    db.close()

    store = await Store.open(home)
    await store.aclose()
    assert _version(home / DB_NAME) == [HEAD]
    db = sqlite3.connect(home / DB_NAME)
    try:
        for table in ("messages", "chat_messages", "assignment_messages"):
            assert db.execute(f"select count(*) from {table}").fetchone()[0] == 1, table
        assert db.execute("select title, title_provisional from tasks").fetchall() == [("Taxes", 0)]
        assert db.execute("select title, title_provisional from chats").fetchall() == [("Hi", 0)]
        assert db.execute("select kind from team_assignments").fetchall() == [("work",)]
    finally:
        db.close()


async def test_0012_gives_every_existing_task_to_the_local_person_and_goes_back_with_every_message(tmp_path):
    """Tasks from before the server host's users belong to no user (the desktop's), and the revision adds its
    column and drops it again without rebuilding `tasks` (which would cascade into its conversations)."""
    home = tmp_path / "h"
    home.mkdir()
    before = make_old_folder(home, 4)
    store = await Store.open(home)
    try:
        tasks = await store.list_tasks()
        assert len(tasks) == 4 and {t["owner_id"] for t in tasks} == {None}
    finally:
        await store.aclose()
    db = sqlite3.connect(home / DB_NAME)
    db.execute("pragma foreign_keys = on")
    db.execute("insert into users (id, name, token_hash, created_at) values ('u1', 'ada', 'h', 1)")
    db.execute("update tasks set owner_id = 'u1' where id = (select min(id) from tasks)")
    db.commit()
    db.close()

    with _sync_engine(home / DB_NAME).begin() as conn:
        cfg = alembic_config()
        cfg.attributes["connection"] = conn
        downgrade(cfg, "0011_assignment_steps")
    db = sqlite3.connect(home / DB_NAME)
    try:
        assert _counts(db) == before
        assert "owner_id" not in _columns(home / DB_NAME, "tasks") and "users" not in _tables(home / DB_NAME)
    finally:
        db.close()
    store = await Store.open(home)  # and up again
    await store.aclose()
    assert _version(home / DB_NAME) == [HEAD]
