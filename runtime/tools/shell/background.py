"""Background commands: a `run_shell` call with `background: true` (runtime/ARCHITECTURE.md, "Background commands").

The command is prepared and started exactly as a foreground one (run_shell.py: the same sandbox launch, environment,
new session), but the call returns at once with an id: the process belongs to the task, not the turn. Its combined
output goes to a log file in the data folder, capped: past `LOG_CAP` bytes the older half is dropped and a line
says how much (`CappedLog`), so the model can read it in pieces by offset and the person sees its tail.

No process outlives a Stop or a quit: `stop`, `stop_task` and `close` kill the process group (SIGTERM, then
SIGKILL) and record how it ended (`stopped`, or `interrupted` for a quit). A crash cannot do that, so each row
keeps the group's id and its leader's start (the boot and the start tick in /proc): `recover` at the next start
kills that group only while its leader is still that same process, or gone with members left (`still_ours`), and
records the command `interrupted`. In the sandbox the kernel has already ended it with Hearth (bwrap's
--die-with-parent).
"""

from __future__ import annotations

import asyncio
import builtins  # `BackgroundCommands.list` hides the builtin in the annotations below it
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, Protocol

from .process import kill_group, pump, settle, spawn, until_exit
from .sandbox import Launch

log = logging.getLogger(__name__)

LOG_CAP = 1024 * 1024  # bytes a command's log keeps; past it the older half goes
READ_LIMIT = 16 * 1024  # bytes one read gives at most
BACKGROUND_DIR = "background"  # in the data folder: one log per command


class BackgroundRecords(Protocol):
    """Where background commands are kept (store/background.py)."""

    async def add_background(self, values: dict[str, Any]) -> None: ...

    async def end_background(self, command_id: str, status: str, exit_code: int | None, ended_at: float) -> None: ...

    async def background_command(self, command_id: str) -> dict[str, Any] | None: ...

    async def background_commands(self, task_id: str) -> list[dict[str, Any]]: ...

    async def running_background(self) -> list[dict[str, Any]]: ...


