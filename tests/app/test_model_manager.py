"""Settings ▸ Models' local-models page (app/settings/model_manager.py) offscreen, on a real runtime and the loopback
Hub: a catalog download with its progress bar, speed and time left, Pause (still listed when Settings opens again),
Resume and Cancel, the installed list with its size and Delete, a Hugging Face reference with a mistake in it, a local
.gguf, and the won't-fit mark."""

from __future__ import annotations

from pathlib import Path

import pytest
import shiboken6
from PySide6.QtWidgets import QFileDialog, QLabel, QPushButton

from app.settings.model_manager import ModelManager
from runtime.api import Runtime
from runtime.local_models import catalog as catalog_module
from runtime.local_models.library import ModelLibrary
from runtime.local_models.machine import human_bytes
from tests.support.fake_hub import FakeHub, refused_endpoint, tiny_gguf
from tests.support.qt_helpers import until

QWEN = ("bartowski/Qwen2.5-1.5B-Instruct-GGUF", "Qwen2.5-1.5B-Instruct-Q4_K_M.gguf")


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    return tiny_gguf(tmp_path_factory.mktemp("gguf") / "m.gguf", payload_bytes=16 << 20).read_bytes()


@pytest.fixture
async def page(home, monkeypatch, qtbot):
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        rt = await Runtime.open(home)
        widget = ModelManager(rt.models)
        qtbot.addWidget(widget)
        widget.resize(900, 700)
        widget.show()
        try:
            yield widget, hub
        finally:
            for task in list(widget.downloads.values()):
                task.cancel()
            await rt.aclose()


def partial_files(home: Path) -> list[Path]:
    """What downloads left unfinished in the data folder's model cache."""
    return list(ModelLibrary(home).hub_cache.rglob("*.incomplete"))


def texts(layout) -> list[str]:
    return [layout.itemAt(i).widget().text() for i in range(layout.count())
            if isinstance(layout.itemAt(i).widget(), QLabel | QPushButton)]


def catalog_button(widget: ModelManager, label: str) -> QPushButton:
    grid = widget.catalog
    for row in range(grid.rowCount()):
        item = grid.itemAtPosition(row, 0)
        if item is not None and label in item.widget().text():
            return grid.itemAtPosition(row, 2).widget()
    raise AssertionError(f"no catalog row {label}")


async def start_download(widget: ModelManager, hub: FakeHub, gguf: bytes, throttle: int):
    """Download Qwen from the catalog, slowly; returns its row once a tenth of it has arrived."""
    hub.add(*QWEN, gguf)
    hub.faults.throttle = throttle
    catalog_button(widget, "Qwen2.5 1.5B").click()
    row = await until(lambda: widget.rows.get("qwen2.5-1.5b-instruct"), what="a download row")
    await until(lambda: row.bar.maximum() == 1000 and row.bar.value() > 100, what="progress")
    return row


def paused_row(widget: ModelManager) -> tuple[QLabel, QPushButton, QPushButton]:
    """The first paused download: its text, Resume and Cancel."""
    grid = widget.paused
    return tuple(grid.itemAtPosition(0, col).widget() for col in range(3))


async def test_download_with_progress_pause_resume_and_delete(page, gguf, qtbot):
    widget, hub = page
    row = await start_download(widget, hub, gguf, throttle=8 << 20)
    assert "of 16.8 MB" in row.detail.text() and "/s" in row.detail.text() and "left" in row.detail.text()
    assert not catalog_button(widget, "Qwen2.5 1.5B").isEnabled()  # one download per model

    row.pause_button.click()
    await until(lambda: "Paused" in widget.message.text(), what="the pause")
    assert not widget.rows and not widget.no_downloads.isVisible()
    text, resume, _cancel = paused_row(widget)
    assert text.text().startswith("Qwen2.5 1.5B Instruct<br>") and "Paused at " in text.text()
    assert " of 16.8 MB (" in text.text()
    assert catalog_button(widget, "Qwen2.5 1.5B").text() == "Resume"
    reopened = ModelManager(widget.models)  # Settings closed and opened again: the paused download is still there
    qtbot.addWidget(reopened)
    assert paused_row(reopened)[0].text() == text.text()

    hub.faults.throttle = None
    resume.click()
    await until(lambda: "Installed Qwen2.5 1.5B Instruct" in widget.message.text(), what="the finished download")
    assert hub.cdn_gets()[-1]["range"].startswith("bytes=")  # resumed, not started over
    assert widget.paused.count() == 0 and widget.no_downloads.isVisible()
    installed = " ".join(texts(widget.installed))
    assert "builtin/qwen2.5-1.5b-instruct" in installed and "16.8 MB" in installed
    assert catalog_button(widget, "Qwen2.5 1.5B").text() == "Installed"

    delete = next(w for w in (widget.installed.itemAt(i).widget() for i in range(widget.installed.count()))
                  if isinstance(w, QPushButton) and w.text() == "Delete")
    delete.click()
    await until(lambda: "Removed qwen2.5-1.5b-instruct" in widget.message.text(), what="the removal")
    assert "builtin/qwen2.5-1.5b-instruct" not in " ".join(texts(widget.installed))
    assert catalog_button(widget, "Qwen2.5 1.5B").text() == "Download"


