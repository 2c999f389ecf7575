"""teams: members, a plan of assignments with dependencies, and each assignment's conversation

Revision ID: 0007_teams
Revises: 0006_chats
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_teams"
down_revision = "0006_chats"
branch_labels = None
depends_on = None


def _conversation_tables() -> None:
    """An assignment's messages, turns and checkpoints: a chat's columns, keyed by assignment_id."""
    op.create_table(
        "assignment_messages",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("assignment_id", sa.String(length=32), nullable=False),
        sa.Column("turn_id", sa.String(length=32), nullable=True),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("parts", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), server_default="complete", nullable=False),
        sa.Column("client_msg_id", sa.String(length=100), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["assignment_id"], ["team_assignments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("assignment_id", "client_msg_id", name="uq_assignment_messages_client_msg_id"),
    )
    op.create_index("ix_assignment_messages_order", "assignment_messages", ["assignment_id", "id"], unique=False)
    op.create_table(
        "assignment_turns",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("assignment_id", sa.String(length=32), nullable=False),
        sa.Column("input_message_id", sa.Integer(), nullable=True),
        sa.Column("output_message_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=16), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["assignment_id"], ["team_assignments.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["input_message_id"], ["assignment_messages.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["output_message_id"], ["assignment_messages.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_assignment_turns_owner", "assignment_turns", ["assignment_id", "started_at"], unique=False)
    op.create_index("ix_assignment_turns_running", "assignment_turns", ["status"], unique=False,
                    sqlite_where=sa.text("status = 'running'"), postgresql_where=sa.text("status = 'running'"))
    op.create_table(
        "assignment_checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("assignment_id", sa.String(length=32), nullable=False),
        sa.Column("turn_id", sa.String(length=32), nullable=True),
        sa.Column("upto_message_id", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["assignment_id"], ["team_assignments.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_assignment_checkpoints_owner", "assignment_checkpoints", ["assignment_id", "upto_message_id"],
                    unique=False)


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("max_parallel", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(length=16), server_default="idle", nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_teams_updated", "teams", ["updated_at"], unique=False)
    op.create_table(
        "team_members",
        sa.Column("team_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=60), nullable=False),
        sa.Column("role", sa.Text(), server_default="", nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("tools", sa.JSON(), nullable=False),
        sa.Column("approval", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("team_id", "name"),
    )
    op.create_table(
        "team_assignments",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("team_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=60), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("instructions", sa.Text(), nullable=False),
        sa.Column("member", sa.String(length=60), nullable=False),
        sa.Column("depends_on", sa.JSON(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("output", sa.Text(), nullable=True),
        sa.Column("state", sa.String(length=16), server_default="idle", nullable=False),
        sa.Column("last_reason", sa.String(length=16), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("pending_request", sa.JSON(), nullable=True),
        sa.Column("input_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("team_id", "key", name="uq_team_assignments_key"),
    )
    _conversation_tables()


def downgrade() -> None:
    # Children first: only the new tables go.
    for table in ("assignment_checkpoints", "assignment_turns", "assignment_messages", "team_assignments",
                  "team_members", "teams"):
        op.drop_table(table)
