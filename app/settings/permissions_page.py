"""Settings → Permissions: whether shell commands run in a sandbox (in the runtime's plain words), every permission
rule (for all tasks, then per task) with a Remove button each, a form that adds one, and the MCP servers paused
because their tools changed since they were approved, each with the difference and an Approve button.

Self-contained: it talks to the runtime only through the bridge (`bridge.permissions`: `sandbox_status`, `rules`,
`add_rule`, `remove_rule`; `bridge.mcp`: `tool_changes`, `approve_tools`; `bridge.list_tasks`), and reloads
itself after each action. `refresh()` returns the task that loads
it, so a caller (or a test) can await it.

The form offers the built-in tools a rule is usually about, and an MCP server's tool can be typed (server__tool);
the command box is for run_shell only. A rule the runtime refuses (a name no tool has, a command that is not one
plain command) is said in its sentence under the form, and nothing typed is lost; an added one clears only the
command box.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..conversation.markdown import mono_font
from ..core.bridge import RuntimeBridge
from ..core.util import error_text, spawn

if TYPE_CHECKING:
    from runtime.api import MCPToolChange, PermissionRule, TaskInfo

NO_RULES = ("No rules yet. Add one below, or approve a request with “Always allow”; rules for every task say "
            "“All tasks”.")
NO_PAUSED = "No MCP server is paused: every server offers the tools you approved."
RULE_TOOLS = ("run_shell", "write_file", "edit_file", "read_file", "list_files", "search_files")
COMMAND_TOOL = "run_shell"  # the one tool whose rules may name a command


def _heading(text: str) -> QLabel:
    label = QLabel(f"<b>{text}</b>")
    label.setTextFormat(Qt.TextFormat.RichText)
    return label


class PermissionsPage(QWidget):
    changed = Signal()  # a rule was added or removed, or a server's new tools approved

    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        outer.addWidget(scroll)
        body = QWidget()
        scroll.setWidget(body)
        lay = QVBoxLayout(body)

        lay.addWidget(_heading("Shell commands"))
        self.sandbox_label = QLabel("Checking whether commands can run in a sandbox…")
        self.sandbox_label.setWordWrap(True)
        self.sandbox_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.sandbox_label)
        self.sandbox_detail = QLabel()
        self.sandbox_detail.setObjectName("Muted")
        self.sandbox_detail.setWordWrap(True)
        self.sandbox_detail.setVisible(False)
        lay.addWidget(self.sandbox_detail)

        lay.addSpacing(10)
        lay.addWidget(_heading("Permission rules"))
        self.rules = QTreeWidget()
        self.rules.setHeaderLabels(["Applies to", "Rule", ""])
        self.rules.setRootIsDecorated(False)
        self.rules.header().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.rules.header().setStretchLastSection(False)
        self.rules.setColumnWidth(0, 160)
        self.rules.setMinimumHeight(140)
        lay.addWidget(self.rules)
        self.no_rules = QLabel(NO_RULES)
        self.no_rules.setObjectName("Muted")
        self.no_rules.setWordWrap(True)
        lay.addWidget(self.no_rules)
        lay.addLayout(self._rule_form())

        lay.addSpacing(10)
        lay.addWidget(_heading("MCP servers paused for changed tools"))
        self.paused = QVBoxLayout()
        lay.addLayout(self.paused)
        self.no_paused = QLabel(NO_PAUSED)
        self.no_paused.setObjectName("Muted")
        self.no_paused.setWordWrap(True)
        lay.addWidget(self.no_paused)

        lay.addStretch(1)
        self.message = QLabel()
        self.message.setWordWrap(True)
        lay.addWidget(self.message)
        self.remove_buttons: dict[int, QPushButton] = {}
        self.approve_buttons: dict[str, QPushButton] = {}
        self.diffs: dict[str, QPlainTextEdit] = {}
        self.refresh()

    def _rule_form(self) -> QFormLayout:
        form = QFormLayout()
        self.rule_decision = QComboBox()
        self.rule_decision.addItem("Always allow", "allow")
        self.rule_decision.addItem("Never allow", "deny")
        self.rule_tool = QComboBox()
        self.rule_tool.setEditable(True)
        self.rule_tool.addItems(RULE_TOOLS)
        self.rule_tool.setToolTip("A built-in tool, or type the name of an MCP server's tool.")
        self.rule_tool.currentTextChanged.connect(self._tool_chosen)
        what = QHBoxLayout()
        what.addWidget(self.rule_decision)
        what.addWidget(self.rule_tool, 1)
        form.addRow("Add a rule", what)
        self.rule_command = QLineEdit()
        self.rule_command.setPlaceholderText("Optional: only commands starting with, e.g. git status")
        self.rule_command.setToolTip("Empty: every call of the tool. For “Never allow”, the usual spellings count "
                                     "too (rm -rf also matches rm -fR, rm -r --force, sudo -u bob rm -rf …).")
        form.addRow("Commands", self.rule_command)
        self.rule_scope = QComboBox()
        self.rule_scope.addItem("All tasks", None)
        self.rule_add = QPushButton("Add rule")
        self.rule_add.clicked.connect(self._add)
        scope = QHBoxLayout()
        scope.addWidget(self.rule_scope, 1)
        scope.addWidget(self.rule_add)
        form.addRow("Applies to", scope)
        self.rule_error = QLabel()
        self.rule_error.setObjectName("Warning")
        self.rule_error.setWordWrap(True)
        self.rule_error.setVisible(False)
        form.addRow(self.rule_error)
        return form

    def _tool_chosen(self, tool: str) -> None:
        self.rule_command.setEnabled(tool.strip() == COMMAND_TOOL)

    # -- loading --

    def refresh(self) -> asyncio.Task:
        return spawn(self._load(), self._failed, owner=self, load=True)

    def _failed(self, exc: BaseException) -> None:
        self.message.setText(error_text(exc))

    async def _load(self) -> None:
        bridge = self.bridge
        status = await bridge.permissions.sandbox_status()
        rules = await bridge.permissions.rules()
        tasks = await bridge.list_tasks()
        paused = bridge.mcp.tool_changes()
        self.sandbox_label.setText(status.message)
        self.sandbox_detail.setText(f"What the sandbox program said: {status.detail}" if status.detail else "")
        self.sandbox_detail.setVisible(bool(status.detail))
        self._fill_rules(rules)
        self._fill_scopes(tasks)
        self._fill_paused(paused)

    def _fill_rules(self, rules: list[PermissionRule]) -> None:
        self.rules.clear()
        self.remove_buttons.clear()
        for rule in rules:
            scope = "All tasks" if rule.scope == "global" else (rule.task_title or "An untitled task")
            item = QTreeWidgetItem([scope, rule.text, ""])
            item.setToolTip(1, rule.text)
            item.setData(0, Qt.ItemDataRole.UserRole, rule.id)
            self.rules.addTopLevelItem(item)
            button = QPushButton("Remove")
            button.setToolTip("Delete this rule; the next request asks again.")
            button.clicked.connect(lambda _=False, rule_id=rule.id: self._remove(rule_id))
            self.rules.setItemWidget(item, 2, button)
            self.remove_buttons[rule.id] = button
        self.rules.setVisible(bool(rules))
        self.no_rules.setVisible(not rules)

    def _fill_scopes(self, tasks: list[TaskInfo]) -> None:
        """"All tasks" and each task by title; the chosen one stays chosen while it exists."""
        chosen = self.rule_scope.currentData()
        while self.rule_scope.count() > 1:
            self.rule_scope.removeItem(1)
        for task in tasks:
            self.rule_scope.addItem(f"Only “{task.title or 'New task'}”", task.id)
        self.rule_scope.setCurrentIndex(max(0, self.rule_scope.findData(chosen)))

    def _fill_paused(self, paused: list[MCPToolChange]) -> None:
        while self.paused.count():
            item = self.paused.takeAt(0)
            if item is not None and (w := item.widget()) is not None:
                w.deleteLater()
        self.approve_buttons.clear()
        self.diffs.clear()
        for change in paused:
            box = QFrame()
            box.setObjectName("WaitingBox")
            lay = QVBoxLayout(box)
            title = QLabel(f"<b>{change.server}</b> changed its tools since you approved them, so Hearth does not "
                           f"offer them to tasks. Check the difference before you approve it.")
            title.setWordWrap(True)
            lay.addWidget(title)
            if change.command_line:
                line = QLabel(change.command_line)
                line.setObjectName("Muted")
                line.setFont(mono_font())
                lay.addWidget(line)
            diff = QPlainTextEdit("\n\n".join(c["text"] for c in change.changes))
            diff.setReadOnly(True)
            diff.setFont(mono_font())
            diff.setMinimumHeight(120)
            lay.addWidget(diff)
            row = QHBoxLayout()
            row.addStretch(1)
            approve = QPushButton("Approve the new tools")
            approve.setToolTip("They become the approved tools and the server runs again from the next turn.")
            approve.clicked.connect(lambda _=False, name=change.server: self._approve(name))
            row.addWidget(approve)
            lay.addLayout(row)
            self.paused.addWidget(box)
            self.approve_buttons[change.server] = approve
            self.diffs[change.server] = diff
        self.no_paused.setVisible(not paused)

    # -- actions --

    def _add(self) -> None:
        tool = self.rule_tool.currentText().strip()
        command = self.rule_command.text().strip() if self.rule_command.isEnabled() else ""

        async def go() -> None:
            try:
                rule = await self.bridge.permissions.add_rule(tool, self.rule_decision.currentData(),
                                                              command=command or None,
                                                              task_id=self.rule_scope.currentData())
            finally:
                self.rule_add.setEnabled(True)
            self.rule_command.clear()
            self.message.setText(f"Rule added: {rule.text}.")
            await self._load()
            self.changed.emit()

        self.rule_error.setVisible(False)
        self.message.clear()
        self.rule_add.setEnabled(False)
        spawn(go(), self._refused, owner=self)

    def _refused(self, exc: BaseException) -> None:
        self.rule_error.setText(error_text(exc))
        self.rule_error.setVisible(True)

    def _remove(self, rule_id: int) -> None:
        async def go() -> None:
            await self.bridge.permissions.remove_rule(rule_id)
            self.message.setText("Rule removed.")
            await self._load()
            self.changed.emit()

        self.remove_buttons[rule_id].setEnabled(False)
        spawn(go(), self._failed, owner=self)

    def _approve(self, server: str) -> None:
        async def go() -> None:
            self.bridge.mcp.approve_tools(server)
            self.message.setText(f"Approved the new tools of {server}; it runs again from the next turn.")
            await self._load()
            self.changed.emit()

        self.approve_buttons[server].setEnabled(False)
        spawn(go(), self._failed, owner=self)
