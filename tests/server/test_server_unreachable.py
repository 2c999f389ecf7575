"""What a server's processes say when Redis or the database cannot be reached: `/healthz` and the routes answer
503 with a sentence while Redis is down and recover by themselves once it is back, a worker too; a process that cannot
reach them at start exits 8 with a sentence, and a worker without both URLs exits 2."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import pytest

from tests.support.cluster import ROOT, Cluster, read_sse
from tests.support.openai_server import Reply, run_in_thread
from tests.support.services import free_port


async def _until(client, path: str, status: int, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while (answer := await client.get(path)).status_code != status:
        assert time.monotonic() < deadline, (answer.status_code, answer.text)
        await asyncio.sleep(0.1)
    return answer


async def test_redis_gone_is_503_with_a_sentence_and_the_instance_recovers(tmp_path, own_redis, postgres_url):
    with run_in_thread() as model:
        cluster = Cluster(tmp_path, model.base_url, database=postgres_url, redis=own_redis.url)
        try:
            api = await cluster.api()
            await cluster.worker()
            token = await cluster.user("ada")
            async with api.client(token) as http:
                task = (await http.post("/api/tasks", json={"goal": "g"})).json()
                down = asyncio.ensure_future(asyncio.to_thread(own_redis.restart, keep_data=True, downtime=4))
                sick = await _until(http, "/healthz", 503)
                assert sick.json() == {"error": sick.json()["error"]} and "Redis" in sick.json()["error"]
                send = await http.post(f"/api/tasks/{task['id']}/messages", json={"text": "hello"})
                assert send.status_code == 503 and "Redis" in send.json()["error"]
                assert "Traceback" not in send.text
                await down
                assert (await _until(http, "/healthz", 200)).json() == {"ok": True}
                model.script(Reply(["back"]))
                # The worker took jobs again (arq's poll loop ends at the first failed call: it is started again).
                read = await asyncio.wait_for(
                    read_sse(http, "POST", f"/api/tasks/{task['id']}/messages", json={"text": "again"}), 30)
                assert read.status == 200 and read.text == "back"
        finally:
            cluster.stop()


def _hearth(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env=env)


@pytest.mark.parametrize(("args", "code", "says"), [
    (["serve", "--database", "postgresql://nobody@127.0.0.1:{port}/none", "--port", "0"], 8, "database"),
    (["worker", "--database", "postgresql://nobody@127.0.0.1:{port}/none", "--redis", "redis://127.0.0.1:{port}/0"],
     8, ""),
    (["worker"], 2, "hearth worker needs --database and --redis"),
    (["serve", "--redis", "redis://127.0.0.1:{port}/0"], 2, "give --database too"),
], ids=["serve-no-database", "worker-nothing-reachable", "worker-without-urls", "serve-redis-without-database"])
def test_a_process_that_cannot_start_says_why_in_one_sentence(args, code, says, tmp_path):
    port = free_port()  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    done = _hearth(*[a.format(port=port) for a in args], "--data", str(tmp_path), env=env)
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hearth: ") and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr
