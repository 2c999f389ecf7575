"""index tasks by last update: the task list (the app's sidebar, `hearth tasks`) reads them newest first

Revision ID: 0002_tasks_by_update
Revises: 0001_initial
"""

from alembic import op

revision = "0002_tasks_by_update"
down_revision = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.create_index("ix_tasks_updated", ["updated_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_index("ix_tasks_updated")
