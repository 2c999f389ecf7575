"""team leads: an assignment's kind, so a lead member's planning assignment (kind "plan") is told apart

Revision ID: 0008_team_leads
Revises: 0007_teams
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_team_leads"
down_revision = "0007_teams"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("team_assignments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("kind", sa.String(length=8), server_default="work", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("team_assignments", schema=None) as batch_op:
        batch_op.drop_column("kind")
