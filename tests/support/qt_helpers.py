"""Helpers for the Qt tests. Everything waits by awaiting (asyncio), never by spinning a nested Qt event loop:
`qtbot.waitSignal` or `processEvents()` inside a coroutine would re-enter the qasync loop."""

from __future__ import annotations

import asyncio
import time

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QLabel, QWidget

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
    await until(lambda: assistant_entries(panel) >= count and not ctl.rt.tasks.is_running(panel.task_id)
                and panel.settled, timeout=timeout, what=f"{count} finished turn(s)")


def laid_out(conv) -> list[QWidget]:
    """The message widgets in the order the conversation's layout places them on screen."""
    lay = conv.lay
    widgets = [lay.itemAt(i).widget() for i in range(lay.count())]
    return [w for w in widgets if w is not None and w is not conv.older_note and w is not conv.hint]


def wheel(conv, notches: int) -> None:
    """Turn the mouse wheel over the conversation by `notches` (positive: up, towards older messages)."""
    viewport = conv.viewport()
    at = QPointF(viewport.width() / 2, viewport.height() / 2)
    QApplication.sendEvent(viewport, QWheelEvent(
        at, viewport.mapToGlobal(at), QPoint(), QPoint(0, 120 * notches), Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False))


def screen_text(widget) -> str:
    """What a person gets by selecting all of a text widget on screen (Ctrl+A) and reading the selection."""
    widget.setFocus()
    QTest.keyClick(widget, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    text = widget.selectedText() if isinstance(widget, QLabel) else widget.textCursor().selectedText()
    return text.replace("\u2029", "\n")  # Qt's paragraph separator in a selection


async def settled_place(conv) -> tuple[tuple[int | None, int], int]:
    """(the message at the top of the view and its offset, the scroll value) once they stop changing: messages
    just shown get their heights on the loop's next passes, and the view holds the person's place meanwhile."""
    bar = conv.verticalScrollBar()
    before = None
    while (now := (conv.view_state(), bar.value(), bar.maximum())) != before:
        before = now
        await asyncio.sleep(0.05)
    return now[:2]


def in_view(conv, widget: QWidget) -> bool:
    """`widget` lies wholly inside the conversation's visible area."""
    top = widget.mapTo(conv.viewport(), QPoint(0, 0)).y()
    return top >= 0 and top + widget.height() <= conv.viewport().height()


def run_shots(shots) -> int:
    """Run a screenshot script's `shots(folder)` coroutine in a qasync loop: the folder is the first argument,
    else resources/screenshots (the README's pictures)."""
    import sys
    from pathlib import Path

    import qasync

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setQuitOnLastWindowClosed(False)
    qasync.run(shots(Path(sys.argv[1] if len(sys.argv) > 1 else "resources/screenshots")))
    return 0
