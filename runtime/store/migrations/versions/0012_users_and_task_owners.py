"""users and task owners: the server host's people (a name, the hash of their API token, a token quota) and the
user each task belongs to (NULL: the local person's, as every desktop task is)

Revision ID: 0012_users_and_task_owners
Revises: 0011_assignment_steps
"""

import sqlalchemy as sa
from alembic import op

revision = "0012_users_and_task_owners"
down_revision = "0011_assignment_steps"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("revoked_at", sa.Float(), nullable=True),
        # Tokens over a server's life outgrow PostgreSQL's 4-byte integer (2.1 billion).
        sa.Column("quota_tokens", sa.BigInteger(), nullable=True),
        sa.Column("used_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_users_name", "users", ["name"], unique=True)
    op.create_index("ix_users_token_hash", "users", ["token_hash"], unique=True)
    # ADD COLUMN, never a table rebuild: tasks is the parent of foreign keys that are on (see 0003). Written out,
    # since alembic adds a column's foreign key as a constraint of its own, which SQLite cannot; this statement is
    # the same on both (SQLite takes a REFERENCES clause in ADD COLUMN when the default is NULL). No ON DELETE: a
    # user is revoked, never deleted, and deleting one who owns tasks is refused rather than handing their tasks
    # to someone else.
    op.execute("ALTER TABLE tasks ADD COLUMN owner_id VARCHAR(32) REFERENCES users (id)")
    # A user's task list, newest first; `owner_id IS NULL` (the desktop's list) is read through it too.
    op.create_index("ix_tasks_owner", "tasks", ["owner_id", "updated_at"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_tasks_owner", table_name="tasks")
    # SQLite's own DROP COLUMN (3.35+; alembic's batch mode would copy and drop `tasks`, cascading into every
    # conversation); PostgreSQL drops the column's foreign key with it.
    op.execute("ALTER TABLE tasks DROP COLUMN owner_id")
    op.drop_index("ix_users_token_hash", table_name="users")
    op.drop_index("ix_users_name", table_name="users")
    op.drop_table("users")
