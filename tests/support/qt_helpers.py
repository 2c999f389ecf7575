"""Helpers for the Qt tests. Everything waits by awaiting (asyncio), never by spinning a nested Qt event loop:
`qtbot.waitSignal` or `processEvents()` inside a coroutine would re-enter the qasync loop."""

from __future__ import annotations

import asyncio
import time

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

MODEL = "scripted/test"


async def until(predicate, timeout: float = 10.0, what: str = "", interval: float = 0.01):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        await asyncio.sleep(interval)


def type_and_send(panel, text: str) -> None:
    """Type into the composer and press Enter, as a person would."""
    panel.composer.edit.setFocus()
    panel.composer.edit.setPlainText(text)
    QTest.keyClick(panel.composer.edit, Qt.Key.Key_Return)


async def open_task(ctl, task_id: str):
    """Open a task's panel in the main window and wait until it has loaded."""
    await ctl.window.reload_tasks()
    panel = ctl.window.open_task(task_id)
    assert panel is not None
    await asyncio.wait_for(panel.loaded.wait(), 10)
    return panel


def persisted_text(messages, turn_id: str) -> str:
    msg = next(m for m in messages if m.role == "assistant" and m.turn_id == turn_id)
    return msg.text


def assistant_entries(panel) -> int:
    return len(panel.conversation.assistant_items())


async def wait_turns(ctl, panel, count: int = 1, timeout: float = 15.0) -> None:
    """Until the panel shows `count` finished turns and nothing runs."""
    await until(lambda: assistant_entries(panel) >= count and not ctl.rt.is_running(panel.task_id)
                and panel.settled, timeout=timeout, what=f"{count} finished turn(s)")
