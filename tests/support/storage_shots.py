"""Screenshots of the pages the app shows when its data folder fails: the database damaged (found by the check
after the start), the disk full, the folder read-only. Real faults: a damaged index, a full tmpfs, a read-only
mount, so it runs as root, under a display (Xvfb):

    xvfb-run -a -s "-screen 0 1400x900x24" .venv/bin/python -m tests.support.storage_shots resources/screenshots
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.api import Runtime
from runtime.providers.scripted import ScriptedModel
from runtime.store import backup as backups
from tests.support.disks import damage_beyond_the_first_queries, fill, remount, tmpfs
from tests.support.qt_helpers import until


async def _settle(seconds: float) -> None:
    await asyncio.sleep(seconds)  # lets Qt paint; processEvents() here would re-enter the qasync loop


async def _page_shot(home: Path, out: Path, title: str) -> None:
    """Start the app on `home`, wait for the problem page titled `title` (and its note, if it gets one), save it."""
    from app.shell.application import HearthApp

    ctl = HearthApp(home, providers={"scripted": ScriptedModel()}, use_tray=False, preload_model=False)
    await ctl.start()
    try:
        await until(lambda: ctl.window is not None and ctl.window.stack.currentWidget() is ctl.window.problem
                    and ctl.window.problem.title.text() == title, what=title)
        await _settle(0.8)  # the damaged page describes the latest backup a moment later
        ctl.window.grab().save(str(out))
    finally:
        await ctl.shutdown()


async def damaged_shot(home: Path, out: Path) -> None:
    home.mkdir(parents=True)
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    for title in ("Plan the garden", "Tax return 2026"):
        await rt.create_task(title=title, model="scripted/x")
    await rt.aclose()
    await asyncio.to_thread(backups.backup, home, automatic=True)
    await damage_beyond_the_first_queries(home)
    await _page_shot(home, out / "14-damaged-database.png", "Hearth's database is damaged")


async def disk_full_shot(disk: Path, out: Path) -> None:
    with tmpfs(disk, "1m") as home:
        await asyncio.to_thread(fill, home)
        await _page_shot(home, out / "15-disk-full.png", "The disk is full")


async def read_only_shot(disk: Path, out: Path) -> None:
    with tmpfs(disk) as home:
        rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
        await rt.aclose()
        remount(home, "ro")
        try:
            await _page_shot(home, out / "30-read-only-folder.png", "Hearth cannot write its data")
        finally:
            remount(home, "rw")


async def shots(out: Path) -> None:
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-shots-"))
    try:
        await damaged_shot(tmp / "Hearth", out)
        await disk_full_shot(tmp / "disk", out)
        await read_only_shot(tmp / "readonly", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
