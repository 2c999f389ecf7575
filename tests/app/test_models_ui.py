"""Picking any model: live lists from real loopback servers (one down, greyed with the reason), a failed task's way
to another model, and Settings that never lose an edit silently."""

from __future__ import annotations

import asyncio
import json

from PySide6.QtCore import Qt

from app.shell.application import HearthApp
from tests.support.openai_server import OpenAIServer, Reply
from tests.support.qt_helpers import open_task, type_and_send, until, wait_turns

LONG = "org-with-a-long-name/some-model-family-70b-instruct-q4_k_m-2025-edition"


def _settings(home, a: str, b: str) -> None:
    (home / "settings.json").write_text(json.dumps({
        "providers": [
            {"id": "a", "kind": "openai", "base_url": a},
            {"id": "b", "kind": "openai", "base_url": b},
            {"id": "down", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
        ],
        "default_model": "a/alpha",
    }))


async def _app(home) -> HearthApp:
    ctl = HearthApp(home, use_tray=False)
    await ctl.start()
    assert ctl.startup_error is None
    return ctl


async def test_the_new_task_dialog_lists_every_providers_live_models(home):
    async with OpenAIServer(models=["alpha", "beta", LONG]) as one, OpenAIServer(models=["gamma"]) as two:
        _settings(home, one.base_url, two.base_url)
        ctl = await _app(home)
        try:
            dlg = ctl.window.new_task()
            await until(lambda: "b/gamma" in dlg.model.refs(), what="live models")
            refs = dlg.model.refs()
            assert refs[0] == "a/alpha"  # the default first
            assert {"a/beta", f"a/{LONG}", "b/gamma"} <= set(refs)
            assert "down" in dlg.model.unavailable and "127.0.0.1:9" in dlg.model.unavailable["down"]
            row = next(r for r in range(dlg.model.count()) if dlg.model.itemData(r, Qt.ItemDataRole.UserRole)
                       == f"a/{LONG}")
            shown = dlg.model.itemText(row)
            assert "…" in shown and len(shown) < len(LONG)  # elided in the middle ...
            assert dlg.model.itemData(row, Qt.ItemDataRole.ToolTipRole) == f"a/{LONG}"  # ... full id on hover
            dlg.model.setCurrentIndex(row)
            assert dlg.model.ref() == f"a/{LONG}"
            dlg.close()
        finally:
            await ctl.shutdown()


async def test_closing_the_dialog_while_the_lists_load_is_no_error(home):
    async with OpenAIServer(models=["alpha"]) as one, OpenAIServer(models=["gamma"]) as slow:
        slow.script(Reply(hang=True))  # its list comes back only at the runtime's timeout
        _settings(home, one.base_url, slow.base_url)
        ctl = await _app(home)
        errors: list[str] = []
        ctl.bridge.error.connect(errors.append)
        try:
            dlg = ctl.window.new_task()
            loading = dlg.model.loading
            dlg.close()  # deleted on close, before the slow list came back
            await asyncio.wait([loading], timeout=10)
            assert loading.done()
            assert errors == []
        finally:
            await ctl.shutdown()


async def test_a_failed_task_offers_settings_and_another_model_in_a_new_task(home):
    async with OpenAIServer(models=["alpha"]) as one, OpenAIServer(models=["gamma"]) as two:
        _settings(home, one.base_url, two.base_url)
        two.script(Reply(chunks=["Gamma here."]))
        ctl = await _app(home)
        try:
            task = await ctl.bridge.create_task(title="Trip", model="down/x")
            panel = await open_task(ctl, task.id)
            type_and_send(panel, "Plan my trip.")
            await wait_turns(ctl, panel)
            banner = panel.conversation.banners()[0]
            assert banner.kind == "error" and "127.0.0.1:9" in banner.label.text()
            assert set(banner.extra) == {"Open Settings", "Continue in a new task with another model…"}
            banner.extra["Open Settings"].click()
            await until(lambda: ctl.settings_window is not None, what="settings open")
            ctl.settings_window.close()
            banner.extra["Continue in a new task with another model…"].click()
            dlg = panel.model_dialog
            await until(lambda: "b/gamma" in dlg.picker.refs(), what="models to pick from")
            dlg.picker.set_ref("b/gamma")
            dlg.ok.click()
            await until(lambda: ctl.window.panel is not None and ctl.window.panel.task_id != task.id,
                        what="the new task opened")
            new = ctl.window.panel
            assert new.info.model == "b/gamma"
            await until(lambda: new.loaded.is_set())
            type_and_send(new, "Go on.")
            await wait_turns(ctl, new, 2)
            body = two.requests[-1]
            assert [m["content"] for m in body["messages"] if m["role"] == "user"] == ["Plan my trip.", "Go on."]
            assert (await ctl.rt.get_task(task.id)).model == "down/x"  # the original keeps its model
        finally:
            await ctl.shutdown()


async def test_settings_ask_before_removing_a_provider_and_before_dropping_unsaved_changes(home):
    async with OpenAIServer(models=["alpha"]) as one, OpenAIServer(models=["gamma"]) as two:
        _settings(home, one.base_url, two.base_url)
        ctl = await _app(home)
        try:
            win = ctl.open_settings()
            editor = win.providers
            editor.list.setCurrentRow(1)
            editor.remove.click()
            assert len(editor.providers) == 3  # nothing removed before the person agrees
            box = editor.confirm_box
            next(b for b in box.buttons() if b.text() == "Remove").click()
            assert [p["id"] for p in editor.providers] == ["a", "down"] and win.dirty
            win.close()
            assert win.isVisible()  # not closed: it asks
            box = win.close_box
            next(b for b in box.buttons() if b.text() == "Save").click()
            await until(lambda: ctl.settings_window is None, what="saved and closed")
            saved = json.loads((home / "settings.json").read_text())
            assert [p["id"] for p in saved["providers"]] == ["a", "down"]

            win = ctl.open_settings()  # quitting (Ctrl+Q, the tray, the last window) asks the same
            win.providers.list.setCurrentRow(1)
            win.providers.remove.click()
            next(b for b in win.providers.confirm_box.buttons() if b.text() == "Remove").click()
            ctl.request_quit(ask=True)
            assert not ctl.quit_event.is_set() and win.isVisible()
            box = win.close_box
            assert box.windowTitle() == "Save changes before quitting?"
            next(b for b in box.buttons() if b.text() == "Save").click()
            await until(ctl.quit_event.is_set, what="saved, then quit")
            saved = json.loads((home / "settings.json").read_text())
            assert [p["id"] for p in saved["providers"]] == ["a"]
        finally:
            await ctl.shutdown()


async def test_the_provider_form_sets_a_servers_context_window_or_asks_the_server(home):
    async with OpenAIServer(models=["alpha"]) as one, OpenAIServer(models=["gamma"]) as two:
        _settings(home, one.base_url, two.base_url)
        saved = json.loads((home / "settings.json").read_text())
        saved["providers"][1]["context_window"] = {"gamma": 65536}
        saved["providers"].append({"id": "builtin", "kind": "llama_cpp"})
        (home / "settings.json").write_text(json.dumps(saved))
        ctl = await _app(home)
        try:
            rt = ctl.rt
            assert (await rt.kit.context_window(rt.providers.get("a"), "alpha"))[0] == 8192  # the server does not say
            win = ctl.open_settings()
            editor = win.providers
            editor.list.setCurrentRow(0)
            assert editor.form.isRowVisible(editor.context_row) and editor.context.text() == "Ask the server"
            editor.context.setValue(32768)
            assert win.dirty
            win.save.click()
            await until(lambda: win.status.text().startswith("Saved."), what="saved")
            saved = json.loads((home / "settings.json").read_text())
            assert saved["providers"][0]["context_window"] == 32768
            assert saved["providers"][1]["context_window"] == {"gamma": 65536}  # per model: kept as it was
            assert await rt.kit.context_window(rt.providers.get("a"), "alpha") == (32768, None)

            editor.list.setCurrentRow(1)  # figures per model are shown, and left to settings.json
            assert editor.context.isHidden() and editor.per_model.text() == "Per model, in settings.json: gamma 65,536"
            editor.list.setCurrentRow(3)
            assert not editor.form.isRowVisible(editor.context_row)  # a local model knows its own
            editor.list.setCurrentRow(0)
            assert editor.context.value() == 32768
            editor.context.setValue(0)  # back to asking the server
            win.save.click()
            await until(lambda: not win.dirty and win.status.text().startswith("Saved."), what="saved again")
            assert "context_window" not in json.loads((home / "settings.json").read_text())["providers"][0]
            assert (await rt.kit.context_window(rt.providers.get("a"), "alpha"))[0] == 8192
        finally:
            await ctl.shutdown()
