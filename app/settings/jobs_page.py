"""Settings ▸ Jobs: the log of Hearth's background work (saving memories after a turn, indexing documents,
backups), newest first, with the reason of every failure in the person's words.

The log is read when the page is shown and on Refresh (jobs record themselves when they end; there is no feed of
them, and the page is not polled). "Only failures" asks the runtime for failed jobs alone, so an old failure is
found even when hundreds of jobs succeeded since. The selected job's whole message shows below the list.
"""

from __future__ import annotations

import time

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from ..core.bridge import RuntimeBridge

SHOWN = 200  # the newest jobs listed; older ones stay in the database (`hearth jobs --limit N`)
OUTCOMES = {"done": "Done", "failed": "Failed", "cancelled": "Cancelled (Hearth was closing)"}


def when_text(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def outcome_text(job: dict) -> str:
    return OUTCOMES.get(job["status"], job["status"])


class JobsPage(QWidget):
    def __init__(self, bridge: RuntimeBridge, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        lay = QVBoxLayout(self)
        intro = QLabel("What Hearth did in the background: saving what it learned about you after a task, "
                       "indexing your documents, backups. A failure never stops your tasks; its reason is here.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        lay.addWidget(intro)
        row = QHBoxLayout()
        self.failed_only = QCheckBox("Only failures")
        self.failed_only.toggled.connect(lambda _on: self.refresh())
        row.addWidget(self.failed_only)
        row.addStretch(1)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        row.addWidget(self.refresh_button)
        lay.addLayout(row)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["When", "Job", "Task", "Outcome"])
        self.tree.setRootIsDecorated(False)
        self.tree.setColumnWidth(0, 130)
        self.tree.setColumnWidth(1, 150)
        self.tree.setColumnWidth(2, 180)
        self.tree.currentItemChanged.connect(self._show_details)
        lay.addWidget(self.tree, 1)
        self.details = QPlainTextEdit()
        self.details.setReadOnly(True)
        self.details.setMaximumHeight(90)
        self.details.setPlaceholderText("Select a job to read its whole message.")
        lay.addWidget(self.details)
        self.status = QLabel()
        self.status.setObjectName("Muted")
        lay.addWidget(self.status)

    def refresh(self) -> None:
        self.bridge.run(self.reload(), owner=self, load=True)

    async def reload(self) -> None:
        jobs = await self.bridge.jobs.log(limit=SHOWN, failed=self.failed_only.isChecked())
        self.tree.clear()
        self.details.clear()
        for job in jobs:
            task = job.get("task_title") or ("a deleted task" if job.get("task_id") else "")
            item = QTreeWidgetItem([when_text(job["created_at"]), job["label"], task, outcome_text(job)])
            message = job.get("error") or ""
            item.setData(0, Qt.ItemDataRole.UserRole, message)
            item.setToolTip(3, message)
            if job["status"] == "failed":
                item.setText(3, f"Failed: {message}" if message else "Failed")
            self.tree.addTopLevelItem(item)
        if not jobs:
            self.status.setText("No failed jobs." if self.failed_only.isChecked() else "No background jobs yet.")
        else:
            failures = sum(job["status"] == "failed" for job in jobs)
            self.status.setText(f"{len(jobs)} job{'s' * (len(jobs) != 1)} shown, {failures} failed.")

    def _show_details(self, item: QTreeWidgetItem | None, _old: QTreeWidgetItem | None = None) -> None:
        if item is None:
            self.details.clear()
            return
        message = item.data(0, Qt.ItemDataRole.UserRole)
        self.details.setPlainText(message or f"{item.text(1)}: {item.text(3).lower()}.")
