"""The task header's command settings, a link with a menu: whether the task's shell commands may use the network,
and whether the person accepted that they run without a sandbox where none can start (offered on an approval card
in full_auto, shown here to be seen and undone). Both apply from the task's next turn (`bridge.set_task_sandbox`);
the panel hands every fresh TaskInfo to `show_info`, so what the menu shows is what is stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

import shiboken6
from PySide6.QtWidgets import QMenu, QPushButton, QWidget

from ..core.bridge import RuntimeBridge

if TYPE_CHECKING:
    from runtime.api import TaskInfo


class CommandSettings(QPushButton):
    def __init__(self, bridge: RuntimeBridge, info: TaskInfo, parent: QWidget | None = None):
        super().__init__(parent)
        self.bridge = bridge
        self.task_id = info.id
        self.setObjectName("Link")
        self.setStyleSheet("QPushButton::menu-indicator { image: none; width: 0; }")  # the text ends in ▾ instead
        menu = QMenu(self)
        menu.setToolTipsVisible(True)
        self.network = menu.addAction("Let commands use the network")
        self.network.setCheckable(True)
        self.network.setToolTip("Commands run in a sandbox; it cuts the network unless this is ticked.")
        self.network.triggered.connect(lambda on: self._set(network=on))
        self.unsandboxed = menu.addAction("Run commands unsandboxed in this task")
        self.unsandboxed.setCheckable(True)
        self.unsandboxed.setToolTip("No sandbox can start here, and you accepted that this task's commands run "
                                    "without one and without asking. Untick to be asked before each command again.")
        self.unsandboxed.triggered.connect(lambda on: self._set(unsandboxed_ok=on))
        self.setMenu(menu)
        self.show_info(info)

    def show_info(self, info: TaskInfo) -> None:
        self.info = info
        self.network.setChecked(info.network)
        self.unsandboxed.setChecked(info.unsandboxed_ok)
        self.unsandboxed.setVisible(info.unsandboxed_ok)
        said = ["network on" if info.network else "no network"]
        if info.unsandboxed_ok:
            said.append("may run unsandboxed")
        self.setText("Commands: " + ", ".join(said) + " ▾")
        self.setToolTip("What this task's shell commands may do; click to change it (from the next turn).")

    def _set(self, **values: bool) -> None:
        async def go() -> None:
            try:
                await self.bridge.set_task_sandbox(self.task_id, **values)
            except Exception:
                if shiboken6.isValid(self):
                    self.show_info(self.info)  # the click did not count: show what is stored again
                raise

        self.bridge.run(go(), owner=self)
