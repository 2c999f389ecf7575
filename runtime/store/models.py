"""The schema. Times are UNIX seconds (float). Message parts are typed JSON (see runtime/parts.py)."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (Index("ix_tasks_updated", "updated_at"),)  # the task list, newest first

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    title: Mapped[str | None] = mapped_column(Text)
    # Task-bound settings: fixed for the task's life.
    model: Mapped[str] = mapped_column(String(200))
    approval: Mapped[str] = mapped_column(String(16), server_default="ask")
    planning: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))
    knowledge: Mapped[list] = mapped_column(JSON, default=list)
    workspace: Mapped[str] = mapped_column(Text)
    # Live state.
    state: Mapped[str] = mapped_column(String(16), server_default="idle")
    last_reason: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    pending_request: Mapped[dict | None] = mapped_column(JSON)
    tool_rules: Mapped[dict] = mapped_column(JSON, default=dict)
    # The task's todo list ({"content", "status": pending|in_progress|done}), also its approved plan.
    todos: Mapped[list | None] = mapped_column(JSON)
    # For a task created with planning on: None (no plan yet), "proposed" (waiting for the person), "approved".
    plan_status: Mapped[str | None] = mapped_column(String(16))
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class MessageRow(Base):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("task_id", "client_msg_id", name="uq_messages_client_msg_id"),
        Index("ix_messages_task_order", "task_id", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    turn_id: Mapped[str | None] = mapped_column(String(32))
    role: Mapped[str] = mapped_column(String(16))
    parts: Mapped[list] = mapped_column(JSON, default=list)
    # complete | streaming (the assistant message of a running turn) | queued (input waiting its turn)
    # | discarded (a queued input the person dropped: an empty tombstone, so ids are never reused)
    status: Mapped[str] = mapped_column(String(16), server_default="complete")
    client_msg_id: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)


class TurnRow(Base):
    __tablename__ = "turns"
    __table_args__ = (
        Index("ix_turns_running", "status", sqlite_where=text("status = 'running'")),
        Index("ix_turns_task", "task_id", "started_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    input_message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    output_message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    status: Mapped[str] = mapped_column(String(16))  # running | ended
    reason: Mapped[str | None] = mapped_column(String(16))
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)


class StepRow(Base):
    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_turn", "turn_id", "step_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"))
    step_index: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    started_at: Mapped[float] = mapped_column(Float)
    first_token_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    tool_calls: Mapped[list] = mapped_column(JSON, default=list)


class SubagentRow(Base):
    __tablename__ = "subagents"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"), index=True)
    goal: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # its ending: completed | aborted | interrupted | error
    definition: Mapped[str | None] = mapped_column(String(100))
    model: Mapped[str | None] = mapped_column(String(200))
    tool_calls: Mapped[list | None] = mapped_column(JSON)
    result: Mapped[str | None] = mapped_column(Text)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)


class UsageAnchorRow(Base):
    """Where the last turn's context size was measured; compaction of the next turn starts here."""

    __tablename__ = "usage_anchors"

    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), primary_key=True)
    turn_id: Mapped[str] = mapped_column(String(32))
    message_id: Mapped[int | None] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(Integer)
    input_chars: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[float] = mapped_column(Float)


class CheckpointRow(Base):
    """A summary of a task's older history: the messages with id <= `upto_message_id` are replaced by
    `summary` in every later model input (they stay in the messages table and on screen)."""

    __tablename__ = "context_checkpoints"
    __table_args__ = (Index("ix_checkpoints_task", "task_id", "upto_message_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    turn_id: Mapped[str | None] = mapped_column(String(32))
    upto_message_id: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))
    task_id: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
