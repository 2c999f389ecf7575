"""The scrolling conversation of one task.

`sync()` reconciles the widgets with persisted messages (keyed by message id, so a reload keeps what did not
change, including which cards are expanded). The assistant message of the running turn is *live*: it starts
empty and is filled only by the turn's events, replayed from seq 0 — never from its checkpointed parts, which
would double the text. When the turn ends, the next `sync()` reconciles it with the persisted parts (that is
how tool parts settled by finalize become `interrupted`).
"""

from __future__ import annotations

import html
import json

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QVBoxLayout, QWidget

from .message_widgets import TEXT_KINDS, AssistantBlock, Banner, UserBubble, footer_text


class TurnEntry(QWidget):
    """An assistant message, its footer (state and token usage) and, for an interrupted or failed turn, a banner."""

    continue_clicked = Signal()

    def __init__(self, turn_id: str | None, parent=None):
        super().__init__(parent)
        self.turn_id = turn_id
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(6)
        self.block = AssistantBlock()
        lay.addWidget(self.block)
        self.footer = QLabel()
        self.footer.setObjectName("Footer")
        lay.addWidget(self.footer)
        self.banner: Banner | None = None
        self._banner_key = None
        self.live_usage = (0, 0)

    def set_meta(self, turn: dict | None, live: bool, can_continue: bool) -> None:
        if live:
            self.footer.setText(footer_text(None, *self.live_usage, live=True))
            self._set_banner(None, "", False)
            return
        turn = turn or {}
        reason = turn.get("reason")
        self.footer.setText(footer_text(reason, turn.get("input_tokens", 0), turn.get("output_tokens", 0)))
        if reason == "interrupted":
            text = ("<b>Interrupted.</b> Hearth closed while this turn ran. What it produced so far is kept"
                    + (" — continue to let it pick up from there." if can_continue else "."))
            self._set_banner("interrupted", text, can_continue)
        elif reason == "error":
            err = turn.get("error") or "the model or the runtime failed"
            self._set_banner("error", f"<b>This turn failed.</b> {html.escape(err)}", can_continue)
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
            self.banner = Banner(kind, text, can_continue)
            self.banner.continue_clicked.connect(self.continue_clicked)
            self.layout().addWidget(self.banner)


class ConversationView(QScrollArea):
    continue_clicked = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Conversation")
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        body = QWidget()
        body.setObjectName("ConversationBody")
        self.lay = QVBoxLayout(body)
        self.lay.setContentsMargins(24, 16, 24, 16)
        self.lay.setSpacing(14)
        self.lay.addStretch(1)
        self.setWidget(body)
        self.entries: dict[tuple, QWidget] = {}
        self._sigs: dict[tuple, tuple] = {}
        self.live_turn: str | None = None
        self._stick = True
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range)
        bar.valueChanged.connect(self._on_scroll)

    # -- persisted state --

    def sync(self, messages: list, turns: list[dict], live_turn: str | None, running: bool) -> None:
        by_turn = {t["id"]: t for t in turns}
        last_assistant = next((m.id for m in reversed(messages) if m.role == "assistant"), None)
        order: list[tuple] = []
        for m in messages:
            if m.role == "user":
                key = ("u", m.id)
                sig = (m.status, json.dumps(m.parts, sort_keys=True, default=str))
                if self._sigs.get(key) != sig:
                    self._replace(key, UserBubble(m.parts, m.status))
                    self._sigs[key] = sig
            elif m.role == "assistant":
                key = ("a", m.id)
                live = m.turn_id is not None and m.turn_id == live_turn
                entry = self.entries.get(key)
                if entry is None:
                    entry = TurnEntry(m.turn_id)
                    entry.continue_clicked.connect(self.continue_clicked)
                    self._replace(key, entry)
                sig = ("live",) if live else (m.status, json.dumps(m.parts, sort_keys=True, default=str))
                if self._sigs.get(key) != sig:
                    if not live:
                        entry.block.set_parts(m.parts)
                    self._sigs[key] = sig
                can_continue = m.id == last_assistant and not running
                entry.set_meta(by_turn.get(m.turn_id), live, can_continue)
            else:
                continue
            order.append(key)
        for key in [k for k in self.entries if k not in set(order)]:
            w = self.entries.pop(key)
            self._sigs.pop(key, None)
            self.lay.removeWidget(w)
            w.deleteLater()
        for index, key in enumerate(order):
            w = self.entries[key]
            if self.lay.indexOf(w) != index:
                self.lay.removeWidget(w)
                self.lay.insertWidget(index, w)
        self.live_turn = live_turn

    def _replace(self, key: tuple, widget: QWidget) -> None:
        old = self.entries.get(key)
        if old is not None:
            index = self.lay.indexOf(old)
            self.lay.removeWidget(old)
            old.deleteLater()
            self.lay.insertWidget(index, widget)
        else:
            self.lay.insertWidget(self.lay.count() - 1, widget)
        self.entries[key] = widget

    # -- live events --

    def live_entry(self) -> TurnEntry | None:
        if self.live_turn is None:
            return None
        return next((w for w in self.entries.values() if isinstance(w, TurnEntry) and w.turn_id == self.live_turn),
                    None)

    def reset_live(self) -> None:
        """Empty the live message before its turn is replayed from seq 0 (a replay must never double it)."""
        entry = self.live_entry()
        if entry is not None and entry.block.parts:
            entry.block.clear()
            entry.live_usage = (0, 0)

    def apply(self, items: list) -> None:
        """Apply a frame's events of the live turn (the caller checked their turn id)."""
        entry = self.live_entry()
        if entry is None:
            return
        block = entry.block
        for ev in items:
            t = ev.type
            if t in TEXT_KINDS:
                block.add_delta(TEXT_KINDS[t], ev.part_id, ev.text)
            elif t == "tool_call":
                block.update_tool({"part_id": ev.part_id, "call_id": ev.call_id, "name": ev.name,
                                   "state": str(ev.state), "args": ev.args, "result": ev.result,
                                   "effect": ev.effect})
            elif t == "usage":
                entry.live_usage = (ev.usage.input_tokens, ev.usage.output_tokens)
                entry.set_meta(None, True, False)
            elif t == "warning":
                block.add_warning(ev.message)
        block.render()

    def mark_waiting(self, call_id: str | None) -> None:
        """Show which card the pending approval or question belongs to."""
        for card in self.cards():
            card.set_waiting(call_id is not None and card.call_id == call_id)

    # -- reading back (tests, export) --

    def turn_entry(self, turn_id: str) -> TurnEntry | None:
        return next((w for w in self.entries.values() if isinstance(w, TurnEntry) and w.turn_id == turn_id), None)

    def turn_text(self, turn_id: str) -> str:
        entry = self.turn_entry(turn_id)
        return entry.block.text() if entry is not None else ""

    def cards(self) -> list:
        return [c for w in self.entries.values() if isinstance(w, TurnEntry) for c in w.block.cards()]

    def banners(self) -> list[Banner]:
        return [w.banner for w in self.entries.values() if isinstance(w, TurnEntry) and w.banner is not None]

    # -- scrolling: follow the end while the person is at the end --

    def _on_scroll(self, value: int) -> None:
        bar = self.verticalScrollBar()
        self._stick = value >= bar.maximum() - 40

    def _on_range(self, _lo: int, hi: int) -> None:
        if self._stick:
            self.verticalScrollBar().setValue(hi)
