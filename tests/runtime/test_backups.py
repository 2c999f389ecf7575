"""Backups (also beside a running owner), the daily automatic backup, `check`, and restoring after damage."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from runtime.api import BackupNotFound, Backups, DataFolderBusy, Runtime, StorageCorrupt
from runtime.providers.scripted import ScriptedModel
from runtime.store.backup import AUTO_EVERY, KEEP_AUTO
from runtime.store.repo import DB_NAME
from tests.runtime.test_cli import _cli, _result
from tests.runtime.test_knowledge import indexed
from tests.support.disks import damage_table, tmpfs

MODEL = "scripted/x"


async def _open(home: Path, **kw) -> Runtime:
    return await Runtime.open(home, providers={"scripted": ScriptedModel(chunk_delay=0.001)}, **kw)


def _snapshot_facts(path: str) -> tuple[str, list, int, int]:
    db = sqlite3.connect(path)
    try:
        return (db.execute("PRAGMA integrity_check").fetchone()[0], db.execute("PRAGMA foreign_key_check").fetchall(),
                db.execute("select count(*) from tasks").fetchone()[0],
                db.execute("select count(*) from turns where input_message_id not in (select id from messages)")
                .fetchone()[0])
    finally:
        db.close()


async def test_backups_beside_a_busy_owner_are_consistent_snapshots(home, tmp_path):
    rt = await _open(home)
    stop = asyncio.Event()

    async def keep_writing() -> int:
        n = 0
        while not stop.is_set():
            task = await rt.create_task(model=MODEL, approval="full_auto")
            await rt.send(task.id, "write " * 200)
            await rt.wait_idle(task.id)
            n += 1
        return n

    writer = asyncio.ensure_future(keep_writing())
    try:
        made = []
        for i in range(5):
            await asyncio.sleep(0.1)
            made.append(await Backups.backup(home, tmp_path / f"b{i}.sqlite3"))
        code, out, err = await _result(await _cli("backup", str(tmp_path / "cli.sqlite3"), home=home))
        assert code == 0 and "Backed up to" in out, err
    finally:
        stop.set()
        written = await writer
        await rt.aclose()
    counts = []
    for info in made:
        integrity, broken_keys, tasks, orphans = await asyncio.to_thread(_snapshot_facts, info.path)
        assert (integrity, broken_keys, orphans) == ("ok", [], 0)
        assert not Path(info.path + "-wal").exists()  # one self-contained file
        counts.append(tasks)
    assert counts == sorted(counts) and counts[-1] > counts[0] and written >= counts[-1]


async def test_check_summarizes_and_finds_damage(home):
    rt = await _open(home)
    task = await rt.create_task(model=MODEL)
    await rt.send(task.id, "x" * 20_000)
    await rt.wait_idle(task.id)
    await rt.aclose()
    await Backups.backup(home)
    report = await Backups.check(home)
    assert report.ok and report.problems == [] and (report.tasks, report.messages) == (1, 2)
    assert report.size_bytes == (home / DB_NAME).stat().st_size and report.backups == 1
    assert report.last_backup is not None and abs(report.last_backup.created_at - time.time()) < 60
    code, out, err = await _result(await _cli("check", home=home))
    assert (code, err) == (0, ""), err
    database, *summary = out.splitlines()
    assert re.fullmatch(rf"Database: {re.escape(report.database)} \((\d+ kB|\d+\.\d MB)\)", database), database
    backed_up = time.strftime("%Y-%m-%d %H:%M", time.localtime(report.last_backup.created_at))
    assert summary == ["Integrity: ok", "Tasks: 1, messages: 2", f"Last backup: {backed_up}, 1 kept"]

    await asyncio.to_thread(damage_table, home / DB_NAME, "messages")
    report = await Backups.check(home)
    assert not report.ok and report.problems and report.tasks is None
    code, out, err = await _result(await _cli("check", home=home))
    assert code == 7 and "DAMAGED" in out and "hearth restore --latest" in err and "Traceback" not in err
    with pytest.raises(StorageCorrupt):  # no damaged copy is ever made
        await Backups.backup(home)
    assert len(await Backups.list(home)) == 1


async def _drain_backup(rt: Runtime) -> None:
    await rt.jobs.drain(timeout=30)


def _age(backups: Path, n: int) -> list[Path]:
    """`n` automatic backups made 1..n days ago (copies of a real one)."""
    real = next(backups.glob("*.sqlite3"))
    made = []
    for days in range(1, n + 1):
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(time.time() - days * AUTO_EVERY - 60))
        made.append(backups / f"auto-{stamp}.sqlite3")
        shutil.copy(real, made[-1])
    return made


async def test_the_automatic_backup_runs_once_a_day_and_keeps_the_last_seven(home):
    rt = await _open(home)
    await _drain_backup(rt)
    assert await Backups.list(home) == []  # nothing to keep yet
    await rt.create_task(model=MODEL, title="keep me")
    await rt.aclose()

    rt = await _open(home)
    await _drain_backup(rt)
    await rt.aclose()
    first = await Backups.list(home)
    assert len(first) == 1 and first[0].automatic

    manual = await Backups.backup(home)  # asked for: never pruned
    rt = await _open(home)  # the same day: no second automatic backup
    await _drain_backup(rt)
    await rt.aclose()
    assert len(await Backups.list(home)) == 2

    os.unlink(first[0].path)
    old = await asyncio.to_thread(_age, home / "backups", KEEP_AUTO + 2)
    rt = await _open(home)  # the newest automatic backup is a day old now
    await _drain_backup(rt)
    await rt.aclose()
    autos = [b for b in await Backups.list(home) if b.automatic]
    assert len(autos) == KEEP_AUTO and time.time() - autos[0].created_at < 60
    assert [b.path for b in autos[1:]] == [str(p) for p in old[: KEEP_AUTO - 1]]
    assert Path(manual.path).exists()


async def test_restore_the_latest_backup_after_damage_keeps_the_broken_file_workspaces_memory_and_knowledge(
    home, tmp_path
):
    rt = await _open(home)
    kept = await rt.create_task(model=MODEL, title="in the backup")
    await rt.aclose()
    rt = await _open(home)
    await _drain_backup(rt)  # the day's automatic backup
    newer = await rt.create_task(model=MODEL, title="after the backup")
    # Files written after the backup: a memory (in the data folder) and a document added to the library.
    memory = await rt.memory.save("garden.md", "# Waters the tomatoes at dawn\nEvery day before work.")
    document = tmp_path / "library" / "harvest.md"
    document.parent.mkdir()
    document.write_text("# Harvest\n\nThe tomatoes ripened in August.\n")
    await rt.knowledge.add([document])
    await indexed(rt)
    await rt.aclose()
    [good] = await Backups.list(home)
    Path(newer.workspace).mkdir(parents=True, exist_ok=True)
    (Path(newer.workspace) / "notes.txt").write_text("mine")
    memory_file = rt.memory.folder / memory
    after = {path: path.read_bytes() for path in (memory_file, document)}
    (home / DB_NAME).write_bytes(os.urandom(8192))
    broken = (home / DB_NAME).read_bytes()
    with pytest.raises(StorageCorrupt):
        await _open(home)

    done = await Backups.restore_latest(home)
    assert done.backup.path == good.path and done.previous is not None
    assert Path(done.previous).name.startswith(f"{DB_NAME}.broken-") and Path(done.previous).read_bytes() == broken
    assert (Path(newer.workspace) / "notes.txt").read_text() == "mine"
    assert {path: path.read_bytes() for path in after} == after  # restore only moved the database aside
    rt = await _open(home)
    try:
        assert [t.id for t in await rt.list_tasks()] == [kept.id]
        # The memory file is the truth: the restored database takes it up again; the document can be re-added.
        assert [m["name"] for m in await rt.memory.list()] == [memory]
        assert await rt.memory.text(memory) == after[memory_file].decode()
        assert await rt.knowledge.list() == []  # the library is the backup's
        await rt.knowledge.add([document])
        assert (await indexed(rt))["harvest.md"]["status"] == "ready"
    finally:
        await rt.aclose()


async def test_restore_skips_a_damaged_backup_refuses_a_running_owner_and_says_when_there_is_none(home, tmp_path):
    with pytest.raises(BackupNotFound):
        await Backups.restore_latest(home)
    rt = await _open(home)
    await rt.create_task(model=MODEL)
    await rt.aclose()
    rt = await _open(home)
    await _drain_backup(rt)
    await rt.aclose()
    [good] = await Backups.list(home)
    await asyncio.sleep(1.1)  # backups are named by the second
    bad = await Backups.backup(home)
    Path(bad.path).write_bytes(os.urandom(4096))
    rt = await _open(home)
    try:
        with pytest.raises(DataFolderBusy):
            await Backups.restore_latest(home)
    finally:
        await rt.aclose()
    done = await Backups.restore_latest(home)
    assert done.backup.path == good.path

    code, out, err = await _result(await _cli("restore", "--latest", home=home))
    assert code == 0 and "Restored the backup of" in out and "kept as" in out, err
    code, _, err = await _result(await _cli("restore", str(tmp_path / "nothing.sqlite3"), home=home))
    assert code == 2 and err.startswith("hearth: There is no backup at") and "Traceback" not in err


async def test_no_automatic_backup_when_it_would_leave_the_disk_nearly_full(tmp_path, caplog):
    with tmpfs(tmp_path / "disk", "24m") as home:
        rt = await _open(home)
        await rt.create_task(model=MODEL)
        await rt.aclose()
        rt = await _open(home)
        await _drain_backup(rt)
        await rt.aclose()
        [made] = await Backups.list(home)
        os.unlink(made.path)
        (home / "filler").write_bytes(b"\0" * (12 << 20))  # under 16 MB stay free
        rt = await _open(home)
        await _drain_backup(rt)
        await rt.aclose()
        assert await Backups.list(home) == []
        assert any("No automatic backup today" in r.getMessage() for r in caplog.records)
