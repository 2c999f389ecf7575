"""Teams on the shared turn engine: a 4-assignment diamond (A → B, A → C, B + C → D) with 3 members, each on its
own scripted model, so every request is counted: B and C overlap, D's input holds their results, a failure keeps
D blocked until a retry, Stop ends B and C `aborted`, a kill -9 during B is recovered and continued."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import textwrap

import pytest

from runtime.api import ConfigError, Runtime, TeamNotFound
from runtime.cli.team import board
from runtime.providers.scripted import Call, Delay, Fail, ScriptedModel
from runtime.store.db import make_engine
from runtime.store.repo import DB_NAME
from runtime.store.teams import TeamStore
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply


class Counted(ScriptedModel):
    """A scripted model that counts how many requests of all the models sharing `flight` are in flight at once."""

    def __init__(self, steps, flight: dict, **kw):
        super().__init__(steps, **kw)
        self.flight = flight

    async def stream(self, request, *, on_queued=None):
        self.flight["now"] += 1
        self.flight["peak"] = max(self.flight["peak"], self.flight["now"])
        try:
            async for item in super().stream(request, on_queued=on_queued):
                yield item
        finally:
            self.flight["now"] -= 1


MEMBERS = [
    {"name": "lead", "model": "lead/m", "role": "You plan and merge.", "approval": "full_auto"},
    {"name": "writer", "model": "writer/m", "tools": ["read_file", "write_file"], "approval": "full_auto"},
    {"name": "critic", "model": "critic/m", "tools": [], "approval": "full_auto"},
]
DIAMOND = [
    {"key": "A", "title": "Outline", "instructions": "Outline the essay.", "member": "lead"},
    {"key": "B", "title": "Draft", "instructions": "Draft it.", "member": "writer", "depends_on": ["A"]},
    {"key": "C", "title": "Critique", "instructions": "Critique the outline.", "member": "critic",
     "depends_on": ["A"]},
    {"key": "D", "title": "Merge", "instructions": "Merge draft and critique.", "member": "lead",
     "depends_on": ["B", "C"]},
]


def models(lead, writer, critic, flight=None):
    flight = flight if flight is not None else {"now": 0, "peak": 0}
    return {"lead": Counted(lead, flight, id="lead"), "writer": Counted(writer, flight, id="writer"),
            "critic": Counted(critic, flight, id="critic")}


def statuses(team) -> dict[str, str]:
    return {a.key: a.status for a in team.assignments}


def last_input(model: ScriptedModel, n: int = -1) -> str:
    return model.requests[n].messages[-1]["content"]


async def wait_for(predicate, seconds: float = 20):
    for _ in range(int(seconds / 0.02)):
        if await predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the condition never came true")


async def test_the_diamond_runs_b_and_c_at_once_and_d_gets_both_results(home):
    flight = {"now": 0, "peak": 0}
    providers = models([["Outline: three parts."], ["Final essay."]], [[Delay(0.3), "Draft text."]],
                       [[Delay(0.3), "Critique text."]], flight)
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Write an essay", MEMBERS, DIAMOND, max_parallel=2)
        assert statuses(team) == {"A": "ready", "B": "blocked", "C": "blocked", "D": "blocked"}
        assert team.assignments[3].reason == "waiting for B, C"
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == dict.fromkeys("ABCD", "done") and team.state == "done"
        assert flight["peak"] == 2  # B's and C's requests were in flight together
        lead, writer, critic = providers["lead"], providers["writer"], providers["critic"]
        assert len(lead.requests) == 2 and len(writer.requests) == 1 and len(critic.requests) == 1
        assert "Outline: three parts." in last_input(writer) and "Outline: three parts." in last_input(critic)
        d_input = last_input(lead)
        assert d_input.startswith("Merge draft and critique.")
        assert '<result of="B" title="Draft" by="writer">\nDraft text.\n</result>' in d_input
        assert '<result of="C" title="Critique" by="critic">\nCritique text.\n</result>' in d_input
        # The member's role and tools reach its requests.
        assert "You plan and merge." in lead.requests[0].messages[0]["content"]
        assert sorted(t["function"]["name"] for t in writer.requests[0].tools) == ["read_file", "write_file"]
        assert not critic.requests[0].tools
        assert team.assignments[3].output == "Final essay."
        assert [m.text for m in await rt.teams.messages(team.id, "B")] == [last_input(writer), "Draft text."]
        assert await rt.list_tasks() == [] and await rt.chats.list() == []
    finally:
        await rt.aclose()


async def test_max_parallel_one_runs_b_and_c_one_after_the_other(home):
    flight = {"now": 0, "peak": 0}
    providers = models([["A."], ["D."]], [[Delay(0.2), "B."]], [[Delay(0.2), "C."]], flight)
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND, max_parallel=1)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id)) == dict.fromkeys("ABCD", "done")
        assert flight["peak"] == 1
    finally:
        await rt.aclose()


async def test_a_failure_keeps_d_blocked_with_the_reason_until_c_is_retried(home):
    providers = models([["A."], ["D merged."]], [["B."]], [[Fail("the critic's server fell over")], ["C again."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "done", "B": "done", "C": "failed", "D": "blocked"}
        assert "the critic's server fell over" in team.assignments[2].reason
        assert team.assignments[3].reason.startswith("waiting for C, which failed: ")
        assert "the critic's server fell over" in team.assignments[3].reason
        assert team.state == "idle" and len(providers["lead"].requests) == 1  # D never asked its model
        with pytest.raises(ConfigError, match="only a failed"):
            await rt.teams.retry(team.id, "B")
        await rt.teams.retry(team.id, "C")
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == dict.fromkeys("ABCD", "done") and team.state == "done"
        assert "C again." in last_input(providers["lead"])
    finally:
        await rt.aclose()


async def test_stop_during_b_and_c_ends_both_aborted_and_d_never_starts(home):
    providers = models([["A."], ["D."]], [[Delay(30), "never"], ["B, continued."]],
                       [[Delay(30), "never"], ["C, continued."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)

        async def both_asked():
            return len(providers["writer"].requests) == 1 and len(providers["critic"].requests) == 1

        await wait_for(both_asked)
        await rt.teams.stop(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "done", "B": "aborted", "C": "aborted", "D": "blocked"}
        assert team.assignments[3].reason == "waiting for B, which was stopped" and team.state == "idle"
        assert len(providers["lead"].requests) == 1
        await rt.teams.run(team.id)  # continues B and C, then D
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id)) == dict.fromkeys("ABCD", "done")
        assert "B, continued." in last_input(providers["lead"])
    finally:
        await rt.aclose()


async def test_a_member_asking_approval_waits_and_its_answer_moves_the_plan_on(home):
    providers = models([["A."], ["D."]], [[Call("write_file", {"path": "draft.md", "content": "Draft."})], ["Saved."]],
                       [["C."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        members = [dict(m, approval="ask") if m["name"] == "writer" else m for m in MEMBERS]
        team = await rt.teams.create("Goal", members, DIAMOND)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "done", "B": "waiting", "C": "done", "D": "blocked"}
        request = team.assignments[1].pending_request
        assert request["kind"] == "approval" and request["tool_name"] == "write_file" and team.state == "idle"
        with pytest.raises(ConfigError, match="'approve' or 'deny'"):
            await rt.teams.answer(team.id, "B", request["request_id"], "maybe")
        first = await rt.teams.answer(team.id, "B", request["request_id"], "approve")
        again = await rt.teams.answer(team.id, "B", request["request_id"], "approve")  # a double click
        assert again.message_id == first.message_id
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == dict.fromkeys("ABCD", "done")
        assert (home / "workspaces" / team.id / "draft.md").read_text() == "Draft."  # the team's folder
        assert team.assignments[1].output == "Saved."
    finally:
        await rt.aclose()


async def test_an_assignment_turn_keeps_its_model_steps_for_details_until_the_team_is_deleted(home):
    writer = [[Call("write_file", {"path": "draft.md", "content": "Draft."})], ["Draft written."]]
    providers = models([["Outline."], ["Merged."]], writer, [["Critique."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Write an essay", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        [answer] = [m for m in await rt.teams.messages(team.id, "B") if m.role == "assistant"]
        details = await rt.teams.turn_details(team.id, "B", answer.turn_id)
        steps = details["steps"]
        assert [s["step_index"] for s in steps] == [0, 1] and details["subagents"] == []
        assert steps[0]["tool_calls"] == ["write_file"] and steps[1]["tool_calls"] == []
        assert all(s["started_at"] <= s["ended_at"] for s in steps)
        assert (await rt.teams.turn_details(team.id, "C", answer.turn_id))["steps"] == []  # not C's turn
        with pytest.raises(TeamNotFound):
            await rt.teams.turn_details("no-such-team", "B", answer.turn_id)
        await rt.teams.delete(team.id)
    finally:
        await rt.aclose()
    db = sqlite3.connect(home / DB_NAME)
    assert db.execute("select count(*) from assignment_steps").fetchone()[0] == 0
    assert db.execute("select count(*) from steps").fetchone()[0] == 0  # a task's steps table held none of them


async def test_a_plan_with_a_cycle_or_unknown_names_is_refused(home):
    rt = await Runtime.open(home, providers=models([], [], []))
    try:
        cyclic = [{"key": "A", "instructions": "a", "member": "lead", "depends_on": ["B"]},
                  {"key": "B", "instructions": "b", "member": "lead", "depends_on": ["A"]}]
        with pytest.raises(ConfigError, match="goes in a circle"):
            await rt.teams.create("Goal", MEMBERS, cyclic)
        with pytest.raises(ConfigError, match="not a member"):
            await rt.teams.create("Goal", MEMBERS, [{"key": "A", "instructions": "a", "member": "nobody"}])
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND[:1])
        with pytest.raises(ConfigError, match="depends on 'Z'"):
            await rt.teams.add_assignment(team.id, "B", "b", "writer", depends_on=["Z"])
        team = await rt.teams.add_assignment(team.id, "B", "b", "writer", depends_on=["A"])
        assert statuses(team) == {"A": "ready", "B": "blocked"}
        with pytest.raises(ConfigError, match="already"):
            await rt.teams.add_member(team.id, "lead", "lead/m")
        with pytest.raises(TeamNotFound):
            await rt.teams.get("nope")
        with pytest.raises(ConfigError, match="Member 'typo': Hearth has no tool called 'rn_shell'"):
            await rt.teams.add_member(team.id, "typo", "lead/m", tools=["read_file", "rn_shell"])
        with pytest.raises(ConfigError, match="one of all, files, read_only, none, not 'everything'"):
            await rt.teams.add_member(team.id, "greedy", "lead/m", tools="everything")
        team = await rt.teams.add_member(team.id, "reader", "lead/m", tools="read_only")
        assert team.members[-1].tools == ["read_file", "list_files", "search_files"]
        shown = board(team).splitlines()  # `hearth team show` names a set, lists other tools, says all
        assert any(line.split()[0] == "reader" and line.endswith("tools: read_only") for line in shown)
        assert any(line.split()[0] == "writer" and line.endswith("tools: read_file, write_file") for line in shown)
        assert any(line.split()[0] == "lead" and "tools: all" in line for line in shown)
        assert len((await rt.teams.get(team.id)).assignments) == 2  # nothing a refusal touched was lost
    finally:
        await rt.aclose()


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from runtime.api import Runtime
    from tests.runtime.test_teams import DIAMOND, MEMBERS, models

    async def main():
        providers = models([["Outline."]], [[f"word{i} " for i in range(100000)]], [["Critique."]])
        providers["writer"].chunk_delay = 0.002
        rt = await Runtime.open(sys.argv[1], providers=providers)
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)
        while True:
            info = await rt.teams.get(team.id)
            if info.assignments[2].status == "done" and len(providers["writer"].requests) == 1:
                break
            await asyncio.sleep(0.01)
        chars = 0
        async for ev in rt.teams.subscribe(team.id, "B"):
            if ev.type == "text_delta":
                chars += len(ev.text)
                if chars > 3000:
                    print("STREAMED", team.id, flush=True)
                    chars = -10**9

    asyncio.run(main())
    """
)


