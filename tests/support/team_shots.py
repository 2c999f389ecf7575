"""Screenshots of teams: the New team dialog filled in (members on models from the picker, the plan's assignments
given to members and ticked to wait for others), the same dialog with a lead writing the plan, a team's board
while two assignments run (its state a coloured word, Stop team enabled) and the board after one failed (the
demo's shot, app_demo.team_shot). Run under a display (Xvfb):

    xvfb-run -a .venv/bin/python -m tests.support.team_shots resources/screenshots
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
from pathlib import Path

from runtime.providers.scripted import Delay
from tests.support.app_demo import team_models, team_shot


async def _settle(seconds: float) -> None:
    await asyncio.sleep(seconds)  # lets Qt paint; processEvents() here would re-enter the qasync loop


def _fill(dlg) -> None:
    """What a person types for a small essay team: three members, four assignments (B and C after A, D after
    both)."""
    dlg.goal.setText("An essay about lighthouses, drafted and checked")
    dlg.set_member(0, "lead", "lead/qwen2.5-7b", "You plan the work and merge the results.", "full_auto")
    dlg.set_member(1, "writer", "writer/qwen2.5-3b", "You write clear, warm prose.", "auto_edit", tools="files")
    dlg.set_member(2, "critic", "critic/llama3.1-8b", "You find what is missing.", tools="read_only")
    dlg.set_assignment(0, "lead", "Outline a short essay about lighthouses.")
    dlg.set_assignment(1, "writer", "Write the essay from the outline.", ["A"])
    dlg.set_assignment(2, "critic", "List what the essay must not forget.", ["A"])
    dlg.set_assignment(3, "lead", "Merge the draft and the critique.", ["B", "C"])


async def shots(out: Path) -> None:
    from app.shell.application import HearthApp
    from app.teams.panel import TeamPanel
    from app.widgets import theme

    out.mkdir(parents=True, exist_ok=True)
    theme.apply("light")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-team-shots-"))
    try:
        ctl = HearthApp(tmp / "home", providers=team_models(), use_tray=False, preload_model=False)
        await ctl.start()
        win = ctl.window
        win.resize(1180, 780)
        win.show()
        await team_shot(ctl, out)  # 23: the board after C failed, nothing running

        models = ctl._providers  # the next team's answers take their time: B and C are seen running
        models["lead"].add_steps(["1. Light 2. Keepers 3. Storms"])
        models["writer"].add_steps(["Drafting the essay: a lighthouse stands where the sea is most dangerous…",
                                    Delay(30)])
        models["critic"].add_steps(["Checking what it must not forget", Delay(30)])
        dlg = win.new_team()
        _fill(dlg)
        await _settle(0.6)
        dlg.grab().save(str(out / "39-new-team.png"))
        first = win.panel
        dlg.create_button.click()
        while win.panel is first or not (isinstance(win.panel, TeamPanel) and win.panel.loaded.is_set()):
            await asyncio.sleep(0.05)
        panel = win.panel
        panel.run_button.click()
        while not panel.stop_button.isEnabled() or len(models["writer"].requests) < 2:
            await asyncio.sleep(0.05)
        panel.select("B")
        await _settle(1.0)
        win.grab().save(str(out / "40-team-board-running.png"))
        panel.stop_button.click()
        await ctl.rt.teams.wait_idle(panel.team_id)

        dlg = win.new_team()
        dlg.goal.setText("Plan a weekend trip to the coast")
        dlg.set_member(0, "lead", "lead/qwen2.5-7b", "You plan and check.")
        dlg.set_member(1, "scout", "writer/qwen2.5-3b", "You look things up.", tools="read_only")
        dlg.planner.setCurrentText("lead")
        await _settle(0.6)
        dlg.grab().save(str(out / "27-new-team-lead.png"))
        dlg.close()
        await ctl.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    from tests.support.qt_helpers import run_shots

    sys.exit(run_shots(shots))
