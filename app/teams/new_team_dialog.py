"""New team: a goal, the members and the plan — or a lead member who writes the plan from the goal.

Members are named freely (the runtime takes any unique name without ':'), each with a model from the model picker
(the providers' live lists, or typed), a role, which tools and an approval mode. The plan's assignments get their
ids here (A, B, C … in the order they are added, kept when another is removed); each is given to one of the
members from a list, and waits for the assignments ticked under "After" (a tick that would close a circle is not
offered). It starts small: two members — a worker with every tool and a reviewer that only reads — and two
assignments, the second after the first; rows are added and removed in place. An assignment without
instructions that nothing waits for is left out; the runtime checks the whole team and its sentence shows here,
with everything typed kept. Non-modal: a nested Qt event loop would break qasync."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import count

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge
from ..widgets.controls import remove_button
from ..widgets.model_picker import ModelPicker

APPROVALS = {"Asks before changes": "ask", "Edits files, asks before commands": "auto_edit",
             "Runs everything without asking": "full_auto"}
# The runtime's named tool sets (teams_api.create): what a member may do.
TOOL_SETS = {"Every tool": "all", "Files, no commands": "files", "Reads files only": "read_only",
             "No tools: answers only": "none"}
BY_ME = "Me: the assignments below"
AFTER_COLUMN = 3
# (name, tools) of the members a new team starts with; the plan starts with one assignment for each, in order.
STARTING_MEMBERS = (("worker", "all"), ("reviewer", "read_only"))


def assignment_key(n: int) -> str:
    """A, B … Z, AA, AB …: the n-th assignment's id (from 0)."""
    key = ""
    n += 1
    while n:
        n, rest = divmod(n - 1, 26)
        key = chr(ord("A") + rest) + key
    return key


def _combo(choices: dict[str, str], value: str) -> QComboBox:
    box = QComboBox()
    box.addItems(list(choices))
    box.setCurrentIndex(list(choices.values()).index(value))
    return box


class MemberRow:
    """One member's widgets, a row of the Members table."""

    def __init__(self, uid: int, model: str, bridge: RuntimeBridge | None = None):
        self.uid = uid
        self.name = QLineEdit()
        self.name.setPlaceholderText("a name, e.g. writer")
        self.model = ModelPicker(model)
        self.model.setMinimumContentsLength(18)
        if bridge is not None:
            self.model.load(bridge)
        self.role = QLineEdit()
        self.role.setPlaceholderText("what this member does (optional)")
        self.tools = _combo(TOOL_SETS, "all")
        self.tools.setToolTip("What this member may use: its files and commands work in the team's folder")
        self.approval = _combo(APPROVALS, "ask")
        self.remove = remove_button("Remove this member")

    def widgets(self) -> list[QWidget]:
        return [self.name, self.model, self.role, self.tools, self.approval, self.remove]

    def spec(self) -> dict:
        return {"name": self.name.text().strip(), "model": self.model.ref() or None, "role": self.role.text().strip(),
                "tools": TOOL_SETS[self.tools.currentText()], "approval": APPROVALS[self.approval.currentText()]}


class AssignmentRow:
    """One assignment's widgets, a row of the Plan table: its id, member, instructions and what it waits for."""

    def __init__(self, key: str):
        self.key = key
        self.id = QLabel(key)
        self.id.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.member = QComboBox()
        self.member.setToolTip("Who does it")
        self.instructions = QLineEdit()
        self.instructions.setPlaceholderText("what to do, e.g. Draft the post from the notes")
        self.after_box = QWidget()
        self.after_lay = QHBoxLayout(self.after_box)
        self.after_lay.setContentsMargins(4, 0, 4, 0)
        self.none = QLabel("—")
        self.none.setObjectName("Muted")
        self.after_lay.addWidget(self.none)
        self.after_lay.addStretch(1)
        self.after: dict[str, QCheckBox] = {}  # the other assignments' keys, ticked: this one waits for them
        self.remove = remove_button("Remove this assignment")

    def widgets(self) -> list[QWidget]:
        return [self.id, self.member, self.instructions, self.after_box, self.remove]

    def waits_for(self) -> list[str]:
        return [key for key, box in self.after.items() if box.isChecked()]