async def test_killed_during_b_a_is_not_rerun_b_is_interrupted_and_run_finishes_the_plan(home):
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, str(home),
                                                stdout=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().split()
        assert line[0] == "STREAMED"
        team_id = line[1]
        await asyncio.sleep(0.6)  # past a checkpoint (every 0.25 s)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    providers = models([["Merged."]], [["and the end."]], [])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.get(team_id)
        assert statuses(team) == {"A": "done", "B": "interrupted", "C": "done", "D": "blocked"}
        assert team.state == "idle" and "which was interrupted" in team.assignments[3].reason
        user, partial = await rt.teams.messages(team_id, "B")
        assert user.text.startswith("Draft it.") and "Outline." in user.text
        assert partial.text.startswith("word0 word1 ") and len(partial.text) > 3000
        await rt.teams.run(team_id)
        await rt.teams.wait_idle(team_id)
        team = await rt.teams.get(team_id)
        assert statuses(team) == dict.fromkeys("ABCD", "done") and team.state == "done"
        # A and C were not run again: the lead's one request is D's, the critic's model was never asked.
        assert len(providers["lead"].requests) == 1 and providers["critic"].requests == []
        assert providers["writer"].requests[0].messages[-2]["content"] == partial.text  # a Continue
        assert team.assignments[1].output == partial.text + "and the end."
        d_input = last_input(providers["lead"])
        assert partial.text + "and the end." in d_input and "Critique." in d_input
    finally:
        await rt.aclose()
    db = sqlite3.connect(home / DB_NAME)
    try:
        assert db.execute("select count(*) from assignment_turns where status = 'running'").fetchone()[0] == 0
        assert db.execute("select count(*) from tasks").fetchone()[0] == 0
    finally:
        db.close()


