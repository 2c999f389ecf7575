"""Chats on the shared turn engine: their own rows, replay, Stop, a kill -9, a model change between turns, one
write per client id, no tools, and "turn into a task"."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import sys
import textwrap

import pytest

from runtime.api import ChatNotFound, ConfigError, Runtime, TaskBusy
from runtime.providers.scripted import Call, Delay, ScriptedModel
from runtime.store.repo import DB_NAME
from tests.support.helpers import MODEL, open_runtime


def _count(home, sql: str) -> int:
    db = sqlite3.connect(home / DB_NAME)
    try:
        return db.execute(sql).fetchone()[0]
    finally:
        db.close()


async def test_a_chat_is_its_own_record_and_has_no_workspace_or_tools(home):
    model = ScriptedModel([["Paris."]])
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model=MODEL)
        handle = await rt.chats.send(chat.id, "Capital of France?")
        assert handle.task_id == chat.id
        events = [e async for e in rt.chats.subscribe(chat.id)]
        assert events[0].type == "turn_started" and events[-1].type == "turn_ended"
        assert {e.task_id for e in events} == {chat.id}
        assert [(m.role, m.text) for m in await rt.chats.messages(chat.id)] == [
            ("user", "Capital of France?"), ("assistant", "Paris.")]
        info = await rt.chats.get(chat.id)
        assert info.title == "Capital of France?" and info.state == "idle" and info.last_reason == "completed"
        assert await rt.list_tasks() == [] and [c.id for c in await rt.chats.list()] == [chat.id]
        # No file, shell or MCP tools: memory (on by default), and no knowledge search with an empty library.
        assert [t["function"]["name"] for t in model.requests[0].tools] == ["memory"]
        assert not (home / "workspaces").exists() or not any((home / "workspaces").iterdir())
    finally:
        await rt.aclose()
    assert _count(home, "select count(*) from tasks") == 0
    assert _count(home, "select count(*) from messages") == 0
    assert _count(home, "select count(*) from chat_messages") == 2
    assert _count(home, "select count(*) from chat_turns where reason = 'completed'") == 1


async def test_replay_then_live_and_stop_then_continue(home):
    model = ScriptedModel([["Once ", "upon ", Delay(5), "a time."], ["a time there was a fox."]])
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model=MODEL)
        await rt.chats.send(chat.id, "A story.")
        first, late = [], []

        async def follow(into: list):
            async for e in rt.chats.subscribe(chat.id):
                into.append(e)

        def text(events) -> str:
            return "".join(e.text for e in events if e.type == "text_delta")

        watchers = [asyncio.ensure_future(follow(first))]
        for _ in range(500):
            if text(first) == "Once upon ":
                break
            await asyncio.sleep(0.01)
        watchers.append(asyncio.ensure_future(follow(late)))  # joins mid-turn: replayed from the start
        for _ in range(500):
            if text(late) == "Once upon ":
                break
            await asyncio.sleep(0.01)
        with pytest.raises(TaskBusy, match="Chat"):
            await rt.chats.send(chat.id, "and?")
        await rt.chats.stop(chat.id)
        await asyncio.gather(*watchers)
        assert [e.seq for e in late] == [e.seq for e in first]
        assert late[-1].type == "turn_ended" and late[-1].reason == "aborted"
        await rt.chats.continue_chat(chat.id)
        await rt.chats.wait_idle(chat.id)
        answers = [m.text for m in await rt.chats.messages(chat.id) if m.role == "assistant"]
        assert answers == ["Once upon ", "a time there was a fox."]
        assert model.requests[-1].messages[-2]["content"] == "Once upon "
    finally:
        await rt.aclose()


async def test_the_model_can_change_between_turns_and_the_next_request_uses_it(home):
    first, second = ScriptedModel([["From A."]]), ScriptedModel([["From B."]], id="other")
    rt = await Runtime.open(home, providers={"scripted": first, "other": second})
    try:
        chat = await rt.chats.create(model=MODEL)
        await rt.chats.send(chat.id, "Hi A")
        await rt.chats.wait_idle(chat.id)
        info = await rt.chats.set_model(chat.id, "other/b-model")
        assert info.model == "other/b-model"
        await rt.chats.send(chat.id, "Hi B")
        await rt.chats.wait_idle(chat.id)
        assert len(first.requests) == 1 and len(second.requests) == 1
        assert second.requests[0].model == "b-model"
        # B sees the whole conversation, but not the marker, which is for the person.
        assert [(m["role"], m.get("content")) for m in second.requests[0].messages[1:]] == [
            ("user", "Hi A"), ("assistant", "From A."), ("user", "Hi B")]
        messages = await rt.chats.messages(chat.id)
        assert [m.role for m in messages] == ["user", "assistant", "event", "user", "assistant"]
        assert messages[2].parts == [{"type": "model_changed", "from": MODEL, "to": "other/b-model"}]
        with pytest.raises(ConfigError):
            await rt.chats.set_model(chat.id, "nowhere/x")
    finally:
        await rt.aclose()


async def test_the_same_message_sent_1000_times_at_once_is_written_once(home):
    rt = await open_runtime(home, ScriptedModel([["ok"]]))
    try:
        chat = await rt.chats.create(model=MODEL)
        handles = await asyncio.gather(*(rt.chats.send(chat.id, "once", client_msg_id="same") for _ in range(1000)))
        assert len({h.message_id for h in handles}) == 1 and sum(not h.duplicate for h in handles) == 1
        await rt.chats.wait_idle(chat.id)
        assert [m.text for m in await rt.chats.messages(chat.id) if m.role == "user"] == ["once"]
    finally:
        await rt.aclose()


async def test_turn_into_a_task_carries_the_history(home):
    model = ScriptedModel([["Use a list."], ["Here is the plan, with the list."]])
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model=MODEL, title="Groceries")
        await rt.chats.send(chat.id, "How do I plan my shopping?")
        await rt.chats.wait_idle(chat.id)
        task = await rt.chats.to_task(chat.id)
        assert task.title == "Groceries" and task.model == MODEL
        assert [(m.role, m.text) for m in await rt.messages(task.id)] == [
            ("user", "How do I plan my shopping?"), ("assistant", "Use a list.")]
        await rt.send(task.id, "Make it a plan.")
        await rt.wait_idle(task.id)
        assert [m.get("content") for m in model.requests[-1].messages[1:]] == [
            "How do I plan my shopping?", "Use a list.", "Make it a plan."]
        assert len(await rt.chats.messages(chat.id)) == 2  # the chat stays as it was
        await rt.chats.delete(chat.id)
        with pytest.raises(ChatNotFound):
            await rt.chats.get(chat.id)
        assert [m.text for m in await rt.messages(task.id)][-1] == "Here is the plan, with the list."
    finally:
        await rt.aclose()


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from runtime.api import Runtime
    from runtime.providers.scripted import ScriptedModel

    async def main():
        model = ScriptedModel([[f"word{i} " for i in range(100000)]], chunk_delay=0.002)
        rt = await Runtime.open(sys.argv[1], providers={"scripted": model})
        chat = await rt.chats.create(model="scripted/x")
        await rt.chats.send(chat.id, "Tell me everything.", client_msg_id="c1")
        print("ACK", chat.id, flush=True)
        chars = 0
        async for ev in rt.chats.subscribe(chat.id):
            if ev.type == "text_delta":
                chars += len(ev.text)
                if chars > 3000:
                    print("STREAMED", flush=True)
                    chars = -10**9

    asyncio.run(main())
    """
)


