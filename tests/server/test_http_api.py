"""The server host's HTTP API (DESIGN.md §11) driven as a client drives it: real `hearth serve` processes, a real
HTTP client and SSE reader (httpx, httpx-sse), a loopback model server as the model. Every test runs twice
(`server` is parametrized): on two API instances and two `hearth worker`s sharing one Redis and one PostgreSQL, and
on the single box (`hearth serve` alone on a SQLite data folder, its turns run in that process), where "instance B"
is the same instance as A."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import httpx_sse
import pytest
import redis.asyncio

from runtime.parts import text_of
from tests.support.cluster import MODEL, Api, Cluster, events_of, read_sse
from tests.support.openai_server import OpenAIServer, Reply


@dataclass
class Server:
    cluster: Cluster
    a: Api
    b: Api
    model: OpenAIServer

    async def user(self, quota_tokens: int | None = None) -> str:
        return await self.cluster.user(f"u{uuid.uuid4().hex[:12]}", quota_tokens)

    def lock(self, task_id: str) -> str:
        return f"hearth:lock:{task_id}"


@pytest.fixture(scope="module", params=["distributed", "single"])
def server(request, tmp_path_factory, model) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "single":
        cluster = Cluster(folder, model.base_url)
        a = cluster.launch_api()
        a.wait_started()
        yield Server(cluster, a, a, model)
        cluster.stop()
        return
    pg = request.getfixturevalue("postgres_server")
    redis_server = request.getfixturevalue("redis_server")
    name = pg.create_database()
    cluster = Cluster(folder, model.base_url, database=pg.url(name), redis=redis_server.url.rsplit("/", 1)[0] + "/3")
    children = [cluster.launch_api(), cluster.launch_api(), cluster.launch_worker(), cluster.launch_worker()]
    try:
        for child in children:
            child.wait_started()
        yield Server(cluster, children[0], children[1], model)  # type: ignore[arg-type]
    finally:
        cluster.stop()
        pg.drop_database(name)


@pytest.fixture(autouse=True)
def fresh_script(model) -> None:
    """A reply one test scripted and no turn took (its sends were refused) is not the next test's."""
    model.forget_script()


async def _task(client, **body) -> dict:
    created = await client.post("/api/tasks", json={"goal": "a task", **body})
    assert created.status_code == 201, created.text
    return created.json()


async def _stored_answer(client, task_id: str) -> str:
    found = (await client.get(f"/api/tasks/{task_id}/messages")).json()
    return text_of([m for m in found if m["role"] == "assistant"][-1]["parts"])


async def _until_idle(client, task_id: str, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while (task := (await client.get(f"/api/tasks/{task_id}")).json())["state"] == "running":
        assert time.monotonic() < deadline, task
        await asyncio.sleep(0.05)
    return task


def _sleeping(marker: str) -> bool:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True).returncode == 0


async def test_a_turn_read_from_a_and_resumed_on_b_is_the_stored_text(server):
    token = await server.user()
    reply = Reply.counting(600, delay=0.004)
    server.model.script(reply)
    async with server.a.client(token) as a, server.b.client(token) as b:
        task = await _task(a)
        assert task["state"] == "idle" and task["last_reason"] is None
        first = await read_sse(a, "POST", f"/api/tasks/{task['id']}/messages", json={"text": "count"}, stop_after=25)
        assert first.status == 200 and first.events[0]["type"] == "turn_started"
        turn_id = first.events[0]["turn_id"]
        assert all(e["id"] == f"{turn_id}:{e['seq']}" for e in first.events)
        # Dropped mid-turn; the same client goes on from instance B where it stopped.
        rest = await read_sse(b, "GET", f"/api/tasks/{task['id']}/stream", headers={"Last-Event-ID": first.last_id})
        assert rest.status == 200 and first.text and rest.text
        seqs = [e["seq"] for e in first.events + rest.events]
        assert seqs == sorted(set(seqs))
        assert rest.events[-1]["type"] == "turn_ended" and rest.events[-1]["reason"] == "completed"
        assert first.text + rest.text == "".join(reply.chunks) == await _stored_answer(a, task["id"])
        # After the end: the whole turn again by ?after_seq, and a Last-Event-ID of another turn starts it over.
        again = await read_sse(b, "GET", f"/api/tasks/{task['id']}/stream?after_seq=0")
        older = await read_sse(a, "GET", f"/api/tasks/{task['id']}/stream", headers={"Last-Event-ID": "0ld:9"})
        assert again.text == older.text == "".join(reply.chunks)
        assert again.events[0]["type"] == older.events[0]["type"] == "turn_started"
        got = (await b.get(f"/api/tasks/{task['id']}")).json()
        assert got["state"] == "idle" and got["last_reason"] == "completed" and got["output_tokens"] == 5


