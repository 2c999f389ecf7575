"""kill -9 at random points across turns that stream, queue follow-ups and run side-effecting tools.

    .venv/bin/python -m tests.reliability.kill9_harness --n 200      # the full run; prints its figures

Each round starts a child process on a fresh data folder. The child runs turns back to back: every turn streams
words, runs `run_shell` (a side effect that takes a while) or `write_file`, and more inputs are queued while it
runs. It prints what it was told: `ACK <client id>` once `send()` returned, `RUN <call id>` / `END <call id>`
when a tool call started / finished, and `T <turn id> <chars> <time>` as its text grows. The parent kills it
with SIGKILL at a random moment, reopens the folder and checks:
- every acknowledged input is in the database (sent or still queued);
- `PRAGMA integrity_check` is ok, no turn is left `running` and no tool call `pending` or `running`;
- every side-effecting call that had started and not finished is `interrupted` with "outcome unknown" (a
  `write_file`: "applied" or "not applied", checked on disk), and the next model request says so for it — never
  "it had no effect", never missing;
- the text lost (streamed but not persisted) is at most ~0.5 s of stream;
- one more input runs every input left queued first, in the order they were sent, and nothing stays queued.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import sqlite3
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from runtime.parts import OUTCOME_UNKNOWN, WRITE_APPLIED, WRITE_NOT_APPLIED

CHILD = textwrap.dedent(
    """
    import asyncio, sys, time
    from runtime.api import Runtime
    from runtime.providers.scripted import Call, ScriptedModel

    def out(*words):
        sys.stdout.write(" ".join(str(w) for w in words) + "\\n")
        sys.stdout.flush()

    async def watch(rt, task_id):
        chars, last = 0, 0.0
        async for ev in rt.subscribe(task_id, follow=True):
            if ev.type == "turn_started":
                chars = 0
            elif ev.type == "text_delta":
                chars += len(ev.text)
                now = time.monotonic()
                if now - last > 0.01:
                    out("T", ev.turn_id, chars, now)
                    last = now
            elif ev.type == "tool_call" and ev.state == "running":
                out("RUN", ev.call_id)
            elif ev.type == "tool_call" and ev.state in ("done", "error"):
                out("END", ev.call_id)

    async def main():
        model = ScriptedModel(chunk_delay=0.002)
        rt = await Runtime.open(sys.argv[1], providers={"scripted": model})
        task = await rt.create_task(model="scripted/x", approval="full_auto")
        out("TASK", task.id)
        watcher = asyncio.ensure_future(watch(rt, task.id))
        for turn in range(1000):
            model.add_steps(
                [f"w{turn}.{i} " for i in range(120)]
                + [Call("run_shell", {"command": "sleep 0.2; echo ran >> ran.txt"})],
                [Call("write_file", {"path": f"f{turn}.txt", "content": "x" * 1000})],
                [f"v{turn}.{i} " for i in range(120)],
                [f"q{turn}.{i} " for i in range(40)],
            )
            await rt.send(task.id, f"input {turn}", client_msg_id=f"c{turn}")
            out("ACK", f"c{turn}")
            for k in "ab":
                await rt.send(task.id, f"queued {turn}{k}", client_msg_id=f"q{turn}{k}", queue=True)
                out("ACK", f"q{turn}{k}")
            await rt.wait_idle(task.id)

    asyncio.run(main())
    """
)


def _read_db(db_path: Path) -> dict:
    db = sqlite3.connect(db_path)
    try:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
        running = db.execute("select count(*) from turns where status = 'running'").fetchone()[0]
        clients = {r[0] for r in db.execute("select client_msg_id from messages where client_msg_id is not null")}
        messages = [(r[0], r[1], json.loads(r[2])) for r in db.execute("select turn_id, role, parts from messages")]
        inputs = [tuple(r) for r in db.execute(
            "select client_msg_id, status from messages where role = 'user' and status != 'discarded' order by id")]
    finally:
        db.close()
    return {"integrity": integrity, "running": running, "clients": clients, "messages": messages, "inputs": inputs}


def _send_order(client_id: str) -> tuple[int, str]:
    # The child sends c0, q0a, q0b, c1, q1a, ...: the turn number, then the input's place in it.
    kind, rest = client_id[0], client_id[1:]
    return (int(rest.rstrip("ab")), "0" if kind == "c" else rest[-1])


async def one_round(rng: random.Random, home: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(home), stdout=asyncio.subprocess.PIPE, env=env
    )
    lines: list[str] = []

    async def read() -> None:
        while line := await proc.stdout.readline():
            lines.append(line.decode().strip())

    reader = asyncio.ensure_future(read())
    while not any(ln.startswith("TASK") for ln in lines):
        await asyncio.sleep(0.01)
        if proc.returncode is not None:
            raise RuntimeError("the child died before it started")
    await asyncio.sleep(rng.uniform(0.0, 2.5))
    killed_at = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    await proc.wait()
    await reader
    return await check(home, lines, killed_at)


async def check(home: Path, lines: list[str], killed_at: float) -> dict:
    from runtime.providers.scripted import ScriptedModel

    task_id = next(ln.split()[1] for ln in lines if ln.startswith("TASK"))
    acked = {ln.split()[1] for ln in lines if ln.startswith("ACK")}
    started = [ln.split()[1] for ln in lines if ln.startswith("RUN")]
    finished = {ln.split()[1] for ln in lines if ln.startswith("END")}
    open_calls = [c for c in started if c not in finished]
    model = ScriptedModel()
    rt, busy_for = await _reopen(home, model)
    if rt is None:
        return {"problems": [f"the data folder stayed locked {busy_for:.1f} s after the kill"], "lost_seconds": 0.0,
                "open_calls": len(open_calls), "busy_seconds": busy_for}
    try:
        db = _read_db(home / "hearth.sqlite3")
        problems = []
        if db["integrity"] != "ok":
            problems.append(f"integrity: {db['integrity']}")
        if db["running"]:
            problems.append(f"{db['running']} turn(s) left running")
        if missing := acked - db["clients"]:
            problems.append(f"acknowledged inputs lost: {sorted(missing)}")
        parts = {p["call_id"]: p for _, _, ps in db["messages"] for p in ps if p.get("type") == "tool_call"}
        if unsettled := sorted(c for c, p in parts.items() if p["state"] in ("pending", "running")):
            problems.append(f"calls left unsettled after reopen: {unsettled}")
        for call_id in open_calls:
            part = parts.get(call_id)
            if part is None:
                problems.append(f"call {call_id} started but is missing")
            elif part["state"] == "interrupted" and part.get("note") not in _expected_notes(part):
                problems.append(f"call {call_id} started but reads {part.get('note')!r}")
        # The next request tells the model about every interrupted side effect.
        await rt.send(task_id, "continue", client_msg_id="after")
        await rt.wait_idle(task_id)
        ran = _read_db(home / "hearth.sqlite3")["inputs"]
        if stuck := [c for c, status in ran if status != "complete"]:
            problems.append(f"inputs still not run after the next send: {stuck}")
        expected = [*sorted((c for c, _ in ran if c != "after"), key=_send_order), "after"]
        if [c for c, _ in ran] != expected:
            problems.append(f"inputs ran out of order: {[c for c, _ in ran]}")
        request = model.requests[0].messages
        told = {m["tool_call_id"]: m["content"] for m in request if m["role"] == "tool"}
        for call_id in open_calls:
            part = parts.get(call_id, {})
            if part.get("state") == "interrupted" and _said(part) not in told.get(call_id, ""):
                problems.append(f"call {call_id}: the model was told {told.get(call_id)!r}")
        lost = _text_lost_seconds(lines, db["messages"], killed_at)
        return {"problems": problems, "lost_seconds": lost, "open_calls": len(open_calls), "busy_seconds": busy_for}
    finally:
        await rt.aclose()


def _expected_notes(part: dict) -> tuple[str, ...]:
    """A file tool's interrupted write is checked on disk (test_write_kill.py checks the claim against the file);
    every other side effect's outcome is unknown."""
    if part["name"] == "write_file":
        return WRITE_APPLIED, WRITE_NOT_APPLIED
    return (OUTCOME_UNKNOWN,)