async def test_a_chat_killed_mid_turn_is_interrupted_keeps_its_text_and_continues(home):
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", CHILD, str(home),
                                                stdout=asyncio.subprocess.PIPE,
                                                env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        ack = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().split()
        assert ack[0] == "ACK"
        chat_id = ack[1]
        assert (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip() == "STREAMED"
        await asyncio.sleep(0.6)  # past a checkpoint (every 0.25 s)
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    model = ScriptedModel([["and that is all."]])
    rt = await open_runtime(home, model)
    try:
        info = await rt.chats.get(chat_id)
        assert info.state == "idle" and info.last_reason == "interrupted"
        user, answer = await rt.chats.messages(chat_id)
        assert user.text == "Tell me everything." and answer.text.startswith("word0 word1 ")
        assert len(answer.text) > 3000 and answer.status == "complete"
        await rt.chats.continue_chat(chat_id)
        await rt.chats.wait_idle(chat_id)
        assert (await rt.chats.messages(chat_id))[-1].text == "and that is all."
        assert model.requests[0].messages[-2]["content"] == answer.text
    finally:
        await rt.aclose()
    assert _count(home, "select count(*) from chat_turns where status = 'running'") == 0


async def test_a_chat_searches_the_whole_library_read_only_and_follows_the_memory_setting(home, tmp_path):
    doc = tmp_path / "keepers.md"
    doc.write_text("# Keepers\n\nThe lighthouse keeper in 1900 was Ada Lovell, who kept the lamp for forty years.\n")
    model = ScriptedModel([[Call("search_knowledge", {"query": "lighthouse keeper"})], ["Ada Lovell [1]."]])
    rt = await open_runtime(home, model)
    try:
        await rt.knowledge.add([doc])
        while (await rt.knowledge.status())["busy"]:
            await asyncio.sleep(0.02)
        chat = await rt.chats.create(model=MODEL)
        await rt.chats.send(chat.id, "Who kept the lighthouse?")
        await rt.chats.wait_idle(chat.id)
        offered = {t["function"]["name"] for t in model.requests[0].tools}
        assert offered == {"memory", "search_knowledge"}
        tool_result = model.requests[1].messages[-1]
        assert tool_result["role"] == "tool" and "Ada Lovell" in tool_result["content"]
        assert (await rt.chats.messages(chat.id))[-1].text == "Ada Lovell [1]."

        await rt.save_settings(rt.settings.model_copy(update={"memory": False}))
        model.add_steps(["Noted."])
        await rt.chats.send(chat.id, "Thanks")
        await rt.chats.wait_idle(chat.id)
        assert {t["function"]["name"] for t in model.requests[2].tools} == {"search_knowledge"}
    finally:
        await rt.aclose()


async def test_a_chat_turn_keeps_its_model_steps_for_details_until_the_chat_is_deleted(home):
    model = ScriptedModel([[Call("memory", {"command": "view"})], ["Nothing saved yet."]])
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model=MODEL)
        await rt.chats.send(chat.id, "What do you remember about me?")
        await rt.chats.wait_idle(chat.id)
        [answer] = [m for m in await rt.chats.messages(chat.id) if m.role == "assistant"]
        details = await rt.chats.turn_details(chat.id, answer.turn_id)
        steps = details["steps"]
        assert [s["step_index"] for s in steps] == [0, 1] and details["subagents"] == []
        assert steps[0]["tool_calls"] == ["memory"] and steps[1]["tool_calls"] == []
        assert all(s["started_at"] <= s["ended_at"] for s in steps)
        other = await rt.chats.create(model=MODEL)
        assert (await rt.chats.turn_details(other.id, answer.turn_id))["steps"] == []  # not another chat's
        with pytest.raises(ChatNotFound):
            await rt.chats.turn_details("no-such-chat", answer.turn_id)
        assert _count(home, "select count(*) from steps") == 0  # a task's steps table holds none of them
        await rt.chats.delete(chat.id)
    finally:
        await rt.aclose()
    assert _count(home, "select count(*) from chat_steps") == 0


