"""New team: a goal, the members (name, model, role, which tools, approval mode) and the plan (assignments, each
for a member, with the assignments it waits for) — or a lead member who writes the plan from the goal. Blank rows
are left out; the runtime checks the whole team (an unknown member or dependency, a cycle) and its sentence shows
here, with everything typed kept. Non-modal: a nested Qt event loop would break qasync."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

APPROVALS = {"Asks before changes": "ask", "Edits files, asks before commands": "auto_edit",
             "Runs everything without asking": "full_auto"}
# The runtime's named tool sets (teams_api.create): what a member may do.
TOOL_SETS = {"Every tool": "all", "Files, no commands": "files", "Reads files only": "read_only",
             "No tools: answers only": "none"}
TOOLS_COLUMN, APPROVAL_COLUMN = 3, 4
MEMBER_ROWS, PLAN_ROWS = 4, 8
BY_ME = "Me: the assignments below"


class NewTeamDialog(QDialog):
    create_requested = Signal(dict)  # the keyword arguments of rt.teams.create

    def __init__(self, default_model: str, max_parallel: int, parent=None):
        super().__init__(parent)
        self.setWindowTitle("New team")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(920, 620)
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.goal = QLineEdit()
        self.goal.setPlaceholderText("What the team works toward, e.g. Write and review a blog post about our trip")
        form.addRow("Goal", self.goal)
        self.parallel = QSpinBox()
        self.parallel.setRange(1, max(8, max_parallel))  # a larger setting must not be cut down here
        self.parallel.setValue(max_parallel)  # the runtime's team_max_parallel, the person's default
        self.parallel.setToolTip("How many assignments may run at the same time")
        form.addRow("At once", self.parallel)
        lay.addLayout(form)
        lay.addWidget(QLabel("Members"))
        self.members = self._table(["Name", "Model", "Role instructions", "Tools", "Approval"], MEMBER_ROWS)
        for row in range(MEMBER_ROWS):
            self.members.setItem(row, 1, QTableWidgetItem(default_model))
            tools = QComboBox()
            tools.addItems(list(TOOL_SETS))
            tools.setToolTip("What this member may use: its files and commands work in the team's folder")
            self.members.setCellWidget(row, TOOLS_COLUMN, tools)
            mode = QComboBox()
            mode.addItems(list(APPROVALS))
            self.members.setCellWidget(row, APPROVAL_COLUMN, mode)
        for column in (TOOLS_COLUMN, APPROVAL_COLUMN):  # the choices read in full; the role takes the rest
            self.members.horizontalHeader().setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        lay.addWidget(self.members)
        planner = QFormLayout()
        self.planner = QComboBox()
        self.planner.setToolTip("A member who turns the goal into assignments before the team starts on them")
        self.planner.addItem(BY_ME)
        self.members.itemChanged.connect(self._members_changed)
        self.planner.currentIndexChanged.connect(self._planner_changed)
        planner.addRow("Plan written by", self.planner)
        lay.addLayout(planner)
        self.plan_label = QLabel("Plan")
        lay.addWidget(self.plan_label)
        self.plan = self._table(["Id", "Member", "Instructions", "After (ids, comma-separated)"], PLAN_ROWS)
        self.plan.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.ResizeToContents)
        lay.addWidget(self.plan, 1)
        self.error = QLabel()
        self.error.setObjectName("Warning")
        self.error.setWordWrap(True)
        self.error.hide()
        lay.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.create = buttons.addButton("Create team", QDialogButtonBox.ButtonRole.AcceptRole)
        self.create.setObjectName("Primary")
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)

    @staticmethod
    def _table(headers: list[str], rows: int) -> QTableWidget:
        table = QTableWidget(rows, len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.verticalHeader().hide()
        table.horizontalHeader().setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        return table

    def _members_changed(self) -> None:
        """The lead is chosen among the members typed so far."""
        chosen = self.planner.currentText()
        names = [self._cell(self.members, row, 0) for row in range(self.members.rowCount())]
        self.planner.blockSignals(True)
        self.planner.clear()
        self.planner.addItems([BY_ME, *(n for n in names if n)])
        self.planner.setCurrentIndex(max(self.planner.findText(chosen), 0))
        self.planner.blockSignals(False)
        self._planner_changed(self.planner.currentIndex())

    def _planner_changed(self, index: int) -> None:
        self.plan_label.setText(f"Plan: {self.planner.currentText()} turns the goal into assignments first (any "
                                "you write here are kept too)" if index > 0 else "Plan")

    def set_member(self, row: int, name: str, model: str, role: str = "", approval: str = "ask",
                   tools: str = "all") -> None:
        for column, text in enumerate((name, model, role)):
            self.members.setItem(row, column, QTableWidgetItem(text))
        self.members.cellWidget(row, TOOLS_COLUMN).setCurrentIndex(list(TOOL_SETS.values()).index(tools))
        self.members.cellWidget(row, APPROVAL_COLUMN).setCurrentIndex(list(APPROVALS.values()).index(approval))

    def set_assignment(self, row: int, key: str, member: str, instructions: str, after: str = "") -> None:
        for column, text in enumerate((key, member, instructions, after)):
            self.plan.setItem(row, column, QTableWidgetItem(text))

    @staticmethod
    def _cell(table: QTableWidget, row: int, column: int) -> str:
        item = table.item(row, column)
        return item.text().strip() if item is not None else ""

    def values(self) -> dict:
        members = []
        for row in range(self.members.rowCount()):
            name = self._cell(self.members, row, 0)
            if name:
                members.append({"name": name, "model": self._cell(self.members, row, 1) or None,
                                "role": self._cell(self.members, row, 2),
                                "tools": TOOL_SETS[self.members.cellWidget(row, TOOLS_COLUMN).currentText()],
                                "approval": APPROVALS[self.members.cellWidget(row, APPROVAL_COLUMN).currentText()]})
        plan = []
        for row in range(self.plan.rowCount()):
            key, member, instructions, after = (self._cell(self.plan, row, c) for c in range(4))
            if key or instructions:
                plan.append({"key": key, "member": member, "instructions": instructions,
                             "depends_on": [d.strip() for d in after.split(",") if d.strip()]})
        lead = self.planner.currentText() if self.planner.currentIndex() > 0 else None
        return {"goal": self.goal.text().strip(), "members": members, "assignments": plan,
                "max_parallel": self.parallel.value(), "lead": lead}

    def _accept(self) -> None:
        self.error.hide()
        self.create.setEnabled(False)
        self.create_requested.emit(self.values())

    def failed(self, text: str) -> None:
        """The runtime refused the team: say why and keep everything typed."""
        self.error.setText(text)
        self.error.show()
        self.create.setEnabled(True)
