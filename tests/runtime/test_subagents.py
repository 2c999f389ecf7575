"""Subagents: delegate runs helpers with their own context, tools and model; several at once; Stop cancels them;
each leaves a record."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from runtime.api import Runtime
from runtime.engine.agent.subagents import PARALLEL
from runtime.events import EndReason, Usage
from runtime.memory.folder import looks_secret
from runtime.providers.base import FINISH, TEXT, TOOL_CALLS, TOOL_START, USAGE, ToolCallRequest
from runtime.providers.scripted import Call, ScriptedModel
from tests.support.helpers import MODEL, collect, open_runtime

HELPER = """---
name: reader
description: Reads files for you.
tools: read_file, write_file
model: kid/small
---
Read what you are told to read and say what it contains."""


class Kid:
    """The helpers' model: answers from its task, after `delay`; can be told to read a file first."""

    id = "kid"
    context_tokens = 16_000

    def __init__(self, delay: float = 0.3):
        self.delay = delay
        self.active = 0
        self.most = 0
        self.requests = []

    async def stream(self, request, *, on_queued=None):
        self.requests.append(request)
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            await asyncio.sleep(self.delay)
            task = request.messages[1]["content"]
            if "read notes.txt" in task and request.messages[-1]["role"] == "user":
                yield (TOOL_START, 0, "k1", "read_file")
                yield (TOOL_START, 1, "k2", "write_file")
                yield (TOOL_CALLS, [ToolCallRequest("k1", "read_file", '{"path": "notes.txt"}', {"path": "notes.txt"}),
                                    ToolCallRequest("k2", "write_file", '{"path": "x", "content": "y"}',
                                                    {"path": "x", "content": "y"})])
            else:
                seen = [m["content"] for m in request.messages if m["role"] == "tool"]
                yield (TEXT, f"Found for '{task}'" + (f": {seen}" if seen else ""))
            yield (USAGE, Usage(input_tokens=10, output_tokens=5))
            yield (FINISH, "stop")
        finally:
            self.active -= 1

    async def list_models(self):
        return ["small"]

    async def aclose(self):
        pass


class Held(ScriptedModel):
    """The helpers' scripted model: counts its requests in flight, and holds each until `go` is set."""

    def __init__(self):
        super().__init__(id="kid")
        self.now = self.peak = 0
        self.go = asyncio.Event()

    async def stream(self, request, *, on_queued=None):
        self.now += 1
        self.peak = max(self.peak, self.now)
        try:
            await self.go.wait()
            async for item in super().stream(request, on_queued=on_queued):
                yield item
        finally:
            self.now -= 1


async def test_more_delegates_than_the_bound_run_at_most_parallel_at_once(home):
    (home / "agents").mkdir()
    (home / "agents" / "reader.md").write_text(HELPER)
    goals = [f"find part {i}" for i in range(PARALLEL + 2)]
    model = ScriptedModel([[Call("delegate", {"agent": "reader", "task": g}) for g in goals], ["All found."]])
    kid = Held()
    rt = await Runtime.open(home, providers={"scripted": model, "kid": kid})
    try:
        task = await rt.create_task(model=MODEL, approval="full_auto")
        await rt.send(task.id, "research")
        for _ in range(1000):  # until the first helpers are all asking their model
            if kid.now == PARALLEL:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # room for a helper past the bound to start, were it let through
        assert (kid.now, kid.peak) == (PARALLEL, PARALLEL)
        kid.go.set()
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed
        assert kid.peak == PARALLEL and len(kid.requests) == len(goals)  # the rest ran as places came free
        assert len([m for m in model.requests[1].messages if m["role"] == "tool"]) == len(goals)
        subs = (await rt.tasks.turn_details(task.id, events[-1].turn_id))["subagents"]
        assert sorted(s["goal"] for s in subs) == goals and {s["status"] for s in subs} == {"completed"}
    finally:
        await rt.aclose()


async def test_two_delegates_in_one_step_run_at_once_and_report_back(home):
    (home / "agents").mkdir()
    (home / "agents" / "reader.md").write_text(HELPER)
    kid = Kid()
    model = ScriptedModel([[Call("delegate", {"agent": "reader", "task": "find A"}),
                            Call("delegate", {"agent": "reader", "task": "find B"})], ["Both found."]])
    rt = await open_runtime(home, model)
    rt.core.providers["kid"] = kid
    try:
        task = await rt.create_task(model=MODEL, approval="full_auto")
        await rt.send(task.id, "research")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed
        assert kid.most == 2  # at once, not one after the other
        tools = [m for m in model.requests[1].messages if m["role"] == "tool"]
        assert ["find A" in tools[0]["content"], "find B" in tools[1]["content"]] == [True, True]  # call order
        assert any(e.type == "tool_progress" and "reader started" in e.text for e in events)
        assert "delegate" in {t["function"]["name"] for t in model.requests[0].tools}
        records = await rt.tasks.turn_details(task.id, events[-1].turn_id)
        subs = records["subagents"]
        assert sorted(s["goal"] for s in subs) == ["find A", "find B"]
        assert {s["status"] for s in subs} == {"completed"} and {s["definition"] for s in subs} == {"reader"}
        assert all(s["model"] == "kid/small" and s["input_tokens"] == 10 for s in subs)
    finally:
        await rt.aclose()


