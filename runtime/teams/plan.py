"""A team's plan as a graph: checks before it is saved, and what the scheduler (services/teams.py) does next.

Pure functions over assignment rows (dicts with `key`, `member`, `depends_on`, `status`, `reason`, `position`),
so the rules are in one place: a plan names known members and existing assignments and has no cycle; an
assignment is ready when every dependency is done or skipped, and otherwise blocked with a sentence saying what
it waits for (`refresh`: store/plan_status.py, where the store's startup recovery finds it too).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import ConfigError
from ..store.plan_status import finished as finished
from ..store.plan_status import refresh as refresh  # the store's recovery applies them too

STATUSES = ("blocked", "ready", "running", "waiting", "done", "failed", "interrupted", "skipped", "aborted")
KEY_CHARS = 60


def check_plan(members: Iterable[str], assignments: list[dict]) -> None:
    """ConfigError, in one sentence, when the plan cannot run: an empty or repeated key, an unknown member, a
    dependency that does not exist, or a cycle."""
    members = set(members)
    keys: set[str] = set()
    for a in assignments:
        key = a["key"]
        if not key or len(key) > KEY_CHARS or any(c in key for c in ":,") or key != key.strip():
            raise ConfigError(f"An assignment's id must be 1 to {KEY_CHARS} characters without ':' or ',' "
                              f"or surrounding spaces, not {key!r}.")
        if key in keys:
            raise ConfigError(f"There are two assignments with the id {key!r}.")
        keys.add(key)
        if a["member"] not in members:
            known = ", ".join(sorted(members)) or "none yet"
            raise ConfigError(f"Assignment {key!r} is given to {a['member']!r}, who is not a member of the team "
                              f"(members: {known}).")
    for a in assignments:
        for dep in a["depends_on"]:
            if dep not in keys:
                raise ConfigError(f"Assignment {a['key']!r} depends on {dep!r}, which is not in the plan.")
    cycle = find_cycle({a["key"]: list(a["depends_on"]) for a in assignments})
    if cycle:
        raise ConfigError(f"The plan goes in a circle ({' → '.join(cycle)}): no assignment of it could ever start.")


def find_cycle(deps: dict[str, list[str]]) -> list[str] | None:
    """One dependency cycle as a path that ends where it starts, or None (an iterative depth-first search)."""
    done: set[str] = set()
    for start in deps:
        if start in done:
            continue
        path, on_path = [start], {start}
        stack = [iter(deps[start])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                node = path.pop()
                on_path.discard(node)
                done.add(node)
                continue
            if nxt in on_path:
                return [*path[path.index(nxt):], nxt]
            if nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(deps[nxt]))
    return None


def to_start(rows: list[dict], max_parallel: int) -> list[dict]:
    """The ready assignments to start now, in plan order, without going over `max_parallel` running ones."""
    free = max_parallel - sum(r["status"] == "running" for r in rows)
    ready = sorted((r for r in rows if r["status"] == "ready"), key=lambda r: r["position"])
    return ready[:max(free, 0)]
