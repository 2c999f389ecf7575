"""One message as the conversation shows it: `Message` (its parts, folded from live events while its turn runs)
and `AssistantItem` (an assistant message's widgets: its parts, footer with Copy / Retry / Details, and the
banner of an interrupted, failed or cut-off turn). The view (conversation/view.py) places them."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QApplication, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from .changes_dialog import files_line
from .message_widgets import REPEATED, TEXT_KINDS, AssistantBlock, Banner, footer_text, link_button
from .tool_card import ToolCard

if TYPE_CHECKING:
    from runtime.api import MessageInfo
    from runtime.events import ToolCall

    from ..core.bridge import Batched

# An input of these kinds is not shown as a bubble: its answer carries a marker instead.
MARKERS = {"continue": "continued", "retry": "another answer"}


@dataclass(eq=False)
class Message:
    """One message as the view shows it. Live events update `parts` while its turn runs."""

    id: int
    role: str
    parts: list[dict]
    status: str
    turn_id: str | None
    turn: dict | None = None  # the turn row: reason, error, token usage
    live: bool = False
    usage: tuple[int, int] = (0, 0)
    warnings: list[tuple[str, str | None]] = field(default_factory=list)  # a live turn's (message, code)

    @classmethod
    def of(cls, info: MessageInfo, turn: dict | None) -> Message:
        return cls(info.id, info.role, [dict(p) for p in info.parts], info.status, info.turn_id, turn)

    @property
    def text(self) -> str:
        return "".join(p.get("text", "") for p in self.parts if p.get("type") == "text")

    @property
    def woken(self) -> bool:
        """An input Hearth sent when the task woke up (services/wakeups.py), not the person."""
        return any(p.get("type") == "wake" for p in self.parts)

    @property
    def truncated(self) -> bool:
        return self.marked("truncated")

    @property
    def repeating(self) -> bool:
        """The loop cut the answer off: the model was repeating itself."""
        return self.marked("repeating")

    def marked(self, marker: str) -> bool:
        return any(p.get("type") == "marker" and p.get("marker") == marker for p in self.parts)

    @property
    def rewind(self) -> str | None:
        """"continue" / "retry" for an input that only asks for more, else None."""
        return next((p["type"] for p in self.parts if p.get("type") in MARKERS), None)

    def apply(self, items: list[Batched]) -> None:
        """Fold a frame's events of this message's turn into its parts (the same folding the widgets do)."""
        for ev in items:
            if ev.type in ("text_delta", "reasoning_delta"):
                while len(self.parts) <= ev.part_id:
                    self.parts.append({"type": "text", "text": ""})
                part = self.parts[ev.part_id]
                part["type"] = TEXT_KINDS[ev.type]
                part["text"] = part.get("text", "") + ev.text
            elif ev.type == "tool_call":
                while len(self.parts) <= ev.part_id:
                    self.parts.append({"type": "text", "text": ""})
                before = self.parts[ev.part_id]
                self.parts[ev.part_id] = tool_part(ev)
                if before.get("call_id") == ev.call_id and "progress" in before:
                    self.parts[ev.part_id]["progress"] = before["progress"]
            elif ev.type == "tool_progress":  # kept too: an item re-created mid-turn (a page re-read) shows it
                card = next((p for p in self.parts if p.get("call_id") == ev.call_id), None)
                if card is not None:
                    card.setdefault("progress", []).append(ev.text)  # a live answer's parts are its own
            elif ev.type == "usage":
                self.usage = (ev.usage.input_tokens, ev.usage.output_tokens)
            elif ev.type == "warning":
                self.warnings.append((ev.message, ev.code))
                if ev.code in ("truncated", "compacted", "repeating"):
                    self.parts.append({"type": "marker", "marker": ev.code})


def tool_part(ev: ToolCall) -> dict:
    return {"type": "tool_call", "part_id": ev.part_id, "call_id": ev.call_id, "name": ev.name,
            "state": str(ev.state), "args": ev.args, "result": ev.result, "effect": ev.effect}


class AssistantItem(QWidget):
    """An assistant message, its footer (state, token usage, Copy / Retry, Continue after a Stop) and, for an
    interrupted, failed or cut-off turn, a banner. An answer that a Continue carried on reads as one answer: the
    part before the Continue has no footer or banner (`goes_on`), and Copy on the rest copies the whole
    (`earlier`)."""

    continue_clicked = Signal()
    retry_clicked = Signal()
    settings_clicked = Signal(str)  # the Settings page to show, "" for the first
    fork_clicked = Signal()
    details_clicked = Signal(str)  # turn id
    changes_clicked = Signal(str)  # turn id: the files it changed

    def __init__(self, message: Message, marker: str = "", foreign: Callable[[str], ToolCard | None] | None = None,
                 parent: QWidget | None = None, chat: bool = False,
                 retry: bool = True):
        super().__init__(parent)
        self.message = message
        self.can_retry = retry
        self.chat = chat  # a chat's answer: a failed one offers another model for the chat
        lay = self.outer = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        if marker:
            note = QLabel(f"↳ {marker}")
            note.setObjectName("Muted")
            lay.addWidget(note)
        self.block = AssistantBlock(live=message.live)
        self.block.settings_wanted.connect(self.settings_clicked)
        if foreign is not None:
            self.block.foreign = foreign
        lay.addWidget(self.block)
        row = QHBoxLayout()
        row.setSpacing(12)
        self.footer = QLabel()
        self.footer.setObjectName("Footer")
        row.addWidget(self.footer)
        row.addStretch(1)
        self.copy = link_button("Copy", self._copy, "Copy this answer as Markdown")
        self.retry = link_button("Retry", self.retry_clicked, "Ask for another answer to your last message")
        self.details = link_button("Details", lambda: self.details_clicked.emit(self.message.turn_id or ""),
                                   "Model steps, tokens, times and helpers of this turn")
        self.go_on = link_button("Continue", self.continue_clicked, "Let the model go on from where you stopped it")
        self.changes = link_button("", lambda: self.changes_clicked.emit(self.message.turn_id or ""),
                                   "What this turn created, modified and deleted in the task's folder; undo it")
        row.addWidget(self.changes)
        row.addWidget(self.go_on)
        row.addWidget(self.details)
        row.addWidget(self.copy)
        row.addWidget(self.retry)
        lay.addLayout(row)
        self.banner: Banner | None = None
        self._banner_key: tuple[str | None, str, bool] | None = None
        self.waiting_now = False
        self._meta_key: tuple | None = None  # what the footer, banner and cards last showed (see show_meta)
        self.goes_on = False  # a Continue carried this answer on in the next item
        self.earlier: AssistantItem | None = None  # the answer this one carries on
        self.refresh(can_continue=False)

    @property
    def turn_id(self) -> str | None:
        return self.message.turn_id

    def refresh(self, can_continue: bool) -> None:
        """Show the message as it is now (its parts, footer and banner)."""
        m = self.message
        self.block.set_parts(m.parts)
        saved = [(p.get("message", ""), p.get("code")) for p in m.parts
                 if p.get("type") == "marker" and p.get("marker") == "warning"]
        for message, code in m.warnings or saved:
            self.block.add_warning(message, code)
        if not m.warnings and any(p.get("marker") == "compacted" for p in m.parts):
            self.block.add_warning("Context compacted: earlier messages were summarized to fit the model's "
                                   "context window. They are still here.")
        self.set_meta(can_continue)

    def apply(self, items: list[Batched]) -> None:
        """A frame's live events, applied to the widgets incrementally."""
        block = self.block
        for ev in items:
            if ev.type in ("text_delta", "reasoning_delta"):
                block.add_delta(TEXT_KINDS[ev.type], ev.part_id, ev.text)
            elif ev.type == "tool_call":
                block.update_tool(tool_part(ev))
            elif ev.type == "tool_progress":
                block.add_progress(ev.call_id, ev.text)
            elif ev.type == "usage":
                self.set_meta(False)
            elif ev.type == "warning":
                block.add_warning(ev.message, ev.code)
        block.render_changed()

    def _copy(self) -> None:
        QApplication.clipboard().setText(self.copy_text())

    def copy_text(self) -> str:
        """This answer's text, from where it began before any Continue."""
        texts: list[str] = []
        item: AssistantItem | None = self
        while item is not None:
            texts.append(item.block.copy_text())
            item = item.earlier
        return "".join(reversed(texts))

    def show_meta(self, can_continue: bool, waiting_now: bool, waiting_call: str | None) -> None:
        """Footer, banner and which card waits, skipped when none of what they depend on changed: the view
        calls this for every item on each update, and a finished item's message never changes in place."""
        key = (can_continue, waiting_now, waiting_call, self.goes_on, self.earlier is not None, self.message.live)
        if key == self._meta_key and not self.message.live:
            return
        self._meta_key = key
        self.waiting_now = waiting_now
        self.set_meta(can_continue)
        for card in self.block.cards():
            card.set_waiting(card.call_id == waiting_call)

    def set_meta(self, can_continue: bool) -> None:
        """Footer and banner. `can_continue`: this is the task's last answer and nothing runs."""
        m = self.message
        self.footer.setVisible(not self.goes_on)
        # No Retry while an approval or a question waits: the answer to it is how this turn goes on. An answer
        # cut off for repeating itself offers Retry in its banner instead.
        self.retry.setVisible(can_continue and not m.live and self.can_retry and not self.goes_on
                              and not self.waiting_now and not m.repeating)
        self.copy.setVisible(not m.live and not self.goes_on and bool(m.text or self.earlier))
        self.details.setVisible(not m.live and m.turn is not None and not self.goes_on)
        changed = (m.turn or {}).get("changed_files", 0)
        self.changes.setText(files_line(changed))
        self.changes.setVisible(bool(changed) and not m.live and not self.goes_on)
        stopped = (m.turn or {}).get("reason") == "aborted" and not m.truncated
        self.go_on.setVisible(stopped and can_continue and not m.live and not self.goes_on)
        if self.goes_on:
            self._set_banner(None, "", False)
            return
        if m.live:
            self.footer.setText(footer_text(None, *m.usage, live=True))
            self._set_banner(None, "", False)
            return
        turn = m.turn or {}
        reason = turn.get("reason")
        ending = REPEATED if m.repeating else reason
        self.footer.setText(footer_text(ending, turn.get("input_tokens", 0), turn.get("output_tokens", 0),
                                        waiting_now=self.waiting_now, truncated=m.truncated))
        if reason == "interrupted":
            text = ("<b>Interrupted.</b> Hearth closed while this turn ran. What it produced so far is kept"
                    + (" — continue to let it pick up from there." if can_continue else "."))
            self._set_banner("interrupted", text, can_continue)
        elif reason == "error":
            err = turn.get("error") or "the model or the runtime failed"
            self._set_banner("error", f"<b>This turn failed.</b> {html.escape(err)}", can_continue)
        elif m.truncated:
            self._set_banner("interrupted", "<b>The model ran out of room for this answer.</b>"
                             + (" Continue lets it go on from where it was cut." if can_continue else ""),
                             can_continue)
        elif m.repeating:  # going on would repeat it again: another answer is the way on
            self._set_banner("repeating", "<b>Stopped: the model was repeating itself.</b> Retry for another "
                             "answer, or use a bigger model (Settings ▸ Models).", can_continue and self.can_retry)
        else:
            self._set_banner(None, "", False)

    def _set_banner(self, kind: str | None, text: str, can_continue: bool) -> None:
        key = (kind, text, can_continue)
        if key == self._banner_key:
            return
        self._banner_key = key
        if self.banner is not None:
            self.banner.deleteLater()
            self.banner = None
        if kind is not None:
            fork = "Answer with another model…" if self.chat else "Continue in a new task with another model…"
            self.banner = Banner(kind, text, can_continue, fork_label=fork)
            self.banner.continue_clicked.connect(self.retry_clicked if kind == "repeating" else self.continue_clicked)
            self.banner.settings_clicked.connect(lambda: self.settings_clicked.emit(""))
            self.banner.fork_clicked.connect(self.fork_clicked)
            self.outer.addWidget(self.banner)
