"""Long work inside a small context window: summaries persisted as checkpoints, old tool outputs trimmed first,
mid-turn compaction, facts kept across summaries, and a rebuild that does not depend on the process."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest

from runtime.api import Backups, Runtime
from runtime.engine.agent import compaction
from runtime.engine.agent.compaction import SUMMARIZE
from runtime.events import EndReason, Usage
from runtime.providers.base import FINISH, TEXT, TOOL_CALLS, TOOL_START, USAGE, ToolCallRequest
from runtime.tools.base import Effect, FunctionTool

# Tokens; the fake model counts 4 characters a token of the whole request, messages and tool schemas. The
# built-in tools' schemas alone take ~2,000 tokens (deliver, background_command and wait among them): a 2,000-token
# window would leave the chat nothing under the 80% threshold, so the window is 5,000 tokens (the history of the long
# test is still many windows long).
WINDOW = 5000


class SmallModel:
    """A model with a 5,000-token window that notes every request bigger than that. Asked to summarize, it keeps
    every "FACT:" line it is shown (a faithful summarizer); otherwise it answers with a paragraph, or calls a tool
    when the input asks for one."""

    id = "small"
    context_tokens = WINDOW

    def __init__(self):
        self.requests: list[list[dict]] = []
        self.summaries = 0
        self.too_big: list[int] = []
        self.sizes: list[int] = []  # each request's messages (one by one) and tool schemas, in JSON characters
        self.reports_usage = True

    async def stream(self, request, *, on_queued=None):
        if request.purpose == "title":  # the title job's request is not part of the conversation
            return
        size = (len(json.dumps(request.messages)) + len(json.dumps(request.tools or []))) // 4
        if size > WINDOW:
            self.too_big.append(size)
        self.requests.append(json.loads(json.dumps(request.messages)))
        self.sizes.append(sum(len(json.dumps(m)) for m in request.messages)
                          + (len(json.dumps(request.tools)) if request.tools else 0))
        if request.messages[0]["content"] == SUMMARIZE:
            self.summaries += 1
            facts = []
            for line in request.messages[1]["content"].splitlines():
                fact = line[line.find("FACT:"):] if "FACT:" in line else None
                if fact and fact not in facts:
                    facts.append(fact)
            yield (TEXT, "\n".join(facts) or "Nothing to keep.")
        elif "use the tool" in (request.messages[-1].get("content") or "") and request.messages[-1]["role"] == "user":
            yield (TOOL_START, 0, f"c{len(self.requests)}", "dump")
            yield (TOOL_CALLS, [ToolCallRequest(f"c{len(self.requests)}", "dump", "{}", {})])
        else:
            yield (TEXT, "Noted. " + "This is a fairly long answer that fills the context. " * 6)
        if self.reports_usage:
            yield (USAGE, Usage(input_tokens=size, output_tokens=50))
        yield (FINISH, "stop")

    async def list_models(self):
        return ["small"]

    async def aclose(self):
        pass


async def _dump(args, ctx):
    return "\n".join(f"row {i}: " + "data " * 8 for i in range(65))  # ~3,100 characters, under the tool cap


DUMP = FunctionTool(name="dump", description="Prints a lot.", parameters={"type": "object", "properties": {}},
                    effect=Effect.read_only, fn=_dump)


@pytest.fixture
def on_loop(monkeypatch):
    """Every call of the compactor's O(history) helpers, each with whether it ran on the event loop's thread."""
    calls: list[tuple[str, bool]] = []

    def watch(name):
        real = getattr(compaction, name)

        def watched(*args, **kwargs):
            try:
                asyncio.get_running_loop()
                calls.append((name, True))
            except RuntimeError:  # a worker thread runs no event loop
                calls.append((name, False))
            return real(*args, **kwargs)
        monkeypatch.setattr(compaction, name, watched)

    for name in ("compact", "chat_chars", "trim_old_tool_outputs"):
        watch(name)
    return calls


async def _turn(rt, task_id, text):
    await rt.send(task_id, text)
    await rt.wait_idle(task_id)
    return (await rt.get_task(task_id)).last_reason


async def test_a_200_turn_task_stays_inside_the_window_and_keeps_an_early_fact(home, tmp_path):
    model = SmallModel()
    rt = await Runtime.open(home, providers={"small": model})
    task = await rt.create_task(model="small/m")
    for i in range(150):
        text = "FACT: my cat is called Miso." if i == 2 else f"Message {i}: tell me more about topic {i}, please."
        assert await _turn(rt, task.id, text) == "completed"
    checkpoints = await rt.core.store.checkpoints(task.id)
    assert len(checkpoints) >= 3 and model.summaries >= 3
    # The usage anchor pairs the last request's real tokens with that whole request's size, tool schemas included.
    anchor = (await rt.core.store.context_inputs(task.id)).anchor
    assert anchor["input_chars"] == model.sizes[-1] and anchor["input_tokens"] > 0
    assert all("FACT: my cat is called Miso." in c["summary"] for c in checkpoints)
    # A copy of the data folder as it is between two turns: the next request must not depend on the process.
    await Backups.backup(home, tmp_path / "copy" / "hearth.sqlite3")
    before = len(model.requests)
    assert await _turn(rt, task.id, "Message 150: and now?") == "completed"
    same_process = model.requests[before:]  # with the summary request, when this turn made one
    await rt.aclose()
    copy = tmp_path / "copy"
    shutil.copytree(home / "workspaces", copy / "workspaces")
    other = SmallModel()
    rt2 = await Runtime.open(copy, providers={"small": other})
    try:
        assert await _turn(rt2, task.id, "Message 150: and now?") == "completed"
        assert json.dumps(other.requests) == json.dumps(same_process)  # byte-identical after a restart
    finally:
        await rt2.aclose()
    rt = await Runtime.open(home, providers={"small": model})
    try:
        for i in range(151, 200):
            assert await _turn(rt, task.id, f"Message {i}: go on about topic {i}.") == "completed"
        last = model.requests[-1]
        assert "FACT: my cat is called Miso." in json.dumps(last)  # summarized in turn 3, still there at 200
        assert model.too_big == []  # no request ever passed the window
        raw = sum(len(json.dumps(m.parts)) for m in await rt.messages(task.id)) // 4
        assert raw > 4 * WINDOW  # the raw history is many windows long
        events = [e async for e in rt.subscribe(task.id)]
        assert events[-1].reason == EndReason.completed
    finally:
        await rt.aclose()


async def test_old_tool_outputs_are_trimmed_first_and_mid_turn_compaction_keeps_the_turn_going(home, on_loop):
    model = SmallModel()
    rt = await Runtime.open(home, providers={"small": model}, tools=[DUMP])
    try:
        task = await rt.create_task(model="small/m")
        assert await _turn(rt, task.id, "FACT: the report is due Friday.") == "completed"
        for i in range(6):
            assert await _turn(rt, task.id, f"Step {i}: use the tool") == "completed"
        assert model.too_big == []
        tool_results = [m["content"] for m in model.requests[-1] if m["role"] == "tool"]
        assert len(tool_results) >= 2 and len(tool_results[-1]) > 3000  # the newest output is whole ...
        assert all(len(c) < 3000 for c in tool_results[:-1])  # ... older ones are cut to their start and end
        trimmed = [i for i, r in enumerate(model.requests)
                   if any("older tool output left out" in (m.get("content") or "") for m in r if m["role"] == "tool")]
        summaries = [i for i, r in enumerate(model.requests) if r[0]["content"] == SUMMARIZE]
        assert trimmed and summaries and trimmed[0] < summaries[0]  # trimming came before any summary
        # Mid-turn: a summary request between a step that called the tool and that same turn's follow-up, which
        # carries the call's result (the model names its calls after the request count).
        assert any(_calls_tool(model.requests[i - 1]) and model.requests[i + 1][-1].get("tool_call_id") == f"c{i}"
                   for i in summaries if 0 < i < len(model.requests) - 1)
        messages = await rt.messages(task.id)
        markers = [p for m in messages for p in m.parts if p.get("type") == "marker"]
        assert any(p["marker"] == "compacted" for p in markers)  # the conversation shows where it happened
        assert "FACT: the report is due Friday." in json.dumps(model.requests[-1])
        assert {"trim_old_tool_outputs", "chat_chars"} <= {name for name, _ in on_loop}
        assert not [name for name, loop in on_loop if loop]  # the O(history) work ran off the event loop
    finally:
        await rt.aclose()


async def test_the_tool_schemas_count_toward_the_window_when_the_server_reports_no_usage(home):
    model = SmallModel()
    model.reports_usage = False  # no anchor: the estimate is 4 characters a token of the whole request
    rt = await Runtime.open(home, providers={"small": model})
    try:
        task = await rt.create_task(model="small/m")
        for i in range(40):
            assert await _turn(rt, task.id, f"Message {i}: tell me more about topic {i}, please.") == "completed"
        assert model.summaries >= 1 and model.too_big == []
    finally:
        await rt.aclose()


def _calls_tool(request: list[dict]) -> bool:
    """Whether SmallModel answered this request with a tool call (its last message asks for one)."""
    return request[-1]["role"] == "user" and "use the tool" in request[-1]["content"]


class BrokenSummarizer(SmallModel):
    async def stream(self, request, *, on_queued=None):
        if request.messages[0]["content"] == SUMMARIZE:
            raise RuntimeError("the model crashed")
            yield  # pragma: no cover
        async for item in super().stream(request, on_queued=on_queued):
            yield item


async def test_a_failing_summary_falls_back_to_dropping_old_messages(home, on_loop):
    model = BrokenSummarizer()
    rt = await Runtime.open(home, providers={"small": model})
    try:
        task = await rt.create_task(model="small/m")
        for i in range(40):
            assert await _turn(rt, task.id, f"Message {i} about something or other.") == "completed"
        assert model.too_big == [] and await rt.core.store.checkpoints(task.id) == []
        assert "earlier messages were left out" in json.dumps(model.requests[-1])
        assert "compact" in {name for name, _ in on_loop}
        assert not [name for name, loop in on_loop if loop]  # dropping ran off the event loop
    finally:
        await rt.aclose()
