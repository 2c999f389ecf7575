"""The schema. Times are UNIX seconds (float). Message parts are typed JSON (see runtime/parts.py).

The full-text indexes (`FTS_TABLES`) are SQLite FTS5 virtual tables, made by the migration itself: SQLAlchemy's
metadata cannot describe them, so schema comparisons leave them (and their shadow tables) out on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column


class Base(DeclarativeBase):
    if TYPE_CHECKING:
        # SQLAlchemy types it as any FromClause; every model here is mapped to a plain Table (which insert,
        # update and delete take, and which has its columns).
        __table__: ClassVar[Table]


class UserRow(Base):
    """A person using the server host (store/users.py): their API token is kept only as its SHA-256."""

    __tablename__ = "users"
    __table_args__ = (Index("ix_users_name", "name", unique=True),
                      Index("ix_users_token_hash", "token_hash", unique=True))

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    token_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    revoked_at: Mapped[float | None] = mapped_column(Float)  # a revoked token opens nothing
    quota_tokens: Mapped[int | None] = mapped_column(BigInteger)  # None: unlimited
    used_tokens: Mapped[int] = mapped_column(BigInteger, server_default="0")


class TaskRow(Base):
    __tablename__ = "tasks"
    __table_args__ = (
        Index("ix_tasks_updated", "updated_at"),  # the task list, newest first
        Index("ix_tasks_owner", "owner_id", "updated_at"),  # one owner's list (the desktop's: owner NULL)
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    title: Mapped[str | None] = mapped_column(Text)
    # The title is the first input's opening words, until the model's title replaces it (runtime/engine/titles.py).
    title_provisional: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))
    # Task-bound settings: fixed for the task's life.
    model: Mapped[str] = mapped_column(String(200))
    approval: Mapped[str] = mapped_column(String(16), server_default="ask")
    planning: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))
    knowledge: Mapped[list] = mapped_column(JSON, default=list)
    memory: Mapped[bool] = mapped_column(Boolean, server_default=text("1"))  # use and save the person's memories
    workspace: Mapped[str] = mapped_column(Text)
    # Live state.
    state: Mapped[str] = mapped_column(String(16), server_default="idle")
    last_reason: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    pending_request: Mapped[dict | None] = mapped_column(JSON)
    # The task's todo list ({"content", "status": pending|in_progress|done}), also its approved plan.
    todos: Mapped[list | None] = mapped_column(JSON)
    # For a task created with planning on: None (no plan yet), "proposed" (waiting for the person), "approved".
    plan_status: Mapped[str | None] = mapped_column(String(16))
    # The sandbox of its commands (runtime/tools/shell/sandbox.py): they may use the network; in full_auto they may run
    # without a sandbox when none can start (the person accepted that risk for this task).
    network: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))
    unsandboxed_ok: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # The server host's user it belongs to; None: the local person's (every desktop task).
    owner_id: Mapped[str | None] = mapped_column(ForeignKey("users.id"))


class PermissionRuleRow(Base):
    """Always allow / never allow a tool, or a `run_shell` command (runtime/tools/approvals.py)."""

    __tablename__ = "permission_rules"
    __table_args__ = (Index("ix_permission_rules_task", "task_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))  # None: global
    tool: Mapped[str] = mapped_column(String(200))
    command: Mapped[str | None] = mapped_column(Text)  # the words a command starts with; None: the whole tool
    decision: Mapped[str] = mapped_column(String(8))  # allow | deny
    created_at: Mapped[float] = mapped_column(Float)


# A conversation's messages, turns and checkpoints have the same columns for each kind of owner (a task, a chat, an
# assignment in team_models.py) apart from the owner key, which each table adds with `owner_key`;
# store/conversations.py writes their SQL once over them. The columns keep the migrations' order by `sort_order`
# (ascending; left alone, a class's own columns come before its mixins' and a mixin's `declared_attr`s come last):
# the id first, then the owner key and a turn's message keys, then the rest.
_FIRST, _OWNER = -2, -1


def owner_key(owner_table: str) -> Mapped[str]:
    """The column naming the task, chat or assignment a message, turn or checkpoint belongs to."""
    return mapped_column(ForeignKey(f"{owner_table}.id", ondelete="CASCADE"), sort_order=_OWNER)


class MessageColumns:
    """The columns of `messages`, `chat_messages` and `assignment_messages`."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True, sort_order=_FIRST)
    turn_id: Mapped[str | None] = mapped_column(String(32))
    role: Mapped[str] = mapped_column(String(16))  # user | assistant | event (a chat's model change)
    parts: Mapped[list] = mapped_column(JSON, default=list)
    # complete | streaming (the assistant message of a running turn) | queued (input waiting its turn)
    # | discarded (a queued input the person dropped, or the place one left when its turn started and it moved
    #   to the end: an empty tombstone, so ids are never reused)
    status: Mapped[str] = mapped_column(String(16), server_default="complete")
    client_msg_id: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[float] = mapped_column(Float)


