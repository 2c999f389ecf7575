"""SIGKILL during the first open and during a schema upgrade; every reopen must work.

    .venv/bin/python -m tests.reliability.migration_kill_harness --n 120     # the full run; prints its figures

Two scenarios, each `n` rounds on a fresh copy of a data folder:
- `first_open`: an empty folder, so `Runtime.open` creates the whole schema;
- `upgrade`: a folder at revision 0001 holding tasks, messages and turns, so `Runtime.open` upgrades it.

A round starts a child process that opens the runtime and is killed with SIGKILL at a random point, chosen one
of two ways: before the k-th database statement or commit of its open (k random, so every step of a migration
can be hit, including between a revision's DDL and its version stamp), or at a random moment after it announced
the open (so the kill also lands inside a statement, a commit or an fsync). The parent then reopens the folder
and checks: the open works, the schema is exactly the models' schema at the head revision, `PRAGMA
integrity_check` is ok, the data of the upgrade folder is all there, and a second reopen works too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import sqlite3
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

from alembic.command import upgrade
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from runtime.api import Runtime
from runtime.providers.scripted import ScriptedModel
from runtime.store.db import alembic_config
from tests.support.schema import schema_diff

CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    from runtime.api import Runtime
    from runtime.providers.scripted import ScriptedModel

    kill_at = int(sys.argv[2])  # kill before this database event (statement or commit); -1: never
    seen = 0

    def point(*_args, **_kw):
        global seen
        seen += 1
        if seen == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    event.listen(Engine, "before_cursor_execute", point)
    event.listen(Engine, "commit", point)

    async def main():
        print("OPEN", flush=True)
        rt = await Runtime.open(sys.argv[1], providers={"scripted": ScriptedModel()})
        print("OPENED", seen, flush=True)
        await rt.aclose()

    asyncio.run(main())
    """
)


def make_old_folder(home: Path, tasks: int) -> dict[str, int]:
    """A data folder at revision 0001 with `tasks` tasks, two messages and one ended turn each."""
    db_path = home / "hearth.sqlite3"
    db = sqlite3.connect(db_path)
    db.execute("PRAGMA journal_mode=WAL")
    cfg = alembic_config()
    with _sync_engine(db_path).begin() as conn:
        cfg.attributes["connection"] = conn
        upgrade(cfg, "0001_initial")
    now = time.time()
    rows = [uuid.uuid4().hex for _ in range(tasks)]
    db.executemany(
        "insert into tasks (id, model, knowledge, workspace, tool_rules, created_at, updated_at) "
        "values (?, 'scripted/x', '[]', '/w', '{}', ?, ?)",
        [(t, now, now + i) for i, t in enumerate(rows)],
    )
    db.executemany(
        "insert into messages (task_id, role, parts, created_at) values (?, ?, ?, ?)",
        [(t, role, json.dumps([{"type": "text", "text": f"{role} of {t}"}]), now) for t in rows
         for role in ("user", "assistant")],
    )
    db.executemany(
        "insert into turns (id, task_id, status, reason, started_at, ended_at) "
        "values (?, ?, 'ended', 'completed', ?, ?)",
        [(uuid.uuid4().hex, t, now, now) for t in rows],
    )
    db.commit()
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    counts = _counts(db)
    db.close()
    return counts


def _sync_engine(db_path: Path):
    return create_engine(f"sqlite:///{db_path}")


def _counts(db: sqlite3.Connection) -> dict[str, int]:
    return {t: db.execute(f"select count(*) from {t}").fetchone()[0] for t in ("tasks", "messages", "turns")}


async def _child(home: Path, kill_at: int) -> tuple[asyncio.subprocess.Process, asyncio.StreamReader]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, str(home), str(kill_at), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert proc.stdout is not None
    return proc, proc.stdout


async def calibrate(template: Path | None, work: Path) -> tuple[int, float]:
    """(database events of an open, seconds an open takes) measured by an open that is not killed."""
    home = await asyncio.to_thread(_fresh, template, work / "calibrate")
    proc, out = await _child(home, -1)
    assert (await out.readline()).strip() == b"OPEN"
    start = time.monotonic()
    line = (await out.readline()).split()
    took = time.monotonic() - start
    await proc.wait()
    if not line or line[0] != b"OPENED":
        raise RuntimeError("the child could not open a data folder without being killed")
    return int(line[1]), took


