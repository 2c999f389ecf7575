"""Small controls used in several places: the ✕ that takes a row or a file away, a picked file as a chip, and the
arrow button that opens and closes what it names."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QFileInfo, Qt
from PySide6.QtWidgets import QFileIconProvider, QFrame, QHBoxLayout, QLabel, QToolButton


def remove_button(tip: str) -> QToolButton:
    button = QToolButton()
    button.setText("✕")
    button.setAutoRaise(True)
    button.setToolTip(tip)
    return button


class FileChip(QFrame):
    """A file or folder the person picked (an attachment, a task's document): its name and a ✕ to take it back,
    with the desktop's own icon for it when `icon` (emoji need a font the system may lack)."""

    def __init__(self, path: str, remove_tip: str, icon: bool = False):
        super().__init__()
        self.setObjectName("AttachmentChip")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(8, 2, 4, 2)
        if icon:
            picture = QLabel()
            picture.setPixmap(QFileIconProvider().icon(QFileInfo(path)).pixmap(16, 16))
            lay.addWidget(picture)
        self.name = QLabel(Path(path).name)
        lay.addWidget(self.name)
        self.remove_button = remove_button(remove_tip)
        lay.addWidget(self.remove_button)


class Disclosure(QToolButton):
    """A checkable "▸ Thinking" button: its arrow points down while what it names is open."""

    def __init__(self, opened: bool = False):
        super().__init__()
        self.setObjectName("Toggle")
        self.setCheckable(True)
        self.setChecked(opened)
        self.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self._point(opened)
        self.toggled.connect(self._point)

    def _point(self, opened: bool) -> None:
        self.setArrowType(Qt.ArrowType.DownArrow if opened else Qt.ArrowType.RightArrow)
