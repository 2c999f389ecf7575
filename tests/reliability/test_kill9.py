"""A turn in a child process is killed with SIGKILL mid-stream; the data dir must recover honestly."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import sys
import textwrap
import time

from runtime.store.repo import DB_NAME
from tests.support.helpers import open_runtime

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from runtime.api import Runtime
    from runtime.providers.scripted import ScriptedModel

    async def main():
        model = ScriptedModel([[f"word{i} " for i in range(100000)]], chunk_delay=0.002)
        rt = await Runtime.open(sys.argv[1], providers={"scripted": model})
        task = await rt.create_task(model="scripted/x")
        print(task.id, flush=True)
        await rt.send(task.id, "tell me everything", client_msg_id="c-1")
        async for ev in rt.subscribe(task.id):
            if ev.type == "text_delta":
                print("STREAMING", flush=True)
                break
        await asyncio.sleep(3600)

    asyncio.run(main())
    """
)


def _checkpointed_text(db_path) -> str:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        row = db.execute(
            "select parts from messages where role='assistant' order by id desc limit 1"
        ).fetchone()
    finally:
        db.close()
    return "".join(p.get("text", "") for p in json.loads(row[0]) if p["type"] == "text") if row else ""


async def test_kill_9_mid_stream_recovers(home):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(home), stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    try:
        task_id = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode().strip()
        assert (await asyncio.wait_for(proc.stdout.readline(), 30)).strip() == b"STREAMING"
        deadline = time.monotonic() + 10
        before = ""
        while time.monotonic() < deadline and len(before) < 200:
            await asyncio.sleep(0.2)
            before = await asyncio.to_thread(_checkpointed_text, home / DB_NAME)
        assert before, "no checkpoint was written while streaming"
    finally:
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    rt = await open_runtime(home)
    try:
        info = await rt.get_task(task_id)
        assert info.state == "idle" and info.last_reason == "interrupted"
        msgs = await rt.messages(task_id)
        assert msgs[0].role == "user" and msgs[0].text == "tell me everything"
        assert msgs[1].text.startswith(before)
        turns = await rt.tasks.turns(task_id)
        assert [(t["status"], t["reason"]) for t in turns] == [("ended", "interrupted")]
        async with rt.core.store.engine.connect() as conn:
            assert (await conn.exec_driver_sql("PRAGMA integrity_check")).scalar() == "ok"
    finally:
        await rt.aclose()


async def test_kill_9_at_random_points_never_relabels_a_side_effect_or_loses_an_input():
    from tests.reliability.kill9_harness import run_harness

    report = await run_harness(4, seed=7)
    assert report["problems"] == []
    assert report["passed"] == 4
    assert report["max_lost_seconds"] <= 0.6  # 0.25 s checkpoints plus the commit, on a loaded machine