async def test_cancel_stops_a_download_and_deletes_what_it_had(page, gguf, home):
    widget, hub = page
    row = await start_download(widget, hub, gguf, throttle=4 << 20)
    row.cancel_button.click()
    await until(lambda: "was cancelled" in widget.message.text(), what="the cancel")
    assert widget.message.text() == (
        "The download of Qwen2.5-1.5B-Instruct-Q4_K_M.gguf was cancelled; what it had downloaded was deleted.")
    assert widget.no_downloads.isVisible() and not widget.rows
    assert not partial_files(home)
    assert catalog_button(widget, "Qwen2.5 1.5B").text() == "Download"


async def test_cancel_on_a_paused_download_deletes_what_it_had(page, gguf, home):
    widget, hub = page
    row = await start_download(widget, hub, gguf, throttle=4 << 20)
    row.pause_button.click()
    await until(lambda: widget.paused.count() == 3, what="the paused row")
    assert partial_files(home)
    paused_row(widget)[2].click()
    await until(lambda: widget.paused.count() == 0, what="the paused download gone")
    assert widget.message.text() == "Deleted the partial download of Qwen2.5 1.5B Instruct."
    assert not partial_files(home)
    assert widget.no_downloads.isVisible() and catalog_button(widget, "Qwen2.5 1.5B").text() == "Download"


async def test_a_failed_download_says_why_on_its_row_with_retry(page, gguf, monkeypatch, home):
    widget, hub = page
    nowhere = refused_endpoint()
    monkeypatch.setenv("HF_ENDPOINT", nowhere)  # Hugging Face cannot be reached
    catalog_button(widget, "Qwen2.5 1.5B").click()
    row = widget.rows["qwen2.5-1.5b-instruct"]
    await until(lambda: row.retry_button.isVisibleTo(widget), what="Retry on the failed row")
    assert row.detail.isVisibleTo(widget) and row.detail.text() == (
        f"Hearth could not reach Hugging Face ({nowhere.removeprefix('http://')}). Check the internet connection, "
        "then try again.")  # plain words, on the row; nothing was downloaded, so no partial download is mentioned
    assert not row.bar.isVisibleTo(widget) and not row.pause_button.isVisibleTo(widget)
    assert widget.message.text() == "" and catalog_button(widget, "Qwen2.5 1.5B").text() == "Retry"

    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)  # back online: Retry downloads it
    hub.add(*QWEN, gguf)
    hub.faults.throttle = 4 << 20
    row.retry_button.click()
    row = await until(lambda: (r := widget.rows.get("qwen2.5-1.5b-instruct")) and r.bar.value() > 100 and r,
                      what="the retried download under way")
    row.pause_button.click()
    await until(lambda: widget.paused.count() == 3, what="paused with bytes kept")
    have = widget.models.paused()[0].downloaded
    monkeypatch.setenv("HF_ENDPOINT", nowhere)
    paused_row(widget)[1].click()  # Resume, with the connection gone again
    row = await until(lambda: (r := widget.rows.get("qwen2.5-1.5b-instruct")) and r.failed and r, what="failed")
    assert row.detail.text().endswith(f"The {human_bytes(have)} downloaded so far are kept: trying again goes on "
                                      "from there.")
    assert widget.paused.count() == 0  # the failed row is the one place it is listed
    row.cancel_button.click()  # let it go: what it had is deleted
    await until(lambda: not widget.rows and widget.paused.count() == 0, what="the row gone")
    await until(lambda: widget.message.text() == "Deleted the partial download of Qwen2.5 1.5B Instruct.",
                what="said so")
    assert not partial_files(home) and widget.no_downloads.isVisible()


async def test_a_wrong_reference_and_a_local_file(page, tmp_path):
    widget, _hub = page
    widget.hf_ref.setText("org/repo/README.md")
    widget.hf_button.click()
    await until(lambda: "is not one" in widget.message.text(), what="the refusal")
    assert "Traceback" not in widget.message.text() and not widget.rows

    local = tiny_gguf(tmp_path / "Local-Model.gguf")
    widget.add_local(str(local))
    await until(lambda: "Added local-model" in widget.message.text(), what="the added file")
    installed = " ".join(texts(widget.installed))
    assert "builtin/local-model" in installed and "Remove" in installed  # forgotten, never deleted


async def test_models_that_will_not_fit_are_marked(home, monkeypatch, qtbot):
    monkeypatch.setattr(catalog_module, "total_ram_bytes", lambda: 4_000_000_000)
    rt = await Runtime.open(home)
    try:
        widget = ModelManager(rt.models)
        qtbot.addWidget(widget)
        marks = {}
        for row in range(widget.catalog.rowCount()):
            label = widget.catalog.itemAtPosition(row, 0).widget().text()
            marks[label.split("</b>")[0][3:]] = "won't fit" in widget.catalog.itemAtPosition(row, 1).widget().text()
        assert marks["Qwen2.5 1.5B Instruct"] is False and marks["Qwen2.5 7B Instruct"] is True
        assert marks["Llama 3.1 8B Instruct"] is True
    finally:
        await rt.aclose()


async def test_adding_a_local_file_starts_in_the_home_folder(page, tmp_path, monkeypatch):
    widget, _hub = page
    person = tmp_path / "person"  # a home that is surely not the folder the tests run from
    person.mkdir()
    monkeypatch.setenv("HOME", str(person))
    widget.local_button.click()
    (dialog,) = widget.findChildren(QFileDialog)
    assert dialog.isVisible()
    try:
        assert Path(dialog.directory().absolutePath()) == person
        local = tiny_gguf(person / "Mine.gguf")
        dialog.selectFile(local.name)
        dialog.accept()
        await until(lambda: "Added mine" in widget.message.text(), what="the added file")
    finally:
        if shiboken6.isValid(dialog):
            dialog.close()