class TurnColumns:
    """The columns of `turns`, `chat_turns` and `assignment_turns`; each names the table of its messages."""

    messages_table: ClassVar[str]

    id: Mapped[str] = mapped_column(String(32), primary_key=True, sort_order=_FIRST)

    @declared_attr
    def input_message_id(cls) -> Mapped[int | None]:
        return mapped_column(ForeignKey(f"{cls.messages_table}.id", ondelete="SET NULL"), sort_order=_OWNER)

    @declared_attr
    def output_message_id(cls) -> Mapped[int | None]:
        return mapped_column(ForeignKey(f"{cls.messages_table}.id", ondelete="SET NULL"), sort_order=_OWNER)

    status: Mapped[str] = mapped_column(String(16))  # running | ended
    reason: Mapped[str | None] = mapped_column(String(16))
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    error: Mapped[str | None] = mapped_column(Text)


class CheckpointColumns:
    """A summary of a conversation's older history: the messages with id <= `upto_message_id` are replaced by
    `summary` in every later model input (they stay in the messages table and on screen). The columns of
    `context_checkpoints`, `chat_checkpoints` and `assignment_checkpoints`."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True, sort_order=_FIRST)
    turn_id: Mapped[str | None] = mapped_column(String(32))
    upto_message_id: Mapped[int] = mapped_column(Integer)
    summary: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


def running_turns(name: str) -> Index:
    """The partial index startup recovery finds a kind's running turns by."""
    running = text("status = 'running'")
    return Index(name, "status", sqlite_where=running, postgresql_where=running)


class MessageRow(MessageColumns, Base):
    __tablename__ = "messages"
    __table_args__ = (
        UniqueConstraint("task_id", "client_msg_id", name="uq_messages_client_msg_id"),
        Index("ix_messages_task_order", "task_id", "id"),
    )

    task_id: Mapped[str] = owner_key("tasks")


class TurnRow(TurnColumns, Base):
    __tablename__ = "turns"
    __table_args__ = (running_turns("ix_turns_running"), Index("ix_turns_task", "task_id", "started_at"))
    messages_table = "messages"

    task_id: Mapped[str] = owner_key("tasks")


class StepColumns:
    """One model request of a turn: its tokens, times, finish reason and the tools it called (what a turn's Details
    shows). The columns of `steps`, `chat_steps` and `assignment_steps`; each adds `turn_id` on its turns table."""

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    step_index: Mapped[int] = mapped_column(Integer)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    started_at: Mapped[float] = mapped_column(Float)
    first_token_at: Mapped[float | None] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    finish_reason: Mapped[str | None] = mapped_column(String(32))
    tool_calls: Mapped[list] = mapped_column(JSON, default=list)


class StepRow(StepColumns, Base):
    __tablename__ = "steps"
    __table_args__ = (Index("ix_steps_turn", "turn_id", "step_index"),)

    turn_id: Mapped[str] = mapped_column(ForeignKey("turns.id", ondelete="CASCADE"))


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


class CheckpointRow(CheckpointColumns, Base):
    __tablename__ = "context_checkpoints"
    __table_args__ = (Index("ix_checkpoints_task", "task_id", "upto_message_id"),)

    task_id: Mapped[str] = owner_key("tasks")


class BackgroundCommandRow(Base):
    """A task's command running in the background (tools/shell/background.py): its process group and that process's
    start (so a restart after a crash kills only that group), its capped log, how it ended."""

    __tablename__ = "background_commands"
    __table_args__ = (Index("ix_background_commands_task", "task_id", "started_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    turn_id: Mapped[str | None] = mapped_column(String(32))
    command: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # running | exited | stopped | interrupted
    exit_code: Mapped[int | None] = mapped_column(Integer)
    started_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float)
    pgid: Mapped[int | None] = mapped_column(Integer)
    proc_start: Mapped[str | None] = mapped_column(String(64))  # boot id and start tick of the group's leader
    log_path: Mapped[str] = mapped_column(Text)
    sandboxed: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))


class WakeupRow(Base):
    """What a task waits for before its next turn starts by itself (services/wakeups.py): a time, or a background
    command finishing. One per task."""

    __tablename__ = "wakeups"
    __table_args__ = (Index("ix_wakeups_task", "task_id", unique=True),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    turn_id: Mapped[str | None] = mapped_column(String(32))
    note: Mapped[str] = mapped_column(Text)
    due_at: Mapped[float | None] = mapped_column(Float)
    command_id: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float)


class JobRow(Base):
    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(32))
    task_id: Mapped[str | None] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class DeliveryRow(Base):
    """A file or folder a task's turn handed to the person (the `deliver` tool, tools/deliver.py): one row per
    version, whose copy (`stored`, relative to the task's delivery folder) is never changed."""

    __tablename__ = "deliveries"
    __table_args__ = (UniqueConstraint("task_id", "path", "version", name="uq_deliveries_version"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    task_id: Mapped[str] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    turn_id: Mapped[str | None] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)  # in the workspace, as delivered; versions count per path
    kind: Mapped[str] = mapped_column(String(8))  # file | folder (kept as a zip)
    version: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(BigInteger)  # of the copy; may pass PostgreSQL's 4-byte integer
    sha256: Mapped[str] = mapped_column(String(64))
    note: Mapped[str] = mapped_column(Text)
    stored: Mapped[str] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)


