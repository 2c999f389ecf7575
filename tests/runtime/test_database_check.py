"""The open runtime's own check of its database (`rt.backups.verify_database`): damage that opening and the first
queries never touch is found, every later write is refused, and a sound database is checked at most once a day."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from runtime.api import Runtime, StorageCorrupt
from runtime.providers.scripted import ScriptedModel
from runtime.store.backup import CHECK_EVERY, CHECK_STAMP, DatabaseCheck
from runtime.store.repo import DB_NAME
from tests.support.disks import damage_beyond_the_first_queries

MODEL = "scripted/x"


async def _open(home: Path) -> Runtime:
    return await Runtime.open(home, providers={"scripted": ScriptedModel()})


def _task_count(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("select count(*) from tasks").fetchone()[0]
    finally:
        conn.close()


async def test_damage_no_query_met_fails_the_check_and_every_later_write_is_refused(home):
    rt = await _open(home)
    await rt.create_task(title="Keep me", model=MODEL)
    await rt.aclose()
    assert await damage_beyond_the_first_queries(home) == ["Keep me", "Long"]
    rt = await _open(home)
    try:
        with pytest.raises(StorageCorrupt, match=r"checked its database .* found it damaged"):
            await rt.backups.verify_database()
        with pytest.raises(StorageCorrupt, match="found it damaged"):  # refused, though the tasks table is sound
            await rt.create_task(title="Lost in the damaged file", model=MODEL)
    finally:
        await rt.aclose()
    assert _task_count(home / DB_NAME) == 2  # the refused task never reached the file
    assert not (home / CHECK_STAMP).exists()  # a damaged database is checked again at the next start


async def test_a_sound_database_is_checked_at_most_once_a_day(home):
    rt = await _open(home)
    try:
        await rt.create_task(title="Fine", model=MODEL)
        assert await rt.backups.verify_database() is True
        assert await rt.backups.verify_database() is False  # checked today
        assert await rt.backups.verify_database(force=True) is True
        (home / CHECK_STAMP).write_text(f"{time.time() - CHECK_EVERY - 1:.0f}\n")
        assert await rt.backups.verify_database() is True  # a day later
        (home / CHECK_STAMP).write_text("not a time\n")
        assert await rt.backups.verify_database() is True
        await rt.create_task(title="Still writable", model=MODEL)
    finally:
        await rt.aclose()


def test_a_stopped_check_reports_nothing(home):
    sqlite3.connect(home / DB_NAME).close()
    check = DatabaseCheck(home)
    check.stop()  # as aclose() does while it runs
    assert check.run() is None
