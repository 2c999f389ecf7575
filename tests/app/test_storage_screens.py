"""When the data folder fails, the window says so in a sentence and every way out works: free space and retry,
restore the latest backup, choose another data folder. Real faults: a full tmpfs, a damaged file, a read-only
mount (root, as in CI)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time

from app.core.util import pending_tasks
from app.shell.application import HearthApp
from runtime.api import Backups, Runtime, StorageCorrupt
from runtime.providers.scripted import ScriptedModel
from runtime.store import backup as backups
from runtime.store.backup import CHECK_STAMP
from runtime.store.repo import DB_NAME
from tests.support.disks import damage_beyond_the_first_queries, damage_table, fill, remount, tmpfs
from tests.support.qt_helpers import open_task, until


def _damage_while_open(db_path, table: str) -> None:
    """Damage `table` under a running Hearth: its pages moved from the WAL into the file first, then garbage,
    then a write by another connection so the runtime's connections drop the pages they had cached."""
    other = sqlite3.connect(db_path)
    for _ in range(100):  # a read of the app's in progress blocks the checkpoint for a moment
        if other.execute("pragma wal_checkpoint(truncate)").fetchone()[0] == 0:
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the WAL could not be checkpointed")
    damage_table(db_path, table)
    other.execute("create table poke (x)")
    other.commit()
    other.close()


async def _start(home) -> HearthApp:
    ctl = HearthApp(home, providers={"scripted": ScriptedModel()}, use_tray=False, preload_model=False)
    await ctl.start()
    return ctl


