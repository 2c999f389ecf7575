"""Each turn's changes to its task's workspace (`rt.changes`): recorded after the turn (`TurnRecorder`, which the
kit gives a task's turn), listed per turn with a diff of each text file, undone, and the size cap of the kept
contents (runtime/ARCHITECTURE.md, "A turn's changes"; the mechanics are tools/changes.py)."""

from __future__ import annotations

import asyncio
import builtins
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import Settings
from ..errors import ConfigError, HearthError, TaskNotFound, UndoRefused
from ..tools.changes import BlobStore, Watch, conflicts, is_folder, restore, text_diff
from .core import Core

log = logging.getLogger(__name__)

DROPPED = "restore data dropped by the size cap"


@dataclass(frozen=True, slots=True)
class FileChange:
    path: str  # a folder's ends with '/'
    kind: str  # created | modified | deleted
    before_size: int | None
    after_size: int | None
    cannot_undo: str | None  # why this file cannot be put back (its earlier content was not kept), or None


@dataclass(frozen=True, slots=True)
class TurnChanges:
    number: int  # the turn's place in its task, from 1, as the person sees it
    turn_id: str
    files: list[FileChange]  # the folders it created or deleted too
    undone: bool

    @property
    def file_count(self) -> int:
        """How many files it changed, folders aside."""
        return sum(not f.path.endswith("/") for f in self.files)


class TurnRecorder:
    """One task turn's recording (engine/ports.ChangeRecorder): the workspace watched before the first call that
    may change it, the changes written down after the turn."""

    def __init__(self, changes: Changes, task_id: str, workspace: Path):
        self._changes, self._task_id = changes, task_id
        self._watch: Watch | None = None
        self._workspace = workspace
        self._taking: asyncio.Future[None] | None = None

    async def watch(self) -> None:
        if self._taking is None:
            self._watch = Watch(self._workspace)
            self._taking = asyncio.ensure_future(asyncio.to_thread(self._watch.take))
        await asyncio.shield(self._taking)  # a Stop during the walk still leaves a whole snapshot

    async def record(self, turn_id: str) -> None:
        if self._watch is None or self._taking is None:
            return  # nothing in this turn could change the workspace
        await asyncio.wait({self._taking})
        if self._taking.cancelled() or self._taking.exception() is not None:
            self._watch.close()
            log.error("the workspace of turn %s could not be looked at; its changes are not recorded", turn_id)
            return
        await self._changes.save(self._task_id, turn_id, self._watch)


