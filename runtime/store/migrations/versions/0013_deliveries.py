"""deliveries: what a task's turns handed to the person (the `deliver` tool), each version a record whose copy is in
the data folder's delivery store

Revision ID: 0013_deliveries
Revises: 0012_users_and_task_owners
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_deliveries"
down_revision = "0012_users_and_task_owners"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("task_id", sa.String(length=32), nullable=False),
        sa.Column("turn_id", sa.String(length=32), nullable=True),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        # A copy may be bigger than PostgreSQL's 4-byte integer (2 GiB).
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("stored", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("task_id", "path", "version", name="uq_deliveries_version"),
    )


def downgrade() -> None:
    op.drop_table("deliveries")
