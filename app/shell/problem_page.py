"""The page Hearth shows when it cannot start normally: what is wrong, in a sentence, and the ways out as
buttons (open the file, reset it, retry; later: free space, restore a backup, choose another folder).

Nothing on it needs the runtime, so every button works while the runtime is not open."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget


class ProblemPage(QWidget):
    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("ProblemPage")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(48, 48, 48, 48)
        outer.addStretch(1)
        self.title = QLabel()
        self.title.setObjectName("PanelTitle")
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        outer.addWidget(self.title)
        self.text = QLabel()
        self.text.setWordWrap(True)
        self.text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        outer.addWidget(self.text)
        self.note = QLabel()
        self.note.setObjectName("Muted")
        self.note.setWordWrap(True)
        self.note.setAlignment(Qt.AlignmentFlag.AlignCenter)
        outer.addWidget(self.note)
        self.row = QHBoxLayout()
        self.row.addStretch(1)
        outer.addLayout(self.row)
        outer.addStretch(2)
        self.buttons: dict[str, QPushButton] = {}

    def show_problem(self, title: str, text: str, actions: list[tuple[str, Callable[[], None]]],
                     note: str = "") -> None:
        self.title.setText(title)
        self.text.setText(text)
        self.note.setText(note)
        self.note.setVisible(bool(note))
        while self.row.count() > 1:
            item = self.row.takeAt(1)
            if item is not None and (w := item.widget()) is not None:
                w.deleteLater()
        self.buttons = {}
        for i, (label, action) in enumerate(actions):
            button = QPushButton(label)
            if i == 0:
                button.setObjectName("Primary")
            button.clicked.connect(action)
            self.row.addWidget(button)
            self.buttons[label] = button
        self.row.addStretch(1)

    def say(self, note: str) -> None:
        """A line under the problem: what the last action did (or why it could not)."""
        self.note.setText(note)
        self.note.setVisible(bool(note))
