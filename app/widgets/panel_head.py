"""The head of a task's, chat's or team's panel: its title (the window is named after it) with the panel's own
buttons on the right, and the rows a panel adds under it (a task's settings)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget


class PanelHead(QWidget):
    def __init__(self, *buttons: QWidget, top_margin: int = 14, framed: bool = True):
        """`framed`: a head of its own across the panel, with a line under it; unframed, it sits in the panel's
        margins (a team's board, whose assignments have a frame of their own)."""
        super().__init__()
        self.rows = QVBoxLayout(self)
        self.rows.setSpacing(6)
        if framed:
            self.setObjectName("PanelHead")
            self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
            self.rows.setContentsMargins(24, top_margin, 24, 10)
        else:
            self.rows.setContentsMargins(0, 0, 0, 0)
        top = QHBoxLayout()
        self.title = QLabel()
        self.title.setObjectName("PanelTitle")
        top.addWidget(self.title, 1)
        for button in buttons:
            top.addWidget(button)
        self.rows.addLayout(top)

    def show_title(self, title: str) -> bool:
        """Show `title`; whether it changed (the panel then tells the window)."""
        if self.title.text() == title:
            return False
        self.title.setText(title)
        return True
