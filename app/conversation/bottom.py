"""The bottom of a task's or chat's panel: what the running turn is doing, the question waiting for the person's
answer, and the composer."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QVBoxLayout, QWidget

from .composer import Composer
from .phase import PhaseLine


class PanelBottom(QWidget):
    def __init__(self, enter_sends: bool, *above_waiting: QWidget):
        """`above_waiting`: what a panel shows between the phase line and a waiting box (a task's to-do list)."""
        super().__init__()
        self.setObjectName("PanelBottom")
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        rows = QVBoxLayout(self)
        rows.setContentsMargins(24, 6, 24, 14)
        rows.setSpacing(6)
        self.phase = PhaseLine()
        rows.addWidget(self.phase)
        for widget in above_waiting:
            rows.addWidget(widget)
        self.waiting_slot = QVBoxLayout()  # a WaitingBox while the turn waits for the person (waiting.swap_box)
        rows.addLayout(self.waiting_slot)
        self.composer = Composer()
        self.composer.set_enter_sends(enter_sends)
        rows.addWidget(self.composer)
