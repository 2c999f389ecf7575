"""The team tables (services/teams.py, store/teams.py): teams, their members, and the assignments with their own
messages, turns, steps and checkpoints. On the same `Base` as the rest of the schema (models.py); the migration
environment and the exact-schema test import both modules.
"""

from __future__ import annotations

from sqlalchemy import JSON, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from .models import Base, CheckpointColumns, MessageColumns, StepColumns, TurnColumns, owner_key, running_turns


class TeamRow(Base):
    """A team: members and a plan of assignments (services/teams.py). `state`: idle | running (its scheduler starts
    assignments) | done (every assignment done or skipped)."""

    __tablename__ = "teams"
    __table_args__ = (Index("ix_teams_updated", "updated_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    title: Mapped[str] = mapped_column(Text)  # the goal
    max_parallel: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), server_default="idle")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class TeamMemberRow(Base):
    __tablename__ = "team_members"

    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(60), primary_key=True)
    role: Mapped[str] = mapped_column(Text, server_default="")  # role instructions, a note in its every step
    model: Mapped[str] = mapped_column(String(200))
    tools: Mapped[list | str] = mapped_column(JSON)  # tool names, or "all"
    approval: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[float] = mapped_column(Float)


class AssignmentRow(Base):
    """An assignment of a team's plan, and the owner of its conversation (store/teams.py): `state`,
    `last_reason` … are its turn's, as a chat's; `status` is its place in the plan."""

    __tablename__ = "team_assignments"
    __table_args__ = (UniqueConstraint("team_id", "key", name="uq_team_assignments_key"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    team_id: Mapped[str] = mapped_column(ForeignKey("teams.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(60))  # the plan's name for it ("A"), unique in the team
    title: Mapped[str | None] = mapped_column(Text)
    instructions: Mapped[str] = mapped_column(Text)
    member: Mapped[str] = mapped_column(String(60))
    kind: Mapped[str] = mapped_column(String(8), server_default="work")  # "plan": a lead turning the goal into a plan
    depends_on: Mapped[list] = mapped_column(JSON)  # keys of the assignments whose outputs it needs
    position: Mapped[int] = mapped_column(Integer)  # the order it was planned in
    # blocked | ready | running | waiting | done | failed | interrupted | skipped | aborted
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)  # why it is blocked or failed, for the person
    output: Mapped[str | None] = mapped_column(Text)  # the answer its dependents get
    state: Mapped[str] = mapped_column(String(16), server_default="idle")
    last_reason: Mapped[str | None] = mapped_column(String(16))
    last_error: Mapped[str | None] = mapped_column(Text)
    pending_request: Mapped[dict | None] = mapped_column(JSON)
    input_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    output_tokens: Mapped[int] = mapped_column(Integer, server_default="0")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class AssignmentMessageRow(MessageColumns, Base):
    __tablename__ = "assignment_messages"
    __table_args__ = (
        UniqueConstraint("assignment_id", "client_msg_id", name="uq_assignment_messages_client_msg_id"),
        Index("ix_assignment_messages_order", "assignment_id", "id"),
    )

    assignment_id: Mapped[str] = owner_key("team_assignments")


class AssignmentTurnRow(TurnColumns, Base):
    __tablename__ = "assignment_turns"
    __table_args__ = (
        running_turns("ix_assignment_turns_running"),
        Index("ix_assignment_turns_owner", "assignment_id", "started_at"),
    )
    messages_table = "assignment_messages"

    assignment_id: Mapped[str] = owner_key("team_assignments")


class AssignmentStepRow(StepColumns, Base):
    """One model request of an assignment's turn (as steps for tasks): what its answer's Details shows."""

    __tablename__ = "assignment_steps"
    __table_args__ = (Index("ix_assignment_steps_turn", "turn_id", "step_index"),)

    turn_id: Mapped[str] = mapped_column(ForeignKey("assignment_turns.id", ondelete="CASCADE"))


class AssignmentCheckpointRow(CheckpointColumns, Base):
    __tablename__ = "assignment_checkpoints"
    __table_args__ = (Index("ix_assignment_checkpoints_owner", "assignment_id", "upto_message_id"),)

    assignment_id: Mapped[str] = owner_key("team_assignments")
