"""What a person (or a lead) gives for a team, checked one by one before the plan as a whole (teams/plan.py)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from ..errors import ConfigError
from ..tools.approvals import APPROVAL_MODES
from .plan import KEY_CHARS

MEMBER_FIELDS = {"name", "model", "role", "tools", "approval"}
ASSIGNMENT_FIELDS = {"key", "id", "title", "instructions", "member", "depends_on"}
# What a member may do, by name (the New team dialog's choices): every tool, files but no commands, reading only,
# or nothing but its answer.
TOOL_SETS: dict[str, str | list[str]] = {
    "all": "all",
    "files": ["read_file", "write_file", "edit_file", "list_files", "search_files", "todo_write", "ask_user"],
    "read_only": ["read_file", "list_files", "search_files"],
    "none": [],
}


def member_entry(spec: dict[str, Any], model: Callable[[str | None], str],
                 check_tool: Callable[[str], None]) -> dict[str, Any]:
    """A member as stored, or ConfigError saying what is wrong; `model` checks (and defaults) its model,
    `check_tool` each tool name of a list (ConfigError for a name no tool has)."""
    if unknown := set(spec) - MEMBER_FIELDS:
        raise ConfigError(f"A member has no {', '.join(sorted(unknown))} "
                          "(it has name, model, role, tools, approval).")
    name = str(spec.get("name") or "").strip()
    if not name or len(name) > KEY_CHARS or ":" in name:
        raise ConfigError(f"A member needs a name of 1 to {KEY_CHARS} characters without ':', not {name!r}.")
    approval = spec.get("approval") or "ask"
    if approval not in APPROVAL_MODES:
        raise ConfigError(f"Approval mode must be one of {', '.join(APPROVAL_MODES)}, not {approval!r}.")
    tools = spec.get("tools", "all")
    if isinstance(tools, str):
        if tools not in TOOL_SETS:
            raise ConfigError(f"Member {name!r}: tools are a list of tool names or one of {', '.join(TOOL_SETS)}, "
                              f"not {tools!r}.")
        tools = TOOL_SETS[tools]
    elif not (isinstance(tools, list | tuple) and all(isinstance(t, str) for t in tools)):
        raise ConfigError(f"Member {name!r}: tools are a list of tool names or one of {', '.join(TOOL_SETS)}.")
    else:
        try:
            for tool in tools:
                check_tool(tool)
        except ConfigError as exc:
            raise ConfigError(f"Member {name!r}: {exc}") from None
    return {"name": name, "model": model(spec.get("model")), "role": str(spec.get("role") or "").strip(),
            "tools": tools if tools == "all" else list(tools), "approval": approval}


def plan_entry(spec: dict[str, Any]) -> dict[str, Any]:
    """An assignment as stored (a new id, status to be set), or ConfigError saying what is wrong; whether the
    plan as a whole can run is check_plan's."""
    if unknown := set(spec) - ASSIGNMENT_FIELDS:
        raise ConfigError(f"An assignment has no {', '.join(sorted(unknown))} "
                          "(it has key, title, instructions, member, depends_on).")
    key = str(spec.get("key") or spec.get("id") or "").strip()
    instructions = str(spec.get("instructions") or "").strip()
    if not instructions:
        raise ConfigError(f"Assignment {key!r} needs instructions.")
    depends_on = spec.get("depends_on") or []
    if not isinstance(depends_on, list | tuple) or not all(isinstance(d, str) for d in depends_on):
        raise ConfigError(f"Assignment {key!r}: depends_on is a list of assignment ids.")
    return {"id": uuid.uuid4().hex, "key": key, "title": (spec.get("title") or "").strip() or None,
            "instructions": instructions, "member": str(spec.get("member") or "").strip(),
            "depends_on": [d.strip() for d in depends_on]}