def _fresh(template: Path | None, home: Path) -> Path:
    if home.exists():
        shutil.rmtree(home)
    if template is None:
        home.mkdir(parents=True)
    else:
        shutil.copytree(template, home)
    return home


async def one_round(rng: random.Random, template: Path | None, home: Path, events: int, window: float) -> dict:
    await asyncio.to_thread(_fresh, template, home)
    by_event = rng.random() < 0.5
    kill_at = rng.randint(1, events) if by_event else -1
    proc, out = await _child(home, kill_at)
    assert (await out.readline()).strip() == b"OPEN"
    if not by_event:
        await asyncio.sleep(rng.uniform(0.0, window))
        with contextlib.suppress(ProcessLookupError):  # it may have finished already
            proc.send_signal(signal.SIGKILL)
    rest = await out.read()
    await proc.wait()
    finished = rest.startswith(b"OPENED")
    killed = proc.returncode == -signal.SIGKILL
    return {"killed_during_open": killed and not finished, "by_event": by_event, **await check(home, template)}


async def check(home: Path, template: Path | None) -> dict:
    """Reopen twice; the schema, the head revision, integrity and the data must all be right."""
    problems: list[str] = []
    for attempt in (1, 2):
        try:
            rt = await Runtime.open(home, providers={"scripted": ScriptedModel()})
        except Exception as exc:
            problems.append(f"reopen {attempt} failed: {type(exc).__name__}: {exc}")
            return {"problems": problems}
        try:
            async with rt.core.store.engine.connect() as conn:
                diff = await conn.run_sync(schema_diff)
                version = (await conn.exec_driver_sql("select version_num from alembic_version")).scalars().all()
                integrity = (await conn.exec_driver_sql("PRAGMA integrity_check")).scalar()
        finally:
            await rt.aclose()
        head = ScriptDirectory.from_config(alembic_config()).get_current_head()
        if diff:
            problems.append(f"schema differs from the models: {diff}")
        if version != [head]:
            problems.append(f"alembic_version is {version}, not [{head}]")
        if integrity != "ok":
            problems.append(f"integrity: {integrity}")
    if template is not None:
        old, new = sqlite3.connect(template / "hearth.sqlite3"), sqlite3.connect(home / "hearth.sqlite3")
        try:
            if _counts(old) != _counts(new):
                problems.append(f"rows changed: {_counts(old)} -> {_counts(new)}")
        finally:
            old.close()
            new.close()
    return {"problems": problems}


async def run_scenario(name: str, n: int, rng: random.Random, work: Path, tasks: int) -> dict:
    template = None
    if name == "upgrade":
        template = work / "template"
        template.mkdir()
        await asyncio.to_thread(make_old_folder, template, tasks)
    events, took = await calibrate(template, work)
    results = [await one_round(rng, template, work / "round", events, took * 1.2) for _ in range(n)]
    failed = [r for r in results if r["problems"]]
    return {
        "scenario": name,
        "rounds": n,
        "database_events_per_open": events,
        "open_seconds": round(took, 3),
        "killed_during_open": sum(r["killed_during_open"] for r in results),
        "killed_at_an_event": sum(r["by_event"] and r["killed_during_open"] for r in results),
        "reopen_ok": n - len(failed),
        "problems": sorted({p for r in failed for p in r["problems"]}),
    }


async def run_harness(n: int, seed: int = 1, tasks: int = 20_000) -> list[dict]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        reports = []
        for name in ("first_open", "upgrade"):
            work = Path(tmp) / name
            work.mkdir()
            reports.append(await run_scenario(name, n, rng, work, tasks))
        return reports


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=120, help="rounds per scenario")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tasks", type=int, default=20_000, help="tasks in the folder that is upgraded")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run_harness(args.n, args.seed, args.tasks)), indent=2))


if __name__ == "__main__":
    main()
