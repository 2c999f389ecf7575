"""A new task by keyboard alone: Tab leaves the goal box (it used to insert a tab, so the Create button could not
be reached without a mouse), and Enter in the title creates the task. The installer smoke test drives this."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest

from tests.support.qt_helpers import until


async def test_tab_leaves_the_goal_and_enter_creates_the_task(launch):
    ctl = await launch()
    dlg = ctl.window.new_task()
    dlg.goal.setFocus()
    QTest.keyClicks(dlg.goal, "Plan my week")
    QTest.keyClick(dlg.goal, Qt.Key.Key_Tab)
    assert dlg.goal.toPlainText() == "Plan my week"
    assert dlg.focusWidget() is dlg.title
    QTest.keyClick(dlg.title, Qt.Key.Key_Return)
    await until(lambda: ctl.window.panel is not None, what="task created and opened")
    assert len(await ctl.rt.list_tasks()) == 1
