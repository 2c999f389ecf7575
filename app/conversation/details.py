"""A turn's details: each model step (time to first token, duration, tokens, finish reason, tool calls) and
each helper it delegated to (agent, model, tokens, duration, tools used, how it ended)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)


def _secs(a: float | None, b: float | None) -> str:
    return f"{b - a:.1f} s" if a and b else "—"


class DetailsDialog(QDialog):
    def __init__(self, details: dict, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Turn details")
        self.setModal(False)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(720, 420)
        lay = QVBoxLayout(self)
        steps = details.get("steps") or []
        lay.addWidget(QLabel(f"<b>Model steps</b> ({len(steps)})"))
        self.steps = self._table(["#", "First token", "Took", "Tokens in / out", "Ended", "Tool calls"], [
            [str(s["step_index"] + 1), _secs(s["started_at"], s.get("first_token_at")),
             _secs(s["started_at"], s.get("ended_at")), f"{s['input_tokens']:,} / {s['output_tokens']:,}",
             s.get("finish_reason") or "—", ", ".join(s.get("tool_calls") or []) or "—"] for s in steps])
        lay.addWidget(self.steps)
        helpers = details.get("subagents") or []
        label = QLabel(f"<b>Helpers</b> ({len(helpers)})")
        lay.addWidget(label)
        self.helpers = self._table(["Agent", "Task", "Model", "Tokens in / out", "Took", "Tools", "Ended"], [
            [h.get("definition") or "—", h["goal"][:80], h.get("model") or "—",
             f"{h['input_tokens']:,} / {h['output_tokens']:,}", _secs(h["created_at"], h.get("ended_at")),
             ", ".join(h.get("tool_calls") or []) or "—", h["status"]] for h in helpers])
        lay.addWidget(self.helpers)
        label.setVisible(bool(helpers))
        self.helpers.setVisible(bool(helpers))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.close)
        lay.addWidget(buttons)

    @staticmethod
    def _table(headers: list[str], rows: list[list[str]]) -> QTableWidget:
        table = QTableWidget(len(rows), len(headers))
        table.setHorizontalHeaderLabels(headers)
        table.verticalHeader().hide()
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        for r, row in enumerate(rows):
            for c, text in enumerate(row):
                table.setItem(r, c, QTableWidgetItem(text))
        table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        table.horizontalHeader().setStretchLastSection(True)
        return table
