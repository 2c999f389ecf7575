"""Background work without a tray, one app per data folder, notifications through the desktop's service."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from app.core.single import server_name
from runtime.api import resolve_home
from runtime.providers.scripted import Delay, ScriptedModel
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until


async def test_closing_without_a_tray_offers_to_keep_working_and_the_turn_goes_on(launch):
    model = ScriptedModel([["Working ", Delay(1.0), "all done."]])
    ctl = await launch(model)
    assert ctl.tray is None
    task = await ctl.bridge.create_task(title="Background", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "go")
    await until(lambda: ctl.rt.tasks.is_running(task.id), what="running")
    ctl.window.close()
    box = await until(lambda: ctl.close_choice, what="the keep-working question")
    keep = next(b for b in box.buttons() if b.text() == "Keep running in the background")
    assert box.defaultButton() is keep
    keep.click()
    assert ctl.window is None and not ctl.quit_event.is_set()
    await until(lambda: not ctl.rt.tasks.is_running(task.id), what="the turn finished in the background")
    assert (await ctl.rt.messages(task.id))[-1].text == "Working all done."
    await until(lambda: any(n[0] == task.id and "is done" in n[1] for n in ctl.notifications), what="notified")
    window = ctl.show_main()  # what a second launch does
    await until(lambda: window.panel is not None and window.panel.loaded.is_set(), what="reopened")


def test_the_app_and_the_runtime_agree_on_the_data_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path))
    assert server_name(None) == server_name(str(resolve_home(None)))
    monkeypatch.delenv("HEARTH_HOME")
    assert server_name(None) == server_name(str(resolve_home(None)))


async def test_a_second_launch_shows_the_running_window_and_exits(home):
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "QT_QPA_PLATFORM": "offscreen"}
    first = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "app", "--home", str(home), "--no-tray", "--report-startup", "stay",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, env=env)
    try:
        ready = json.loads(await asyncio.wait_for(first.stdout.readline(), 60))
        assert ready["error"] is None
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "app", "--home", str(home), "--no-tray",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=env)
        assert await asyncio.wait_for(second.wait(), 60) == 0
        shown = json.loads(await asyncio.wait_for(first.stdout.readline(), 30))
        assert "shown" in shown
    finally:
        first.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(first.wait(), 60) == 0


async def test_a_turn_that_ends_unseen_is_announced_by_the_desktop_notification_service(launch):
    from tests.support.dbus_notify import notification_service

    async with notification_service() as calls:
        model = ScriptedModel([["Here is the summary."]])
        ctl = await launch(model)
        task = await ctl.bridge.create_task(title="Summarise", model=MODEL)
        await ctl.window.reload_tasks()
        ctl.hide_window()  # nobody is looking
        await ctl.bridge.send(task.id, "go")
        await until(lambda: calls, what="a desktop notification")
        assert calls == [("Summarise is done", "Open Hearth to see the answer.")]
