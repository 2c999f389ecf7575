"""The person's hand on a running plan: Stop one assignment (the others go on, its dependents wait with the
reason), Skip a failed one (its dependents start without its result), from the facade and from `hearth team`."""

from __future__ import annotations

import sqlite3

import pytest

from runtime.api import ConfigError, Runtime, TeamNotFound
from runtime.providers.scripted import Delay, Fail
from runtime.store.repo import DB_NAME
from tests.runtime.test_cli import _cli, _result
from tests.runtime.test_teams import DIAMOND, MEMBERS, last_input, models, statuses, wait_for
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


async def test_stopping_one_assignment_lets_the_others_go_on_and_keeps_its_dependents_waiting(home):
    providers = models([["A."], ["D."]], [[Delay(30), "never"], ["B, continued."]], [[Delay(0.3), "C."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)

        async def b_asked():
            return len(providers["writer"].requests) == 1

        await wait_for(b_asked)
        await rt.teams.stop_assignment(team.id, "B")
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "done", "B": "aborted", "C": "done", "D": "blocked"}
        assert team.assignments[3].reason == "waiting for B, which was stopped"
        assert len(providers["lead"].requests) == 1  # D never started
        await rt.teams.retry(team.id, "B")
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id)) == dict.fromkeys("ABCD", "done")
        assert "B, continued." in last_input(providers["lead"]) and "C." in last_input(providers["lead"])
    finally:
        await rt.aclose()


async def test_skipping_a_failed_assignment_starts_its_dependents_without_its_result(home):
    providers = models([["A."], ["D without critique."]], [["B."]], [[Fail("the critic's server is down")]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id))["C"] == "failed"
        with pytest.raises(ConfigError, match="'A' is done: it cannot be skipped"):
            await rt.teams.skip(team.id, "A")
        team = await rt.teams.skip(team.id, "C")
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "done", "B": "done", "C": "skipped", "D": "done"} and team.state == "done"
        assert team.assignments[2].reason == "skipped by you"
        d_input = last_input(providers["lead"])
        assert '<result of="C" title="Critique" by="critic">\n(skipped by the person: there is no result)' in d_input
        assert "B." in d_input
    finally:
        await rt.aclose()


async def test_the_cli_skips_a_failed_assignment_and_goes_on(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        code, out, err = await _result(await _cli(
            "team", "create", "Essay", "--member", "writer", "local/test-model", "--assign", "A", "writer",
            "Outline it.", "--assign", "B", "writer", "Write it.", "A", "--approval", "full_auto", home=home))
        assert code == 0, err
        team_id = out.splitlines()[0]
        server.script(Reply(chunks=[], error_event="the model refused the request"))
        code, out, err = await _result(await _cli("team", "run", team_id, home=home))
        assert code == 3 and "A      failed" in out and "B      blocked" in out, (out, err)
        server.script(Reply(chunks=["Written without an outline."]))
        code, out, err = await _result(await _cli("team", "run", team_id, "--skip", "A", home=home))
        assert code == 0 and "A      skipped" in out and "B      done" in out, (out, err)
        assert "skipped by the person" in server.chat_requests[-1]["messages"][-1]["content"]


async def test_deleting_a_running_team_stops_it_and_removes_all_it_holds_but_its_folder(home):
    providers = models([["A."]], [[Delay(30), "never"]], [[Delay(30), "never"]])
    rt = await Runtime.open(home, providers=providers)
    try:
        keep = await rt.teams.create("Another team", MEMBERS[:1], DIAMOND[:1])
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)

        async def b_and_c_asked():
            return len(providers["writer"].requests) == 1 and len(providers["critic"].requests) == 1

        await wait_for(b_and_c_asked)
        folder = home / "workspaces" / team.id
        (folder / "notes.md").write_text("kept")
        await rt.teams.delete(team.id)
        assert not rt.tasks.running()  # B's and C's turns were stopped
        assert [t.id for t in await rt.teams.list()] == [keep.id]
        with pytest.raises(TeamNotFound):
            await rt.teams.get(team.id)
        assert (folder / "notes.md").read_text() == "kept"
    finally:
        await rt.aclose()
    db = sqlite3.connect(home / DB_NAME)
    try:
        counts = {table: db.execute(f"select count(*) from {table}").fetchone()[0]
                  for table in ("teams", "team_members", "team_assignments", "assignment_messages", "assignment_turns")}
        assert counts == {"teams": 1, "team_members": 1, "team_assignments": 1, "assignment_messages": 0,
                          "assignment_turns": 0}  # only the other team, which never ran
    finally:
        db.close()


async def test_the_cli_deletes_a_team(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        code, out, err = await _result(await _cli(
            "team", "create", "Essay", "--member", "writer", "local/test-model", "--assign", "A", "writer",
            "Write it.", home=home))
        team_id = out.splitlines()[0]
        code, out, err = await _result(await _cli("team", "delete", team_id, home=home))
        assert code == 0 and out.startswith(f"Deleted team {team_id} (Essay); its folder stays at "), err
        code, out, _ = await _result(await _cli("team", "show", home=home))
        assert code == 0 and team_id not in out
        code, _, err = await _result(await _cli("team", "delete", team_id, home=home))
        assert code == 2 and f"No team with id '{team_id}'" in err
