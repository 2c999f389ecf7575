"""Picking a model: every configured provider's live models (asked at once, each with a short timeout, cached by
the runtime), the default and recent ones first; an unreachable provider shows greyed with the reason. Long
ids are elided in the middle, the full id in the tooltip. Typing a `provider/model` by hand works too."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QComboBox, QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

from ..core.bridge import RuntimeBridge
from ..core.util import spawn

GROUPS = {"default": "Default", "recent": "Recent"}
ELIDE_AT = 360  # pixels


class ModelPicker(QComboBox):
    """An editable combo box of model refs; `ref()` is the chosen one."""

    loaded = Signal()

    def __init__(self, default: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setEditable(True)
        self.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.setMinimumContentsLength(28)
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self._model = QStandardItemModel(self)
        self.setModel(self._model)
        self.unavailable: dict[str, str] = {}  # provider id -> why it is greyed
        self._fill([{"ref": default, "provider": default.partition("/")[0], "group": "default",
                     "available": True, "reason": None}])
        self.setToolTip("provider/model — pick one, or type one")

    def load(self, bridge: RuntimeBridge) -> None:
        """Ask the runtime for the live lists; the box is usable meanwhile."""
        async def go() -> None:
            choices = await bridge.providers.model_choices()
            current = self.ref()
            self._fill(choices)
            self.set_ref(current)
            self.loaded.emit()

        self.loading = spawn(go(), bridge.report, owner=self, load=True)

    def _fill(self, choices: list[dict]) -> None:
        self._model.clear()
        self.unavailable = {}
        metrics = self.fontMetrics()
        group = None
        for choice in choices:
            if choice["group"] != group:
                group = choice["group"]
                header = QStandardItem(GROUPS.get(group, group))
                header.setFlags(Qt.ItemFlag.NoItemFlags)
                font = header.font()
                font.setBold(True)
                header.setFont(font)
                self._model.appendRow(header)
            if not choice["available"]:
                self.unavailable[choice["provider"]] = choice["reason"] or "unreachable"
                item = QStandardItem(f"   unreachable: {choice['reason']}")
                item.setFlags(Qt.ItemFlag.NoItemFlags)  # greyed, not selectable
                item.setToolTip(choice["reason"] or "")
                self._model.appendRow(item)
                continue
            ref = choice["ref"]
            item = QStandardItem(metrics.elidedText(ref, Qt.TextElideMode.ElideMiddle, ELIDE_AT))
            item.setData(ref, Qt.ItemDataRole.UserRole)
            item.setToolTip(ref)
            self._model.appendRow(item)
        first = next((i for i in range(self._model.rowCount()) if self._ref_at(i)), -1)
        self.setCurrentIndex(first)

    def _ref_at(self, row: int) -> str | None:
        return self._model.item(row).data(Qt.ItemDataRole.UserRole) if 0 <= row < self._model.rowCount() else None

    def refs(self) -> list[str]:
        return [r for i in range(self._model.rowCount()) if (r := self._ref_at(i))]

    def ref(self) -> str:
        row = self.currentIndex()
        text = self.currentText().strip()
        chosen = self._ref_at(row)
        if chosen and self.itemText(row) == text:
            return chosen
        return text

    def set_ref(self, ref: str) -> None:
        for row in range(self._model.rowCount()):
            if self._ref_at(row) == ref:
                self.setCurrentIndex(row)
                return
        self.setEditText(ref)


class ModelDialog(QDialog):
    """Choose another model: for "Continue in a new task with another model…", or a chat's next answers."""

    chosen = Signal(str)

    def __init__(self, bridge: RuntimeBridge, current: str, parent: QWidget | None = None, chat: bool = False):
        super().__init__(parent)
        self.setWindowTitle("Change the chat's model" if chat else "Continue with another model")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        lay = QVBoxLayout(self)
        note = QLabel("The next answers come from the model you pick; the conversation stays as it is."
                      if chat else "A new task starts with a copy of this conversation and the model you pick. "
                      f"This task keeps its model ({current}).")
        note.setWordWrap(True)
        lay.addWidget(note)
        self.picker = ModelPicker(current if chat else bridge.settings.default_model)
        self.picker.load(bridge)
        lay.addWidget(self.picker)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.ok = buttons.addButton("Use this model" if chat else "Continue in a new task",
                                    QDialogButtonBox.ButtonRole.AcceptRole)
        self.ok.setObjectName("Primary")
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)

    def _accept(self) -> None:
        ref = self.picker.ref()
        if ref:
            self.chosen.emit(ref)
            self.close()
