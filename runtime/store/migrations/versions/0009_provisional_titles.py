"""provisional titles: a task's or chat's title from its first input is marked, so the model's title may
replace it and a person's never is

Revision ID: 0009_provisional_titles
Revises: 0008_team_leads
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_provisional_titles"
down_revision = "0008_team_leads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Titles written before this revision stay as they are: nobody can tell a provisional one from a name.
    # SQLite's own ADD COLUMN and DROP COLUMN: alembic's batch mode would copy the table, and dropping the old
    # one would cascade to the conversation's messages (see 0003).
    for table in ("tasks", "chats"):
        # sa.false(): DEFAULT 0 on SQLite as before, DEFAULT false on PostgreSQL.
        op.add_column(table, sa.Column("title_provisional", sa.Boolean(), server_default=sa.false(),
                                       nullable=False))


def downgrade() -> None:
    for table in ("tasks", "chats"):
        op.execute(f"ALTER TABLE {table} DROP COLUMN title_provisional")
