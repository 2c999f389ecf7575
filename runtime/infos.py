"""What the facade hands back: tasks, messages and turn handles, as plain typed records."""

from __future__ import annotations

import time
from dataclasses import dataclass

from pydantic import BaseModel

from .parts import is_truncated, text_of


class TaskInfo(BaseModel):
    id: str
    title: str | None
    model: str
    approval: str
    planning: bool
    knowledge: list  # real paths of the documents and folders the task works from
    memory: bool = True  # False: created with "don't use or save memory"
    workspace: str
    state: str
    last_reason: str | None
    last_error: str | None
    pending_request: dict | None
    todos: list | None = None  # [{"content", "status"}]; for a planned task, its approved plan
    plan_status: str | None = None  # a task created with planning on: None, "approved" or "rejected"
    network: bool = False  # its shell commands may use the network
    unsandboxed_ok: bool = False  # in full_auto, its commands may run without a sandbox when none can start
    # What it waits for before its next turn starts by itself (services/wakeups.py): `note`, and `due_at` (a time)
    # or `command_id` (a background command finishing); None when it waits for nothing.
    wake: dict | None = None
    input_tokens: int
    output_tokens: int
    created_at: float
    updated_at: float

    def waits_for(self) -> str | None:
        """What the task waits for before it wakes, in a few words ("waiting until 14:20:00", "waiting for a
        command to finish"); None when it waits for nothing."""
        if self.wake is None:
            return None
        if self.wake.get("command_id"):
            return "waiting for a command to finish"
        return f"waiting until {clock(self.wake['due_at'])}"

    def wakes(self) -> str | None:
        """When it wakes, for a list's narrow column: "wakes 14:20", "wakes 7 Dec 09:00", "wakes after a command";
        None when it waits for nothing."""
        if self.wake is None:
            return None
        if self.wake.get("command_id"):
            return "wakes after a command"
        local = time.localtime(self.wake["due_at"])
        today = time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d")
        return "wakes " + time.strftime("%H:%M" if today else f"{local.tm_mday} %b %H:%M", local)


def clock(ts: float) -> str:
    """A time as a person reads it: the time of day today, else with its date."""
    local = time.localtime(ts)
    if time.strftime("%Y-%m-%d", local) == time.strftime("%Y-%m-%d"):
        return time.strftime("%H:%M:%S", local)
    return time.strftime("%Y-%m-%d %H:%M", local)


class DeliveryInfo(BaseModel):
    """One version of something a task's turn delivered (rt.deliveries)."""

    id: int
    task_id: str
    turn_id: str | None
    path: str  # in the workspace, as delivered
    name: str  # the copy's file name: the file's, or a folder's with .zip
    kind: str  # file | folder (its copy is a zip)
    version: int  # 1 for the first delivery of the path
    size: int  # bytes of the copy
    sha256: str
    note: str
    created_at: float
    file: str  # the copy in the data folder: open it, never change it


class ChatInfo(BaseModel):
    id: str
    title: str | None
    model: str  # the next turn's
    state: str
    last_reason: str | None
    last_error: str | None
    pending_request: dict | None = None  # while `state` is "waiting": the memory write to approve
    input_tokens: int
    output_tokens: int
    created_at: float
    updated_at: float


class MemberInfo(BaseModel):
    name: str
    role: str  # role instructions
    model: str
    tools: list | str  # tool names, or "all"
    approval: str


class AssignmentInfo(BaseModel):
    id: str  # its conversation's id (the `task_id` of its events)
    key: str  # the plan's name for it, e.g. "A"
    title: str | None
    instructions: str
    member: str
    depends_on: list[str]
    # blocked | ready | running | waiting | done | failed | interrupted | skipped | aborted
    status: str
    reason: str | None  # what a blocked one waits for; why one failed
    output: str | None  # a done one's answer, which its dependents get
    last_error: str | None
    pending_request: dict | None  # the approval or question a waiting one needs answered
    input_tokens: int
    output_tokens: int


class TeamInfo(BaseModel):
    id: str
    title: str  # the goal
    max_parallel: int
    state: str  # idle | running | done
    members: list[MemberInfo]
    assignments: list[AssignmentInfo]
    created_at: float
    updated_at: float


class MessageInfo(BaseModel):
    id: int
    role: str
    parts: list[dict]
    status: str  # complete | streaming (a running turn's answer) | queued (an input waiting for its turn)
    turn_id: str | None
    created_at: float

    @property
    def text(self) -> str:
        return text_of(self.parts)

    @property
    def truncated(self) -> bool:
        """The answer stopped at the model's length limit."""
        return is_truncated(self.parts)


@dataclass
class TurnHandle:
    task_id: str
    turn_id: str | None  # None while the input is queued
    message_id: int
    duplicate: bool = False
    queued: bool = False
