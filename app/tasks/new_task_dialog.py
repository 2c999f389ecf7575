"""New task dialog: goal (the first message), title, model, approval mode, planning, the documents it works from,
whether it uses memory and whether its commands may use the network. Non-modal (a nested event loop would break
qasync), file choosers included; it stays open until the runtime created the task, and shows its error if not (e.g.
a chosen file that is gone).

Documents are files or folders, shown as removable chips; the runtime adds them to the knowledge library and the
task's search_knowledge sees only them. "Use memory" starts from Settings ▸ Memory; with memory off there it is
off and cannot be turned on here (the runtime needs both). The network is off by default, as the sandbox keeps it;
unlike the rest it can be changed later, in the task's header."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge
from ..widgets import dialogs
from ..widgets.controls import FileChip
from ..widgets.model_picker import ModelPicker

APPROVALS = (
    ("ask", "Ask me before any change (recommended)"),
    ("auto_edit", "Edit files in its folder freely, ask before commands"),
    ("full_auto", "Run everything without asking"),
)


class NewTaskDialog(QDialog):
    create_requested = Signal(dict)

    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
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
        self.goal.setTabChangesFocus(True)  # keyboard users reach Title and Create; a goal needs no tab characters
        form.addRow("Goal", self.goal)
        self.title = QLineEdit()
        self.title.setPlaceholderText("Optional — taken from the goal otherwise")
        form.addRow("Title", self.title)
        self.remote = bridge.remote
        # On a server: its default model, and none of what only this computer's tasks have.
        self.model = None if self.remote else ModelPicker(bridge.settings.default_model)
        if self.model is not None:
            self.model.load(bridge)
            form.addRow("Model", self.model)
        self.approval = QComboBox()
        for key, label in APPROVALS:
            self.approval.addItem(label, key)
        form.addRow("Approvals", self.approval)
        self.planning = QCheckBox("Plan first, then act")
        self.documents = DocumentChips()
        self.memory = QCheckBox("Use memory: what Hearth remembers about you, and learn from this task")
        self.network = QCheckBox("Let commands use the network")
        self.network.setToolTip("Shell commands run in a sandbox with no network unless you allow it here. You can "
                                "change this later in the task's header.")
        if self.remote:
            only_here = QLabel(f"The task runs on the Hearth {bridge.where}, with its default model. Planning "
                               "first, documents, memory and network for commands work on this computer's tasks "
                               "only.")
            only_here.setWordWrap(True)
            only_here.setObjectName("Muted")
            form.addRow(only_here)
        else:
            form.addRow("Planning", self.planning)
            form.addRow("Documents", self.documents)
            if bridge.settings.memory:
                self.memory.setChecked(True)
            else:
                self.memory.setEnabled(False)
                self.memory.setToolTip("Memory is off for every task (Settings ▸ Memory).")
            form.addRow("Memory", self.memory)
            form.addRow("Network", self.network)
        lay.addLayout(form)
        fixed = QLabel("Model, approvals, planning, documents and memory stay fixed for this task's life.")
        fixed.setObjectName("Muted")
        lay.addWidget(fixed)
        self.error = dialogs.error_line()
        lay.addWidget(self.error)
        buttons, self.create_button = dialogs.action_buttons("Create task", self._create, self.close)
        lay.addWidget(buttons)
        self.goal.setFocus()

    def model_ref(self) -> str | None:
        return self.model.ref() if self.model is not None else None

    def values(self) -> dict:
        return {
            "title": self.title.text().strip() or None,
            "model": self.model_ref(),
            "approval": self.approval.currentData(),
            "planning": self.planning.isChecked(),
            "knowledge": list(self.documents.paths),
            "memory": self.memory.isChecked(),
            "network": self.network.isChecked(),
            "goal": self.goal.toPlainText().strip(),
        }

    def _create(self) -> None:
        self.error.hide()
        self.create_button.setEnabled(False)
        self.create_requested.emit(self.values())

    def failed(self, message: str) -> None:
        self.error.setText(message)
        self.error.show()
        self.create_button.setEnabled(True)


class DocumentChips(QWidget):
    """"Work from documents…" (files or a folder, by non-modal choosers) and the chosen ones as removable chips."""

    COLUMNS = 2

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.paths: list[str] = []
        self.chooser: QFileDialog | None = None
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.button = QPushButton("Work from documents…")
        self.button.setAutoDefault(False)  # Enter in the dialog creates the task, never opens this menu
        menu = QMenu(self.button)
        menu.addAction("Files…", lambda: self.choose(folder=False))
        menu.addAction("A folder…", lambda: self.choose(folder=True))
        self.button.setMenu(menu)
        lay.addWidget(self.button, 0, Qt.AlignmentFlag.AlignLeft)
        self.grid = QGridLayout()
        self.grid.setSpacing(4)
        self.grid.setColumnStretch(self.COLUMNS, 1)  # chips keep their size, packed to the left
        lay.addLayout(self.grid)
        self.chips: dict[str, FileChip] = {}

    def choose(self, folder: bool) -> QFileDialog:
        dlg = QFileDialog(self, "Work from a folder" if folder else "Work from files", str(Path.home()))
        dlg.setFileMode(QFileDialog.FileMode.Directory if folder else QFileDialog.FileMode.ExistingFiles)
        dlg.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dlg.filesSelected.connect(self.add)
        dlg.open()
        self.chooser = dlg
        return dlg

    def add(self, paths: list[str]) -> None:
        for path in paths:
            if path not in self.paths:
                self.paths.append(path)
                self.chips[path] = self._chip(path)
        self._lay_out()

    def remove(self, path: str) -> None:
        self.paths.remove(path)
        chip = self.chips.pop(path)
        chip.setParent(None)
        chip.deleteLater()
        self._lay_out()

    def _chip(self, path: str) -> FileChip:
        chip = FileChip(path, f"Don't use {Path(path).name}", icon=True)
        chip.setToolTip(path)
        chip.remove_button.clicked.connect(lambda: self.remove(path))
        return chip

    def _lay_out(self) -> None:
        for chip in self.chips.values():  # taken out first: a widget added twice would leave a stale cell
            self.grid.removeWidget(chip)
        for i, path in enumerate(self.paths):
            self.grid.addWidget(self.chips[path], i // self.COLUMNS, i % self.COLUMNS, Qt.AlignmentFlag.AlignLeft)