async def test_a_full_disk_shows_free_space_and_retry(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as home:
        filler = await asyncio.to_thread(fill, home)
        ctl = await _start(home)
        try:
            window = ctl.window
            assert window.stack.currentWidget() is window.problem
            assert window.problem.title.text() == "The disk is full"
            assert "Traceback" not in window.problem.text.text()
            assert set(window.problem.buttons) == {"Retry", "Choose another data folder…", "Quit"}
            window.problem.buttons["Retry"].click()  # still full: the page stays
            await asyncio.sleep(0.3)
            assert ctl.bridge is None and window.stack.currentWidget() is window.problem
            filler.unlink()
            window.problem.buttons["Retry"].click()
            await until(lambda: ctl.bridge is not None, what="started once there was room")
            assert window.stack.currentWidget() is window.welcome
        finally:
            await ctl.shutdown()


async def test_a_damaged_database_offers_the_latest_backup_and_restores_it(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    task = await rt.create_task(title="Keep me", model="scripted/x")
    await rt.aclose()
    await Backups.backup(home)
    (home / DB_NAME).write_bytes(os.urandom(32 * 1024))
    ctl = await _start(home)
    try:
        window = ctl.window
        assert window.problem.title.text() == "Hearth's database is damaged"
        await until(lambda: "latest backup is from" in window.problem.note.text(), what="the backup described")
        window.problem.buttons["Restore the latest backup"].click()
        await until(lambda: ctl.bridge is not None, what="started from the backup")
        await window.reload_tasks()
        assert [t.title for t in window.tasks.values()] == ["Keep me"]
        assert task.id in window.tasks
        assert list(home.glob(f"{DB_NAME}.broken-*"))  # the damaged file is kept aside
    finally:
        await ctl.shutdown()


async def test_damage_found_by_the_check_after_the_start_offers_the_latest_backup(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    await rt.create_task(title="Keep me", model="scripted/x")
    await rt.aclose()
    await asyncio.to_thread(backups.backup, home, automatic=True)  # today's: the opens below make none
    # It opens and lists its tasks: no query at the start meets the damage.
    assert await damage_beyond_the_first_queries(home) == ["Keep me", "Long"]
    ctl = await _start(home)
    try:
        await until(lambda: ctl.bridge is None and ctl.window is not None
                    and ctl.window.stack.currentWidget() is ctl.window.problem, what="the damaged-database page")
        window = ctl.window
        assert window.problem.title.text() == "Hearth's database is damaged"
        assert "found it damaged" in window.problem.text.text()
        assert set(window.problem.buttons) == {"Restore the latest backup", "Choose another data folder…", "Quit"}
        await until(lambda: "latest backup is from" in window.problem.note.text(), what="the backup described")
        window.problem.buttons["Restore the latest backup"].click()
        await until(lambda: ctl.bridge is not None, what="started from the backup")
        await window.reload_tasks()
        assert [t.title for t in window.tasks.values()] == ["Keep me"]  # the backup's data, from before "Long"
        assert list(home.glob(f"{DB_NAME}.broken-*"))  # the damaged file is kept aside
        assert await ctl.rt.backups.verify_database(force=True)
    finally:
        await ctl.shutdown()


async def test_a_sound_database_passes_the_check_after_the_start_and_no_page_shows(home):
    ctl = await _start(home)
    try:
        await until(lambda: (home / CHECK_STAMP).exists(), what="the database checked")
        assert ctl.bridge is not None and ctl.window.stack.currentWidget() is ctl.window.welcome
    finally:
        await ctl.shutdown()


async def test_a_read_only_folder_offers_another_data_folder(tmp_path):
    with tmpfs(tmp_path / "disk") as home:
        rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
        await rt.aclose()
        remount(home, "ro")
        try:
            ctl = await _start(home)
            try:
                window = ctl.window
                assert window.problem.title.text() == "Hearth cannot write its data"
                assert "Choose another data folder…" in window.problem.buttons
                other = tmp_path / "elsewhere"
                other.mkdir()
                ctl.use_data_folder(str(other))  # what the folder dialog hands over
                await until(lambda: ctl.bridge is not None, what="started in the other folder")
                assert (other / DB_NAME).exists()
            finally:
                await ctl.shutdown()
        finally:
            remount(home, "rw")


async def test_a_disk_that_fills_during_a_session_says_so_and_keeps_what_was_typed(tmp_path):
    with tmpfs(tmp_path / "disk", "3m") as home:
        ctl = await _start(home)
        try:
            task = await ctl.bridge.create_task(title="Notes", model="scripted/x")
            panel = await open_task(ctl, task.id)
            filler = await asyncio.to_thread(fill, home)
            panel.composer.edit.setPlainText("Remember the milk")
            panel.composer.submit()
            await until(lambda: ctl.fault_box is not None and ctl.fault_box.isVisible(), what="the disk-full box")
            box = ctl.fault_box
            assert box.windowTitle() == "The disk is full" and "Free some space" in box.informativeText()
            assert "Traceback" not in box.text() and "sqlite" not in box.text().lower()
            assert panel.composer.edit.toPlainText() == "Remember the milk"  # nothing typed is lost
            assert ctl.bridge is not None and ctl.window.panel is panel  # the session goes on
            box.close()
            filler.unlink()
            panel.composer.submit()
            await until(lambda: any(m.text == "Remember the milk" for m in panel.conversation.messages),
                        what="sent once there was room")
        finally:
            await ctl.shutdown()


async def test_a_database_damaged_during_a_session_shows_the_ways_out_and_restore_comes_back(home):
    ctl = await _start(home)
    try:
        task = await ctl.bridge.create_task(title="Keep me", model="scripted/x")
        await Backups.backup(home)
        panel = await open_task(ctl, task.id)
        await asyncio.to_thread(_damage_while_open, home / DB_NAME, "messages")
        panel.composer.edit.setPlainText("Remember the milk")
        panel.composer.submit()
        await until(lambda: ctl.bridge is None and ctl.window is not None
                    and ctl.window.stack.currentWidget() is ctl.window.problem, what="the problem page")
        window = ctl.window
        assert window.problem.title.text() == "Hearth's database is damaged"
        assert "Traceback" not in window.problem.text.text()
        await until(lambda: "latest backup is from" in window.problem.note.text(), what="the backup described")
        window.problem.buttons["Restore the latest backup"].click()
        await until(lambda: ctl.bridge is not None, what="started from the backup")
        await ctl.window.reload_tasks()
        assert [t.title for t in ctl.window.tasks.values()] == ["Keep me"]
    finally:
        await ctl.shutdown()


async def test_two_actions_that_meet_the_damage_together_close_the_runtime_once(home, caplog):
    ctl = await _start(home)
    try:
        task = await ctl.bridge.create_task(title="Keep me", model="scripted/x")
        await asyncio.to_thread(_damage_while_open, home / DB_NAME, "messages")
        try:
            await ctl.bridge.send(task.id, "Remember the milk")
        except StorageCorrupt as exc:
            damage = exc
        else:
            raise AssertionError("the damaged table took the input")
        ctl.bridge.report(damage)  # two reads in flight fail at once: each reports it before the runtime closes
        ctl.bridge.report(damage)
        await until(lambda: ctl.bridge is None and ctl.window is not None
                    and ctl.window.stack.currentWidget() is ctl.window.problem, what="the problem page")
        await until(lambda: not ctl.rt and pending_tasks(short_only=True) == set(), what="the runtime closed")
        assert ctl.window.problem.title.text() == "Hearth's database is damaged"
        assert "closing the runtime after a storage fault failed" not in caplog.text
    finally:
        await ctl.shutdown()