class NewTeamDialog(QDialog):
    create_requested = Signal(dict)  # the keyword arguments of bridge.create_team

    def __init__(self, default_model: str, max_parallel: int, parent: QWidget | None = None,
                 bridge: RuntimeBridge | None = None):
        super().__init__(parent)
        self.setWindowTitle("New team")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(1040, 640)
        self.default_model = default_model
        self.bridge = bridge  # for the model pickers' live lists (None: the default model only, or typed)
        self._uids = count()
        self._keys = count()
        self.member_rows: list[MemberRow] = []
        self.assignment_rows: list[AssignmentRow] = []
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
        self.members = self._table(["Name", "Model", "Role instructions", "Tools", "Approval", ""], stretch=2)
        self.members.horizontalHeader().resizeSection(0, 130)
        self.members.horizontalHeader().resizeSection(1, 220)
        lay.addWidget(self.members, 1)
        self.add_member_button = self._add_button("+ Add member", self.add_member, lay)
        planner = QFormLayout()
        self.planner = QComboBox()
        self.planner.setToolTip("A member who turns the goal into assignments before the team starts on them")
        self.planner.addItem(BY_ME)
        self.planner.currentIndexChanged.connect(self._planner_changed)
        planner.addRow("Plan written by", self.planner)
        lay.addLayout(planner)
        self.plan_label = QLabel("Plan")
        lay.addWidget(self.plan_label)
        self.plan = self._table(["Id", "Member", "Instructions", "After", ""], stretch=2)
        self.plan.horizontalHeader().resizeSection(0, 40)
        self.plan.horizontalHeader().resizeSection(1, 130)
        self.plan.horizontalHeader().setSectionResizeMode(AFTER_COLUMN, QHeaderView.ResizeMode.Fixed)  # _plan_changed
        after_header = self.plan.horizontalHeaderItem(AFTER_COLUMN)
        assert after_header is not None  # made by _table's labels
        after_header.setToolTip("Tick the assignments this one waits for")
        lay.addWidget(self.plan, 1)
        self.add_assignment_button = self._add_button("+ Add assignment", self.add_assignment, lay)
        self.error = QLabel()
        self.error.setObjectName("Warning")
        self.error.setWordWrap(True)
        self.error.hide()
        lay.addWidget(self.error)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Cancel)
        self.create_button = buttons.addButton("Create team", QDialogButtonBox.ButtonRole.AcceptRole)
        self.create_button.setObjectName("Primary")
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)
        for i, (name, tools) in enumerate(STARTING_MEMBERS):
            self.set_member(i, name, default_model, tools=tools)
        self.set_assignment(0, STARTING_MEMBERS[0][0], "")
        self.set_assignment(1, STARTING_MEMBERS[1][0], "", after=["A"])

    @staticmethod
    def _table(headers: list[str], stretch: int) -> QTableWidget:
        table = QTableWidget(0, len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.verticalHeader().hide()
        table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        table.setFocusPolicy(Qt.FocusPolicy.NoFocus)  # the cells' own widgets take the focus
        header = table.horizontalHeader()
        for column in range(stretch + 1, len(headers)):  # the choices read in full; the stretched column the rest
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(stretch, QHeaderView.ResizeMode.Stretch)
        return table

    def _add_button(self, text: str, action: Callable[[], object], lay: QVBoxLayout) -> QPushButton:
        button = QPushButton(text)
        button.setObjectName("Link")
        button.setAutoDefault(False)  # Enter creates the team, never adds a row
        button.clicked.connect(lambda: action())
        lay.addWidget(button, 0, Qt.AlignmentFlag.AlignLeft)
        return button

    @staticmethod
    def _put(table: QTableWidget, widgets: list[QWidget]) -> None:
        row = table.rowCount()
        table.insertRow(row)
        for column, widget in enumerate(widgets):
            table.setCellWidget(row, column, widget)
        table.resizeRowToContents(row)

    # -- members --

    def add_member(self) -> MemberRow:
        member = MemberRow(next(self._uids), self.default_model, self.bridge)
        member.name.textChanged.connect(self._members_changed)
        member.remove.clicked.connect(lambda: self._remove_member(member))
        self.member_rows.append(member)
        self._put(self.members, member.widgets())
        self._members_changed()
        return member

    def _remove_member(self, member: MemberRow) -> None:
        self.members.removeRow(self.member_rows.index(member))
        self.member_rows.remove(member)
        self._members_changed()

    def set_member(self, row: int, name: str, model: str, role: str = "", approval: str = "ask",
                   tools: str = "all") -> MemberRow:
        while len(self.member_rows) <= row:
            self.add_member()
        member = self.member_rows[row]
        member.name.setText(name)
        member.model.set_ref(model)
        member.role.setText(role)
        member.role.setCursorPosition(0)  # its start shows, as after typing
        member.tools.setCurrentIndex(list(TOOL_SETS.values()).index(tools))
        member.approval.setCurrentIndex(list(APPROVALS.values()).index(approval))
        return member

    def _named(self) -> list[MemberRow]:
        return [m for m in self.member_rows if m.name.text().strip()]

    def _members_changed(self) -> None:
        """The assignments' member lists and the lead's follow the members' names (a renamed member keeps its
        assignments)."""
        named = self._named()
        for a in self.assignment_rows:
            chosen = a.member.currentData()
            a.member.blockSignals(True)
            a.member.clear()
            for m in named:
                a.member.addItem(m.name.text().strip(), m.uid)
            a.member.setCurrentIndex(max(a.member.findData(chosen), 0))
            a.member.blockSignals(False)
        chosen = self.planner.currentText()
        self.planner.blockSignals(True)
        self.planner.clear()
        self.planner.addItems([BY_ME, *(m.name.text().strip() for m in named)])
        self.planner.setCurrentIndex(max(self.planner.findText(chosen), 0))
        self.planner.blockSignals(False)
        self._planner_changed(self.planner.currentIndex())

    def _planner_changed(self, index: int) -> None:
        self.plan_label.setText(f"Plan: {self.planner.currentText()} turns the goal into assignments first (any "
                                "you write here are kept too)" if index > 0 else "Plan")

    # -- the plan --

    def add_assignment(self) -> AssignmentRow:
        assignment = AssignmentRow(assignment_key(next(self._keys)))
        assignment.instructions.textChanged.connect(self._plan_changed)
        assignment.remove.clicked.connect(lambda: self._remove_assignment(assignment))
        self.assignment_rows.append(assignment)
        self._put(self.plan, assignment.widgets())
        self._members_changed()
        self._plan_changed()
        return assignment

    def _remove_assignment(self, assignment: AssignmentRow) -> None:
        self.plan.removeRow(self.assignment_rows.index(assignment))
        self.assignment_rows.remove(assignment)
        self._plan_changed()

    def set_assignment(self, row: int, member: str, instructions: str, after: Iterable[str] = ()) -> str:
        """Fill the plan's row `row` (added as needed) as a person would; returns its id."""
        while len(self.assignment_rows) <= row:
            self.add_assignment()
        a = self.assignment_rows[row]
        a.member.setCurrentIndex(max(a.member.findText(member), 0))
        a.instructions.setText(instructions)
        for key, box in a.after.items():
            box.setChecked(key in after)
        return a.key

    def _ancestors(self, key: str) -> set[str]:
        """What assignment `key` waits for, directly or through others."""
        deps = {a.key: a.waits_for() for a in self.assignment_rows}
        seen: set[str] = set()
        todo = list(deps.get(key, []))
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.add(k)
                todo.extend(deps.get(k, []))
        return seen

    def _plan_changed(self) -> None:
        """Each assignment offers the others to wait for, except one that already waits for it (a circle)."""
        keys = [a.key for a in self.assignment_rows]
        instructions = {a.key: a.instructions.text().strip() for a in self.assignment_rows}
        for a in self.assignment_rows:
            for key in [k for k in a.after if k not in keys]:  # removed assignments
                gone = a.after.pop(key)
                gone.setParent(None)
                gone.deleteLater()
            for i, key in enumerate(k for k in keys if k != a.key):
                box = a.after.get(key)
                if box is None:
                    box = a.after[key] = QCheckBox(key)
                    box.toggled.connect(self._plan_changed)
                    a.after_lay.insertWidget(i, box)
                    box.show()  # now: the column's width below counts it
            a.none.setVisible(not a.after)
        widest = max((a.after_box.sizeHint().width() for a in self.assignment_rows), default=0)
        self.plan.horizontalHeader().resizeSection(AFTER_COLUMN, max(widest, 60))  # every tick shows
        for a in self.assignment_rows:
            for key, box in a.after.items():
                circle = a.key in self._ancestors(key)
                box.setEnabled(box.isChecked() or not circle)
                box.setToolTip(f"{key} already waits for {a.key}" if circle and not box.isChecked() else
                               f"Wait for {key}: {instructions[key] or '(no instructions yet)'}")

    # -- creating --

    def values(self) -> dict:
        members = [m.spec() for m in self._named()]
        names = {m.uid: m.name.text().strip() for m in self._named()}
        wanted = {a.key for a in self.assignment_rows if a.instructions.text().strip()}
        for key in list(wanted):  # an empty assignment something waits for is kept: the runtime says it is empty
            wanted |= self._ancestors(key)
        plan = [{"key": a.key, "member": names.get(a.member.currentData(), ""),
                 "instructions": a.instructions.text().strip(), "depends_on": a.waits_for()}
                for a in self.assignment_rows if a.key in wanted]
        lead = self.planner.currentText() if self.planner.currentIndex() > 0 else None
        return {"goal": self.goal.text().strip(), "members": members, "assignments": plan,
                "max_parallel": self.parallel.value(), "lead": lead}

    def _accept(self) -> None:
        spec = self.values()
        if not spec["assignments"] and spec["lead"] is None:
            self.failed("Write at least one assignment, or choose a member under “Plan written by” to write them.")
            return
        self.error.hide()
        self.create_button.setEnabled(False)
        self.create_requested.emit(spec)

    def failed(self, text: str) -> None:
        """The runtime refused the team: say why and keep everything typed."""
        self.error.setText(text)
        self.error.show()
        self.create_button.setEnabled(True)