def _said(part: dict) -> str:
    return "checked on disk" if part["name"] == "write_file" else "outcome unknown"


async def _reopen(home: Path, model, patience: float = 5.0):
    """(runtime, seconds the folder lock outlived the kill). Seen once, in round 96 of a run at load ~4 on 2
    cores: the lock was still held right after the killed child had been reaped (not reproduced in 150 more
    rounds; the cause is not established). A restart a few seconds later is what a person does, so only a lock
    that outlives `patience` counts as a problem; the longest wait is reported."""
    from runtime.api import DataFolderBusy, Runtime

    started, locked_for = time.monotonic(), 0.0
    while True:
        try:
            return await Runtime.open(home, providers={"scripted": model}), locked_for
        except DataFolderBusy:
            locked_for = time.monotonic() - started
            if locked_for > patience:
                return None, locked_for
            await asyncio.sleep(0.05)


def _text_lost_seconds(lines: list[str], messages: list, killed_at: float) -> float:
    """Seconds between the moment the stream had produced what was persisted and the kill (0 if nothing was
    streamed after the last persisted character)."""
    progress = [ln.split() for ln in lines if ln.startswith("T ")]
    if not progress:
        return 0.0
    turn_id = progress[-1][1]
    persisted = sum(len(p.get("text", "")) for t, role, ps in messages if t == turn_id and role == "assistant"
                    for p in ps if p.get("type") == "text")
    marks = [(int(c), float(t)) for _, tid, c, t in progress if tid == turn_id]
    if marks[-1][0] <= persisted:
        return 0.0
    reached = [t for c, t in marks if c <= persisted]
    since = reached[-1] if reached else marks[0][1]
    return max(0.0, killed_at - since)


async def run_harness(n: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(n):
            home = Path(tmp) / f"round{i}"
            home.mkdir()
            results.append(await one_round(rng, home))
    failed = [r for r in results if r["problems"]]
    return {
        "n": n,
        "passed": n - len(failed),
        "problems": [p for r in failed for p in r["problems"]],
        "max_lost_seconds": max(r["lost_seconds"] for r in results),
        "max_seconds_folder_locked_after_kill": max(r["busy_seconds"] for r in results),
        "rounds_with_open_side_effects": sum(1 for r in results if r["open_calls"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    report = asyncio.run(run_harness(args.n, args.seed))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