async def test_stop_sent_to_b_reaches_the_turn_at_once_and_leaves_nothing_running(server):
    token = await server.user()
    marker = f"sleep {40 + uuid.uuid4().int % 1000 / 1000:.3f}"
    server.model.script(Reply(chunks=["Let me wait. "], tool_calls=[("c1", "run_shell", {"command": marker})],
                              finish="tool_calls"), Reply(["never asked"]))
    async with server.a.client(token) as a, server.b.client(token) as b:
        task = await _task(a, approval="full_auto")
        seen: list[tuple[float, dict]] = []

        async def read() -> None:
            async with httpx_sse.aconnect_sse(a, "POST", f"/api/tasks/{task['id']}/messages",
                                                              json={"text": "wait"}) as source:
                async for event in events_of(source):
                    seen.append((time.monotonic(), event))

        reader = asyncio.ensure_future(read())
        deadline = time.monotonic() + 20
        while not _sleeping(marker):
            assert time.monotonic() < deadline and not reader.done(), seen
            await asyncio.sleep(0.05)
        sent = time.monotonic()
        stopped = await b.post(f"/api/tasks/{task['id']}/abort")
        assert stopped.status_code == 202
        await asyncio.wait_for(reader, 15)
        aborted = [at for at, e in seen if e["type"] == "aborted"]
        assert aborted and aborted[0] - sent < 1.0, seen
        assert seen[-1][1]["type"] == "turn_ended" and seen[-1][1]["reason"] == "aborted"
        got = await _until_idle(b, task["id"])
        assert got["state"] == "idle" and got["last_reason"] == "aborted"
        if server.cluster.distributed:
            client = redis.asyncio.from_url(server.cluster.redis)
            try:
                assert not await client.exists(server.lock(task["id"]))
            finally:
                await client.aclose()
        deadline = time.monotonic() + 5
        while _sleeping(marker):
            assert time.monotonic() < deadline, f"{marker} still runs"
            await asyncio.sleep(0.05)
        assert (await b.post(f"/api/tasks/{task['id']}/abort")).status_code == 202  # nothing runs: a no-op


async def test_one_input_sent_fifty_times_at_once_is_one_message_and_one_turn(server):
    token = await server.user()
    server.model.script(Reply.counting(100, delay=0.01))
    async with server.a.client(token) as a, server.b.client(token) as b:
        task = await _task(a)
        url = f"/api/tasks/{task['id']}/messages"
        reads = await asyncio.gather(*(read_sse(a if i % 2 else b, "POST", url, json={"text": "once", "client_msg_id":
                                                                                    "same-1"}) for i in range(50)))
        assert {r.status for r in reads} == {200}
        turns = {e["turn_id"] for r in reads for e in r.events}
        assert len(turns) == 1 and all(r.events[-1]["type"] == "turn_ended" for r in reads)
        # A second input while a turn runs: 409, stored nowhere; with queue: 202, and it runs after.
        server.model.script(Reply.counting(100, delay=0.01), Reply(["queued answer"]))
        running = asyncio.ensure_future(read_sse(b, "POST", url, json={"text": "second"}))
        deadline = time.monotonic() + 20
        while (await a.get(f"/api/tasks/{task['id']}")).json()["state"] != "running":
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        busy = await a.post(url, json={"text": "third"})
        assert busy.status_code == 409 and "already working on a turn" in busy.json()["error"]
        queued = await b.post(url, json={"text": "fourth", "queue": True})
        assert queued.status_code == 202 and queued.json()["queued"] is True
        assert (await running).events[-1]["reason"] == "completed"
        deadline = time.monotonic() + 30
        while len(found := (await a.get(url)).json()) < 6 or found[-1]["status"] != "complete":
            assert time.monotonic() < deadline, found
            await asyncio.sleep(0.05)
        said = [text_of(m["parts"]) for m in found if m["role"] == "user"]
        assert said == ["once", "second", "fourth"]
        assert [m["role"] for m in found] == ["user", "assistant"] * 3
        assert "third" not in str(found)


