"""Fill a real data folder fast: long tasks and many tasks, written in bulk into the same SQLite schema the
runtime writes (a person reaches these sizes after months; a test cannot run 1,000 turns to get there).

    .venv/bin/python -m tests.support.seed --home /tmp/hearth-long --messages 2000 --tasks 1000
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from sqlalchemy import insert

from runtime.api import Runtime
from runtime.store.models import MessageRow, TaskRow, TurnRow
from runtime.workspace import workspace_for

ANSWER = """Answer {i}: here is what I found.

- the first point, with `inline code`
- the second point, **in bold**

```python
def step_{i}(x):
    return x * {i}  # a small code block
```
"""


def _task_row(home, task_id: str, title: str, now: float, model: str) -> dict:
    return {"id": task_id, "title": title, "model": model, "approval": "ask", "planning": False, "knowledge": [],
            "workspace": str(workspace_for(home, task_id)), "state": "idle", "last_reason": "completed",
            "input_tokens": 0, "output_tokens": 0, "created_at": now, "updated_at": now}


async def seed_long_task(rt: Runtime, messages: int, title: str = "A long task", model: str = "scripted/test",
                         tool_every: int = 5) -> str:
    """A task with `messages` messages (user/assistant pairs, every `tool_every`-th answer with a tool card)."""
    task_id = uuid.uuid4().hex
    now = time.time() - messages
    msg_rows, turn_rows = [], []
    next_id = await _next_message_id(rt)
    for i in range(messages // 2):
        turn_id = uuid.uuid4().hex
        user_id, out_id = next_id, next_id + 1
        next_id += 2
        parts = [{"type": "text", "text": ANSWER.format(i=i), "step": 0}]
        if i % tool_every == 0:
            parts.append({"type": "tool_call", "part_id": 1, "call_id": f"c{i}", "name": "read_file",
                          "args": {"path": f"notes/{i}.md"}, "state": "done", "result": "line\n" * 40,
                          "effect": "read_only", "step": 0})
        t = now + i
        msg_rows.append({"id": user_id, "task_id": task_id, "turn_id": turn_id, "role": "user",
                         "parts": [{"type": "text", "text": f"Question {i}?"}], "status": "complete",
                         "created_at": t})
        msg_rows.append({"id": out_id, "task_id": task_id, "turn_id": turn_id, "role": "assistant",
                         "parts": parts, "status": "complete", "created_at": t})
        turn_rows.append({"id": turn_id, "task_id": task_id, "input_message_id": user_id,
                          "output_message_id": out_id, "status": "ended", "reason": "completed", "started_at": t,
                          "ended_at": t + 0.5, "input_tokens": 100 + i, "output_tokens": 50})
    async with rt.core.store.engine.begin() as conn:
        await conn.execute(insert(TaskRow), [_task_row(rt.home, task_id, title, time.time(), model)])
        await conn.execute(insert(MessageRow), msg_rows)
        await conn.execute(insert(TurnRow), turn_rows)
    return task_id


async def seed_tasks(rt: Runtime, count: int, model: str = "scripted/test") -> list[str]:
    """`count` small tasks, one finished turn each."""
    now = time.time()
    ids = [uuid.uuid4().hex for _ in range(count)]
    rows = [_task_row(rt.home, tid, f"Task number {i}", now - i * 60, model) for i, tid in enumerate(ids)]
    async with rt.core.store.engine.begin() as conn:
        await conn.execute(insert(TaskRow), rows)
    return ids


async def _next_message_id(rt: Runtime) -> int:
    async with rt.core.store.engine.connect() as conn:
        value = (await conn.exec_driver_sql("select coalesce(max(id), 0) from messages")).scalar()
    return int(value) + 1


async def _main(args: argparse.Namespace) -> None:
    rt = await Runtime.open(args.home)
    try:
        if args.messages:
            print(await seed_long_task(rt, args.messages, model=rt.settings.default_model))
        if args.tasks:
            await seed_tasks(rt, args.tasks, model=rt.settings.default_model)
    finally:
        await rt.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--home", required=True)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=0)
    asyncio.run(_main(parser.parse_args()))
