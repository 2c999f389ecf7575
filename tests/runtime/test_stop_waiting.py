"""Stop while an approval or a question waits: the wait ends `aborted`, the call that asked is `stopped` (saved so),
every observer is told, and the next input starts a clean turn. Any other input than the answer ends the wait the
same way; a team's assignment and the CLI (`hearth stop`) alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from runtime.api import RequestNotFound, Runtime
from runtime.engine.agent.context import STOPPED
from runtime.events import EndReason
from runtime.providers.scripted import Call, ScriptedModel
from tests.runtime.test_cli import _cli, _result
from tests.support.helpers import MODEL, collect, open_runtime

WRITE = Call("write_file", {"path": "a.txt", "content": "hi"})


@pytest.fixture
async def model():
    return ScriptedModel()


@pytest.fixture
async def rt(home, model):
    rt = await open_runtime(home, model)
    yield rt
    await rt.aclose()


class Watch:
    """What a panel (one follow-subscription for the task's life) and a task list (`rt.events()`) are told."""

    def __init__(self, rt: Runtime, task_id: str):
        self.followed: list = []
        self.fed: list = []
        self._tasks = [asyncio.ensure_future(self._follow(rt, task_id)), asyncio.ensure_future(self._feed(rt))]

    async def _follow(self, rt, task_id):
        async for ev in rt.subscribe(task_id, follow=True, deltas=False):
            self.followed.append(ev)

    async def _feed(self, rt):
        async for ev in rt.events():
            self.fed.append(ev)

    async def close(self):
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


async def _waiting(rt: Runtime, task_id: str, text: str) -> dict:
    await rt.send(task_id, text)
    events = await collect(rt, task_id)
    assert events[-1].reason == EndReason.waiting
    await rt.wait_idle(task_id)
    return (await rt.get_task(task_id)).pending_request


def _ends(events) -> list[tuple[str, str]]:
    return [(e.type, str(getattr(e, "reason", "") or getattr(e, "state", ""))) for e in events
            if e.type in ("aborted", "turn_ended") or (e.type == "tool_call" and e.state == "stopped")]


async def test_stop_ends_a_waiting_approval_and_the_next_input_starts_a_clean_turn(rt, model):
    model.add_steps(["I will write it.", WRITE], ["Something else, then."])
    task = await rt.create_task(model=MODEL)
    watch = Watch(rt, task.id)
    await asyncio.sleep(0)
    request = await _waiting(rt, task.id, "write a.txt")
    waited = (await rt.messages(task.id))[-1]
    seen = len(watch.followed)

    await rt.stop(task.id)
    await rt.wait_idle(task.id)
    info = await rt.get_task(task.id)
    assert (info.state, info.last_reason, info.pending_request) == ("idle", "aborted", None)
    (part,) = [p for p in (await rt.messages(task.id))[-1].parts if p["type"] == "tool_call"]
    assert (part["state"], "awaiting" in part) == ("stopped", False)  # nothing stays pending, saved
    assert [t["reason"] for t in await rt.tasks.turns(task.id)] == ["aborted"]
    # The panel's subscription is told after what it saw, and nothing of the turn twice; so is the task list.
    await asyncio.sleep(0.05)
    told = watch.followed[seen:]
    assert _ends(told) == [("aborted", ""), ("tool_call", "stopped"), ("turn_ended", "aborted")]
    assert all(e.turn_id == waited.turn_id for e in told) and told[0].seq > watch.followed[seen - 1].seq
    assert _ends(e for e in watch.fed if e.turn_id == waited.turn_id)[-3:] == _ends(told)
    # A late observer replays the turn, ending as it now ends.
    replay = await collect(rt, task.id)
    assert [e.reason for e in replay if e.type == "turn_ended"] == [EndReason.aborted]
    assert any(e.type == "text_delta" for e in replay)

    with pytest.raises(RequestNotFound):  # the request is gone: an Approve clicked late does nothing
        await rt.answer(task.id, request["request_id"], "approve")
    await rt.stop(task.id)  # a second Stop changes nothing
    assert (await rt.get_task(task.id)).last_reason == "aborted" and len(watch.followed) == seen + len(told)

    await rt.send(task.id, "never mind, something else")
    assert (await collect(rt, task.id))[-1].reason == EndReason.completed
    tool = [m for m in model.requests[-1].messages if m["role"] == "tool"]
    assert [m["content"] for m in tool] == [STOPPED]  # the model knows the call was never run
    assert not Path(task.workspace, "a.txt").exists()
    await watch.close()


async def test_another_input_while_a_question_waits_ends_the_wait_first(rt, model):
    model.add_steps([Call("ask_user", {"question": "Which city?"})], ["Paris, then."])
    task = await rt.create_task(model=MODEL)
    watch = Watch(rt, task.id)
    await asyncio.sleep(0)
    await _waiting(rt, task.id, "plan a trip")
    waited = (await rt.messages(task.id))[-1]
    await rt.send(task.id, "Just pick one.")
    assert (await collect(rt, task.id))[-1].reason == EndReason.completed
    await rt.wait_idle(task.id)
    messages = await rt.messages(task.id)
    (part,) = [p for m in messages if m.id == waited.id for p in m.parts if p["type"] == "tool_call"]
    assert part["state"] == "stopped" and (await rt.tasks.turns(task.id))[0]["reason"] == "aborted"
    assert (await rt.get_task(task.id)).state == "idle"
    ends = [(e.turn_id == waited.turn_id, t) for e in watch.followed for t in _ends([e])]
    assert ends == [(True, ("turn_ended", "waiting")), (True, ("aborted", "")), (True, ("tool_call", "stopped")),
                    (True, ("turn_ended", "aborted")), (False, ("turn_ended", "completed"))]
    await watch.close()


async def test_stopping_a_waiting_assignment_ends_it_aborted_and_run_goes_on(home):
    from tests.runtime.test_teams import DIAMOND, MEMBERS, models, statuses

    providers = models([["A."], ["D."]], [[WRITE], ["Saved anyway."]], [["C."]])
    rt = await Runtime.open(home, providers=providers)
    try:
        members = [dict(m, approval="ask") if m["name"] == "writer" else m for m in MEMBERS]
        team = await rt.teams.create("Goal", members, DIAMOND)
        await rt.teams.run(team.id)
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id))["B"] == "waiting"
        await rt.teams.stop_assignment(team.id, "B")
        await rt.teams.wait_idle(team.id)
        team = await rt.teams.get(team.id)
        assert statuses(team) == {"A": "done", "B": "aborted", "C": "done", "D": "blocked"}
        assert team.assignments[1].pending_request is None
        parts = [p for m in await rt.teams.messages(team.id, "B") for p in m.parts if p["type"] == "tool_call"]
        assert [p["state"] for p in parts] == ["stopped"]
        await rt.teams.run(team.id)  # a stopped assignment goes on where it ended
        await rt.teams.wait_idle(team.id)
        assert statuses(await rt.teams.get(team.id)) == dict.fromkeys("ABCD", "done")
        assert not (home / "workspaces" / team.id / "a.txt").exists()
    finally:
        await rt.aclose()


async def test_hearth_stop_ends_a_wait_from_the_command_line(home):
    model = ScriptedModel([["I will write it.", WRITE]])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL)
        await _waiting(rt, task.id, "write a.txt")
    finally:
        await rt.aclose()
    code, out, err = await _result(await _cli("stop", task.id[:8], home=home))
    assert code == 0 and "no longer waits" in out and task.id in out, (out, err)
    code, out, err = await _result(await _cli("stop", task.id, home=home))
    assert code == 0 and "nothing to stop" in out, (out, err)
    rt = await open_runtime(home, model)
    try:
        info = await rt.get_task(task.id)
        assert (info.state, info.last_reason, info.pending_request) == ("idle", "aborted", None)
    finally:
        await rt.aclose()
