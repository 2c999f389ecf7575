"""SIGKILL during the first open and during an upgrade from 0001 with data: every reopen works (a small N here;
`python -m tests.reliability.migration_kill_harness` is the full run)."""

from __future__ import annotations

from tests.reliability.migration_kill_harness import run_harness


async def test_kill_during_first_open_and_upgrade_never_bricks_the_folder():
    reports = await run_harness(5, seed=3, tasks=2000)
    for report in reports:
        assert report["problems"] == [], report
        assert report["reopen_ok"] == report["rounds"]
        assert report["killed_during_open"] >= report["rounds"] // 2, report  # the kills did land inside the open
