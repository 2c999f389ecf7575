"""A turn's changes in the window, offscreen, on a real turn (file tools and `rm` in the sandboxed shell): the
answer's "3 files changed" opens the list with a text file's diff; Undo is refused, naming the file the person
edited since, until the person says "Undo anyway"; then every file is as it was before the turn."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from runtime.providers.scripted import ScriptedModel
from tests.support.changes_shots import NEW_PLAN, PLAN, changed_turn, open_changes
from tests.support.qt_helpers import until


async def test_a_turns_changes_show_a_diff_and_undo_asks_before_overwriting_an_edited_file(launch):
    model = ScriptedModel()
    ctl = await launch(model)
    _task, ws, panel = await changed_turn(ctl, model)
    dialog = await open_changes(panel)
    rows = [dialog.files.item(n).text() for n in range(dialog.files.count())]
    assert rows == ["− deleted   draft.txt", "+ created   packing.md", "~ modified   plan.md"]
    assert dialog.summary.text() == "Turn 1 changed 3 files in the task's folder: 1 created, 1 modified, 1 deleted."
    dialog.files.setCurrentRow(2)
    await until(lambda: "+Day 3: lake day" in dialog.diff.toPlainText(), what="plan.md's diff")
    assert "-Day 3: train to Annecy" in dialog.diff.toPlainText()

    (ws / "packing.md").write_text("- my own list\n")
    dialog.undo.click()
    await until(lambda: dialog.refusal is not None and dialog.refusal.isVisible(), what="the refusal")
    assert dialog.refusal.text() == "Changed since this turn: packing.md."
    assert dialog.status.text() == "Not undone: changed since turn 1: packing.md."
    assert not (ws / "draft.txt").exists() and (ws / "packing.md").read_text() == "- my own list\n"

    anyway = next(b for b in dialog.refusal.buttons() if b.text() == "Undo anyway")
    assert dialog.refusal.buttonRole(anyway) == QMessageBox.ButtonRole.AcceptRole
    anyway.click()
    await until(lambda: dialog.status.text().startswith("Put back:"), what="the undo")
    assert (ws / "plan.md").read_text() == PLAN and (ws / "draft.txt").read_text() == "old notes\n"
    assert not (ws / "packing.md").exists()
    assert dialog.summary.text().endswith("Undone.") and not dialog.undo.isEnabled()


async def test_the_cap_of_what_is_kept_to_undo_is_seen_and_changed_in_the_dialog(launch):
    model = ScriptedModel()
    ctl = await launch(model)
    _task, _ws, panel = await changed_turn(ctl, model)
    dialog = await open_changes(panel)
    await until(lambda: dialog.kept.text(), what="what is kept")
    # draft.txt's and plan.md's earlier contents, and plan.md's and packing.md's new ones (for their diffs)
    kept = sum(len(t.encode()) for t in ("old notes\n", PLAN, NEW_PLAN, "- rain jacket\n- walking shoes\n"))
    assert dialog.kept.text() == f"Kept to undo changes: {kept} bytes of at most" and dialog.cap.value() == 2000
    dialog.cap.setValue(500)
    dialog.cap.editingFinished.emit()
    await until(lambda: ctl.rt.settings.changes_max_bytes == 500_000_000, what="the cap saved")
