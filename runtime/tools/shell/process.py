"""A command's process group: started in a new session, watched until its shell exits, killed as a whole.

Shared by `run_shell` (tools/shell/run_shell.py), which waits for its command, and background commands
(tools/shell/background.py), which do not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from runtime.errors import ToolError
from runtime.tools.shell.sandbox import Launch

KILL_GRACE = 0.5


def _signal_group(pgid: int, sig: int) -> bool:
    """Send sig to the group; False if no process is left in it."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Only happens if every member is gone and the id was reused by someone else's group.
        return False
    return True


def group_alive(pgid: int) -> bool:
    """True if the group still has a member that is not a zombie (a zombie only waits for its parent)."""
    if not _signal_group(pgid, 0):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # Fields after the ")" that ends the command name: state ppid pgrp ...
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


async def kill_group(pgid: int, grace: float = KILL_GRACE) -> None:
    """SIGTERM the group, SIGKILL what is left after `grace`. Survives being cancelled again meanwhile."""
    if not _signal_group(pgid, signal.SIGTERM):
        return
    try:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not group_alive(pgid):  # checked first: a group of zombies (exiting processes) needs no wait
                return
            await asyncio.sleep(0.02)
        _signal_group(pgid, signal.SIGKILL)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and group_alive(pgid):
            await asyncio.sleep(0.02)
    except BaseException:
        _signal_group(pgid, signal.SIGKILL)
        raise


async def _wait_through_cancel(task: asyncio.Future) -> bool:
    """Wait until `task` is done even if we are cancelled meanwhile; True when we were."""
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait({task})  # unlike awaiting it, a cancel of ours does not cancel `task`
        except asyncio.CancelledError:
            cancelled = True
    return cancelled


async def spawn(launch: Launch, cwd: Path, env: dict[str, str]) -> tuple[asyncio.subprocess.Process, bool]:
    """Start the prepared command in a new session (its own process group), stdout and stderr to one pipe; and
    whether the caller was cancelled (Stop) while it started.

    The start is shielded and waited for even when Stop lands meanwhile: a shell that appears after the
    cancellation would otherwise belong to nobody, and asyncio's own cleanup of a cancelled start waits for the
    shell to exit, which `sleep 1000 & ...` never does. A caller told `True` must end the process and re-raise."""
    starting = asyncio.ensure_future(asyncio.create_subprocess_exec(
        *launch.argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        env={**env, **launch.env},
    ))
    stopped = await _wait_through_cancel(starting)
    try:
        return starting.result(), stopped
    except OSError as e:
        if stopped:
            raise asyncio.CancelledError from None
        raise ToolError(f"Could not start the shell: {e.strerror or e}.") from None


async def until_exit(proc: asyncio.subprocess.Process, reader: asyncio.Task[None]) -> None:
    """Return once the shell has exited.

    `proc.wait()` alone also waits for the output pipe to close, which a background job that inherited it
    keeps open; so watch the exit status while the pipe is open, and use `wait()` only after EOF.
    """
    while proc.returncode is None and not reader.done():
        await asyncio.wait({reader}, timeout=0.05)
    if proc.returncode is None:
        await proc.wait()


async def settle(proc: asyncio.subprocess.Process, reader: asyncio.Task[None], within: float = 1.0) -> None:
    """Let the exit status and the last output arrive; a process that left the group (setsid) may hold
    the pipe forever, so stop waiting after `within` seconds."""
    deadline = time.monotonic() + within
    while (proc.returncode is None or not reader.done()) and time.monotonic() < deadline:
        if reader.done():
            await asyncio.sleep(0.02)
        else:
            await asyncio.wait({reader}, timeout=0.02)
    if not reader.done():
        reader.cancel()


async def reap(proc: asyncio.subprocess.Process, pgid: int, reader: asyncio.Task[None]) -> None:
    """End the command's group (Stop, or its timeout) and let its last output arrive."""
    await kill_group(pgid)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await settle(proc, reader)


async def pump(stream: asyncio.StreamReader, feed: Callable[[bytes], None]) -> None:
    while chunk := await stream.read(65536):
        feed(chunk)
