"""The line above a task's or chat's composer that says what a running turn is doing ("● Reading the
conversation…"); hidden between turns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QLabel

if TYPE_CHECKING:
    from ..core.bridge import Batched

PHASES = {
    "agent_building": "Preparing the agent…",
    "context_building": "Reading the conversation…",
    "mcp_connecting": "Connecting tools…",
    "agent_running": "Thinking…",
}


class PhaseLine(QLabel):
    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("Phase")
        self.hide()

    def say(self, text: str) -> None:
        self.setText(f"● {text}")
        self.show()

    def follow(self, ev: Batched) -> None:
        """One event of the running turn: the words it calls for, or none once the turn ended."""
        if ev.type == "status":
            self.say(ev.detail or PHASES.get(str(ev.phase), str(ev.phase)))
        elif ev.type == "text_delta":
            self.say("Writing…")
        elif ev.type == "tool_call":
            self.say(f"Running {ev.name}…" if str(ev.state) == "running" else "Thinking…")
        elif ev.type == "aborted":
            self.say("Stopping…")
        elif ev.type == "turn_ended":
            self.hide()
