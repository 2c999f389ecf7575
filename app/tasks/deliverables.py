"""A task's deliverables: what its turns handed over with the `deliver` tool (runtime/tools/deliver.py).

The task panel's head has a Deliverables button, shown once the task delivered something and counting the
deliverables; it opens this dialog: one row per delivered path (its latest version, a folder's as its zip),
with the older versions under it, and Open, Save as… and Show in folder for the selected one. The copies are the
runtime's, in the data folder: Save as… writes one out through `rt.deliveries.save`, which checks it first.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHeaderView,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..core.util import ago, human_size
from ..widgets import dialogs

if TYPE_CHECKING:
    from runtime.api import DeliveryInfo

    from ..core.bridge import RuntimeBridge

TOOL = "deliver"  # the runtime's tool: a call of it that is done delivered something
COLUMNS = ["Deliverable", "Version", "Size", "Delivered", "Note"]


def label(count: int) -> str:
    """The panel button's text."""
    return f"Deliverables ({count})"


def default_name(d: DeliveryInfo, latest: bool) -> str:
    """What Save as… offers: the copy's name, an older version's with its number."""
    if latest:
        return d.name
    stem, suffix = os.path.splitext(d.name)
    return f"{stem} (version {d.version}){suffix}"


class DeliverablesDialog(QDialog):
    def __init__(self, bridge: RuntimeBridge, task_id: str, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id = task_id
        self.setWindowTitle(f"Deliverables — {title}")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(760, 360)
        lay = QVBoxLayout(self)
        head = QLabel(f"<b>What “{html.escape(title)}” delivered</b> — the latest version of each, older ones under "
                      "it. These are kept copies: the workspace may have changed since.")
        head.setWordWrap(True)
        lay.addWidget(head)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setRootIsDecorated(True)
        self.tree.setUniformRowHeights(True)
        header = self.tree.header()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setStretchLastSection(True)
        self.tree.currentItemChanged.connect(lambda *_: self._enable())
        self.tree.itemDoubleClicked.connect(lambda *_: self.open_selected())
        lay.addWidget(self.tree)
        self.status = QLabel()
        self.status.setObjectName("Muted")
        self.status.setWordWrap(True)
        lay.addWidget(self.status)
        buttons = QDialogButtonBox()
        role = QDialogButtonBox.ButtonRole.ActionRole  # they keep the dialog open
        self.open_button = self._button(buttons, "Open", role, self.open_selected)
        self.save_button = self._button(buttons, "Save as…", role, self.save_selected)
        self.folder_button = self._button(buttons, "Show in folder", role, self.show_in_folder)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)
        self._items: dict[int, tuple[DeliveryInfo, bool]] = {}  # tree item id -> (delivery, is the latest)
        self._enable()

    @staticmethod
    def _button(box: QDialogButtonBox, text: str, role: QDialogButtonBox.ButtonRole, slot) -> QPushButton:
        button = box.addButton(text, role)
        button.clicked.connect(slot)
        return button

    async def load(self) -> None:
        """Read the task's deliverables (again: a turn may have delivered more), keeping the selection's path."""
        delivered = await self.bridge.deliveries.list(self.task_id)
        chosen = self.selected()
        self.tree.clear()
        self._items.clear()
        tops: dict[str, QTreeWidgetItem] = {}
        for d in delivered:  # newest first: the first of a path is its latest version
            latest = d.path not in tops
            item = QTreeWidgetItem([d.path + ("/ (zip)" if d.kind == "folder" else "") if latest else "",
                                    str(d.version), human_size(d.size), ago(d.created_at), d.note])
            item.setToolTip(0, f"{d.path} · sha256 {d.sha256}")
            item.setToolTip(4, d.note)
            item.setTextAlignment(1, Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self._items[id(item)] = (d, latest)
            if latest:
                tops[d.path] = item
                self.tree.addTopLevelItem(item)
            else:
                tops[d.path].addChild(item)
        for top in tops.values():
            if top.childCount():  # the older versions are under it
                top.setText(1, f"{top.text(1)} · {top.childCount()} older")
        keep = tops.get(chosen[0].path) if chosen is not None else None
        first = keep or self.tree.topLevelItem(0)
        if first is not None:
            self.tree.setCurrentItem(first)
        self._enable()

    def selected(self) -> tuple[DeliveryInfo, bool] | None:
        item = self.tree.currentItem()
        return self._items.get(id(item)) if item is not None else None

    def _enable(self) -> None:
        on = self.selected() is not None
        for button in (self.open_button, self.save_button, self.folder_button):
            button.setEnabled(on)

    def open_selected(self) -> None:
        if (chosen := self.selected()) is not None:
            self.path_dialog = dialogs.open_path(self, chosen[0].file)

    def show_in_folder(self) -> None:
        if (chosen := self.selected()) is not None:
            self.path_dialog = dialogs.open_path(self, Path(chosen[0].file).parent)

    def save_selected(self) -> QFileDialog | None:
        chosen = self.selected()
        if chosen is None:
            return None
        delivery, latest = chosen
        dlg = QFileDialog(self, "Save deliverable", str(Path.home() / default_name(delivery, latest)))
        dlg.setAcceptMode(QFileDialog.AcceptMode.AcceptSave)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.fileSelected.connect(lambda path: self.bridge.run(self.save_to(delivery, path), self))
        dlg.open()
        self.save_dialog = dlg
        return dlg

    async def save_to(self, delivery: DeliveryInfo, path: str) -> None:
        written = await self.bridge.deliveries.save(delivery, path)
        self.status.setText(f"Saved {delivery.path} (version {delivery.version}) to {written}")
