"""The task's todo list beside the conversation (its approved plan, kept up to date by the agent)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QVBoxLayout, QWidget

from ..widgets.controls import Disclosure

MARKS = {"pending": "☐", "in_progress": "◐", "done": "☑"}


class TodoBox(QFrame):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("WaitingBox")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 6, 12, 8)
        lay.setSpacing(2)
        self.toggle = Disclosure(opened=True)
        self.toggle.toggled.connect(self._toggled)
        lay.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignLeft)
        self.items = QLabel()
        self.items.setTextFormat(Qt.TextFormat.PlainText)
        self.items.setWordWrap(True)
        lay.addWidget(self.items)
        self.todos: list[dict] = []
        self.hide()

    def set_todos(self, todos: list[dict] | None) -> None:
        self.todos = list(todos or [])
        done = sum(t.get("status") == "done" for t in self.todos)
        self.toggle.setText(f"Plan · {done} of {len(self.todos)} done")
        self.items.setText("\n".join(f"{MARKS.get(t.get('status', ''), '☐')}  {t.get('content', '')}"
                                     for t in self.todos))
        self.setVisible(bool(self.todos))

    def _toggled(self, shown: bool) -> None:
        self.items.setVisible(shown)
