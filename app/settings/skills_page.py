"""Settings ▸ Skills: the skills in the data folder (name, what they are for) and adding one from a folder."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QLabel, QListWidget, QPushButton, QVBoxLayout, QWidget

from ..core.bridge import RuntimeBridge
from ..core.util import error_text


class SkillsPage(QWidget):
    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        lay = QVBoxLayout(self)
        intro = QLabel("Skills are folders with a SKILL.md (name, description, instructions). The model sees each "
                       "one's description and loads it when it applies; start a message with /name to use one.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        self.list = QListWidget()
        lay.addWidget(self.list, 1)
        self.status = QLabel()
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        add = QPushButton("Add skill folder…")
        add.clicked.connect(self._pick)
        lay.addWidget(add, 0, Qt.AlignmentFlag.AlignLeft)
        self.bridge.run(self.reload(), owner=self, load=True)

    async def reload(self) -> None:
        skills = await self.bridge.skills.list()
        self.list.clear()
        for s in skills:
            self.list.addItem(f"/{s['name']} — {s['description']}")
        if not skills:
            self.status.setText("No skills yet.")

    def _pick(self) -> None:
        dlg = QFileDialog(self, "Choose a skill folder", str(Path.home()))
        dlg.setFileMode(QFileDialog.FileMode.Directory)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.fileSelected.connect(lambda folder: self.bridge.run(self.add(folder), owner=self))
        dlg.open()

    async def add(self, folder: str) -> None:
        try:
            skill = await self.bridge.skills.add(folder)
        except Exception as exc:
            self.status.setText(f"Not added: {error_text(exc)}")
            return
        self.status.setText(f"Added /{skill['name']}.")
        await self.reload()
