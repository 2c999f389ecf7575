"""What the turn engine writes through the store, on SQLite and PostgreSQL alike: a task's inputs, queue, finalize,
wait and its end, title, records and deletion; a chat's turn and its copy into a task; a team's recovery. The
server host runs the same repositories on PostgreSQL's engine (booleans, JSON, generated ids and a failed unique
insert behave differently there)."""

from __future__ import annotations

from runtime.events import Usage
from runtime.store.chats import ChatStore
from runtime.store.conversations import DuplicateMessage
from runtime.store.memory_repo import MemoryRepo
from runtime.store.repo import Store
from runtime.store.teams import TeamStore


def _record(owner_id: str, turn_id: str, out_id: int, reason: str, **extra) -> dict:
    return {"task_id": owner_id, "turn_id": turn_id, "output_message_id": out_id, "reason": reason,
            "parts": [{"type": "text", "text": f"answer of {turn_id}"}], "error": None,
            "usage": Usage(input_tokens=10, output_tokens=5), "state": "idle", "pending_request": None,
            "anchor_tokens": 0, "anchor_chars": 0, "steps": [], "subagents": []} | extra


def _text(text: str) -> list[dict]:
    return [{"type": "text", "text": text}]


async def test_a_tasks_turns_through_the_store(database):
    store = await Store.open_url(database)
    try:
        await store.create_task(id="t1", model="p/m", workspace="/w", knowledge=["/docs"])
        _, first = await store.add_input("t1", _text("first"), client_msg_id="c1", turn_id="turn1",
                                         title="First words")
        try:
            await store.add_input("t1", _text("first"), client_msg_id="c1", turn_id="again")
            raise AssertionError("a repeated client message id was stored twice")
        except DuplicateMessage as seen:
            assert seen.row["id"] == first.input_id
        queued_id, none = await store.add_input("t1", _text("queued"), client_msg_id=None, turn_id=None)
        assert none is None
        await store.finalize_turn(_record("t1", "turn1", first.output_id, "completed"))
        await store.write_turn_records(_record(
            "t1", "turn1", first.output_id, "completed", anchor_tokens=100, anchor_chars=400,
            steps=[{"step_index": 0, "started_at": 1.0, "tool_calls": []}],
            subagents=[{"id": "s1", "goal": "look", "status": "completed", "created_at": 1.0}]))
        task = await store.get_task("t1")
        assert (task["state"], task["input_tokens"], task["title"], task["title_provisional"]) == (
            "idle", 10, "First words", True)
        assert await store.settle_title("t1", "A model's title") is True
        assert (await store.get_task("t1"))["title_provisional"] is False

        second = await store.start_queued_turn("t1", "turn2")
        assert second.input_id == queued_id and await store.start_queued_turn("t1", "turn3") is None
        await store.finalize_turn(_record("t1", "turn2", second.output_id, "waiting", state="waiting",
                                          pending_request={"request_id": "r1", "kind": "question"}))
        assert await store.is_waiting("t1") is True
        assert (await store.end_wait("t1")).turn_id == "turn2"
        assert [m["parts"][0]["text"] for m in await store.messages("t1")] == [
            "first", "answer of turn1", "queued", "answer of turn2"]
        inputs = await store.context_inputs("t1")
        assert len(inputs.messages) == 4 and inputs.anchor["input_tokens"] == 100
        assert [s["step_index"] for s in await store.steps("turn1")] == [0]
        assert [s["id"] for s in await store.subagents("turn1")] == ["s1"]
        await store.add_permission_rule("t1", "run_shell", "ls", "allow")
        await store.record_job("title", "t1", "failed", "no model")
        memory = MemoryRepo(store.engine)
        assert [(j["kind"], j["task_title"]) for j in await memory.jobs(failed=True)] == [("title", "A model's title")]
        assert await memory.last_ended_turn("t1") == "turn2"
        assert [t["reason"] for t in await store.turns("t1")] == ["completed", "aborted"]

        await store.delete_task("t1")
        assert await store.get_task("t1") is None and await store.permission_rules(every=True) == []
    finally:
        await store.aclose()


async def test_a_chat_and_a_team_through_the_store(database):
    store = await Store.open_url(database)
    chats, teams = ChatStore(store.engine), TeamStore(store.engine)
    try:
        await chats.create_chat("c1", "p/m", None)
        await chats.change_model("c1", "p/m", "p/n")
        _, started = await chats.add_input("c1", _text("hello"), client_msg_id=None, turn_id="ct1")
        await chats.finalize_turn(_record("c1", "ct1", started.output_id, "completed"))
        await store.create_task(id="t1", model="p/n", workspace="/w", knowledge=[])
        assert await store.copy_messages("c1", "t1", chats) == 2

        await teams.create_team("g1", "Goal", 2, [
            {"name": "lead", "model": "p/m", "role": "", "tools": "all", "approval": "ask"}],
            [{"id": "a1", "key": "A", "instructions": "do", "member": "lead", "depends_on": []},
             {"id": "a2", "key": "B", "instructions": "then", "member": "lead", "depends_on": ["A"]}])
        await teams.update_team("g1", state="running")
        await teams.update_assignment("a1", status="running")
        await teams.add_input("a1", _text("do"), client_msg_id=None, turn_id="at1")
        assert await teams.recover() == ["at1"]
        assert [(a["key"], a["status"]) for a in await teams.assignments("g1")] == [("A", "interrupted"),
                                                                                  ("B", "blocked")]
        assert (await teams.get_team("g1"))["state"] == "idle"
        await teams.delete_team("g1")
        assert await teams.list_teams() == []
    finally:
        await store.aclose()
