"""A lead member turns the team's goal into assignments: its planning turn has read-only tools and
`plan_assignments`, a bad plan is refused back to it in words, a second proposal replaces the first, and the
proposed assignments run after it with its brief; a planning turn that proposes nothing fails visibly."""

from __future__ import annotations

import pytest

from runtime.api import ConfigError, Runtime
from runtime.providers.scripted import Call
from tests.runtime.test_cli import _cli, _result
from tests.runtime.test_teams import MEMBERS, last_input, models, statuses
from tests.support.helpers import write_settings
from tests.support.openai_server import OpenAIServer, Reply

DIAMOND_PROPOSAL = [
    {"id": "A", "title": "Outline", "member": "lead", "instructions": "Outline the essay."},
    {"id": "B", "title": "Draft", "member": "writer", "instructions": "Draft it.", "depends_on": ["A"]},
    {"id": "C", "title": "Critique", "member": "critic", "instructions": "Critique it.", "depends_on": ["A"]},
    {"id": "D", "title": "Merge", "member": "lead", "instructions": "Merge.", "depends_on": ["B", "C"]},
]


def tool_results(model, n: int) -> list[str]:
    return [m["content"] for m in model.requests[n].messages if m["role"] == "tool"]


async def test_the_lead_plans_the_diamond_and_the_team_runs_it(home):
    lead_steps = [
        [Call("plan_assignments", {"assignments": [{"id": "X", "member": "ghost", "instructions": "Haunt."}]})],
        [Call("plan_assignments", {"assignments": [{"id": "Z", "member": "writer", "instructions": "Early idea."}]})],
        [Call("plan_assignments", {"assignments": DIAMOND_PROPOSAL})],
        ["Brief: keep it short."],
        ["Outline."],
        ["Final essay."],
    ]
    providers = models(lead_steps, [["Draft."]], [["Critique."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Write an essay", MEMBERS, lead="lead")
        assert statuses(team) == {"plan": "ready"} and team.assignments[0].member == "lead"
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"plan": "done", **dict.fromkeys("ABCD", "done")} and team.state == "done"
        lead = providers["lead"]
        planning = lead.requests[0]
        assert planning.messages[-1]["content"].startswith("You lead this team. Turn its goal into assignments for "
                                                           "the members: Write an essay")
        assert "- writer (tools: read_file, write_file)" in planning.messages[-1]["content"]
        # Only tools that change nothing, and the planning tool.
        names = {t["function"]["name"] for t in planning.tools}
        assert "plan_assignments" in names and not names & {"write_file", "run_shell", "edit_file"}
        assert "who is not a member of the team" in tool_results(lead, 1)[0]
        assert "Z (writer)" in tool_results(lead, 2)[-1]
        assert "A (lead)" in tool_results(lead, 3)[-1] and "D (lead): Merge — after B, C" in tool_results(lead, 3)[-1]
        assert "Z" not in statuses(team)  # the second proposal replaced the first
        # Every proposed assignment got the lead's brief; D got B's and C's results as well.
        assert '<result of="plan" title="Plan the work" by="lead">\nBrief: keep it short.\n</result>' in \
            last_input(lead, 4)
        d_input = last_input(lead, 5)
        assert "Brief: keep it short." in d_input and "Draft." in d_input and "Critique." in d_input
        assert [a.depends_on for a in team.assignments] == [[], ["plan"], ["plan", "A"], ["plan", "A"],
                                                            ["plan", "B", "C"]]
    finally:
        await rt.aclose()


async def test_a_planning_turn_that_plans_nothing_fails_and_can_be_retried(home):
    providers = models([["I think it is fine as is."],
                        [Call("plan_assignments", {"assignments": [{"id": "A", "member": "writer",
                                                                    "instructions": "Write it."}]})],
                        ["Go."]], [["Written."]], [])
    rt = await Runtime.open(home, providers=providers)
    try:
        team = await rt.teams.create("Write an essay", MEMBERS, lead="lead")
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"plan": "failed"} and team.state == "idle"
        assert "without planning any assignment" in team.assignments[0].reason
        await rt.teams.retry(team.id, "plan")
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"plan": "done", "A": "done"} and team.state == "done"
        assert team.assignments[1].output == "Written."
    finally:
        await rt.aclose()


async def test_a_lead_must_be_a_member(home):
    rt = await Runtime.open(home, providers=models([], [], []))
    try:
        with pytest.raises(ConfigError, match="The lead must be a member of the team, and 'boss' is not"):
            await rt.teams.create("Goal", MEMBERS, lead="boss")
        assert await rt.teams.list() == []
    finally:
        await rt.aclose()


async def test_the_cli_creates_a_team_whose_lead_plans_it(home):
    async with OpenAIServer() as server:
        write_settings(home, server.base_url)
        code, out, err = await _result(await _cli(
            "team", "create", "Essay", "--member", "boss", "local/test-model", "--member", "writer",
            "local/test-model", "--lead", "boss", "--approval", "full_auto", home=home))
        assert code == 0, err
        team_id = out.splitlines()[0]
        assert "plan   ready" in out
        proposal = {"assignments": [{"id": "W", "title": "Write", "member": "writer", "instructions": "Write it."}]}
        server.script(Reply(chunks=[], tool_calls=[("p1", "plan_assignments", proposal)], finish="tool_calls"),
                      Reply(chunks=["Brief: be quick."]), Reply(chunks=["The essay."]))
        code, out, err = await _result(await _cli("team", "run", team_id, home=home))
        assert code == 0, err
        assert "plan   done" in out and "W      done" in out
        assert "Brief: be quick." in server.chat_requests[2]["messages"][-1]["content"]
