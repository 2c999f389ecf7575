"""turn changes: each file a task's turn created, modified or deleted in its workspace, with the hashes of the
content before and after (kept in the data folder's changes/ blob store)

Revision ID: 0014_turn_changes
Revises: 0013_deliveries
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_turn_changes"
down_revision = "0013_deliveries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "turn_changes",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("turn_id", sa.String(length=32), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("before_sha", sa.String(length=64), nullable=True),
        sa.Column("before_size", sa.BigInteger(), nullable=True),
        sa.Column("after_sha", sa.String(length=64), nullable=True),
        sa.Column("after_size", sa.BigInteger(), nullable=True),
        sa.Column("after_kept", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("lost", sa.Text(), nullable=True),
        sa.Column("dropped", sa.Boolean(), server_default="0", nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("undone_at", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["turn_id"], ["turns.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_turn_changes_task_id", "turn_changes", ["task_id"], unique=False)
    op.create_index("ix_turn_changes_turn_id", "turn_changes", ["turn_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_turn_changes_turn_id", table_name="turn_changes")
    op.drop_index("ix_turn_changes_task_id", table_name="turn_changes")
    op.drop_table("turn_changes")