async def test_another_users_task_is_404_on_every_route_and_tokens_and_quota_are_checked(server):
    owner, stranger = await server.user(), await server.user()
    async with server.a.client(owner) as mine, server.b.client(stranger) as theirs, server.b.client() as nobody:
        task = await _task(mine)
        base = f"/api/tasks/{task['id']}"
        routes = [("GET", base, None), ("GET", f"{base}/messages", None), ("GET", f"{base}/stream", None),
                  ("POST", f"{base}/messages", {"text": "hi"}), ("POST", f"{base}/abort", None),
                  ("POST", f"{base}/answer", {"request_id": "r1", "answer": "yes"})]
        for method, url, body in routes:
            got = await theirs.request(method, url, json=body)
            none = await theirs.request(method, url.replace(task["id"], "0" * 32), json=body)
            assert got.status_code == none.status_code == 404, (url, got.text)
            assert got.json()["error"] == none.json()["error"].replace("0" * 32, task["id"])
            assert (await nobody.request(method, url, json=body)).status_code == 401
        assert [t["id"] for t in (await theirs.get("/api/tasks")).json()] == []
        assert [t["id"] for t in (await mine.get("/api/tasks")).json()] == [task["id"]]
        for url in ("/api/tasks", "/api/events"):
            unauthorized = await nobody.get(url)
            assert unauthorized.status_code == 401 and unauthorized.json()["error"]
            assert unauthorized.headers["www-authenticate"] == "Bearer"
        store = await server.cluster.store()
        try:
            user = await store.user_for_token(stranger)
            await store.revoke_user(user["name"])
        finally:
            await store.aclose()
        assert (await theirs.get("/api/tasks")).status_code == 401
        assert (await theirs.post("/api/tasks", json={"goal": "x"})).status_code == 401
        assert (await nobody.get("/healthz")).json() == {"ok": True}

    # A quota of 10 tokens: the first turn runs (and uses 15, counted by its post-turn job), the next is refused.
    limited = await server.user(quota_tokens=10)
    server.model.script(Reply(["short"]))
    async with server.a.client(limited) as a:
        task = await _task(a)
        url = f"/api/tasks/{task['id']}/messages"
        first = await read_sse(a, "POST", url, json={"text": "go"})
        assert first.events[-1]["reason"] == "completed"
        store = await server.cluster.store()
        try:
            deadline = time.monotonic() + 20
            while (await store.user_for_token(limited))["used_tokens"] != 15:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
        finally:
            await store.aclose()
        before = (await a.get(url)).json()
        refused = await a.post(url, json={"text": "again", "client_msg_id": "q-1"})
        assert refused.status_code == 402 and "quota" in refused.json()["error"]
        assert (await a.post(f"/api/tasks/{task['id']}/answer", json={"request_id": "r", "answer": "y"})
                ).status_code == 402
        assert (await a.get(url)).json() == before
        assert (await a.get(f"/api/tasks/{task['id']}")).json()["state"] == "idle"
        if server.cluster.distributed:
            client = redis.asyncio.from_url(server.cluster.redis)
            try:
                assert not await client.exists(server.lock(task["id"]))
                assert await client.hget(f"hearth:stream:{task['id']}:meta", "turn_id") == first.events[0][
                    "turn_id"].encode()
            finally:
                await client.aclose()


async def test_bad_requests_get_a_sentence(server):
    token = await server.user()
    async with server.a.client(token) as a:
        task = await _task(a)
        base = f"/api/tasks/{task['id']}"
        for response in [await a.post("/api/tasks", json={"model": MODEL}),
                         await a.post("/api/tasks", content=b"{not json"),
                         await a.post("/api/tasks", json={"goal": "x", "model": "nowhere/x"}),
                         await a.post("/api/tasks", json={"goal": "x", "approval": "sometimes"}),
                         await a.post(f"{base}/messages", json={"text": 5}),
                         await a.post(f"{base}/messages", json={"text": "x", "queue": "yes"}),
                         await a.post(f"{base}/messages", json={"text": "x", "client_msg_id": "c" * 101}),
                         await a.get(f"{base}/stream?after_seq=-1"),
                         await a.get(f"{base}/stream", headers={"Last-Event-ID": "nonsense"})]:
            assert response.status_code == 400, response.text
            sentence = response.json()["error"]
            assert sentence.endswith(".") and "Traceback" not in sentence
        assert (await a.get(f"{base}/stream")).status_code == 204  # nothing was ever buffered: read /messages
        assert (await a.get(f"{base}/messages")).json() == []
        unknown = await a.get("/api/nothing")
        assert unknown.status_code == 404 and unknown.json()["error"]
        assert (await a.delete(base)).status_code == 405


async def test_the_event_feed_tells_a_user_of_their_turns_only(server):
    token, other = await server.user(), await server.user()
    server.model.script(Reply(["fed"]), Reply(["not yours"]))
    async with server.b.client(token) as b, server.a.client(token) as a, server.a.client(other) as o:
        feed: list[dict] = []

        async def follow() -> None:
            async with httpx_sse.aconnect_sse(b, "GET", "/api/events") as source:
                async for event in events_of(source):
                    feed.append(event)

        following = asyncio.ensure_future(follow())
        await asyncio.sleep(0.5)  # subscribed
        theirs = await _task(o)
        await read_sse(o, "POST", f"/api/tasks/{theirs['id']}/messages", json={"text": "x"})
        task = await _task(a)
        await read_sse(a, "POST", f"/api/tasks/{task['id']}/messages", json={"text": "x"})
        deadline = time.monotonic() + 10
        while [e["type"] for e in feed] != ["turn_started", "turn_ended"]:
            assert time.monotonic() < deadline, feed
            await asyncio.sleep(0.05)
        following.cancel()
        assert {e["task_id"] for e in feed} == {task["id"]} and feed[-1]["reason"] == "completed"
