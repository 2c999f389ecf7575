"""The main window's team side: the Teams tab's list, a team's board, and a new team."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtWidgets import QMessageBox

from ..teams.new_team_dialog import NewTeamDialog
from ..teams.panel import TeamPanel
from ..widgets import dialogs

if TYPE_CHECKING:
    from runtime.events import Event

    from .window_host import ActionsBase
else:
    ActionsBase = object  # see shell/window_host.py


class TeamActions(ActionsBase):
    """Mixed into MainWindow: it owns `panel`, `sidebar`, `stack`, `bridge` and `close_panel`."""

    def new_team(self) -> NewTeamDialog | None:
        if not self._ready():
            return None
        self.sidebar.set_mode("teams")
        settings = self.bridge.settings
        dlg = NewTeamDialog(settings.default_model, settings.team_max_parallel, self, bridge=self.bridge)
        dlg.create_requested.connect(lambda spec: self.bridge.run(self._create_team(dlg, spec)))
        dlg.show()
        self.new_team_dialog = dlg
        return dlg

    async def _create_team(self, dlg: NewTeamDialog, spec: dict) -> None:
        try:
            info = await self.bridge.create_team(**spec)
        except self.bridge.api.HearthError as exc:
            dlg.failed(str(exc))
            return
        dlg.close()
        await self.reload_tasks()
        self.open_team(info.id)

    def open_team(self, team_id: str) -> TeamPanel | None:
        if isinstance(self.panel, TeamPanel) and self.panel.team_id == team_id:
            return self.panel
        info = self.teams.get(team_id)
        if info is None or self.disposed:
            return None
        self.close_panel(select_none=False)
        self.sidebar.select(None)
        self.sidebar.select_chat(None)
        panel = self.panel = TeamPanel(self.bridge, info)
        panel.settings_requested.connect(self.ctl.open_settings)
        self.stack.addWidget(panel)
        self.stack.setCurrentWidget(panel)
        self.sidebar.set_mode("teams")
        self.sidebar.select_team(team_id)
        self._enable_task_actions()
        return panel

    def _team_event(self, owner_id: str, ev: Event) -> None:
        """An event of one of the open board's assignments: the board reads the team again."""
        if isinstance(self.panel, TeamPanel) and self.panel.owns(owner_id):
            self.panel.changed(owner_id, turn_ended=ev.type == "turn_ended")

    def delete_team(self, team_id: str | None) -> QMessageBox | None:
        if not team_id or (info := self.teams.get(team_id)) is None:
            return None
        if isinstance(self.panel, TeamPanel) and self.panel.team_id == team_id:
            info = self.panel.info  # the board's copy follows the plan

        async def delete() -> None:
            if isinstance(self.panel, TeamPanel) and self.panel.team_id == team_id:
                self.close_panel()
            await self.bridge.teams.delete(team_id)
            await self.reload_tasks()

        running = not set(self.bridge.running_tasks()).isdisjoint(a.id for a in info.assignments)
        extra = " Its running assignments will be stopped." if running else ""
        return dialogs.confirm(self, "Delete team?", f"Delete the team “{info.title}”, its plan and its work?",
                               "Delete", lambda: self.bridge.run(delete()),
                               informative=f"This cannot be undone.{extra} Files in its folder stay on disk.",
                               danger=True)