class Changes:
    def __init__(self, core: Core, reindex: Callable[[set[str]], Awaitable[object]] | None = None):
        self._core = core
        self._reindex = reindex  # the knowledge library's refresh: documents a turn changed are indexed again
        self.blobs = BlobStore(core.home / "changes")
        self._saving = asyncio.Lock()  # one turn's blobs and the cap's clean-up at a time

    def recorder(self, task: dict[str, Any]) -> TurnRecorder:
        return TurnRecorder(self, task["id"], Path(task["workspace"]))

    async def save(self, task_id: str, turn_id: str, watch: Watch) -> None:
        async with self._saving:
            try:
                found = await asyncio.to_thread(watch.changes, self.blobs)
            finally:
                watch.close()
            await self._core.store.add_changes(task_id, turn_id, found)
            await self._keep_under_cap()
        if self._reindex is not None and found:
            written = {os.path.realpath(watch.root / c["path"]) for c in found if not c["path"].endswith("/")}
            try:
                await self._reindex(written)
            except HearthError:
                log.exception("the documents turn %s changed could not be queued for indexing", turn_id)

    async def list(self, task_id: str, turn: int | None = None) -> builtins.list[TurnChanges]:
        """The turns of the task that changed files, oldest first (only turn number `turn` when given)."""
        if await self._core.store.get_task(task_id) is None:
            raise TaskNotFound(task_id)
        numbers = await self._numbers(task_id)
        if turn is not None and turn not in numbers.values():
            raise ConfigError(f"Task {task_id} has no turn {turn} (it has {len(numbers)}).")
        by_turn: dict[str, builtins.list[dict[str, Any]]] = {}
        for row in await self._core.store.changes(task_id):
            by_turn.setdefault(row["turn_id"], []).append(row)
        found = [TurnChanges(numbers[turn_id], turn_id, [_file(r) for r in rows], rows[0]["undone_at"] is not None)
                 for turn_id, rows in by_turn.items() if turn_id in numbers]
        found.sort(key=lambda t: t.number)
        return [t for t in found if turn is None or t.number == turn]

    async def diff(self, task_id: str, turn_id: str, path: str) -> str | None:
        """The unified diff of one changed text file, before the turn → after it; None when it cannot be shown
        (not text, too big to have been kept, or its contents dropped)."""
        row = next((r for r in await self._core.store.changes(task_id)
                    if r["turn_id"] == turn_id and r["path"] == path), None)
        if row is None or row["dropped"]:
            return None
        return await asyncio.to_thread(text_diff, row, self.blobs)

    async def undo(self, task_id: str, turn: int, *, force: bool = False) -> builtins.list[str]:
        """Put the files turn number `turn` changed back as they were before it. Refused (UndoRefused, naming the
        files) where a file changed since — by the person or a later turn — or cannot be put back, unless
        `force`; then what can be put back is. Returns the paths put back."""
        self._core.writable()
        task = await self._core.store.get_task(task_id)
        if task is None:
            raise TaskNotFound(task_id)
        if task_id in self._core.aborts:
            raise UndoRefused("The task is running; undo its changes once the turn has ended.")
        listed = await self.list(task_id, turn)
        if not listed:
            raise ConfigError(f"Turn {turn} of task {task_id} changed no files.")
        changes = listed[0]
        if changes.undone:
            raise ConfigError(f"Turn {turn}'s changes were already undone.")
        rows = [r for r in await self._core.store.changes(task_id) if r["turn_id"] == changes.turn_id]
        workspace = Path(task["workspace"])
        async with self._core.locks.hold(task_id):  # a turn sent meanwhile waits until the files are back
            changed = await asyncio.to_thread(conflicts, workspace, rows)
            cannot = [f.path for f in changes.files if f.cannot_undo]
            if (changed or cannot) and not force:
                said = [f"changed since turn {turn}: {', '.join(changed)}"] if changed else []
                if cannot:
                    said.append(f"cannot be put back: {', '.join(cannot)}")
                anyway = "overwrite them" if changed else "put back the others"
                raise UndoRefused(f"Not undone: {'; '.join(said)}. Undo anyway to {anyway} "
                                  f"(hearth undo {task_id} --turn {turn} --force).", changed, cannot)
            todo = [r for r in rows if r["path"] not in cannot]
            skipped = await asyncio.to_thread(restore, workspace, todo, self.blobs)
        await self._core.store.mark_undone(changes.turn_id)
        return [r["path"] for r in todo if r["path"] not in skipped]

    async def usage(self) -> tuple[int, int]:
        """(bytes the kept contents take, the cap in bytes)."""
        kept = {sha: size for _, sha, size in await self._core.store.kept_blobs()}
        return sum(kept.values()), self._core.settings.changes_max_bytes

    async def set_cap(self, max_bytes: int) -> None:
        """Keep at most `max_bytes` of earlier contents; the oldest turns' go first when over it."""
        if max_bytes < 0:
            raise ConfigError("The size cap cannot be negative.")
        settings = Settings.model_validate({**self._core.settings.dump(), "changes_max_bytes": max_bytes})
        await self._core.save_settings(settings)
        async with self._saving:
            await self._keep_under_cap()

    async def sweep(self) -> None:
        """Remove the kept contents no change refers to any more (a deleted task's)."""
        async with self._saving:
            wanted = {sha for _, sha, _ in await self._core.store.kept_blobs()}
            await asyncio.to_thread(self.blobs.keep_only, wanted)

    async def _keep_under_cap(self) -> None:
        """Drop the oldest turns' kept contents until the rest fit the cap, then remove unreferenced blobs."""
        store = self._core.store
        kept = await store.kept_blobs()
        sizes = {sha: size for _, sha, size in kept}
        total, cap = sum(sizes.values()), self._core.settings.changes_max_bytes
        if total <= cap:
            return
        turns: dict[str, set[str]] = {}  # oldest turn first
        users: dict[str, set[str]] = {}
        for turn_id, sha, _ in kept:
            turns.setdefault(turn_id, set()).add(sha)
            users.setdefault(sha, set()).add(turn_id)
        dropped = []
        for turn_id, shas in turns.items():
            if total <= cap:
                break
            dropped.append(turn_id)
            for sha in shas:
                users[sha].discard(turn_id)
                if not users[sha]:
                    total -= sizes.pop(sha)
        await store.drop_restore_data(dropped)
        log.info("changes: restore data of %d turn(s) dropped by the size cap", len(dropped))
        await asyncio.to_thread(self.blobs.keep_only, set(sizes))

    async def _numbers(self, task_id: str) -> dict[str, int]:
        rows = await self._core.store.turns(task_id, None)
        return {row["id"]: n for n, row in enumerate(sorted(rows, key=lambda r: r["started_at"]), start=1)}


def _file(row: dict[str, Any]) -> FileChange:
    cannot = None
    if row["kind"] != "created" and not is_folder(row):  # a folder needs no kept content
        cannot = DROPPED if row["dropped"] else row["lost"]
    return FileChange(row["path"], row["kind"], row["before_size"], row["after_size"], cannot)
