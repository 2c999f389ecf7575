"""The team board as a person uses it, offscreen with real widgets and a real data folder: a team made in the New
team dialog (its "At once" starts from settings.team_max_parallel; a bad plan is refused with the reason, nothing
typed lost), the diamond A → B, A → C, B + C → D run from the board with B and C at once, a failure that keeps D
blocked with the reason until Retry, the selected assignment's conversation, and Stop team ending both running
assignments while D never starts."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QMessageBox, QPushButton

from app.teams.panel import TeamPanel, team_word
from runtime.providers.scripted import Call, Delay, Fail, ScriptedModel
from tests.support.openai_server import OpenAIServer
from tests.support.qt_helpers import until


def _row(panel: TeamPanel, key: str) -> list[str]:
    for i in range(panel.board.topLevelItemCount()):
        item = panel.board.topLevelItem(i)
        if item.text(0).startswith(f"{key}:"):
            return [item.text(c) for c in range(4)]
    raise AssertionError(f"no row {key}")


def _fill(dlg, goal: str, critic: str = "critic") -> None:
    dlg.goal.setText(goal)
    dlg.set_member(0, "lead", "lead/big", "You plan the work and merge the results.", "full_auto")
    dlg.set_member(1, "writer", "writer/small", "You write.", "full_auto")
    dlg.set_member(2, critic, "critic/small", "You find problems.", "full_auto", tools="read_only")
    assert dlg.set_assignment(0, "lead", "Outline a short essay about lighthouses.") == "A"
    dlg.set_assignment(1, "writer", "Write the essay from the outline.", ["A"])
    dlg.set_assignment(2, critic, "List what the essay must not forget.", ["A"])
    assert dlg.set_assignment(3, "lead", "Merge the draft and the critique.", ["B", "C"]) == "D"


async def _new_team(ctl, goal: str) -> TeamPanel:
    window = ctl.window
    dlg = window.new_team()
    _fill(dlg, goal, critic="writer")  # two members called writer
    dlg.assignment_rows[2].member.setCurrentIndex(2)  # C for the second of them
    dlg.create_button.click()
    await until(lambda: dlg.error.isVisible(), what="the refusal")
    assert "same name" in dlg.error.text() and dlg.goal.text() == goal  # said why; everything typed is still there
    dlg.member_rows[2].name.setText("critic")  # renamed: C goes with it
    assert dlg.assignment_rows[2].member.currentText() == "critic"
    dlg.create_button.click()
    await until(lambda: isinstance(window.panel, TeamPanel) and window.panel.loaded.is_set(), what="the board")
    return window.panel


def _boxed(label) -> bool:
    """Something is drawn around the label's text (a frame, as a button or chip has): its top or bottom row of
    pixels is not one plain colour."""
    image = label.grab().toImage()
    return any(len({image.pixelColor(x, y).name() for x in range(image.width())}) > 1
               for y in (0, image.height() - 1))


async def test_new_team_picks_models_names_members_freely_and_ticks_what_each_waits_for(launch, home):
    async with OpenAIServer(models=["small-7b", "big-70b"]) as server:
        (home / "settings.json").write_text(json.dumps({
            "providers": [{"id": "srv", "kind": "openai", "base_url": server.base_url}],
            "default_model": "srv/small-7b"}))
        ctl = await launch()
        window = ctl.window
        dlg = window.new_team()
        # It starts small: a worker and a reviewer on the default model, B after A.
        assert [(m.name.text(), m.model.ref(), m.tools.currentText()) for m in dlg.member_rows] == [
            ("worker", "srv/small-7b", "Every tool"), ("reviewer", "srv/small-7b", "Reads files only")]
        assert [(a.key, a.member.currentText(), a.waits_for()) for a in dlg.assignment_rows] == [
            ("A", "worker", []), ("B", "reviewer", ["A"])]
        dlg.create_button.click()  # nothing to do yet: said, nothing sent
        assert dlg.error.text().startswith("Write at least one assignment") and dlg.create_button.isEnabled()
        picker = dlg.member_rows[1].model  # the model picker, with the server's live list
        await until(lambda: "srv/big-70b" in picker.refs(), what="the server's models")
        picker.setCurrentIndex(next(i for i in range(picker.count())
                                    if picker.itemData(i, Qt.ItemDataRole.UserRole) == "srv/big-70b"))
        dlg.goal.setText("A post about our trip")
        name = dlg.member_rows[1].name
        name.selectAll()
        QTest.keyClicks(name, "Fact checker")  # any name: the assignments follow a renamed member
        assert dlg.assignment_rows[1].member.currentText() == "Fact checker"
        dlg.add_member().name.insert("Léa the editor")  # (QTest types ASCII only)
        a, b = dlg.assignment_rows
        c = dlg.add_assignment()
        assert c.key == "C" and [c.member.itemText(i) for i in range(c.member.count())] == [
            "worker", "Fact checker", "Léa the editor"]
        c.member.setCurrentIndex(2)
        for row, text in ((a, "Draft the post."), (b, "Check the facts."), (c, "Edit it into its final form.")):
            QTest.keyClicks(row.instructions, text)
        c.after["A"].click()
        c.after["B"].click()
        assert not a.after["B"].isEnabled() and not a.after["C"].isEnabled()  # they wait for A: no circle offered
        assert b.after["A"].toolTip() == "Wait for A: Draft the post."
        d = dlg.add_assignment()
        d.after["C"].click()
        assert not c.after["D"].isEnabled()
        d.remove.click()  # gone from every "After" with it
        assert dlg.assignment_rows == [a, b, c] and "D" not in c.after and c.after["A"].isEnabled()
        dlg.create_button.click()
        await until(lambda: isinstance(window.panel, TeamPanel) and window.panel.loaded.is_set(), what="the board")
        info = await ctl.rt.teams.get(window.panel.team_id)
    assert sorted((m.name, m.model) for m in info.members) == [
        ("Fact checker", "srv/big-70b"), ("Léa the editor", "srv/small-7b"), ("worker", "srv/small-7b")]
    assert [(x.key, x.member, x.depends_on) for x in info.assignments] == [
        ("A", "worker", []), ("B", "Fact checker", ["A"]), ("C", "Léa the editor", ["A", "B"])]


async def test_the_board_says_its_state_as_a_word_and_stop_team_only_while_something_runs(launch):
    lead = ScriptedModel([["Outline."], ["Merged."]])
    writer = ScriptedModel([["Drafting ", Delay(1.0), "done."]])
    critic = ScriptedModel([["Fine."]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    panel = await _new_team(ctl, "Watch the header")
    assert panel.state.text() == "● not started" and not _boxed(panel.state)  # a word, not a button
    assert not panel.stop_button.isEnabled()
    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "running", timeout=15, what="B running")
    assert panel.stop_button.isEnabled() and panel.state.text() == "● working" and not _boxed(panel.state)
    await until(lambda: _row(panel, "D")[2] == "done", timeout=15, what="the plan done")
    await until(lambda: panel.state.text() == "● done", what="done")
    assert not panel.stop_button.isEnabled() and not _boxed(panel.state)


async def test_the_diamond_runs_from_the_board_and_a_failure_blocks_until_retry(launch):
    lead = ScriptedModel([["1. Light 2. Keepers 3. Storms"], ["Merged: a fine essay."]])
    writer = ScriptedModel([["Draft ", Delay(0.4), "about keepers and storms."]])
    critic = ScriptedModel([[Delay(0.2), Fail("the critic's server is down")], ["Do not forget the lamp."]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    panel = await _new_team(ctl, "An essay about lighthouses")
    assert ctl.window.sidebar.mode == "teams" and ctl.window.sidebar.team_model.rowCount() == 1
    assert _row(panel, "D")[2] == "blocked"

    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "running" and _row(panel, "C")[2] == "running",
                what="B and C at once")
    await until(lambda: _row(panel, "C")[2] == "failed" and _row(panel, "B")[2] == "done", timeout=15,
                what="C failed, B done")
    d = _row(panel, "D")
    assert d[2] == "blocked" and "C" in d[3] and "failed" in d[3]
    assert len(lead.requests) == 1  # D did not start

    panel.select("C")
    await until(lambda: panel.buttons["Retry"].isVisible(), what="Retry offered")
    panel.buttons["Retry"].click()
    await until(lambda: _row(panel, "D")[2] == "done", timeout=15, what="D done after the retry")
    d_input = lead.requests[1].messages[-1]["content"]
    assert "about keepers and storms" in d_input and "Do not forget the lamp." in d_input
    # The critic was given "Reads files only" in the dialog; the others every tool.
    assert sorted(t["function"]["name"] for t in critic.requests[0].tools) == ["list_files", "read_file",
                                                                              "search_files"]
    assert "run_shell" in [t["function"]["name"] for t in writer.requests[0].tools]
    panel.select("D")
    await until(lambda: "Merged: a fine essay." in [m.text for m in panel.conversation.messages],
                what="D's answer on the board")
    assert panel.state.text() == "● done"
    item = panel.conversation.assistant_items()[-1]  # D's answer has Details, as a task's does
    await until(lambda: item.details.isVisibleTo(panel), what="Details shown")
    QTest.mouseClick(item.details, Qt.MouseButton.LeftButton)
    await until(lambda: panel.details_dialog is not None, what="D's details")
    assert panel.details_dialog.steps.rowCount() == 1 and panel.details_dialog.helpers.isHidden()


async def test_the_new_team_dialog_starts_from_the_team_max_parallel_setting(launch):
    ctl = await launch(lead=ScriptedModel(), writer=ScriptedModel(), critic=ScriptedModel())
    window = ctl.window
    settings = ctl.rt.settings.model_dump(mode="json", by_alias=True, exclude_none=True)
    await ctl.rt.save_settings({**settings, "team_max_parallel": 3})
    dlg = window.new_team()
    assert dlg.parallel.value() == 3
    _fill(dlg, "Three at once")
    dlg.create_button.click()
    await until(lambda: isinstance(window.panel, TeamPanel) and window.panel.loaded.is_set(), what="the board")
    assert (await ctl.rt.teams.get(window.panel.team_id)).max_parallel == 3
    await ctl.rt.save_settings({**settings, "team_max_parallel": 12})  # above the dialog's usual top of 8
    assert window.new_team().parallel.value() == 12


async def test_stop_team_ends_the_running_assignments_and_d_never_starts(launch):
    lead = ScriptedModel([["Outline."]])
    writer = ScriptedModel([["Drafting", Delay(30)]])
    critic = ScriptedModel([["Checking", Delay(30)]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    panel = await _new_team(ctl, "Stop me")
    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "running" and _row(panel, "C")[2] == "running", timeout=15,
                what="B and C running")
    [stop] = [b for b in panel.findChildren(QPushButton) if b.text() == "Stop team"]
    stop.click()
    await until(lambda: _row(panel, "B")[2] == "stopped" and _row(panel, "C")[2] == "stopped", timeout=15,
                what="both stopped")
    assert _row(panel, "D")[2] == "blocked" and len(lead.requests) == 1
    await until(lambda: panel.run_button.text() == "Continue" and panel.run_button.isEnabled(), what="Continue")


async def test_an_assignment_asking_approval_is_answered_on_the_board(launch):
    lead = ScriptedModel([["Outline."], ["Merged."]])
    writer = ScriptedModel([["Saving.", Call("write_file", {"path": "essay.md", "content": "An essay."})],
                            ["Saved the essay."]])
    critic = ScriptedModel([["Fine."]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    window = ctl.window
    dlg = window.new_team()
    _fill(dlg, "Approve on the board")
    dlg.set_member(1, "writer", "writer/small", "You write.", "ask")
    dlg.create_button.click()
    await until(lambda: isinstance(window.panel, TeamPanel) and window.panel.loaded.is_set(), what="the board")
    panel = window.panel
    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "waiting for you", timeout=15, what="B asks")
    panel.select("B")
    await until(lambda: panel.waiting is not None, what="the approval card")
    assert panel.waiting.always.isHidden() and not hasattr(panel.waiting, "with_network")
    panel.waiting.approve.click()
    await until(lambda: _row(panel, "D")[2] == "done", timeout=15, what="the plan finished")
    assert panel.waiting is None
    assert "Saved the essay." in [m.text for m in panel.conversation.messages]


async def test_stop_on_the_board_ends_an_assignment_waiting_for_approval(launch):
    lead = ScriptedModel([["Outline."]])
    writer = ScriptedModel([["Saving.", Call("write_file", {"path": "essay.md", "content": "An essay."})]])
    ctl = await launch(lead=lead, writer=writer, critic=ScriptedModel([["Fine."]]))
    window = ctl.window
    dlg = window.new_team()
    _fill(dlg, "Stop the wait on the board")
    dlg.set_member(1, "writer", "writer/small", "You write.", "ask")
    dlg.create_button.click()
    await until(lambda: isinstance(window.panel, TeamPanel) and window.panel.loaded.is_set(), what="the board")
    panel = window.panel
    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "waiting for you", timeout=15, what="B asks")
    panel.select("B")
    await until(lambda: panel.waiting is not None and panel.buttons["Stop"].isVisible(), what="Stop for the wait")
    panel.buttons["Stop"].click()
    await until(lambda: _row(panel, "B")[2] == "stopped" and panel.waiting is None, what="B stopped")
    await until(lambda: [c.state for c in panel.conversation.cards()] == ["stopped"], what="its card stopped")
    assert not panel.buttons["Stop"].isVisible() and panel.buttons["Retry"].isVisible()


async def test_a_lead_plans_the_team_from_the_dialog_and_its_assignments_run_on_the_board(launch):
    proposal = {"assignments": [
        {"id": "W", "title": "Write", "member": "writer", "instructions": "Write about lighthouses."},
        {"id": "R", "title": "Review", "member": "lead", "instructions": "Review it.", "depends_on": ["W"]}]}
    lead = ScriptedModel([[Call("plan_assignments", proposal)], ["Brief: short and warm."], ["Reviewed: good."]])
    writer = ScriptedModel([["A warm essay."]])
    ctl = await launch(lead=lead, writer=writer)
    window = ctl.window
    dlg = window.new_team()
    dlg.goal.setText("An essay about lighthouses")
    dlg.set_member(0, "lead", "lead/big", "You plan.", "full_auto")
    dlg.set_member(1, "writer", "writer/small", "You write.", "full_auto")
    assert [dlg.planner.itemText(i) for i in range(dlg.planner.count())][1:] == ["lead", "writer"]
    dlg.planner.setCurrentText("lead")
    assert dlg.plan_label.text().startswith("Plan: lead turns the goal into assignments first")
    dlg.create_button.click()
    await until(lambda: isinstance(window.panel, TeamPanel) and window.panel.loaded.is_set(), what="the board")
    panel = window.panel
    assert _row(panel, "plan")[2] == "ready"

    panel.run_button.click()
    await until(lambda: _row(panel, "R")[2] == "done" if panel.info.assignments[-1].key == "R" else False,
                timeout=15, what="the lead's plan run to the end")
    assert _row(panel, "W")[2] == "done" and "Brief: short and warm." in writer.requests[0].messages[-1]["content"]
    # The lead's assignments are the team's: finishing unseen, they do not announce themselves as tasks.
    assert not any("is done" in n[1] for n in ctl.notifications)


async def test_the_header_says_what_to_do_and_stop_and_skip_work_on_one_assignment(launch):
    lead = ScriptedModel([["Outline."], ["Merged without a critique."]])
    writer = ScriptedModel([["Drafting", Delay(30)], ["Draft, finished."]])
    critic = ScriptedModel([[Delay(0.2), Fail("the critic's server is down")]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    panel = await _new_team(ctl, "One at a time")
    assert panel.state.text() == "● not started" and panel.run_button.isEnabled()
    panel.run_button.click()
    await until(lambda: _row(panel, "C")[2] == "failed" and _row(panel, "B")[2] == "running", timeout=15,
                what="C failed while B runs")
    assert panel.state.text() == "● working"
    panel.select("B")
    await until(lambda: panel.buttons["Stop"].isVisible(), what="Stop for B")
    panel.buttons["Stop"].click()
    await until(lambda: _row(panel, "B")[2] == "stopped", timeout=15, what="B stopped")
    assert panel.state.text() == "● an assignment failed"
    await until(lambda: ctl.window.sidebar.team_model.badges[panel.team_id] == "error", what="the sidebar's badge")
    assert _row(panel, "D")[2] == "blocked" and len(lead.requests) == 1
    await until(lambda: panel.run_button.isEnabled(), what="Run offered to continue B")
    panel.run_button.click()  # continues B; C still needs the person
    await until(lambda: _row(panel, "B")[2] == "done", timeout=15, what="B continued")
    assert not panel.run_button.isEnabled() and "Retry or skip" in panel.run_button.toolTip()
    panel.select("C")
    await until(lambda: panel.buttons["Skip"].isVisible(), what="Skip for C")
    panel.buttons["Skip"].click()
    await until(lambda: _row(panel, "D")[2] == "done", timeout=15, what="D ran without C")
    assert _row(panel, "C")[2] == "skipped" and panel.state.text() == "● done"
    assert "(skipped by the person: there is no result)" in lead.requests[1].messages[-1]["content"]


async def test_delete_team_from_the_task_menu_asks_first_then_stops_and_removes_it(launch):
    lead = ScriptedModel([["Outline."]])
    writer = ScriptedModel([["Drafting", Delay(30)]])
    critic = ScriptedModel([["Checking", Delay(30)]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    window = ctl.window
    panel = await _new_team(ctl, "Delete me")
    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "running", timeout=15, what="B running")
    delete_action = window.actions_by_name["Delete…"]
    assert delete_action.isEnabled()
    box = window._delete_current()
    assert isinstance(box, QMessageBox) and "Its running assignments will be stopped." in box.informativeText()
    QTest.mouseClick(box.button(QMessageBox.StandardButton.Cancel), Qt.MouseButton.LeftButton)
    await asyncio.sleep(0.05)
    assert [t.id for t in await ctl.rt.teams.list()] == [panel.team_id]
    delete_action.trigger()
    box = next(w for w in window.findChildren(QMessageBox) if w.isVisible())
    QTest.mouseClick(next(b for b in box.buttons() if b.text() == "Delete"), Qt.MouseButton.LeftButton)
    await until(lambda: window.panel is None and ctl.window.sidebar.team_model.rowCount() == 0, what="deleted")
    assert await ctl.rt.teams.list() == [] and not ctl.rt.tasks.running()


async def test_a_running_assignment_streams_live_and_replays_when_the_board_is_reopened(launch):
    lead = ScriptedModel([["Outline."], ["Merged."]])
    writer = ScriptedModel([["Drafting ", Delay(1.5), "the whole essay."]])
    critic = ScriptedModel([["Fine."]])
    ctl = await launch(lead=lead, writer=writer, critic=critic)
    window = ctl.window
    panel = await _new_team(ctl, "Watch it write")
    panel.run_button.click()
    await until(lambda: _row(panel, "B")[2] == "running", timeout=15, what="B running")
    panel.select("B")

    def shown(p) -> str:
        turn = next(iter(p.feed.live), None) if p.feed is not None else None
        return p.turn_text(turn) if turn else ""

    await until(lambda: shown(panel) == "Drafting ", what="B's text so far, live")
    team_id = panel.team_id
    window.close_panel()  # the board is a viewer: B goes on
    assert ctl.rt.tasks.is_running(next(a.id for a in (await ctl.rt.teams.get(team_id)).assignments if a.key == "B"))
    panel = window.open_team(team_id)
    await until(lambda: panel.loaded.is_set(), what="the board again")
    panel.select("B")
    await until(lambda: shown(panel) == "Drafting ", what="B's text replayed")
    await until(lambda: _row(panel, "B")[2] == "done", timeout=15, what="B done")
    await until(lambda: "Drafting the whole essay." in [m.text for m in panel.conversation.messages],
                what="B's answer as saved")


def test_the_header_says_done_as_soon_as_every_row_is_done_or_skipped():
    """The rows and the plan's state are written one after the other: a board read between them must not say
    "idle" under a plan whose every assignment is done or skipped."""
    rows = [SimpleNamespace(status="done"), SimpleNamespace(status="skipped")]
    assert team_word(SimpleNamespace(state="idle", assignments=rows)) == "done"
    assert team_word(SimpleNamespace(state="idle", assignments=[*rows, SimpleNamespace(status="ready")])) == "idle"
