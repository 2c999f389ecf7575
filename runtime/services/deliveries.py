"""What tasks delivered (`rt.deliveries`): list a task's deliverables and their versions, find one by name, write a
copy out (save as…, `hearth deliveries get`, an export). The `deliver` tool (tools/deliver.py) makes them; the
copies live in the data folder (`deliveries/<task id>/`) and go with their task (`rt.tasks.delete`).

A copy is never changed in place: writing one out reads it, checks its sha256 against the record on the way and
writes the target through a temporary file renamed into place, so a failed save leaves no half file and a copy
damaged on disk is refused with a sentence instead of handed out.
"""

from __future__ import annotations

import asyncio
import builtins  # `Deliveries.list` hides the builtin in the annotations below it
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from ..errors import ConfigError, TaskNotFound
from ..infos import DeliveryInfo
from ..tools.deliver import CHUNK, delivery_folder
from .core import Core


class Deliveries:
    def __init__(self, core: Core):
        self._core = core

    def _info(self, row: dict[str, Any]) -> DeliveryInfo:
        file = delivery_folder(self._core.home, row["task_id"]) / row["stored"]
        return DeliveryInfo.model_validate(dict(row, name=file.name, file=str(file)))

    async def list(self, task_id: str) -> builtins.list[DeliveryInfo]:
        """Every version the task's turns delivered, newest first. TaskNotFound for no such task."""
        store = self._core.store
        if await store.get_task(task_id) is None:
            raise TaskNotFound(task_id)
        return [self._info(r) for r in await store.deliveries(task_id)]

    async def count(self, task_id: str) -> int:
        """How many versions the task's turns delivered (what deleting the task would delete)."""
        return await self._core.store.delivery_count(task_id)

    async def get(self, task_id: str, name: str, version: int | None = None) -> DeliveryInfo:
        """The deliverable `name` names (its path in the workspace, or the copy's file name when only one has it)
        at `version`, by default its latest. ConfigError with a sentence naming what there is otherwise."""
        every = await self.list(task_id)
        matches = [d for d in every if d.path == name] or [d for d in every if d.name == name]
        paths = sorted({d.path for d in matches})
        if not paths:
            there = sorted({d.path for d in every})
            listed = f"Its deliverables: {', '.join(there)}." if there else "It has delivered nothing yet."
            raise ConfigError(f"This task delivered nothing named {name!r}. {listed}")
        if len(paths) > 1:
            raise ConfigError(f"{len(paths)} deliverables are named {name!r}: give the path, one of "
                              f"{', '.join(paths)}.")
        versions = [d for d in matches if d.path == paths[0]]  # newest first
        if version is None:
            return versions[0]
        for d in versions:
            if d.version == version:
                return d
        numbers = sorted(d.version for d in versions)
        have = f"only version {numbers[0]}" if len(numbers) == 1 else f"versions {numbers[0]} to {numbers[-1]}"
        raise ConfigError(f"{paths[0]} has {have}; there is no version {version}.")

    async def save(self, delivery: DeliveryInfo, target: str | Path) -> Path:
        """Write the delivered copy to `target` (into it, under the copy's name, when it is a folder), replacing
        a file there; the path written. ConfigError with a sentence when it cannot be."""
        return await asyncio.to_thread(_write_out, delivery, Path(target).expanduser())

    async def export(self, task_id: str, folder: str | Path) -> builtins.list[tuple[DeliveryInfo, str]]:
        """Write every version the task delivered into `folder` (made if missing): the latest of each path under
        the copy's name, older ones as "name (version N).ext". Each delivery with the file name it got there,
        newest first."""
        out = Path(folder).expanduser()
        written: builtins.list[tuple[DeliveryInfo, str]] = []
        named: set[str] = set()
        seen: set[str] = set()  # paths whose latest version is written
        for d in await self.list(task_id):
            stem, suffix = os.path.splitext(d.name)
            name = d.name if d.path not in seen else f"{stem} (version {d.version}){suffix}"
            if name in named:  # another path's copy has the same file name: say which path this is
                stem, suffix = os.path.splitext(name)
                name = f"{stem} ({d.path.replace('/', ' ∕ ')}){suffix}"
            seen.add(d.path)
            named.add(name)
            await asyncio.to_thread(os.makedirs, out, exist_ok=True)
            await self.save(d, out / name)
            written.append((d, name))
        return written


def _write_out(delivery: DeliveryInfo, target: Path) -> Path:
    if target.is_dir():
        target = target / delivery.name
    label = f"{delivery.path} (version {delivery.version})"
    if not target.parent.is_dir():
        raise ConfigError(f"Cannot write {label} to {target}: the folder {target.parent} does not exist.")
    try:
        source = open(delivery.file, "rb")
    except FileNotFoundError:
        raise ConfigError(f"The kept copy of {label} is missing from the data folder ({delivery.file}).") from None
    sha = hashlib.sha256()
    try:
        with source, tempfile.NamedTemporaryFile("wb", dir=target.parent, prefix=f".{target.name}.",
                                                 delete=False) as out:
            try:
                while chunk := source.read(CHUNK):
                    sha.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            except BaseException:
                out.close()
                os.unlink(out.name)
                raise
        if sha.hexdigest() != delivery.sha256:
            os.unlink(out.name)
            raise ConfigError(f"The kept copy of {label} has changed since it was delivered (its sha256 differs), "
                              "so it was not written out.")
        os.replace(out.name, target)
    except OSError as exc:
        raise ConfigError(f"Cannot write {label} to {target}: {exc.strerror or exc}.") from None
    return target
