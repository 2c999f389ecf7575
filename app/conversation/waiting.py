"""Inline answer UI for a task that waits: an approval (approve / with network / deny / always allow, and for a
command that cannot be sandboxed, when the panel offers it, running the task's commands unsandboxed from now on), a
plan or an `ask_user` question.
Built from the task's persisted `pending_request`, so it is the same after an app restart."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from .markdown import mono_font
from .tool_card import args_text


class WaitingBox(QFrame):
    answered = Signal(str, str, bool, str)  # request_id, answer, remember, the command rule to remember ("": tool)
    plan_answered = Signal(str, str, list)  # request_id, "approve" or the reason it was not, the steps kept
    unsandboxed_accepted = Signal(str)  # request_id: approve, and let this task's commands run unsandboxed

    def __init__(self, request: dict, parent: QWidget | None = None, *, offer_unsandboxed: bool = False):
        super().__init__(parent)
        self.setObjectName("WaitingBox")
        self.request = request
        self.offer_unsandboxed = offer_unsandboxed
        self.request_id = request["request_id"]
        self.kind = request.get("kind", "question")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(14, 12, 14, 12)
        lay.setSpacing(8)
        tool = request.get("tool_name") or "a tool"
        if self.kind == "plan":
            self._plan(lay, request)
        elif self.kind == "approval":
            self._approval(lay, request, tool)
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
            QShortcut(QKeySequence("Ctrl+Return"), self.edit, self._send_text)
            self.buttons = [self.send]

    def _approval(self, lay: QVBoxLayout, request: dict, tool: str) -> None:
        """Approve / Deny, with the network when the sandbox would otherwise cut it, and an "always" rule: for
        this kind of command when the request suggests one, else for the whole tool."""
        unsandboxed = request.get("sandboxed") is False
        self.heading = QLabel(f"Hearth wants to use <b>{tool}</b>"
                              + (", <b>not sandboxed</b>" if unsandboxed else "") + ". Allow it?")
        lay.addWidget(self.heading)
        args = QLabel(args_text(request.get("tool_args") or {}))
        args.setFont(mono_font())
        args.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        args.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        args.setVisible(bool(args.text()))
        lay.addWidget(args)
        # What the call touches, in the tool's words (an approval saved by an older Hearth has only a command's).
        self.note = note = QLabel(request.get("touches") or request.get("sandbox_note") or "")
        note.setWordWrap(True)
        # Without a sandbox the command can do anything the account can: said in the warning colour.
        note.setObjectName("Warning" if request.get("sandboxed") is False else "Muted")
        note.setVisible(bool(note.text()))
        lay.addWidget(note)
        row = QHBoxLayout()
        self.approve = QPushButton("Approve")
        self.approve.setObjectName("Primary")
        self.approve.clicked.connect(lambda: self._answer("approve", False))
        self.buttons = [self.approve]
        if request.get("network_offer"):
            self.with_network = QPushButton("Approve with network")
            self.with_network.setToolTip("Run this one command in the sandbox, but let it use the network.")
            self.with_network.clicked.connect(lambda: self._answer("approve_network", False))
            self.buttons.append(self.with_network)
        self.deny = QPushButton("Deny")
        self.deny.clicked.connect(lambda: self._answer("deny", False))
        rule = request.get("suggested_rule") or ""
        if rule:
            self.always = QPushButton(f"Always allow “{_short(rule)}” commands")
            self.always.setToolTip(f"Approve, and let this task run commands starting with “{rule}” without "
                                   "asking again. Rules are listed in Settings ▸ Permissions.")
        else:
            self.always = QPushButton(f"Always allow {tool}")
            self.always.setToolTip("Approve, and let this task run this tool without asking again. Rules are "
                                   "listed in Settings ▸ Permissions.")
        self.always.clicked.connect(lambda: self._answer("approve", True, rule))
        self.buttons += [self.deny, self.always]
        for b in self.buttons:
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        if unsandboxed and self.offer_unsandboxed:
            self._unsandboxed_offer(lay)

    def _unsandboxed_offer(self, lay: QVBoxLayout) -> None:
        """No sandbox can start, so full_auto asks before each command: the person may accept that risk for the
        task, on its own line because it covers more than this command."""
        row = QHBoxLayout()
        self.unsandboxed = QPushButton("Run commands unsandboxed in this task")
        self.unsandboxed.setObjectName("Danger")
        self.unsandboxed.setToolTip("Approve this command, and run this task's later commands without a sandbox "
                                    "and without asking. They can do anything your account can. Undo it in the "
                                    "task's header (Commands).")
        self.unsandboxed.clicked.connect(self._accept_unsandboxed)
        row.addWidget(self.unsandboxed)
        row.addStretch(1)
        lay.addLayout(row)
        self.buttons.append(self.unsandboxed)

    def _accept_unsandboxed(self) -> None:
        for b in self.buttons:
            b.setEnabled(False)
        self.unsandboxed_accepted.emit(self.request_id)

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

    def _answer(self, answer: str, remember: bool, rule: str = "") -> None:
        for b in self.buttons:
            b.setEnabled(False)
        self.answered.emit(self.request_id, answer, remember, rule)

    def reenable(self) -> None:
        for b in self.buttons:
            b.setEnabled(True)


def swap_box(slot: QVBoxLayout, box: WaitingBox | None, request: dict | None,
             make: Callable[[dict], WaitingBox]) -> WaitingBox | None:
    """The box `slot` shows for `request`: `box` while the request is the same one, else a new one from `make`
    (None when nothing waits)."""
    if box is not None and request and box.request_id == request.get("request_id"):
        return box
    if box is not None:
        box.deleteLater()
    if not request:
        return None
    box = make(request)
    slot.addWidget(box)
    return box


def _short(text: str, limit: int = 28) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
