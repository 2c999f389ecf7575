"""What a task does between its turns, above the composer: the wake-up it waits for ("Waiting until 14:20 — why",
Resume now, Cancel wait) and its background commands (what, since when, how they ended, Stop), with the output so
far of the one the person opens (its last 8 KiB, read again every second while it runs).

The box reads the runtime when the panel's task changes (a command that starts or ends, a wake-up set, cancelled
or fired is a task change: the bridge's `task_changed`), and only the open command's output on a timer."""

from __future__ import annotations

import html
import time
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from ..conversation.markdown import mono_font

if TYPE_CHECKING:
    from runtime.api import TaskInfo

    from ..core.bridge import RuntimeBridge

SHOWN_ENDED = 3  # ended commands listed below the running ones
OUTPUT_TAIL = 8192  # bytes of the open command's output shown
ENDED_WORDS = {"stopped": "stopped", "interrupted": "interrupted by a quit"}


def command_state(row: dict) -> str:
    """How a background command stands, in a few words: 'running since 14:02', 'exited 0', 'stopped'."""
    if row["status"] == "running":
        since = time.strftime("%H:%M", time.localtime(row["started_at"]))
        return f"running since {since}"
    if row["status"] == "exited":
        return f"exited {row['exit_code']}"
    return ENDED_WORDS.get(row["status"], row["status"])


class ActivityBox(QFrame):
    def __init__(self, bridge: RuntimeBridge, task_id: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id = task_id
        self.setObjectName("WaitingBox")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        self.wake_row = QWidget()
        wake = QHBoxLayout(self.wake_row)
        wake.setContentsMargins(0, 0, 0, 0)
        self.wake_label = QLabel()
        self.wake_label.setWordWrap(True)
        wake.addWidget(self.wake_label, 1)
        self.resume = QPushButton("Resume now")
        self.resume.setToolTip("Wake the task now: its next turn starts at once")
        self.resume.clicked.connect(self._resume)
        wake.addWidget(self.resume)
        self.cancel = QPushButton("Cancel wait")
        self.cancel.setToolTip("The task stops waiting and stays as it is until you write to it")
        self.cancel.clicked.connect(self._cancel)
        wake.addWidget(self.cancel)
        lay.addWidget(self.wake_row)
        self.rows = QVBoxLayout()
        self.rows.setSpacing(2)
        lay.addLayout(self.rows)
        self.output = QPlainTextEdit()
        self.output.setReadOnly(True)
        self.output.setFont(mono_font())
        self.output.setFixedHeight(140)
        self.output.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.output.hide()
        lay.addWidget(self.output)
        self.commands: list[dict] = []
        self.open_id: str | None = None  # the command whose output is shown
        self._timer = QTimer(self)
        self._timer.setInterval(1000)
        self._timer.timeout.connect(lambda: self.bridge.run(self._read_output(), owner=self))
        self.wake_row.hide()
        self.hide()

    def show_wake(self, info: TaskInfo) -> None:
        words = info.waits_for()
        self.wake_row.setVisible(words is not None)
        if words is not None and info.wake is not None:
            self.wake_label.setText(f"<b>{words.capitalize()}</b> — {_escape(info.wake['note'])}")
        self._fit()

    async def refresh(self) -> None:
        """Read the task's background commands again and show them."""
        rows = await self.bridge.background(self.task_id)
        running = [r for r in rows if r["status"] == "running"]
        self.commands = running + [r for r in rows if r["status"] != "running"][:SHOWN_ENDED]
        while self.rows.count():
            item = self.rows.takeAt(0)
            if item is not None and (widget := item.widget()) is not None:
                widget.deleteLater()
        for row in self.commands:
            self.rows.addWidget(self._row(row))
        if self.open_id is not None and not any(r["id"] == self.open_id for r in self.commands):
            self._show_output(None)
        elif self.open_id is not None:
            await self._read_output()
        self._fit()

    def _row(self, row: dict) -> QWidget:
        line = QWidget()
        lay = QHBoxLayout(line)
        lay.setContentsMargins(0, 0, 0, 0)
        running = row["status"] == "running"
        state = QLabel(f"{'●' if running else '○'} {command_state(row)}")
        state.setToolTip(f"Background command {row['id']}, {row['output_bytes']:,} bytes of output")
        lay.addWidget(state)
        command = QLabel(f"<code>{_escape(row['command'])}</code>")
        command.setToolTip(row["command"])
        command.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        command.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # a long one never widens
        lay.addWidget(command, 1)
        output = QPushButton("Hide output" if row["id"] == self.open_id else "Output")
        output.setObjectName("Link")
        output.clicked.connect(lambda: self._show_output(None if self.open_id == row["id"] else row["id"]))
        lay.addWidget(output)
        if running:
            stop = QPushButton("Stop")
            stop.setToolTip("Stop this command and everything it started")
            stop.clicked.connect(lambda: self.bridge.run(self.bridge.stop_background(self.task_id, row["id"]),
                                                         owner=self))
            lay.addWidget(stop)
        return line

    def _show_output(self, command_id: str | None) -> None:
        self.open_id = command_id
        self.output.setVisible(command_id is not None)
        self._timer.stop()
        if command_id is not None:
            self.bridge.run(self.refresh(), owner=self)
            if any(r["id"] == command_id and r["status"] == "running" for r in self.commands):
                self._timer.start()
        self._fit()

    async def _read_output(self) -> None:
        if self.open_id is None:
            return
        text = await self.bridge.background_output(self.task_id, self.open_id, -OUTPUT_TAIL)
        if text != self.output.toPlainText():
            self.output.setPlainText(text or "(no output yet)")
            bar = self.output.verticalScrollBar()
            bar.setValue(bar.maximum())

    def _resume(self) -> None:
        self.resume.setEnabled(False)
        self.bridge.run(self.bridge.wakeups.resume_now(self.task_id), owner=self)

    def _cancel(self) -> None:
        self.bridge.run(self.bridge.wakeups.cancel(self.task_id), owner=self)

    def _fit(self) -> None:
        self.resume.setEnabled(True)
        self.setVisible(self.wake_row.isVisibleTo(self) or bool(self.commands))


def _escape(text: str, cap: int = 120) -> str:
    return html.escape(text if len(text) <= cap else text[:cap - 1] + "…")
