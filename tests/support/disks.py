"""Real storage faults for tests: a small tmpfs that fills up, a read-only mount, an immutable folder, a damaged
table, a damaged index that only a check finds.

Mounting needs root (CI runs as root); where the kernel refuses, the fixture using it is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.api import Runtime
from runtime.providers.scripted import ScriptedModel
from runtime.store.repo import DB_NAME

from .seed import seed_long_task


def _run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


@contextlib.contextmanager
def tmpfs(path: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` mounted on `path` for the block."""
    path.mkdir(parents=True, exist_ok=True)
    done = _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.strip()}")
    try:
        yield path
    finally:
        _run("umount", "-l", str(path))


def remount(path: Path, mode: str) -> None:
    """`mode` 'ro' or 'rw' for the tmpfs mounted on `path`."""
    done = _run("mount", "-o", f"remount,{mode}", str(path))
    assert done.returncode == 0, done.stderr


@contextlib.contextmanager
def immutable(path: Path) -> Iterator[None]:
    """`chattr +i` on `path`: nobody, root included, may create or delete files in it (chmod does not stop root)."""
    done = _run("chattr", "+i", str(path))
    if done.returncode:
        pytest.skip(f"chattr +i is not possible here: {done.stderr.strip()}")
    try:
        yield
    finally:
        _run("chattr", "-i", str(path))


def fill(folder: Path, name: str = "filler") -> Path:
    """Write zeros into `folder/name` until the disk is full; returns the file (delete it to free the space)."""
    path = folder / name
    block = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    while True:  # the last partial page
        try:
            with open(path, "ab", buffering=0) as f:
                f.write(b"\0" * 512)
        except OSError:
            break
    return path


def damage_table(db_path: Path, table: str, page_size: int = 4096) -> None:
    """Overwrite every page of `table` with garbage (the rest of the file stays readable)."""
    db = sqlite3.connect(db_path)
    pages = [r[0] for r in db.execute("select pageno from dbstat where name = ?", (table,))]
    db.close()
    with open(db_path, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * page_size)
            f.write(os.urandom(page_size))


async def damage_beyond_the_first_queries(home: Path) -> list[str]:
    """Add a long task, then turn the messages index to garbage: the folder still opens and lists its tasks
    (returned), and only a check finds the damage."""
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    await seed_long_task(rt, 400, title="Long", model="scripted/x")  # the index spans several pages
    await rt.aclose()
    damage_table(home / DB_NAME, "ix_messages_task_order")
    rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
    try:
        return sorted(t.title for t in await rt.list_tasks())
    finally:
        await rt.aclose()
