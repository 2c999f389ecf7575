"""Inline answer UI for a task that waits: an approval (approve / deny / always allow) or an `ask_user` question.
Built from the task's persisted `pending_request`, so it is the same after an app restart."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPlainTextEdit, QPushButton, QSizePolicy, QVBoxLayout

from .markdown import mono_font
from .tool_card import args_text

EFFECT_NOTES = {
    "workspace_write": "It changes files in this task's workspace folder.",
    "external": "It runs outside the workspace (for example a shell command on this computer).",
    "read_only": "It only reads.",
}


class WaitingBox(QFrame):
    answered = Signal(str, str, bool)  # request_id, answer, remember
    plan_answered = Signal(str, str, list)  # request_id, "approve" or the reason it was not, the steps kept

    def __init__(self, request: dict, parent=None):
        super().__init__(parent)
        self.setObjectName("WaitingBox")
        self.request = request
        self.request_id = request["request_id"]
        self.kind = request.get("kind", "question")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 12, 14, 12)
        lay.setSpacing(8)
        tool = request.get("tool_name") or "a tool"
        if self.kind == "plan":
            self._plan(lay, request)
        elif self.kind == "approval":
            title = QLabel(f"Hearth wants to use <b>{tool}</b>. Allow it?")
            lay.addWidget(title)
            note = QLabel(EFFECT_NOTES.get(request.get("effect", ""), ""))
            note.setObjectName("Muted")
            note.setVisible(bool(note.text()))
            lay.addWidget(note)
            args = QLabel(args_text(request.get("tool_args") or {}))
            args.setFont(mono_font())
            args.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
            args.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            args.setVisible(bool(args.text()))
            lay.addWidget(args)
            row = QHBoxLayout()
            self.approve = QPushButton("Approve")
            self.approve.setObjectName("Primary")
            self.deny = QPushButton("Deny")
            self.always = QPushButton(f"Always allow {tool}")
            self.always.setToolTip("Approve, and let this task run this tool without asking again.")
            self.approve.clicked.connect(lambda: self._answer("approve", False))
            self.deny.clicked.connect(lambda: self._answer("deny", False))
            self.always.clicked.connect(lambda: self._answer("approve", True))
            for b in (self.approve, self.deny, self.always):
                row.addWidget(b)
            row.addStretch(1)
            lay.addLayout(row)
            self.buttons = [self.approve, self.deny, self.always]
        else:
            title = QLabel("Hearth asks:")
            title.setObjectName("Muted")
            lay.addWidget(title)
            question = QLabel(request.get("prompt") or (request.get("tool_args") or {}).get("question", ""))
            question.setWordWrap(True)
            question.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            lay.addWidget(question)
            self.edit = QPlainTextEdit()
            self.edit.setPlaceholderText("Your answer (Ctrl+Enter to send)")
            self.edit.setFixedHeight(64)
            lay.addWidget(self.edit)
            row = QHBoxLayout()
            row.addStretch(1)
            self.send = QPushButton("Answer")
            self.send.setObjectName("Primary")
            self.send.clicked.connect(self._send_text)
            row.addWidget(self.send)
            lay.addLayout(row)
            QShortcut(QKeySequence("Ctrl+Return"), self.edit, activated=self._send_text)
            self.buttons = [self.send]

    def _plan(self, lay: QVBoxLayout, request: dict) -> None:
        """The plan as an editable list (one step a line): approve it as it stands, or say what is wrong."""
        title = QLabel("<b>Hearth's plan.</b> Nothing is changed until you approve it.")
        lay.addWidget(title)
        summary = QLabel(request.get("prompt") or "")
        summary.setWordWrap(True)
        summary.setVisible(bool(summary.text()))
        lay.addWidget(summary)
        self.steps = QPlainTextEdit("\n".join(request.get("plan") or []))
        self.steps.setToolTip("One step per line; edit them before approving if you like.")
        self.steps.setFixedHeight(min(200, 26 + 20 * max(2, len(request.get("plan") or []))))
        lay.addWidget(self.steps)
        self.reason = QPlainTextEdit()
        self.reason.setPlaceholderText("Or say what to change, and reject")
        self.reason.setFixedHeight(44)
        lay.addWidget(self.reason)
        row = QHBoxLayout()
        self.approve = QPushButton("Approve plan")
        self.approve.setObjectName("Primary")
        self.reject = QPushButton("Reject")
        self.approve.clicked.connect(self._approve_plan)
        self.reject.clicked.connect(self._reject_plan)
        row.addWidget(self.approve)
        row.addWidget(self.reject)
        row.addStretch(1)
        lay.addLayout(row)
        self.buttons = [self.approve, self.reject]

    def _approve_plan(self) -> None:
        steps = [line.strip() for line in self.steps.toPlainText().splitlines() if line.strip()]
        if steps:
            for b in self.buttons:
                b.setEnabled(False)
            self.plan_answered.emit(self.request_id, "approve", steps)

    def _reject_plan(self) -> None:
        reason = self.reason.toPlainText().strip() or "Not this plan."
        for b in self.buttons:
            b.setEnabled(False)
        self.plan_answered.emit(self.request_id, reason, [])

    def _send_text(self) -> None:
        text = self.edit.toPlainText().strip()
        if text:
            self._answer(text, False)

    def _answer(self, answer: str, remember: bool) -> None:
        for b in self.buttons:
            b.setEnabled(False)
        self.answered.emit(self.request_id, answer, remember)

    def reenable(self) -> None:
        for b in self.buttons:
            b.setEnabled(True)
