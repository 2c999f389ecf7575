"""Settings ▸ Memory, the knowledge library page, and citation chips that open the cited document."""

from __future__ import annotations

import asyncio
import json

from PySide6.QtCore import QMimeData, QObject, QPointF, Qt, QUrl, Slot
from PySide6.QtGui import QDesktopServices, QDragEnterEvent, QDropEvent
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialog, QLineEdit, QMessageBox

import app.shell.application  # noqa: F401  (imported here, not by the first test on the event loop)
from app.conversation.citation import CitationRow, parse_citations
from app.conversation.source_viewer import SourceViewer
from app.settings.knowledge_page import KnowledgePage
from app.settings.memory_page import MemoryPage
from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, trigram_vector
from tests.support.pdf import write_pdf
from tests.support.qt_helpers import MODEL, open_task, type_and_send, until


class Opened(QObject):
    """Receives what QDesktopServices would hand to the desktop for file URLs."""

    def __init__(self):
        super().__init__()
        self.urls: list[QUrl] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.urls.append(url)


async def test_memory_page_lists_edits_deletes_and_forgets(launch):
    ctl = await launch()
    rt = ctl.rt
    await rt.memory.save("tea.md", "# Prefers green tea\nNo sugar.")
    await rt.memory.save("units.md", "# Prefers metric units\nKilometres.")
    page = MemoryPage(ctl.bridge)
    await until(lambda: page.list.count() == 2, what="two memories")
    assert page.list.item(0).text().startswith("Prefers green tea\ntea.md · written by you")
    page.search.setText("kilometres")
    await until(lambda: page.list.count() == 1, what="search")
    page.search.setText("")
    await until(lambda: page.list.count() == 2, what="all again")
    page.list.setCurrentRow(0)
    await until(lambda: page.editor.toPlainText() == "# Prefers green tea\nNo sugar.\n", what="text shown")
    page.editor.setPlainText("# Prefers green tea\nNo sugar, a slice of lemon.")
    QTest.mouseClick(page.save, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text() == "Saved tea.md.", what="saved")
    assert "lemon" in (rt.memory.folder / "tea.md").read_text()
    QTest.mouseClick(page.open_file, Qt.MouseButton.LeftButton)  # no editor answers here: the path is shown
    (dialog,) = [d for d in page.findChildren(QDialog) if d.isVisible()]
    assert dialog.findChild(QLineEdit).text() == str(rt.memory.folder / "tea.md")
    dialog.close()
    page.editor.setPlainText("# Bank\npassword: hunter2hunter2")
    QTest.mouseClick(page.save, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text().startswith("Not saved:"), what="secret refused")
    page.list.setCurrentRow(1)
    units = next(m for m in await rt.memory.list() if m["name"] == "units.md")
    QTest.mouseClick(page.delete, Qt.MouseButton.LeftButton)  # asks first: Cancel keeps it
    box = page.confirm_box
    assert box.isVisible() and not box.isModal() and "Prefers metric units" in box.text()
    QTest.mouseClick(box.button(QMessageBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
    assert (rt.memory.folder / "units.md").exists() and page.list.count() == 2
    QTest.mouseClick(page.delete, Qt.MouseButton.LeftButton)
    next(b for b in page.confirm_box.buttons() if b.text() == "Delete").click()
    await until(lambda: page.status.text() == "Deleted units.md.", what="deleted")
    assert not (rt.memory.folder / "units.md").exists()
    assert page.list.count() == 1 and page.undo.isVisibleTo(page)
    QTest.mouseClick(page.undo, Qt.MouseButton.LeftButton)  # back as it was, with where it came from
    await until(lambda: page.status.text() == "Brought back units.md.", what="brought back")
    assert page.list.count() == 2
    assert (rt.memory.folder / "units.md").read_text() == "# Prefers metric units\nKilometres.\n"
    back = next(m for m in await rt.memory.list() if m["name"] == "units.md")
    assert {k: back[k] for k in ("origin", "created_at", "summary")} == {
        k: units[k] for k in ("origin", "created_at", "summary")}
    assert page.current_name() == "units.md" and not page.undo.isVisibleTo(page)
    assert [m["name"] for m in await rt.memory.list("kilometres")] == ["units.md"]  # searchable again
    QTest.mouseClick(page.delete, Qt.MouseButton.LeftButton)
    next(b for b in page.confirm_box.buttons() if b.text() == "Delete").click()
    await until(lambda: page.status.text() == "Deleted units.md.", what="deleted again")

    QTest.mouseClick(page.new, Qt.MouseButton.LeftButton)  # written by hand, checked as the tool checks
    assert page.name.isVisibleTo(page) and page.save.isEnabled() and not page.delete.isEnabled()
    QTest.keyClicks(page.name, "bank")
    page.editor.setPlainText("# Bank\nmy PIN is 4931")
    QTest.mouseClick(page.save, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text().startswith("Not saved:"), what="secret refused")
    assert "secret" in page.status.text() and not (rt.memory.folder / "bank.md").exists()
    page.name.setText("trains")
    page.editor.setPlainText("# Travels by train\nNever books flights.")
    QTest.mouseClick(page.save, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text() == "Saved trains.md.", what="added")
    assert (rt.memory.folder / "trains.md").read_text() == "# Travels by train\nNever books flights.\n"
    assert page.current_name() == "trains.md" and not page.name.isVisibleTo(page)
    assert next(m for m in await rt.memory.list() if m["name"] == "trains.md")["origin"] == "person"
    QTest.mouseClick(page.new, Qt.MouseButton.LeftButton)
    page.name.setText("tea")  # taken: a new memory never replaces one
    page.editor.setPlainText("# Coffee\nBlack.")
    QTest.mouseClick(page.save, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text().startswith("Not saved:"), what="name taken")
    assert "exists already" in page.status.text() and "lemon" in (rt.memory.folder / "tea.md").read_text()
    page.list.setCurrentRow(1)
    await until(lambda: page.delete.isEnabled() and page.editor.toPlainText().startswith("# Travels"),
                what="trains shown")
    QTest.mouseClick(page.delete, Qt.MouseButton.LeftButton)
    next(b for b in page.confirm_box.buttons() if b.text() == "Delete").click()
    await until(lambda: page.status.text() == "Deleted trains.md.", what="trains deleted")
    assert page.list.count() == 1
    QTest.mouseClick(page.forget_all, Qt.MouseButton.LeftButton)
    await until(lambda: page.forget_all.text().startswith("Click again"), what="asks again")
    assert (rt.memory.folder / "tea.md").exists()
    QTest.mouseClick(page.forget_all, Qt.MouseButton.LeftButton)
    await until(lambda: page.status.text() == "Forgot 1 memories.", what="forgot all")
    assert await rt.memory.list() == []
    page.enabled.setChecked(False)
    await until(lambda: not rt.memory.enabled, what="memory off")


async def test_a_memory_approval_says_it_changes_the_memories_every_task_shares(launch):
    model = ScriptedModel([[Call("memory", {"command": "create", "path": "tea.md", "content": "# Green tea"})]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Tea", model=MODEL)
    panel = await open_task(ctl, task.id)
    type_and_send(panel, "Remember that I like green tea.")
    await until(lambda: panel.waiting is not None and panel.settled, what="approval asked")
    assert panel.waiting.note.isVisibleTo(panel)
    assert panel.waiting.note.text() == ("It saves a new memory tea.md in Hearth's memory folder, which every task "
                                         "and chat reads (not this task's workspace folder).")


async def test_memory_page_and_jobs_tab_say_why_the_last_extraction_failed(launch):
    model = ScriptedModel([["Hello, Ana."], ["I cannot answer in JSON, sorry."]])
    ctl = await launch(model)
    task = await ctl.bridge.create_task(title="Names", model=MODEL)
    await ctl.bridge.send(task.id, "Call me Ana from now on.")
    await ctl.rt.wait_idle(task.id)
    await until(lambda: not ctl.rt.jobs.pending, what="the extraction")
    win = ctl.open_settings()
    win.tabs.setCurrentWidget(win.memory)
    status = win.memory.status
    await until(lambda: status.text().startswith("The last attempt to learn from a task failed"), what="the failure")
    assert status.isVisibleTo(win)
    assert status.text() == ("The last attempt to learn from a task failed (just now): the model did not answer "
                             "with the JSON object asked for (all background work: the Jobs tab)")
    jobs = win.jobs
    win.tabs.setCurrentWidget(jobs)  # shown: the log is read
    await until(lambda: jobs.tree.topLevelItemCount() == 2, what="the job log")
    failure = "the model did not answer with the JSON object asked for"
    rows = [[jobs.tree.topLevelItem(i).text(c) for c in (1, 2, 3)] for i in (0, 1)]
    assert rows == [["Saving memories", "Names", f"Failed: {failure}"], ["Backup", "", "Done"]]  # newest first
    jobs.tree.setCurrentItem(jobs.tree.topLevelItem(0))
    assert jobs.details.toPlainText() == failure
    assert jobs.status.text() == "2 jobs shown, 1 failed."
    model.add_steps(["Noted."], [json.dumps({"add": [{"name": "name", "summary": "Is called Ana",
                                                      "content": "Call the person Ana."}]})])
    await ctl.bridge.send(task.id, "Remember that my name is Ana.")
    await ctl.rt.wait_idle(task.id)
    await until(lambda: not ctl.rt.jobs.pending, what="the second extraction")
    await win.memory.reload()  # the page still open: what it does after an action or a search
    assert win.memory.list.count() == 1  # the memory learned
    assert "failed" not in win.memory.status.text()  # only the last attempt counts, and it worked
    jobs.refresh_button.click()
    await until(lambda: jobs.tree.topLevelItemCount() == 3, what="the second extraction listed")
    assert [jobs.tree.topLevelItem(i).text(3)[:6] for i in (0, 1)] == ["Done", "Failed"]
    jobs.failed_only.setChecked(True)  # asks the runtime for failures alone
    await until(lambda: jobs.tree.topLevelItemCount() == 1, what="failures only")
    assert jobs.tree.topLevelItem(0).text(3) == f"Failed: {failure}"
    win.close()
    await until(lambda: ctl.settings_window is None, what="settings closed")
    win = ctl.open_settings()
    await win.memory.reload()  # what the page does when it opens, awaited here
    assert win.memory.list.count() == 1 and "failed" not in win.memory.status.text()


async def test_knowledge_page_shows_each_files_status(launch, tmp_path):
    ctl = await launch()
    folder = tmp_path / "library"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\nThe boiler is serviced in May.\n")
    (folder / "blob.txt").write_bytes(b"\x00\x01\x02" * 100)
    page = KnowledgePage(ctl.bridge)
    try:
        await until(lambda: page.status.text() == "The library is empty.", what="empty library")
        await page.add([str(folder)])
        assert page.status.text() == "Added 2 documents."
        await until(lambda: len(page.rows) == 2 and all(
            page.rows[p].text(1) not in ("Waiting",) and not page.rows[p].text(1).startswith("Indexing")
            for p in page.rows), what="both settled")
        by_name = {item.text(0): item for item in page.rows.values()}
        ready = by_name["notes.md"].text(1)
        assert ready.startswith("Ready · 1 passage") and "passages" not in ready
        assert by_name["blob.txt"].text(1) == "Cannot be read" and "binary" in by_name["blob.txt"].text(2)
        await page.add([str(tmp_path / "nowhere")])
        assert page.status.text() == f"Not added: {tmp_path / 'nowhere'} was not found."
        (tmp_path / "plan.txt").write_text("Paint the fence in June.\n")
        await page.add([str(tmp_path / "plan.txt"), str(tmp_path / "nowhere")])  # what can be added is
        assert page.status.text() == f"Added 1 document. Not added: {tmp_path / 'nowhere'} was not found."
        await until(lambda: str(tmp_path / "plan.txt") in page.rows, what="the one added listed")
        await ctl.rt.knowledge.remove(tmp_path / "plan.txt")
        await until(lambda: str(tmp_path / "plan.txt") not in page.rows, what="taken out again")

        assert not page.remove_button.isEnabled()  # nothing selected
        by_name["blob.txt"].setSelected(True)
        assert page.remove_button.isEnabled()
        QTest.mouseClick(page.remove_button, Qt.MouseButton.LeftButton)
        await until(lambda: list(page.rows) == [str(folder / "notes.md")], what="the removed one gone from the list")
        assert page.status.text().startswith("Removed blob.txt from the library; the files stay")
        assert [d["path"] for d in await ctl.rt.knowledge.list()] == [str(folder / "notes.md")]
        assert (folder / "blob.txt").exists()
    finally:
        page.stop()


def drag(page, mime: QMimeData, kind=QDropEvent) -> QDropEvent:
    """Drag `mime` over the middle of the page's document list and send the event where Qt's window sends it:
    to the nearest widget under the cursor, or above it, that accepts drops (the page itself)."""
    target, at = page.tree.viewport(), page.tree.viewport().rect().center()
    while not target.acceptDrops() and not target.isWindow():
        at, target = target.mapToParent(at), target.parentWidget()
    assert target is page
    pos = QPointF(at) if kind is QDropEvent else at
    event = kind(pos, Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(target, event)
    return event


async def test_files_dropped_on_the_knowledge_page_are_added(launch, tmp_path):
    ctl = await launch()
    (tmp_path / "notes.md").write_text("# Notes\nThe boiler is serviced in May.\n")
    (tmp_path / "more").mkdir()
    (tmp_path / "more" / "plan.txt").write_text("Paint the fence in June.\n")
    win = ctl.open_settings()
    win.tabs.setCurrentWidget(win.knowledge)
    page = win.knowledge
    await until(lambda: page.status.text() == "The library is empty.", what="empty library")

    words = QMimeData()
    words.setText("just some text")
    assert not drag(page, words, QDragEnterEvent).isAccepted()  # not files: no drop offered

    files = QMimeData()
    files.setUrls([QUrl.fromLocalFile(str(tmp_path / "notes.md")), QUrl.fromLocalFile(str(tmp_path / "more")),
                   QUrl("https://example.com/remote.pdf")])
    assert drag(page, files, QDragEnterEvent).isAccepted()
    assert drag(page, files).isAccepted()
    await until(lambda: page.status.text() == "Added 2 documents.", what="the drop added")
    await until(lambda: sorted(i.text(1) for i in page.rows.values()) == ["Ready · 1 passage"] * 2,
                what="both indexed")
    assert {i.text(0) for i in page.rows.values()} == {"notes.md", "plan.txt"}  # the folder's file, not the URL
    assert {d["path"] for d in await ctl.rt.knowledge.list()} == {
        str(tmp_path / "notes.md"), str(tmp_path / "more" / "plan.txt")}

    only_remote = QMimeData()
    only_remote.setUrls([QUrl("https://example.com/remote.pdf")])
    assert not drag(page, only_remote).isAccepted()  # nothing on this computer to add


async def test_citation_chips_open_the_cited_file(launch, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    manual = write_pdf(folder / "manual.pdf", ["Intro.", "Bleed the radiator with the small key."])
    notes = folder / "notes.txt"
    notes.write_text("Radiator in the hall: bleed it every autumn.\n")
    other = folder / "other.txt"
    other.write_text("The radiator in the attic is not ours.\n")
    model = ScriptedModel([[Call("search_knowledge", {"query": "bleed radiator"})], ["See [1] and [2]."]])
    ctl = await launch(model)
    await ctl.rt.knowledge.add([other])
    task = await ctl.rt.create_task(model=MODEL, knowledge=[str(manual), str(notes)])
    while (await ctl.rt.knowledge.status())["busy"]:
        await asyncio.sleep(0.02)
    await ctl.bridge.send(task.id, "How do I bleed the radiator?")
    await ctl.bridge.wait_idle(task.id)
    tool_part = next(p for m in await ctl.rt.messages(task.id) for p in m.parts if p.get("type") == "tool_call")
    row = CitationRow(tool_part["result"])
    assert {c.citation.path for c in row.chips} == {str(manual.resolve()), str(notes.resolve())}
    assert not parse_citations("no passages here")
    pdf_chip = next(c for c in row.chips if c.citation.path.endswith("manual.pdf"))
    assert pdf_chip.text() == f"[{pdf_chip.citation.n}] manual.pdf · page 2"
    opened = Opened()
    QDesktopServices.setUrlHandler("file", opened, "open")
    try:
        QTest.mouseClick(pdf_chip, Qt.MouseButton.LeftButton)
        await until(lambda: opened.urls, what="the file opened")
    finally:
        QDesktopServices.unsetUrlHandler("file")
    assert opened.urls[0].toLocalFile() == str(manual.resolve()) and opened.urls[0].fragment() == "page=2"
    assert pdf_chip.open() is False  # no viewer answers here: the document's path is shown instead
    (dialog,) = [d for d in row.findChildren(QDialog) if d.isVisible()]
    assert dialog.findChild(QLineEdit).text() == str(manual.resolve())
    dialog.close()
    # A text file's chip opens Hearth's own view of it, at the cited lines.
    text_chip = next(c for c in row.chips if c.citation.path.endswith("notes.txt"))
    assert text_chip.text() == f"[{text_chip.citation.n}] notes.txt · line 1" and text_chip.citation.lines == (1, 1)
    QTest.mouseClick(text_chip, Qt.MouseButton.LeftButton)
    (viewer,) = [d for d in row.findChildren(SourceViewer) if d.isVisible()]
    await viewer.loaded
    assert viewer.marked_text() == "Radiator in the hall: bleed it every autumn."
    viewer.close()


async def test_the_source_viewer_shows_the_cited_lines_of_a_long_file(qtbot, tmp_path):
    log = tmp_path / "service.log"
    log.write_text("".join(f"line {i}: {'ok' if i != 7001 else 'ERROR disk full'}\n" for i in range(1, 20_001)))
    viewer = SourceViewer(None, str(log), (7001, 7002))
    qtbot.addWidget(viewer)
    viewer.show()
    await viewer.loaded
    assert viewer.marked_text() == "line 7001: ERROR disk full\nline 7002: ok"
    assert viewer.note.text().endswith("lines 5001–9002 of the file")  # only a window around the place is read
    view = viewer.view
    assert view.textCursor().block().text() == "line 7001: ERROR disk full"
    top = view.cursorForPosition(view.viewport().rect().topLeft()).block().blockNumber()
    assert 1990 <= top <= 2000  # the cited line is near the top of the view, not at the file's start


async def test_knowledge_page_chooses_an_embeddings_model_and_the_library_gets_vectors(launch, home, tmp_path):
    folder = tmp_path / "library"
    folder.mkdir()
    (folder / "notes.md").write_text("# Notes\nThe lighthouse keeper logs the storms.\n")
    async with OpenAIServer(embed=trigram_vector, models=["chat-model", "embed-model"]) as server:
        write_settings(home, server.base_url)
        ctl = await launch(data=home)
        page = KnowledgePage(ctl.bridge)
        try:
            assert page.embeddings.currentText() == "Words only (works offline)"
            await page.add([str(folder)])
            await until(lambda: any(r.text(1).startswith("Ready") for r in page.rows.values()), what="indexed")
            await until(lambda: page.embeddings.findText("local/embed-model") >= 0, what="the server's models")
            page.embeddings.setCurrentText("nowhere/embed-model")
            await page.choose_embeddings()
            assert page.status.text() == "Not changed: No provider 'nowhere' in settings.json (configured: local)."
            assert ctl.rt.knowledge.embeddings_model is None
            page.embeddings.setCurrentText("local/embed-model")
            await page.choose_embeddings()
            assert page.status.text() == "Search uses local/embed-model too: 1 document gets vectors now."
            assert ctl.rt.knowledge.embeddings_model == "local/embed-model"
            for _ in range(200):
                docs = await ctl.rt.knowledge.list()
                if docs[0]["embed_model"] == "local/embed-model":
                    break
                await asyncio.sleep(0.05)
            assert docs[0]["embed_model"] == "local/embed-model" and docs[0]["status"] == "ready"
            page.embeddings.setCurrentText("Words only (works offline)")
            await page.choose_embeddings()
            assert ctl.rt.knowledge.embeddings_model is None
            assert page.status.text() == "Search uses the documents' words only."
        finally:
            page.stop()


async def test_the_source_viewer_counts_lines_as_the_index_does_and_says_when_the_file_shrank(qtbot, tmp_path):
    log = tmp_path / "build.log"
    log.write_bytes(b"start\r10%\r50%\r100%\nsecond\nthird: the error\n")  # a progress bar's lone \r ends no line
    viewer = SourceViewer(None, str(log), (3, 3))
    qtbot.addWidget(viewer)
    await viewer.loaded
    assert viewer.marked_text() == "third: the error"
    assert viewer.view.document().findBlockByNumber(0).text() == "start␍10%␍50%␍100%"
    log.write_text("only\n")
    shrunk = SourceViewer(None, str(log), (3, 3))
    qtbot.addWidget(shrunk)
    await shrunk.loaded
    assert shrunk.marked_text() == "" and shrunk.note.text().endswith("the file has only 1 line now; it changed "
                                                                        "since it was indexed")