async def test_a_crash_between_the_last_assignment_and_the_team_write_reopens_done(home):
    rt = await Runtime.open(home, providers=models([["Outline."], ["Merged."]], [["Draft."]], [["Critique."]]))
    try:
        done = await rt.teams.create("Finished", MEMBERS, DIAMOND)
        await rt.teams.run(done.id)
        await rt.teams.wait_idle(done.id)
        unfinished = await rt.teams.create("Unfinished", MEMBERS, DIAMOND)
    finally:
        await rt.aclose()
    db = sqlite3.connect(home / DB_NAME)  # the team rows as such a crash leaves them
    try:
        db.execute("update teams set state = 'running'")
        db.commit()
    finally:
        db.close()
    rt = await Runtime.open(home, providers=models([], [], []))
    try:
        assert (await rt.teams.get(done.id)).state == "done"
        assert (await rt.teams.get(unfinished.id)).state == "idle"
    finally:
        await rt.aclose()


async def test_the_cli_creates_runs_and_shows_a_team(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        code, _, err = await _result(await _cli(
            "team", "create", "Essay", "--member", "lead", "local/test-model", "--assign", "A", "nobody", "x",
            home=home))
        assert code == 2 and err.strip() == ("hearth: Assignment 'A' is given to 'nobody', who is not a member of "
                                             "the team (members: lead).")
        code, _, err = await _result(await _cli(
            "team", "create", "Essay", "--member", "lead", "local/test-model", "--tools", "lead", "rn_shell",
            home=home))
        assert code == 2 and err.startswith("hearth: Member 'lead': Hearth has no tool called 'rn_shell'.")
        code, out, err = await _result(await _cli(
            "team", "create", "Essay", "--member", "lead", "local/test-model", "You plan.", "--member", "writer",
            "local/test-model", "--assign", "A", "lead", "Outline: the essay.", "--assign", "B", "writer",
            "Draft it.", "A", "--approval", "full_auto", "--tools", "writer", "read_file,list_files", home=home))
        assert code == 0, err
        team_id = out.splitlines()[0]
        assert "B      blocked" in out and "waiting for A" in out
        server.script(Reply(chunks=["An ", "outline."]), Reply(chunks=["A draft."]))
        code, out, err = await _result(await _cli("team", "run", team_id, home=home))
        assert code == 0, err
        assert "[done]" in out and "A      done" in out and "B      done" in out
        assert "An outline." in server.chat_requests[1]["messages"][-1]["content"]
        assert [t["function"]["name"] for t in server.chat_requests[1]["tools"]] == ["read_file", "list_files"]
        assert "run_shell" in [t["function"]["name"] for t in server.chat_requests[0]["tools"]]
        code, out, _ = await _result(await _cli("team", "show", team_id, "B", home=home))
        assert code == 0 and "Input: Draft it." in out and "Answer: A draft." in out
        code, out, _ = await _result(await _cli("team", "show", home=home))
        assert code == 0 and f"{team_id}  done     2/2 done  Essay" in out
        code, _, err = await _result(await _cli("team", "run", "nope", home=home))
        assert code == 2 and "No team with id 'nope'" in err


async def test_the_cli_answers_an_approval_and_goes_on(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        code, out, err = await _result(await _cli(
            "team", "create", "Notes", "--member", "writer", "local/test-model", "--assign", "A", "writer",
            "Save the notes.", home=home))
        assert code == 0, err
        team_id = out.splitlines()[0]
        server.script(Reply(chunks=[], tool_calls=[("w1", "write_file", {"path": "notes.md", "content": "hi"})],
                            finish="tool_calls"))
        code, out, err = await _result(await _cli("team", "run", team_id, home=home))
        assert code == 4 and "A      waiting" in out, err
        code, _, err = await _result(await _cli("team", "answer", team_id, "A", "--text", "yes", home=home))
        assert code == 2 and "--approve or --deny" in err
        server.script(Reply(chunks=["Saved."]))
        code, out, err = await _result(await _cli("team", "answer", team_id, "A", "--approve", home=home))
        assert code == 0 and "A      done" in out, err
        code, _, err = await _result(await _cli("team", "answer", team_id, "A", "--approve", home=home))
        assert code == 2 and "not waiting" in err


async def _cli_team(home, *assignments: str) -> str:
    """A team of one member made with `hearth team create`; each assignment is "KEY INSTRUCTIONS [DEPS]"."""
    words = []
    for spec in assignments:
        key, instructions, *deps = spec.split(" ", 2)
        words += ["--assign", key, "writer", instructions, *deps]
    code, out, err = await _result(await _cli(
        "team", "create", "Notes", "--member", "writer", "local/test-model", *words, "--max-parallel", "2",
        "--approval", "full_auto", home=home))
    assert code == 0, err
    return out.splitlines()[0]


async def test_the_cli_stop_on_a_team_that_is_not_running_says_so_and_changes_nothing(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        team_id = await _cli_team(home, "A Outline.", "B Draft. A")
        code, out, err = await _result(await _cli("team", "stop", team_id, home=home))
        assert code == 0, err
        lines = out.splitlines()
        assert lines[0] == (f"Nothing of team {team_id} is running: a team runs only in the process that runs "
                            "it, and Ctrl-C there stops it.")
        assert "A      ready" in out and "B      blocked" in out
        code, out, err = await _result(await _cli("team", "stop", team_id, "--assignment", "A", home=home))
        assert code == 0, err
        assert out.splitlines()[0].startswith(f"Assignment A of team {team_id} is not running: ")
        assert "A      ready" in out
        code, _, err = await _result(await _cli("team", "stop", team_id, "--assignment", "Z", home=home))
        assert code == 2 and err == f"hearth: Team {team_id!r} has no assignment 'Z'.\n"
        code, _, err = await _result(await _cli("team", "stop", "nope", home=home))
        assert code == 2 and err == "hearth: No team with id 'nope'.\n"
        assert server.chat_requests == []  # nothing was started by a stop
        server.script(Reply(chunks=["An outline."]), Reply(chunks=["A draft."]))
        code, out, err = await _result(await _cli("team", "run", team_id, home=home))
        assert code == 0 and "A      done" in out and "B      done" in out, err  # the plan was left as it was


def _processes_using(home) -> list[str]:
    """The command lines of the processes that name the data folder (a `hearth` left behind would)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # it ended meanwhile
            continue
        if str(home) in cmdline:
            found.append(cmdline)
    return found


async def test_ctrl_c_stops_a_running_team_and_exits_130(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        team_id = await _cli_team(home, "A Outline.", "B Notes.", "C Merge. A,B")
        server.script(Reply.counting(5000, delay=0.01), Reply.counting(5000, delay=0.01))
        proc = await _cli("team", "run", team_id, home=home)
        try:
            for _ in range(1500):  # A and B both asked their model
                if len(server.chat_requests) == 2 or proc.returncode is not None:
                    break
                await asyncio.sleep(0.02)
            assert len(server.chat_requests) == 2
            # Another process cannot stop it: the folder is owned, so `stop` is refused.
            code, _, err = await _result(await _cli("team", "stop", team_id, home=home))
            assert code == 5 and "already running with the data folder" in err
            proc.send_signal(signal.SIGINT)
            code, out, err = await _result(proc)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert code == 130, err
        assert "A      aborted" in out and "B      aborted" in out and "C      blocked" in out
        assert len(server.chat_requests) == 2  # C never started
        assert not _processes_using(home)
        # The folder is free again and the stop was saved.
        code, out, err = await _result(await _cli("team", "stop", team_id, home=home))
        assert code == 0 and "A      aborted" in out and "B      aborted" in out, err


async def test_a_member_asking_a_question_waits_and_its_answer_moves_the_plan_on(home):
    lead = [[Call("ask_user", {"question": "Which city is the essay about?"})], ["Outline: Lisbon in three parts."],
            ["Merged."]]
    providers = models(lead, [["Draft."]], [["Critique."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "waiting", "B": "blocked", "C": "blocked", "D": "blocked"}
        request = team.assignments[0].pending_request
        assert request["kind"] == "question" and request["prompt"] == "Which city is the essay about?"
        assert team.assignments[1].reason == "waiting for A" and team.state == "idle"
        assert providers["writer"].requests == [] and providers["critic"].requests == []
        await rt.teams.answer(team.id, "A", request["request_id"], "Lisbon")
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == dict.fromkeys("ABCD", "done") and team.state == "done"
        assert "Lisbon" in providers["lead"].requests[1].messages[-1]["content"]  # the answer reached the model
        assert team.assignments[0].output == "Outline: Lisbon in three parts."
        assert "Outline: Lisbon in three parts." in last_input(providers["writer"])
        assert "Outline: Lisbon in three parts." in last_input(providers["critic"])
    finally:
        await rt.aclose()


async def test_two_runs_and_a_retry_at_once_start_each_assignment_once(home):
    """Run twice (a double click, the CLI beside the board) and Retry, all at once, on a stopped A: the team's lock
    lets one of them start A and the others see it running, so every member's model gets one request per
    assignment."""
    providers = models([[Delay(30), "never"], ["A, again."], ["D."]], [["B."]], [["C."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND)
        await rt.teams.run(team.id)

        async def a_asked():
            return len(providers["lead"].requests) == 1

        await wait_for(a_asked)
        await rt.teams.stop_assignment(team.id, "A")
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id))["A"] == "aborted"
        results = await asyncio.gather(rt.teams.run(team.id), rt.teams.run(team.id), rt.teams.retry(team.id, "A"),
                                       return_exceptions=True)
        # Retry either started A or found it already running again: never an error of another kind.
        assert all(not isinstance(r, Exception) or "only a failed" in str(r) for r in results), results
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == dict.fromkeys("ABCD", "done")
        # The lead: A's stopped request, A once again, D. The writer and the critic: B and C, once each.
        assert len(providers["lead"].requests) == 3
        assert len(providers["writer"].requests) == 1 and len(providers["critic"].requests) == 1
        assert team.assignments[0].output.endswith("A, again.")
    finally:
        await rt.aclose()


class WatchedLock(asyncio.Lock):
    """A team's lock that says when someone waits for it."""

    def __init__(self):
        super().__init__()
        self.waited = asyncio.Event()

    async def acquire(self):
        if self.locked():
            self.waited.set()
        return await super().acquire()


async def test_an_assignment_deleted_while_its_ended_turn_waits_to_settle_leaves_nothing_to_settle(home):
    """A turn ends while its team's lock is held, and the assignment is deleted before the lock is free (the team
    deleted at that moment): when its settle gets the lock there is nothing left to settle, and it ends quietly
    instead of failing on the missing row. The test holds the lock itself, the one way to reach that moment."""
    providers = models([[Delay(30), "never"]], [], [])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Goal", MEMBERS, DIAMOND[:1])
        lock = rt.teams._locks[team.id] = WatchedLock()
        await rt.teams.run(team.id)

        async def a_asked():
            return len(providers["lead"].requests) == 1

        await wait_for(a_asked)
        async with lock:
            await rt.teams.stop_assignment(team.id, "A")
            await asyncio.wait_for(lock.waited.wait(), 20)  # the ended turn's settle read its row and waits
            settling = list(rt.teams._settling)
            other = TeamStore(make_engine(home / DB_NAME))  # another connection, as a delete's own
            try:
                await other.delete_team(team.id)
            finally:
                await other.engine.dispose()
        assert len(settling) == 1
        await asyncio.gather(*settling)  # raises what the settle raised
        with pytest.raises(TeamNotFound):
            await rt.teams.get(team.id)
    finally:
        await rt.aclose()
