"""Database faults become Hearth's own errors: a real full disk (a small tmpfs), a damaged file, a read-only folder."""

from __future__ import annotations

import asyncio
import os
import sqlite3

import pytest

from runtime.api import Runtime
from runtime.errors import StorageCorrupt, StorageFull, StorageReadOnly, StorageUnavailable
from runtime.providers.scripted import Call, ScriptedModel
from runtime.store.repo import DB_NAME
from runtime.tools.base import Effect, FunctionTool
from tests.support.disks import damage_table, fill, immutable, remount, tmpfs
from tests.support.helpers import collect

PAGE = 4096


def _plain(exc: BaseException) -> str:
    text = str(exc)
    assert "sqlalche" not in text and "sqlite3" not in text and "Errno" not in text, text
    return text


def _turn_rows(db_path) -> list[tuple]:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return db.execute("select status, reason from turns").fetchall()
    finally:
        db.close()


async def test_a_full_disk_gives_storage_full_and_the_unsaved_turn_comes_back_interrupted(tmp_path, caplog):
    with tmpfs(tmp_path / "disk", "3m") as home:
        filler = home / "filler"

        async def fill_disk(args, ctx):
            await asyncio.to_thread(fill, home)
            return "the disk is full now"

        tool = FunctionTool("fill_disk", "Fill the disk.", {"type": "object"}, Effect.read_only, fill_disk)
        # After the disk fills, the answer streams for ~1.5 s: several checkpoints fail meanwhile.
        model = ScriptedModel([[Call("fill_disk", {})], [f"word{i} " for i in range(150)]], chunk_delay=0.01)
        rt = await Runtime.open(home, providers={"scripted": model}, tools=[tool])
        try:
            task = await rt.create_task(model="scripted/x", approval="full_auto")
            handle = await rt.send(task.id, "fill it", client_msg_id="in-1")
            ended = (await collect(rt, task.id, turn_id=handle.turn_id))[-1]
            assert ended.type == "turn_ended" and ended.reason == "error"
            assert "disk" in _plain(ended.error) and "full" in ended.error
            with pytest.raises(StorageFull) as full:
                await rt.send(task.id, "more")
            assert "Free some space" in _plain(full.value) and full.value.home == str(home)
            with pytest.raises(StorageFull):
                await rt.create_task(model="scripted/x")
        finally:
            await rt.aclose()
        # Neither the finalize commit nor its fallback could be written.
        assert _turn_rows(home / DB_NAME) == [("running", None)]
        said = [r for r in caplog.records if r.getMessage().startswith("checkpoint of turn")]
        assert len(said) == 1 and isinstance(said[0].exc_info[1], StorageFull)  # once, not every 0.4 s

        filler.unlink()
        rt = await Runtime.open(home, providers={"scripted": model})
        try:
            info = await rt.get_task(task.id)
            assert (info.state, info.last_reason) == ("idle", "interrupted")
            assert [(t["status"], t["reason"]) for t in await rt.tasks.turns(task.id)] == [("ended", "interrupted")]
            assert (await rt.messages(task.id))[0].text == "fill it"
            await rt.send(task.id, "again")
            await rt.wait_idle(task.id)
        finally:
            await rt.aclose()


async def test_opening_on_a_full_disk_gives_storage_full_and_works_once_space_is_free(tmp_path):
    with tmpfs(tmp_path / "disk", "1m") as home:
        filler = await asyncio.to_thread(fill, home)
        with pytest.raises(StorageFull) as full:
            await Runtime.open(home, providers={"scripted": ScriptedModel()})
        _plain(full.value)
        filler.unlink()
        rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
        await rt.create_task(model="scripted/x")
        await rt.aclose()


async def test_a_file_that_is_not_a_database_gives_storage_corrupt(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    await rt.create_task(model="scripted/x")
    await rt.aclose()
    (home / DB_NAME).write_bytes(os.urandom(8 * PAGE))
    with pytest.raises(StorageCorrupt) as corrupt:
        await Runtime.open(home, providers={"scripted": ScriptedModel()})
    assert "damaged" in _plain(corrupt.value) and "backup" in str(corrupt.value)
    # The folder is not left taken: the next open gets the same error, not DataFolderBusy.
    with pytest.raises(StorageCorrupt):
        await Runtime.open(home, providers={"scripted": ScriptedModel()})


async def test_a_damaged_table_gives_storage_corrupt_from_the_facade(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    task = await rt.create_task(model="scripted/x")
    await rt.send(task.id, "x" * 20_000)
    await rt.wait_idle(task.id)
    await rt.aclose()
    damage_table(home / DB_NAME, "messages")
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    try:
        with pytest.raises(StorageCorrupt) as corrupt:
            await rt.messages(task.id)
        _plain(corrupt.value)
    finally:
        await rt.aclose()


async def test_a_read_only_mount_gives_storage_read_only(tmp_path):
    with tmpfs(tmp_path / "disk") as home:
        rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
        await rt.create_task(model="scripted/x")
        await rt.aclose()
        remount(home, "ro")
        try:
            with pytest.raises(StorageReadOnly) as ro:
                await Runtime.open(home, providers={"scripted": ScriptedModel()})
            assert "choose another data folder" in _plain(ro.value)
        finally:
            remount(home, "rw")


@pytest.mark.parametrize("used_before", [False, True])
async def test_an_immutable_folder_gives_storage_read_only_even_to_root(home, used_before):
    if used_before:  # the lock file and the database exist: SQLite then fails to create its WAL files
        rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
        await rt.aclose()
    with immutable(home), pytest.raises(StorageReadOnly) as ro:
        await Runtime.open(home, providers={"scripted": ScriptedModel()})
    _plain(ro.value)


async def test_a_database_from_a_newer_hearth_is_refused_plainly(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    await rt.aclose()
    db = sqlite3.connect(home / DB_NAME)
    db.execute("update alembic_version set version_num = '0099_from_the_future'")
    db.commit()
    db.close()
    with pytest.raises(StorageUnavailable) as newer:
        await Runtime.open(home, providers={"scripted": ScriptedModel()})
    assert "newer version of Hearth" in _plain(newer.value)



async def test_saving_settings_into_a_folder_that_became_read_only_gives_storage_read_only(home):
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    try:
        with immutable(home), pytest.raises(StorageReadOnly) as ro:
            await rt.save_settings({"max_steps": 5})
        _plain(ro.value)
        assert rt.settings.max_steps == 25  # nothing changed
    finally:
        await rt.aclose()