class SameIds(ScriptedModel):
    """The helpers' model on a server that names every call `call_0`: reads notes.txt twice, then answers."""

    def __init__(self):
        super().__init__(id="kid")

    async def stream(self, request, *, on_queued=None):
        self.requests.append(request)
        if sum(m["role"] == "tool" for m in request.messages) < 2:
            yield (TOOL_START, 0, "call_0", "read_file")
            yield (TOOL_CALLS, [ToolCallRequest("call_0", "read_file", '{"path": "notes.txt"}', {"path": "notes.txt"})])
        else:
            yield (TEXT, f"Read it twice for {request.messages[1]['content']}")
        yield (FINISH, "stop")


async def test_delegates_and_helpers_on_a_server_that_repeats_call_ids(home):
    (home / "agents").mkdir()
    (home / "agents" / "reader.md").write_text(HELPER)
    model = ScriptedModel([[Call("delegate", {"agent": "reader", "task": "find A"}, call_id="call_0"),
                            Call("delegate", {"agent": "reader", "task": "find B"}, call_id="call_0")],
                           ["Both found."]])
    kid = SameIds()
    rt = await Runtime.open(home, providers={"scripted": model, "kid": kid})
    try:
        task = await rt.create_task(model=MODEL, approval="full_auto")
        Path(task.workspace, "notes.txt").write_text("the notes")
        await rt.send(task.id, "research")
        assert (await collect(rt, task.id))[-1].reason == EndReason.completed
        # Each delegate call keeps its own card, with its own helper's steps.
        saved = [p for m in await rt.messages(task.id) for p in m.parts if p.get("name") == "delegate"]
        assert len({p["call_id"] for p in saved}) == 2
        assert [p["progress"].count("reader started") for p in saved] == [1, 1]
        assert ["find A" in saved[0]["result"], "find B" in saved[1]["result"]] == [True, True]
        # Each result goes back paired with its own call, in the order the calls were made.
        back = model.requests[1].messages
        calls = back[-3]["tool_calls"]
        assert [m["tool_call_id"] for m in back[-2:]] == [c["id"] for c in calls] and calls[0]["id"] != calls[1]["id"]
        assert ["find A" in back[-2]["content"], "find B" in back[-1]["content"]] == [True, True]
        # In a helper's own conversation too, each of its calls has an id of its own that its result answers.
        for request in kid.requests:
            asked = [c["id"] for m in request.messages for c in m.get("tool_calls") or ()]
            answered = [m["tool_call_id"] for m in request.messages if m["role"] == "tool"]
            assert asked == answered and len(set(asked)) == len(asked)
        assert max(len([m for m in r.messages if m["role"] == "tool"]) for r in kid.requests) == 2
    finally:
        await rt.aclose()


async def test_a_helper_gets_only_its_tools_and_never_waits_for_the_person(home):
    (home / "agents").mkdir()
    (home / "agents" / "reader.md").write_text(HELPER)
    kid = Kid(delay=0)
    model = ScriptedModel([[Call("delegate", {"agent": "reader", "task": "read notes.txt"})], ["Done."]])
    rt = await open_runtime(home, model)
    rt.core.providers["kid"] = kid
    try:
        task = await rt.create_task(model=MODEL, approval="ask")
        Path(task.workspace, "notes.txt").write_text("the secret is 42")
        await rt.send(task.id, "go")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed  # no approval asked: the helper does not wait
        names = {t["function"]["name"] for t in kid.requests[0].tools}
        assert names == {"read_file", "write_file"}
        last = kid.requests[-1].messages
        contents = [m["content"] for m in last if m["role"] == "tool"]
        assert "the secret is 42" in contents[0]
        assert "Not allowed for a helper" in contents[1]
        assert not Path(task.workspace, "x").exists()
        subs = (await rt.tasks.turn_details(task.id, events[-1].turn_id))["subagents"]
        assert subs[0]["tool_calls"] == ["read_file", "write_file"]
        saved = next(p for m in await rt.messages(task.id) for p in m.parts if p.get("name") == "delegate")
        assert saved["progress"] == ["reader started", '→ read_file {"path": "notes.txt"}', "reader finished"]
    finally:
        await rt.aclose()