async def test_a_chats_memory_writes_ask_first(home):
    """The chat's model saves, changes or deletes a memory only once the person approves; viewing needs no
    approval, and a global "always allow memory" rule (Settings ▸ Permissions) lets it write without asking."""
    note = {"command": "create", "path": "drinks.md", "content": "Prefers tea to coffee.\nAsked in a chat."}
    model = ScriptedModel([[Call("memory", note)], ["Saved."],
                           [Call("memory", {"command": "delete", "path": "drinks.md"})], ["Kept it."]])
    rt = await open_runtime(home, model)
    try:
        chat = await rt.chats.create(model=MODEL)
        await rt.chats.send(chat.id, "Remember: tea beats coffee.")
        await rt.chats.wait_idle(chat.id)
        info = await rt.chats.get(chat.id)
        req = info.pending_request
        assert info.state == "waiting" and req["kind"] == "approval" and req["tool_name"] == "memory"
        assert not (home / "memory" / "drinks.md").exists()  # nothing written before the answer
        with pytest.raises(ConfigError):
            await rt.chats.answer(chat.id, req["request_id"], "maybe")
        handle = await rt.chats.answer(chat.id, req["request_id"], "approve")
        assert (await rt.chats.answer(chat.id, req["request_id"], "approve")).duplicate  # a double click
        await rt.chats.wait_idle(chat.id)
        assert (home / "memory" / "drinks.md").read_text().startswith("Prefers tea to coffee.")
        assert (await rt.chats.messages(chat.id))[-1].text == "Saved." and handle.task_id == chat.id

        await rt.chats.send(chat.id, "Forget that.")
        await rt.chats.wait_idle(chat.id)
        req = (await rt.chats.get(chat.id)).pending_request
        await rt.chats.answer(chat.id, req["request_id"], "deny")
        await rt.chats.wait_idle(chat.id)
        assert (home / "memory" / "drinks.md").exists() and (await rt.chats.get(chat.id)).state == "idle"
        assert (await rt.chats.messages(chat.id))[-1].text == "Kept it."

        await rt.permissions.add_rule("memory", "allow")
        model.add_steps([Call("memory", {**note, "command": "update"})], ["Updated."])
        await rt.chats.send(chat.id, "Say it again.")
        await rt.chats.wait_idle(chat.id)
        info = await rt.chats.get(chat.id)
        assert info.state == "idle" and info.last_reason == "completed" and info.pending_request is None
    finally:
        await rt.aclose()
