"""Documents in tasks, as a person reaches them: the New task dialog binds chosen files and folders (removable
chips) and the memory choice through the bridge, and a search_knowledge card in the conversation shows its cited
passages as chips that open the document."""

from __future__ import annotations

import asyncio

from PySide6.QtCore import Qt
from PySide6.QtGui import QDesktopServices
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QFileDialog

from runtime.providers.scripted import Call, ScriptedModel
from tests.app.test_memory_knowledge_ui import Opened
from tests.support.pdf import write_pdf
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until, wait_turns


def _choose(dlg, menu_entry: str, path) -> None:
    """Pick `path` in the chooser the Documents menu opens, as a person would."""
    action = next(a for a in dlg.documents.button.menu().actions() if a.text() == menu_entry)
    action.trigger()
    chooser = dlg.documents.chooser
    assert chooser.isVisible()  # shown by open(): no nested event loop
    chooser.setDirectory(str(path.parent))
    chooser.selectFile(str(path))
    chooser.accept()


async def test_new_task_works_from_chosen_documents_without_memory(launch, tmp_path):
    ctl = await launch()
    notes = tmp_path / "notes.txt"
    notes.write_text("The boiler is serviced in May.\n")
    drop = tmp_path / "old.txt"
    drop.write_text("Not this one.\n")
    folder = tmp_path / "manuals"
    folder.mkdir()
    (folder / "boiler.md").write_text("# Boiler\nBleed the radiators first.\n")

    dlg = ctl.window.new_task()
    assert dlg.memory.isChecked() and dlg.memory.isEnabled()  # Settings ▸ Memory is on
    _choose(dlg, "Files…", notes)
    _choose(dlg, "Files…", drop)
    assert dlg.documents.chooser.fileMode() == QFileDialog.FileMode.ExistingFiles
    _choose(dlg, "A folder…", folder)
    assert dlg.documents.chooser.fileMode() == QFileDialog.FileMode.Directory
    assert dlg.documents.paths == [str(notes), str(drop), str(folder)]
    chip = dlg.documents.chips[str(folder)]
    assert chip.name.text() == "manuals" and chip.toolTip() == str(folder)
    QTest.mouseClick(dlg.documents.chips[str(drop)].remove_button, Qt.MouseButton.LeftButton)
    assert dlg.documents.paths == [str(notes), str(folder)] and str(drop) not in dlg.documents.chips
    dlg.memory.setChecked(False)
    dlg.title.setText("Boiler")
    QTest.mouseClick(dlg.create_button, Qt.MouseButton.LeftButton)

    await until(lambda: ctl.window.panel is not None, what="the task created and opened")
    task = await ctl.rt.get_task(ctl.window.panel.task_id)
    assert task.title == "Boiler" and task.memory is False
    assert task.knowledge == [str(notes.resolve()), str(folder.resolve())]
    library = {d["path"] for d in (await ctl.rt.knowledge.status())["documents"]}
    assert str(notes.resolve()) in library and str(drop.resolve()) not in library


async def test_a_chosen_file_that_went_away_is_said_and_memory_off_everywhere_is_shown(launch, tmp_path):
    ctl = await launch()
    await ctl.rt.memory.set_enabled(False)
    gone = tmp_path / "gone.txt"
    gone.write_text("soon gone\n")
    dlg = ctl.window.new_task("Read it")
    assert not dlg.memory.isChecked() and not dlg.memory.isEnabled()
    assert "Settings ▸ Memory" in dlg.memory.toolTip()
    _choose(dlg, "Files…", gone)
    gone.unlink()
    QTest.mouseClick(dlg.create_button, Qt.MouseButton.LeftButton)
    await until(lambda: dlg.error.isVisible(), what="the error sentence")
    assert "gone.txt" in dlg.error.text() and "Traceback" not in dlg.error.text()
    assert dlg.isVisible() and dlg.create_button.isEnabled() and await ctl.rt.list_tasks() == []
    assert dlg.documents.paths == [str(gone)]  # nothing the person chose is lost
    dlg.close()


async def test_a_search_knowledge_card_shows_citation_chips_that_open_the_document(launch, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    manual = write_pdf(folder / "manual.pdf", ["Intro.", "Bleed the radiator with the small key."])
    model = ScriptedModel([[Call("search_knowledge", {"query": "bleed radiator"})], ["See [1]."],
                           [Call("run_shell", {"command": "echo hi"})], ["Done."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Radiator", model=MODEL, knowledge=[str(manual)],
                                        approval="full_auto")
    while (await ctl.rt.knowledge.status())["busy"]:
        await asyncio.sleep(0.02)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "How do I bleed the radiator?")
    await wait_turns(ctl, panel, 1)
    card = panel.conversation.cards()[0]
    assert card.name == "search_knowledge" and not card.expanded
    await until(lambda: card.citations is not None and card.citations.isVisible(), what="chips under the card")
    chip = card.citations.chips[0]
    assert chip.text() == f"[{chip.citation.n}] manual.pdf · page 2"

    opened = Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        QTest.mouseClick(chip, Qt.MouseButton.LeftButton)
        await until(lambda: opened.urls, what="the document opened")
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert opened.urls[0].toLocalFile() == str(manual.resolve()) and opened.urls[0].fragment() == "page=2"

    type_and_send(panel, "now say hi")  # any other tool's card has no chips
    await wait_turns(ctl, panel, 2)
    assert [c.citations is None for c in panel.conversation.cards()] == [False, True]

    ctl.window.close_panel()
    reopened = await open_task(ctl, task.id)  # built again from the saved parts
    assert reopened.conversation.cards()[0].citations.chips[0].citation.path == str(manual.resolve())
