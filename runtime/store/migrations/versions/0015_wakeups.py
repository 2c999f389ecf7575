"""wake-ups: a task's background commands (what runs, since when, how it ended, the process group to kill after a
crash) and the wake-up a task waits for (a time or a background command finishing)

Revision ID: 0015_wakeups
Revises: 0014_turn_changes
"""

import sqlalchemy as sa
from alembic import op

revision = "0015_wakeups"
down_revision = "0014_turn_changes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "background_commands",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("task_id", sa.String(32), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("turn_id", sa.String(32), nullable=True),
        sa.Column("command", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("pgid", sa.Integer(), nullable=True),
        sa.Column("proc_start", sa.String(64), nullable=True),
        sa.Column("log_path", sa.Text(), nullable=False),
        sa.Column("sandboxed", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.create_index("ix_background_commands_task", "background_commands", ["task_id", "started_at"])
    op.create_table(
        "wakeups",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("task_id", sa.String(32), sa.ForeignKey("tasks.id", ondelete="CASCADE"), nullable=False),
        sa.Column("turn_id", sa.String(32), nullable=True),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("due_at", sa.Float(), nullable=True),
        sa.Column("command_id", sa.String(32), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
    )
    op.create_index("ix_wakeups_task", "wakeups", ["task_id"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_wakeups_task", "wakeups")
    op.drop_table("wakeups")
    op.drop_index("ix_background_commands_task", "background_commands")
    op.drop_table("background_commands")