async def test_stop_cancels_every_helper_and_both_records_are_written(home):
    kid = Kid(delay=30)
    (home / "agents").mkdir()
    (home / "agents" / "slow.md").write_text("---\nname: slow\ndescription: Slow.\nmodel: kid/small\n---\nGo.")
    model = ScriptedModel([[Call("delegate", {"agent": "slow", "task": "slow one"}),
                            Call("delegate", {"agent": "slow", "task": "slow two"})]])
    rt = await open_runtime(home, model)
    rt.core.providers["kid"] = kid
    try:
        task = await rt.create_task(model=MODEL)
        await rt.send(task.id, "go")
        endings = []
        async for ev in rt.subscribe(task.id):
            if ev.type == "tool_progress" and kid.active == 2:
                await rt.stop(task.id)
            if ev.type == "turn_ended":
                endings.append(ev.reason)
        await rt.wait_idle(task.id)
        assert endings == [EndReason.aborted]
        assert (await rt.get_task(task.id)).last_reason == "aborted"  # the parent, as saved
        assert kid.active == 0
        turn = (await rt.tasks.turns(task.id))[-1]
        subs = (await rt.tasks.turn_details(task.id, turn["id"]))["subagents"]
        assert len(subs) == 2 and {s["status"] for s in subs} == {"aborted"}
        assert json.loads(json.dumps(subs))[0]["ended_at"] >= subs[0]["created_at"]
    finally:
        await rt.aclose()


async def test_a_helper_cannot_save_a_secret_it_read_to_memory(home):
    canary, key = "canary-5521-hunter", "sk-proj-" + "Q7x" * 12
    note = f"# Bank login\nUses {canary} to log in."
    assert not looks_secret(note)  # by its shape alone it would pass: only what the helper read gives it away
    (home / "agents").mkdir()
    (home / "agents" / "keeper.md").write_text(
        "---\nname: keeper\ndescription: Keeps notes.\ntools: read_file, memory\n---\nKeep what matters.")
    model = ScriptedModel([  # the task's model answers the parent and the helper, in turn
        [Call("delegate", {"agent": "keeper", "task": "Read vault.txt and remember how I log in."})],
        [Call("read_file", {"path": "vault.txt"})],
        [Call("memory", {"command": "create", "path": "login.md", "content": note})],
        [Call("memory", {"command": "create", "path": f"{canary}.md", "content": "# Login\nThe usual one."})],
        [Call("memory", {"command": "create", "path": "key.md", "content": f"# API key\n{key}"})],
        ["Could not keep it."],
        ["Done."],
    ])
    rt = await open_runtime(home, model)
    try:
        task = await rt.create_task(model=MODEL, approval="full_auto")
        Path(task.workspace, "vault.txt").write_text(f"bank login\npassword: {canary}\nOPENAI_API_KEY={key}\n")
        await rt.send(task.id, "Set up my bank notes.")
        events = await collect(rt, task.id)
        assert events[-1].reason == EndReason.completed
        shown, *refusals = [m["content"] for m in model.requests[-2].messages if m["role"] == "tool"]
        assert canary in shown  # the helper read it in a tool result
        assert len(refusals) == 3 and all("memories never hold secrets" in r for r in refusals)
        assert "repeats a secret from this conversation" in refusals[0]
        folder = rt.memory.folder
        assert all(s not in p.name and s not in p.read_text() for p in folder.iterdir() for s in (canary, key))
        assert await rt.memory.list() == []
    finally:
        await rt.aclose()


async def test_a_helpers_file_change_is_the_turns_change(home):
    (home / "agents").mkdir()
    (home / "agents" / "reader.md").write_text(HELPER)
    model = ScriptedModel([[Call("delegate", {"agent": "reader", "task": "read notes.txt"})], ["Done."]])
    rt = await open_runtime(home, model)
    rt.core.providers["kid"] = Kid(delay=0)
    try:
        task = await rt.create_task(model=MODEL, approval="full_auto")  # the helper may write
        Path(task.workspace, "notes.txt").write_text("notes")
        await rt.send(task.id, "go")
        await rt.wait_idle(task.id)
        assert Path(task.workspace, "x").read_text() == "y"
        (turn,) = await rt.changes.list(task.id)
        assert [(f.path, f.kind) for f in turn.files] == [("x", "created")]
    finally:
        await rt.aclose()
