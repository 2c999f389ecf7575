"""`RemoteRuntime` (runtime/remote/runtime.py, `runtime.api.connect_server`): a Hearth server under the facade's task
names, as a window's panel, sidebar and composer use them, against real `hearth serve` processes (the single box on
SQLite; an API instance and a worker on PostgreSQL and Redis for the drop) and a loopback model server."""

from __future__ import annotations

import asyncio
import time

import pytest

from runtime.api import (
    ConfigError,
    QuotaExhausted,
    ServerUnreachable,
    TokenRefused,
    connect_server,
)
from runtime.parts import text_of
from tests.support.cluster import Cluster
from tests.support.openai_server import Reply
from tests.support.services import free_port


@pytest.fixture(autouse=True)
def fresh_script(model) -> None:
    model.forget_script()


class Follower:
    """A panel's one subscription (`follow=True`) for its life, in the background."""

    def __init__(self, rt, task_id: str):
        self.events: list = []
        self._task = asyncio.ensure_future(self._read(rt.subscribe(task_id, follow=True)))

    async def _read(self, events) -> None:
        async for event in events:
            self.events.append(event)

    async def until(self, check, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not check(self.events):
            assert time.monotonic() < deadline and not self._task.done(), [e.type for e in self.events]
            await asyncio.sleep(0.02)

    def ended(self, n: int):
        return lambda events: sum(e.type == "turn_ended" for e in events) >= n

    def text(self, turn_id: str) -> str:
        return "".join(e.text for e in self.events if e.type == "text_delta" and e.turn_id == turn_id)

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def test_a_panel_follows_every_turn_and_the_feed_tells_the_list(box, model):
    cluster, api = box
    rt = await connect_server(api.base_url + "/", await cluster.user("ada"))
    feed: list = []

    async def read_feed() -> None:
        async for event in rt.events():
            feed.append(event)

    listening = asyncio.ensure_future(read_feed())
    try:
        task = await rt.create_task()
        assert task.title == "New task" and [t.id for t in await rt.list_tasks()] == [task.id]
        panel = Follower(rt, task.id)
        await asyncio.sleep(0.3)  # the feed and the panel are listening
        model.script(Reply(["first ", "answer"]), Reply(["second"]))
        one = await rt.send(task.id, "one")
        await panel.until(panel.ended(1))
        await rt.wait_idle(task.id)
        two = await rt.send(task.id, "two")
        await panel.until(panel.ended(2))
        assert one.turn_id != two.turn_id
        assert panel.text(one.turn_id) == "first answer" and panel.text(two.turn_id) == "second"
        seqs = [(e.turn_id, e.seq) for e in panel.events]
        assert seqs == sorted(set(seqs), key=seqs.index) and len(seqs) == len(set(seqs))
        assert [e.type for e in panel.events if e.type in ("turn_started", "turn_ended")] == [
            "turn_started", "turn_ended"] * 2

        said = await rt.messages(task.id)
        assert [(m.role, m.text) for m in said] == [("user", "one"), ("assistant", "first answer"),
                                                     ("user", "two"), ("assistant", "second")]
        assert await rt.messages(task.id, limit=2) == said[2:]
        assert await rt.messages(task.id, after=said[0].id, limit=1) == said[1:2]
        assert await rt.messages(task.id, before=said[2].id, limit=1) == said[1:2]
        deadline = time.monotonic() + 10
        while [(e.type, e.turn_id) for e in feed if e.type != "title"] != [
                ("turn_started", one.turn_id), ("turn_ended", one.turn_id),
                ("turn_started", two.turn_id), ("turn_ended", two.turn_id)]:
            assert time.monotonic() < deadline, feed
            await asyncio.sleep(0.05)

        # A panel opened mid-turn gets the turn from its start; an input queued meanwhile runs next, in the same
        # panels; Stop reaches the running turn; an approval is answered in place.
        model.script(Reply.counting(5000, delay=0.01), Reply(["queued answer"]))
        long = await rt.send(task.id, "long")
        await panel.until(lambda events: sum(e.type == "text_delta" for e in events) > 4)
        deadline = time.monotonic() + 5
        while not rt.tasks.is_running(task.id):  # the feed tells it
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        assert rt.tasks.running() == [task.id]
        reopened = Follower(rt, task.id)
        queued = await rt.send(task.id, "after it", queue=True)
        assert queued.turn_id is None
        await reopened.until(lambda events: sum(e.type == "text_delta" for e in events) > 1)
        assert (reopened.events[0].type, reopened.events[0].turn_id) == ("turn_started", long.turn_id)
        await rt.stop(task.id)
        await panel.until(panel.ended(4))
        assert [e.type for e in panel.events if e.turn_id == long.turn_id][-2:] == ["aborted", "turn_ended"]
        assert panel.text(panel.events[-1].turn_id) == "queued answer"
        await reopened.until(reopened.ended(2))
        assert reopened.text(long.turn_id) == panel.text(long.turn_id) != ""
        assert [(e.turn_id, e.seq) for e in reopened.events][-1] == [(e.turn_id, e.seq) for e in panel.events][-1]
        await reopened.close()
        await rt.wait_idle(task.id)
        assert not rt.tasks.is_running(task.id) and rt.tasks.running() == []
        model.script(Reply(chunks=[], tool_calls=[("c1", "run_shell", {"command": "echo hi"})], finish="tool_calls"),
                     Reply(["It said hi."]))
        await rt.send(task.id, "say hi")
        await panel.until(panel.ended(5))
        assert panel.events[-1].reason == "waiting"
        request = (await rt.get_task(task.id)).pending_request
        answered = await rt.answer(task.id, request["request_id"], "approve")
        await panel.until(panel.ended(6))
        assert panel.text(answered.turn_id) == "It said hi." and panel.events[-1].reason == "completed"
        await panel.close()
    finally:
        listening.cancel()
        await rt.aclose()


async def test_what_a_server_task_cannot_do_is_a_sentence_and_tokens_and_quotas_are_typed(box, model):
    cluster, api = box
    with pytest.raises(TokenRefused, match="The server refused this token"):
        await connect_server(api.base_url, "not-a-token")
    with pytest.raises(ServerUnreachable, match="Cannot reach the Hearth server"):
        await connect_server(f"http://127.0.0.1:{free_port()}", "x")
    rt = await connect_server(api.base_url, await cluster.user("bob"))
    try:
        for kw, says in [({"planning": True}, "Planning first works on this computer's tasks only"),
                         ({"knowledge": ["/home/x/notes.md"]}, "Documents to work from works on"),
                         ({"memory": True}, "Memory works on"), ({"network": True}, "Network for commands")]:
            with pytest.raises(ConfigError, match=says):
                await rt.create_task(**kw)
        task = await rt.create_task("notes")
        with pytest.raises(ConfigError, match="Attachments are files on this computer, which the server cannot"):
            await rt.send(task.id, "read it", attachments=["/etc/hostname"])
        with pytest.raises(ConfigError, match="Editing a plan's steps"):
            await rt.answer(task.id, "r1", "approve", plan=["one"])
        assert await rt.messages(task.id) == []
    finally:
        await rt.aclose()
    spent = await connect_server(api.base_url, await cluster.user("cy", quota_tokens=0))
    try:
        task = await spent.create_task("x")
        with pytest.raises(QuotaExhausted):
            await spent.send(task.id, "hi")
    finally:
        await spent.aclose()


async def test_a_killed_instance_is_a_state_and_the_panel_misses_nothing(tmp_path, model, postgres_server,
                                                                        redis_server):
    """The API instance is killed mid-turn (its worker goes on) and started again on its port: the runtime says
    "reconnecting", refuses a send meanwhile (what was typed stays in its box), then "connected"; the open panel has
    the whole turn, byte-identical to the stored answer, each event once; the input sent again is stored once."""
    database = postgres_server.create_database()
    cluster = Cluster(tmp_path / "host", model.base_url, database=postgres_server.url(database),
                      redis=redis_server.url.rsplit("/", 1)[0] + "/5")
    states: list[str] = []
    try:
        port = free_port()
        api, _ = cluster.launch_api(port), await cluster.worker()
        await api.started()
        rt = await connect_server(api.base_url, await cluster.user("dee"), on_state=states.append)
        task = await rt.create_task("count")
        panel = Follower(rt, task.id)
        reply = Reply.counting(1000, delay=0.005)
        model.script(reply, Reply(["got it"]))
        started = await rt.send(task.id, "count")
        await panel.until(lambda events: sum(e.type == "text_delta" for e in events) > 10)
        api.kill()
        await api.stopped()
        deadline = time.monotonic() + 10
        while rt.state != "reconnecting":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        with pytest.raises(ServerUnreachable):
            await rt.send(task.id, "typed meanwhile")
        await cluster.launch_api(port).started()
        await panel.until(panel.ended(1), timeout=60)
        assert states[:2] == ["reconnecting", "connected"] and rt.state == "connected"
        seqs = [e.seq for e in panel.events]
        assert seqs == sorted(set(seqs)) and panel.events[0].type == "turn_started"  # each once, in order
        [stored] = [m for m in await rt.messages(task.id) if m.role == "assistant"]
        assert panel.text(started.turn_id) == "".join(reply.chunks) == text_of(stored.parts)
        await rt.wait_idle(task.id)
        await rt.send(task.id, "typed meanwhile")
        await panel.until(panel.ended(2))
        said = [m.text for m in await rt.messages(task.id) if m.role == "user"]
        assert said == ["count", "typed meanwhile"]
        await panel.close()
        await rt.aclose()
    finally:
        cluster.stop()
        postgres_server.drop_database(database)