class CappedLog:
    """A command's output file, kept under `cap` bytes by dropping its older half (with a line saying so)."""

    def __init__(self, path: Path, cap: int = LOG_CAP):
        self.path = path
        self.cap = cap
        self.dropped = 0
        self.failed = False
        self._file = open(path, "ab")

    def write(self, data: bytes) -> None:
        if self.failed:
            return
        try:
            self._file.write(data)
            self._file.flush()
            if self._file.tell() > self.cap:
                self._trim()
        except OSError:  # a full disk: the command goes on, the rest of its output is lost
            log.exception("the log %s could not be written", self.path)
            self.failed = True

    def _trim(self) -> None:
        self._file.close()
        data = self.path.read_bytes()
        keep = data[-(self.cap // 2):]
        self.dropped += len(data) - len(keep)
        marker = f"[... {self.dropped} earlier bytes of output dropped ...]\n".encode()
        self.path.write_bytes(marker + keep)
        self._file = open(self.path, "ab")

    def close(self) -> None:
        self._file.close()


class Piece(NamedTuple):
    """A piece of a command's log: its text, where it starts and ends (bytes), and the log's size."""

    text: str
    start: int
    end: int
    size: int


def read_log(path: str | Path, offset: int = 0, limit: int = READ_LIMIT) -> Piece:
    """The log from byte `offset`, at most `limit` bytes; a negative offset counts from the end (-4096: the last
    4 KiB). A log that is gone reads as empty."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            f.seek(start)
            data = f.read(max(0, min(limit, READ_LIMIT * 4)))
    except OSError:
        return Piece("", 0, 0, 0)
    return Piece(data.decode("utf-8", errors="replace"), start, start + len(data), size)


def process_start(pid: int) -> str | None:
    """Who process `pid` is: the boot it runs in and its start tick, so a later check can tell it from another
    process that got the same id. None when there is no such process (or no /proc)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    return f"{boot}:{fields[19].decode()}" if len(fields) > 19 else None  # field 22 of stat: starttime


def still_ours(pgid: int, started: str) -> bool:
    """Whether process group `pgid`, whose leader started as `started` (process_start), can still hold what that
    leader started: in the same boot, its leader is that very process, or gone (Linux gives no new process the id
    of a group that still has members, so what is left in the group is the leader's)."""
    now = process_start(pgid)
    if now is not None:
        return now == started
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() == started.split(":", 1)[0]
    except OSError:
        return False


@dataclass
class _Running:
    row: dict[str, Any]
    proc: asyncio.subprocess.Process
    log: CappedLog
    watcher: asyncio.Task[None] | None = None
    ending: str | None = None  # "stopped" or "interrupted" once Hearth ends it


class BackgroundCommands:
    """The task's running background commands, in this process, and their records."""

    def __init__(self, folder: Path, records: BackgroundRecords):
        self.folder = folder
        self.records = records
        self._listeners: list[Callable[[dict[str, Any]], None]] = []
        self._running: dict[str, _Running] = {}
        self.closed = False

    async def start(self, task_id: str, turn_id: str | None, command: str, launch: Launch, cwd: Path,
                    env: dict[str, str], sandboxed: bool) -> dict[str, Any]:
        """Start `command` as prepared by run_shell (`launch`) and return its row; OSError when it cannot."""
        if self.closed:
            raise OSError("Hearth is shutting down")
        command_id = uuid.uuid4().hex[:12]
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"{command_id}.log"
        try:
            proc, stopped = await spawn(launch, cwd, env)
        except BaseException:
            launch.release()
            raise
        row = {"id": command_id, "task_id": task_id, "turn_id": turn_id, "command": command, "status": "running",
               "exit_code": None, "started_at": time.time(), "ended_at": None, "pgid": proc.pid,
               "proc_start": process_start(proc.pid), "log_path": str(path), "sandboxed": sandboxed}
        running = _Running(row, proc, CappedLog(path))
        try:
            await asyncio.shield(self.records.add_background(row))
        except BaseException:
            await kill_group(proc.pid)
            running.log.close()
            launch.release()
            raise
        self._running[command_id] = running
        running.watcher = asyncio.ensure_future(self._watch(running, launch))
        if stopped:  # the turn was stopped while the command started: it never runs on its own
            await self.stop(task_id, command_id)
            raise asyncio.CancelledError
        self._changed(row)
        return row

    def listen(self, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call `listener` with a command's row whenever one starts or ends (wake-ups, observers)."""
        self._listeners.append(listener)

    def _changed(self, row: dict[str, Any]) -> None:
        for listener in self._listeners:
            listener(dict(row))

    async def _watch(self, running: _Running, launch: Launch) -> None:
        """Copy the output into the log until the shell exits, end what it left in its group (as a foreground
        command's), then record how it ended."""
        proc, row = running.proc, running.row
        assert proc.stdout is not None
        reader = asyncio.ensure_future(pump(proc.stdout, running.log.write))
        await until_exit(proc, reader)
        await kill_group(proc.pid)
        await settle(proc, reader)
        running.log.close()
        launch.release()
        status = running.ending or "exited"
        code = proc.returncode if status == "exited" else None
        row.update(status=status, exit_code=code, ended_at=time.time())
        self._running.pop(row["id"], None)
        try:
            await self.records.end_background(row["id"], status, code, row["ended_at"])
        except Exception:  # the next start finds it running and records it interrupted
            log.exception("could not record the end of background command %s", row["id"])
        self._changed(row)

    async def _end(self, running: _Running, how: str) -> None:
        running.ending = running.ending or how
        await kill_group(running.proc.pid)
        with contextlib.suppress(ProcessLookupError):
            running.proc.kill()
        if running.watcher is not None:
            await asyncio.shield(running.watcher)

    def tasks(self) -> set[str]:
        """The tasks with a command running in this process."""
        return {r.row["task_id"] for r in self._running.values()}

    async def list(self, task_id: str) -> list[dict[str, Any]]:
        """The task's background commands, newest first, each with `output_bytes` (the log's size)."""
        rows = await self.records.background_commands(task_id)
        for row in rows:
            row["output_bytes"] = _size(row["log_path"])
        return rows

    async def get(self, task_id: str, command_id: str) -> dict[str, Any] | None:
        row = await self.records.background_command(command_id)
        return row if row is not None and row["task_id"] == task_id else None

    async def stop(self, task_id: str, command_id: str) -> bool:
        """Stop one of the task's commands; False when it is not running (any more)."""
        running = self._running.get(command_id)
        if running is None or running.row["task_id"] != task_id:
            return False
        await self._end(running, "stopped")
        return True

    async def stop_task(self, task_id: str) -> None:
        """Stop every command of the task (Stop on the task, or its deletion)."""
        for running in [r for r in self._running.values() if r.row["task_id"] == task_id]:
            await self._end(running, "stopped")

    async def forget(self, task_id: str) -> None:
        """The task is being deleted: stop its commands and remove their logs (its rows go with the task)."""
        await self.stop_task(task_id)
        for row in await self.records.background_commands(task_id):
            with contextlib.suppress(OSError):
                os.unlink(row["log_path"])

    async def close(self) -> None:
        """The runtime quits: every command is ended and recorded `interrupted`."""
        self.closed = True
        await asyncio.gather(*(self._end(r, "interrupted") for r in list(self._running.values())))

    async def recover(self) -> builtins.list[dict[str, Any]]:
        """At start, for commands the last process left `running` (it crashed or was killed): kill what is left
        of each group, if its leader is still the process that was started, and record it `interrupted`."""
        rows = await self.records.running_background()
        now = time.time()
        for row in rows:
            if row["pgid"] and row["proc_start"] and still_ours(row["pgid"], row["proc_start"]):
                await kill_group(row["pgid"])
            await self.records.end_background(row["id"], "interrupted", None, now)
            row.update(status="interrupted", ended_at=now)
        return rows


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
