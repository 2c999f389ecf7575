"""assignment steps: an assignment turn's model requests are kept, as a task's and a chat's are, so an answer on a
team's board has Details

Revision ID: 0011_assignment_steps
Revises: 0010_chat_steps
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_assignment_steps"
down_revision = "0010_chat_steps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "assignment_steps",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("turn_id", sa.String(32), sa.ForeignKey("assignment_turns.id", ondelete="CASCADE"),
                  nullable=False),
        sa.Column("step_index", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("first_token_at", sa.Float(), nullable=True),
        sa.Column("ended_at", sa.Float(), nullable=True),
        sa.Column("finish_reason", sa.String(32), nullable=True),
        sa.Column("tool_calls", sa.JSON(), nullable=False),
    )
    op.create_index("ix_assignment_steps_turn", "assignment_steps", ["turn_id", "step_index"])


def downgrade() -> None:
    op.drop_index("ix_assignment_steps_turn", "assignment_steps")
    op.drop_table("assignment_steps")
