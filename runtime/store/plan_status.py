"""Where an assignment waiting in its team's plan stands: ready when every dependency is done or skipped, otherwise
blocked with a sentence saying what it waits for — naming a dependency that failed, was stopped or was interrupted,
with its reason. Pure functions over assignment rows (dicts with `key`, `depends_on`, `status`, `reason`).

They sit in the store because its startup recovery applies them (store/teams.py); the scheduler reaches them
through the rest of the plan's rules (teams/plan.py).
"""

from __future__ import annotations

SATISFIED = ("done", "skipped")  # a dependency in one of these lets its dependents start
# Statuses a plan change (refresh) may move between; the others are a turn's outcome or the person's choice.
PENDING = ("blocked", "ready")


def waiting_reason(row: dict, by_key: dict[str, dict]) -> str | None:
    """None when every dependency is satisfied, else what the assignment waits for."""
    unmet = [by_key[k] for k in row["depends_on"] if by_key[k]["status"] not in SATISFIED]
    if not unmet:
        return None
    for dep in unmet:  # a dependency that will not finish by itself is the one the person must see
        if dep["status"] == "failed":
            return f"waiting for {dep['key']}, which failed: {dep['reason'] or 'no reason given'}"
        if dep["status"] == "aborted":
            return f"waiting for {dep['key']}, which was stopped"
        if dep["status"] == "interrupted":
            return f"waiting for {dep['key']}, which was interrupted (run the team to continue it)"
    return "waiting for " + ", ".join(dep["key"] for dep in unmet)


def refresh(rows: list[dict]) -> list[tuple[dict, str, str | None]]:
    """(row, status, reason) for each blocked or ready assignment whose status or reason should change."""
    by_key = {r["key"]: r for r in rows}
    changes = []
    for row in rows:
        if row["status"] not in PENDING:
            continue
        reason = waiting_reason(row, by_key)
        status = "blocked" if reason else "ready"
        if (status, reason) != (row["status"], row["reason"]):
            changes.append((row, status, reason))
    return changes


def finished(rows: list[dict]) -> bool:
    return bool(rows) and all(r["status"] in SATISFIED for r in rows)
