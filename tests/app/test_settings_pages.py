"""The pages Settings opens besides providers: Models ▸ Local models (downloads pause when the window closes and
resume when it is opened again), Memory and Knowledge, all on the app's runtime, and closing the window while
their reads and follows run reports nothing."""

from __future__ import annotations

import asyncio
import logging

from app.settings.window import SettingsWindow
from tests.support.fake_hub import FakeHub, tiny_gguf
from tests.support.qt_helpers import until

QWEN = ("bartowski/Qwen2.5-1.5B-Instruct-GGUF", "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf")
QWEN_ID = "qwen2.5-1.5b-instruct"


def _catalog_button(settings: SettingsWindow, label: str):
    grid = settings.local_models.catalog
    for row in range(grid.rowCount()):
        item = grid.itemAtPosition(row, 0)
        if item is not None and label in item.widget().text():
            return grid.itemAtPosition(row, 2).widget()
    raise AssertionError(f"no catalog row {label}")


def _errors(ctl, caplog) -> list[str]:
    shown: list[str] = []
    ctl.bridge.error.connect(shown.append)
    caplog.set_level(logging.WARNING)
    return shown


async def test_local_models_sit_beside_providers_and_closing_settings_pauses_a_download(
        launch, monkeypatch, tmp_path, caplog):
    gguf = tiny_gguf(tmp_path / "m.gguf", payload_bytes=16 << 20)
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        hub.add(*QWEN, gguf)
        hub.faults.throttle = 4 << 20
        ctl = await launch()
        shown = _errors(ctl, caplog)
        settings = ctl.open_settings()
        assert settings.tabs.tabText(settings.tabs.indexOf(settings.models)) == "Models"
        assert [settings.models.tabText(i) for i in range(settings.models.count())] == ["Providers", "Local models"]
        settings.models.setCurrentWidget(settings.local_models)
        _catalog_button(settings, "Qwen2.5 1.5B").click()
        row = await until(lambda: settings.local_models.rows.get(QWEN_ID), what="a download row")
        await until(lambda: row.bar.maximum() == 1000 and row.bar.value() > 50, what="progress")
        download = settings.local_models.downloads[QWEN_ID]

        settings.close()
        await until(download.done, what="the download paused")
        await until(lambda: ctl.settings_window is None, what="the window gone")
        assert download.cancelled()
        assert all(m.name != QWEN_ID for m in ctl.rt.models.installed())

        hub.faults.throttle = None
        settings = ctl.open_settings()
        settings.models.setCurrentWidget(settings.local_models)
        _catalog_button(settings, "Qwen2.5 1.5B").click()
        await until(lambda: "Installed Qwen2.5 1.5B Instruct" in settings.local_models.message.text(),
                    what="the resumed download")
        assert hub.cdn_gets()[-1]["range"].startswith("bytes=")  # it went on from the partial file
        assert any(m.name == QWEN_ID for m in ctl.rt.models.installed())
        settings.close()
        await asyncio.sleep(0.1)
        assert shown == [] and not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_memory_and_knowledge_tabs_show_the_runtimes_data_and_close_quietly(launch, tmp_path, caplog):
    ctl = await launch()
    shown = _errors(ctl, caplog)
    await ctl.rt.memory.save("tea.md", "# Prefers green tea\nNo sugar.")
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\nThe boiler is serviced in May.\n")
    settings = ctl.open_settings()
    tabs = [settings.tabs.tabText(i) for i in range(settings.tabs.count())]
    assert tabs == ["Models", "Tools (MCP)", "Skills", "Memory", "Knowledge", "Jobs", "Permissions", "Appearance"]

    settings.tabs.setCurrentWidget(settings.memory)
    await until(lambda: settings.memory.list.count() == 1, what="the memory listed")
    assert settings.memory.list.item(0).text().startswith("Prefers green tea")
    settings.memory.enabled.setChecked(False)
    await until(lambda: not ctl.rt.memory.enabled, what="memory off for every task")

    settings.tabs.setCurrentWidget(settings.knowledge)
    await settings.knowledge.add([str(notes)])
    await until(lambda: settings.knowledge.rows.get(str(notes.resolve())) is not None
                and settings.knowledge.rows[str(notes.resolve())].text(1).startswith("Ready"),
                what="the document indexed")
    follow = settings.knowledge._follow
    settings.memory.search.setText("tea")  # a read still running when the window goes
    settings.close()
    await until(follow.done, what="the library no longer followed")
    await until(lambda: ctl.settings_window is None, what="the window gone")
    await asyncio.sleep(0.1)
    assert shown == [] and not [r for r in caplog.records if r.levelno >= logging.ERROR]
