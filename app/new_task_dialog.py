"""New task dialog: goal (the first message), title, model, approval mode, planning. Non-modal (a nested
event loop would break qasync); it stays open until the runtime created the task, and shows its error if not."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QVBoxLayout,
)

from .model_picker import ModelPicker

APPROVALS = (
    ("ask", "Ask me before any change (recommended)"),
    ("auto_edit", "Edit files in its folder freely, ask before commands"),
    ("full_auto", "Run everything without asking"),
)


class NewTaskDialog(QDialog):
    create_requested = Signal(dict)

    def __init__(self, bridge, parent=None):
        super().__init__(parent)
        self.setWindowTitle("New task")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setMinimumWidth(520)
        lay = QVBoxLayout(self)
        intro = QLabel("What should Hearth work on? It gets its own folder, and you can keep talking to it.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.goal = QPlainTextEdit()
        self.goal.setPlaceholderText("e.g. Summarise the notes I attach and draft a reply")
        self.goal.setFixedHeight(80)
        form.addRow("Goal", self.goal)
        self.title = QLineEdit()
        self.title.setPlaceholderText("Optional — taken from the goal otherwise")
        form.addRow("Title", self.title)
        self.model = ModelPicker(bridge.settings.default_model)
        self.model.load(bridge)
        form.addRow("Model", self.model)
        self.approval = QComboBox()
        for key, label in APPROVALS:
            self.approval.addItem(label, key)
        form.addRow("Approvals", self.approval)
        self.planning = QCheckBox("Plan first, then act")
        form.addRow("Planning", self.planning)
        lay.addLayout(form)
        fixed = QLabel("Model, approvals and planning stay fixed for this task's life.")
        fixed.setObjectName("Muted")
        lay.addWidget(fixed)
        self.error = QLabel()
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #cf3a3a;")
        self.error.hide()
        lay.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.create = buttons.addButton("Create task", QDialogButtonBox.ButtonRole.AcceptRole)
        self.create.setObjectName("Primary")
        self.create.setDefault(True)
        buttons.accepted.connect(self._create)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)
        self.goal.setFocus()

    def model_ref(self) -> str:
        return self.model.ref()

    def values(self) -> dict:
        return {
            "title": self.title.text().strip() or None,
            "model": self.model_ref(),
            "approval": self.approval.currentData(),
            "planning": self.planning.isChecked(),
            "goal": self.goal.toPlainText().strip(),
        }

    def _create(self) -> None:
        self.error.hide()
        self.create.setEnabled(False)
        self.create_requested.emit(self.values())

    def failed(self, message: str) -> None:
        self.error.setText(message)
        self.error.show()
        self.create.setEnabled(True)
