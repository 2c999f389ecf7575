"""plans and todos on tasks, context checkpoints (summaries of older history), richer subagent records

Revision ID: 0004_plans_checkpoints_subagents
Revises: 0002_tasks_by_update
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_plans_checkpoints_subagents"
down_revision = "0002_tasks_by_update"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # ADD COLUMN, never a table rebuild: tasks is the parent of foreign keys that are on.
    op.add_column("tasks", sa.Column("todos", sa.JSON(), nullable=True))
    op.add_column("tasks", sa.Column("plan_status", sa.String(length=16), nullable=True))
    op.add_column("subagents", sa.Column("definition", sa.String(length=100), nullable=True))
    op.add_column("subagents", sa.Column("model", sa.String(length=200), nullable=True))
    op.add_column("subagents", sa.Column("tool_calls", sa.JSON(), nullable=True))
    op.create_table(
        "context_checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("turn_id", sa.String(length=32), nullable=True),
        sa.Column("upto_message_id", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_checkpoints_task", "context_checkpoints", ["task_id", "upto_message_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_checkpoints_task", table_name="context_checkpoints")
    op.drop_table("context_checkpoints")
    with op.batch_alter_table("subagents") as batch_op:
        batch_op.drop_column("tool_calls")
        batch_op.drop_column("model")
        batch_op.drop_column("definition")
    with op.batch_alter_table("tasks") as batch_op:
        batch_op.drop_column("plan_status")
        batch_op.drop_column("todos")