class MemoryRow(Base):
    """Provenance of a memory file in the data folder's memory/ (the file itself holds the text)."""

    __tablename__ = "memories"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    summary: Mapped[str] = mapped_column(Text)
    origin: Mapped[str] = mapped_column(String(16))  # extraction | tool | person | file (found on disk)
    source_task_id: Mapped[str | None] = mapped_column(String(32))
    source_turn_id: Mapped[str | None] = mapped_column(String(32))
    content_hash: Mapped[str] = mapped_column(String(64))
    mtime: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float)


class DocumentRow(Base):
    """A file of the knowledge library and how far its indexing got."""

    __tablename__ = "documents"
    __table_args__ = (Index("ix_documents_path", "path", unique=True), Index("ix_documents_status", "status"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(Text)  # real path
    kind: Mapped[str] = mapped_column(String(16))  # text | markdown | html | pdf | docx
    size: Mapped[int] = mapped_column(Integer, server_default="0")
    mtime: Mapped[float] = mapped_column(Float, server_default="0")
    content_hash: Mapped[str | None] = mapped_column(String(64))
    # queued | indexing | ready | error | missing; `detail` says what happened in a sentence
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(Text)
    progress: Mapped[float] = mapped_column(Float, server_default="0")  # 0..1 while indexing
    passages: Mapped[int] = mapped_column(Integer, server_default="0")
    embed_model: Mapped[str | None] = mapped_column(String(200))  # the model its vectors come from
    added_at: Mapped[float] = mapped_column(Float)
    indexed_at: Mapped[float | None] = mapped_column(Float)


class PassageRow(Base):
    """A piece of a document with its place in it (page, heading, line range); indexed in `passages_fts`."""

    __tablename__ = "passages"
    __table_args__ = (Index("ix_passages_document", "document_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    document_id: Mapped[int] = mapped_column(ForeignKey("documents.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    heading: Mapped[str | None] = mapped_column(Text)
    page: Mapped[int | None] = mapped_column(Integer)
    line_start: Mapped[int | None] = mapped_column(Integer)
    line_end: Mapped[int | None] = mapped_column(Integer)
    vector: Mapped[bytes | None] = mapped_column(LargeBinary)  # float32, normalized; None without embeddings


FTS_TABLES = ("memory_fts", "passages_fts")


def is_fts_table(name: str) -> bool:
    """An FTS5 table or one of the shadow tables SQLite keeps for it (`passages_fts_data`, ...)."""
    return any(name == t or name.startswith(t + "_") for t in FTS_TABLES)


# -- chats: the same columns as a task's conversation apart from the owner key (store/conversations.py); a chat has
# no workspace, no approval mode and no plan, and its model may change between turns.


class ChatRow(Base):
    __tablename__ = "chats"
    __table_args__ = (Index("ix_chats_updated", "updated_at"),)  # the chat list, newest first

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    title: Mapped[str | None] = mapped_column(Text)
    title_provisional: Mapped[bool] = mapped_column(Boolean, server_default=text("0"))  # as a task's
    model: Mapped[str] = mapped_column(String(200))  # the next turn's; a change leaves a marker message
    state: Mapped[str] = mapped_column(String(16), server_default="idle")
    last_reason: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    pending_request: Mapped[dict | None] = mapped_column(JSON)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ChatMessageRow(MessageColumns, Base):
    __tablename__ = "chat_messages"
    __table_args__ = (
        UniqueConstraint("chat_id", "client_msg_id", name="uq_chat_messages_client_msg_id"),
        Index("ix_chat_messages_order", "chat_id", "id"),
    )

    chat_id: Mapped[str] = owner_key("chats")


class ChatTurnRow(TurnColumns, Base):
    __tablename__ = "chat_turns"
    __table_args__ = (running_turns("ix_chat_turns_running"), Index("ix_chat_turns_chat", "chat_id", "started_at"))
    messages_table = "chat_messages"

    chat_id: Mapped[str] = owner_key("chats")


class ChatStepRow(StepColumns, Base):
    """One model request of a chat turn (as steps for tasks): what a chat answer's Details shows."""

    __tablename__ = "chat_steps"
    __table_args__ = (Index("ix_chat_steps_turn", "turn_id", "step_index"),)

    turn_id: Mapped[str] = mapped_column(ForeignKey("chat_turns.id", ondelete="CASCADE"))


class ChatCheckpointRow(CheckpointColumns, Base):
    __tablename__ = "chat_checkpoints"
    __table_args__ = (Index("ix_chat_checkpoints_chat", "chat_id", "upto_message_id"),)

    chat_id: Mapped[str] = owner_key("chats")
