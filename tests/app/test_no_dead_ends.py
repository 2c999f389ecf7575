"""No dead ends: a broken settings.json opens the app anyway, says what is wrong, and every way out works."""

from __future__ import annotations

import sys

from app.controller import HearthApp
from runtime.providers.scripted import ScriptedModel
from tests.support.qt_helpers import until


async def test_a_broken_settings_file_opens_a_page_with_ways_out_and_no_action_raises(home, monkeypatch):
    raised = []
    monkeypatch.setattr(sys, "excepthook", lambda *exc: raised.append(exc))
    (home / "settings.json").write_text('{"providers": [oops]}')
    ctl = HearthApp(home, providers={"scripted": ScriptedModel()}, use_tray=False)
    try:
        await ctl.start()
        window = ctl.window
        assert ctl.startup_error and "settings.json is not valid JSON" in ctl.startup_error
        assert window.stack.currentWidget() is window.problem
        assert set(window.problem.buttons) == {"Reset to defaults", "Open settings.json", "Retry"}
        for name, action in window.actions_by_name.items():
            if name not in ("Quit", "Close Window"):
                action.trigger()
        assert raised == []
        assert window.stack.currentWidget() is window.problem  # still explaining, not broken

        window.problem.buttons["Retry"].click()  # still broken: the page stays
        await until(lambda: window.problem.buttons.get("Retry") is not None, what="page still there")
        window.problem.buttons["Reset to defaults"].click()
        await until(lambda: ctl.bridge is not None, what="started with the defaults")
        kept = list(home.glob("settings.json.broken-*"))
        assert len(kept) == 1 and kept[0].read_text() == '{"providers": [oops]}'
        assert not (home / "settings.json").exists()
        assert window.stack.currentWidget() is window.welcome
        await until(lambda: window.new_task() is not None, what="a new task can be made")
        assert raised == []
    finally:
        await ctl.shutdown()
